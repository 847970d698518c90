"""The timed workload's spin follows the SM clock (torch.cuda is faked: conftest.FakeCuda; its
events take scripted device times, so a calibration measures whatever clock the script says).

Found by a read: the spin was calibrated once per process at the first action, possibly while the
clock was still ramping, and never followed a clock change, so on a GPU a clock shift would read
as planner error. Now: calibration repeats until two measurements agree; each case re-checks the
clock (NVML's SM clock and a short timed spin) and calibrates again when it moved; each case's
spins are bracketed by events and a drift beyond tolerance marks the row degraded."""

import pytest
import torch

from bench.workloads import models
from conftest import FakeCuda

CAL = 100_000_000  # cycles one calibration measurement times
CHECK = 20_000_000  # cycles of the per-case re-check


def at(ghz: float, cycles: int = CAL, t0: float = 0.0) -> list[float]:
    """The two event times of one timed spin of `cycles` at `ghz`."""
    return [t0, t0 + cycles / (ghz * 1e9)]


@pytest.fixture
def cuda(monkeypatch):
    fc = FakeCuda(n=1).install(monkeypatch)
    monkeypatch.setattr(models, "_device_of", lambda t: torch.device("cuda", 0), raising=False)
    monkeypatch.setattr(models, "_SPIN_CYCLES_PER_S", {}, raising=False)  # the code before: its cache
    fc.clock_mhz = [None]  # what NVML reports (None: no NVML)
    try:
        from bench.workloads import spin
    except ImportError:  # the code before bench.workloads.spin (kept so the first test shows the defect there)
        return fc
    monkeypatch.setattr(spin, "_CAL", {})
    monkeypatch.setattr(spin, "sm_clock_mhz", lambda index: fc.clock_mhz[0])
    return fc


def spins(fc) -> list[int]:
    return [c for name, c in fc.calls if name == "_sleep"]


def test_a_calibration_taken_while_the_clock_ramps_is_not_kept(cuda):
    # the first measurement reads 1.0 GHz (clock still ramping), then 1.5, then 1.98 twice
    cuda.script[0] += at(1.0) + at(1.5) + at(1.98) + at(1.98)
    models.occupy(0.02, torch.zeros(1))
    assert spins(cuda)[-1] == round(0.02 * 1.98e9)  # 20 ms at the settled clock, not at the ramp's first


def test_a_clock_change_between_cases_is_followed(cuda):
    from bench.workloads import spin

    cuda.clock_mhz[0] = 1980.0
    cuda.script[0] += at(1.98) + at(1.98)
    models.occupy(0.01, torch.zeros(1))
    assert spins(cuda)[-1] == round(0.01 * 1.98e9)
    cuda.clock_mhz[0] = 1410.0  # the next case: NVML says the SM clock dropped (power cap)
    cuda.script[0] += at(1.41) + at(1.41)  # the calibration it triggers
    spin.recheck(0)
    models.occupy(0.01, torch.zeros(1))
    assert spins(cuda)[-1] == round(0.01 * 1.41e9)


def test_without_nvml_the_recheck_times_a_short_spin(cuda):
    from bench.workloads import spin

    cuda.script[0] += at(1.98) + at(1.98)
    spin.recheck(0)  # first: calibrates
    cuda.script[0] += at(1.98, CHECK)  # unchanged: no new calibration
    assert spin.recheck(0).cycles_per_s == pytest.approx(1.98e9)
    cuda.script[0] += at(1.5, CHECK) + at(1.5) + at(1.5)  # moved: the check, then a calibration
    assert spin.recheck(0).cycles_per_s == pytest.approx(1.5e9)
    assert cuda.script[0] == []  # every scripted event was used: exactly those measurements


def test_a_case_whose_spins_drift_is_degraded(cuda):
    from bench.workloads import spin

    cuda.script[0] += at(2.0) + at(2.0)
    spin.recheck(0)
    with spin.ledger() as led:
        for k in range(3):  # three 10 ms spins that took 11 ms each (the clock fell 9% inside the case)
            cuda.script[0] += [k * 1.0, k * 1.0 + 0.011]
            models.occupy(0.01, torch.zeros(1))
    got = led.result()
    assert got == {"spin_intended_s": pytest.approx(0.03), "spin_measured_s": pytest.approx(0.033)}
    worst, note = spin.drift([got, {"spin_intended_s": 0.03, "spin_measured_s": 0.0301}])
    assert worst == pytest.approx(0.10) and "+10.0%" in note
    assert spin.drift([{"spin_intended_s": 0.03, "spin_measured_s": 0.0303}]) == (pytest.approx(0.01), "")
    assert spin.drift([{"spin_intended_s": None, "spin_measured_s": None}]) == (None, "")
    models.occupy(0.01, torch.zeros(1))  # outside the ledger: no events
    assert cuda.script[0] == [] and cuda.calls[-1] == ("_sleep", 20_000_000)
