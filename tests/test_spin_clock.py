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


def test_a_training_row_carries_the_spins_and_is_degraded_by_a_drift():
    """build_tables (the pipeline row of two ranks, as tests/test_cuda_waits.py builds it) with each
    rank's case_spins: the columns sum over ranks, the worst rank's drift is kept, and a drift past
    5% is one more degraded reason."""
    from bench.training.case import CaseSpec
    from bench.training.measure import build_tables
    from bench.training.replay import gpipe_order

    mem = {"memory_kind": "cpu", "peak_allocated_bytes": 1, "peak_active_bytes": 1, "peak_reserved_bytes": 1,
           "device_used_bytes": 1, "device_total_bytes": 2, "host_peak_rss_bytes": 1, "host_peak_is_lifetime": False}

    def rec(r):
        spans = [("fwd", 0, 0, 0.0, 1.0), ("bwd", 0, -1, 3.0, 4.0)] if r == 0 else \
            [("fwd", 1, 0, 1.0, 2.0), ("bwd", 1, -1, 2.0, 3.0)]
        return {"span": (0.0, 4.0), "spans": spans, "waits": [(1.0, 3.0, (1,))] if r == 0 else [(0.0, 1.0, (0,))]}

    def facts(measured):
        return [{"recs": [rec(r)] * 5, "mem": mem, "solo_s": float("nan"), "role": f"stages {r}", "degraded": "",
                 "devices": 1, "comm_in_compute": False, "order": gpipe_order(2, 1) if r == 0 else None,
                 "params": 10, "spin": {"spin_intended_s": 1.0, "spin_measured_s": m}} for r, m in enumerate(measured)]

    case = CaseSpec(strategy="pp", model="timed", world=2, chunks=1, schedule="gpipe", batch=8)
    base_row = {"run_id": "r", "suite": "s", "kind": "pipeline", "world": 2, "nodes": 1, "backend": "gloo",
                "device_type": "cpu", "threads_per_rank": 1, "oversubscribed": False, "degraded": ""}
    ok = build_tables(case, {"facts": facts([1.01, 0.99]), "check": None, "loss": 1.0}, base_row, ["h", "h"], 1)
    row = ok["results"][0]
    assert (row["spin_intended_s"], row["spin_measured_s"]) == (2.0, pytest.approx(2.0))
    assert row["spin_drift"] == pytest.approx(0.01) and row["degraded"] == ""
    bad = build_tables(case, {"facts": facts([1.0, 1.08]), "check": None, "loss": 1.0}, base_row, ["h", "h"], 1)
    assert bad["results"][0]["spin_drift"] == pytest.approx(0.08)
    assert "spins measured +8.0% off their intended time" in bad["results"][0]["degraded"]


def test_case_spins_rechecks_then_keeps_a_ledger_of_the_timed_steps(cuda):
    from bench.workloads import spin

    cuda.script[0] += at(2.0) + at(2.0)  # the re-check of a device never calibrated: a calibration
    with spin.case_spins([torch.device("cuda", 0)], timed=True) as got:
        cuda.script[0] += [5.0, 5.010]
        models.occupy(0.01, torch.zeros(1))
    assert got == {"spin_intended_s": pytest.approx(0.01), "spin_measured_s": pytest.approx(0.010)}
    with spin.case_spins([torch.device("cpu")], timed=True) as got:
        pass
    assert got == {}  # nothing spins on CPU: no columns
