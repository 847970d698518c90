"""The timed workload's spin on CUDA: torch.cuda._sleep(cycles) is a kernel that spins `cycles`
ticks of the SM clock (clock64), so the seconds a spin takes follow the SM clock.

Calibration (per device, on its first timed action): a warm-up spin (the first launch loads the
kernel), then SPIN_CALIBRATION_CYCLES between two CUDA events, repeated until two measurements in
a row agree within SPIN_TOLERANCE (at most CALIBRATION_TRIES): a clock still ramping up reads
differently each time. The SM clock NVML reports is read beside it (None without NVML).

Re-check (per case, `recheck`): NVML's SM clock is read again and SPIN_CHECK_CYCLES are timed
again; if either moved more than SPIN_TOLERANCE from the calibration, the device is calibrated
again: a case run after a clock change spins the seconds it means.

Ledger (per case, `ledger`): while one is open every spin is bracketed by two CUDA events, so the
case knows what its spins measured against what they were meant to take (`intended_s`,
`measured_s`); a drift beyond SPIN_DRIFT_TOLERANCE marks the row degraded (a clock that changed
inside the case: the known times, and the exact bubble built on them, do not hold).
"""

import contextlib
from dataclasses import dataclass, field

import torch

SPIN_CALIBRATION_CYCLES = 100_000_000  # about 50 ms at 2 GHz
SPIN_CHECK_CYCLES = 20_000_000  # the per-case re-check, about 10 ms at 2 GHz
CALIBRATION_TRIES = 5
SPIN_TOLERANCE = 0.02  # calibrations agreeing within 2%; a re-check or SM clock moved more: calibrate again
SPIN_DRIFT_TOLERANCE = 0.05  # a case whose spins measured more than 5% off what they meant: degraded


@dataclass
class Calibration:
    cycles_per_s: float
    sm_clock_mhz: float | None  # NVML's SM clock when calibrated (None: NVML not readable)
    tries: int = 1


_CAL: dict[int, Calibration] = {}  # device index -> its calibration


def _sm_clock_mhz(index: int) -> float | None:
    """NVML's current SM clock of cuda:index, or None where NVML cannot say."""
    from bench.telemetry import nvml  # lazy: only CUDA ranks of the timed workload read a clock

    try:
        nv, _ = _nvml()
        if nv is None:
            return None
        dev, _ = nvml.resolve(nvml.cuda_identity(torch.device("cuda", index)), nvml.nvml_devices(nv))
        return float(nv.nvmlDeviceGetClockInfo(dev["handle"], nvml.CLOCK_SM)) if dev else None
    except Exception:  # noqa: BLE001 - any NVML failure: no clock reading, the events still calibrate
        return None


_NVML: list = []  # [(module or None, why)] once loaded


def _nvml():
    from bench.telemetry import nvml  # lazy: as above

    if not _NVML:
        _NVML.append(nvml.load())
    return _NVML[0]


sm_clock_mhz = _sm_clock_mhz  # tests replace it with a fake NVML's reading


def _timed_cycles_per_s(cycles: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) / 1e3)  # elapsed: ms


def _agree(a: float, b: float, tol: float = SPIN_TOLERANCE) -> bool:
    return abs(a / b - 1.0) <= tol


def calibrate(index: int) -> Calibration:
    """Measure cuda:index (the current device) until two measurements agree; store and return it."""
    torch.cuda._sleep(SPIN_CALIBRATION_CYCLES // 10)  # warm-up: the first launch pays the kernel load
    last = _timed_cycles_per_s(SPIN_CALIBRATION_CYCLES)
    tries = 1
    while tries < CALIBRATION_TRIES:
        now = _timed_cycles_per_s(SPIN_CALIBRATION_CYCLES)
        tries += 1
        if _agree(now, last):
            last = now
            break
        last = now
    _CAL[index] = Calibration(cycles_per_s=last, sm_clock_mhz=sm_clock_mhz(index), tries=tries)
    return _CAL[index]


def cycles_per_s(index: int) -> float:
    """Cycles per second of torch.cuda._sleep on cuda:index (the current device), calibrated once
    (and again by recheck when the clock moved)."""
    cal = _CAL.get(index)
    return (cal or calibrate(index)).cycles_per_s


def recheck(index: int) -> Calibration:
    """Per case, on cuda:index (the current device): calibrate again if NVML's SM clock or a short
    timed spin moved more than SPIN_TOLERANCE since the calibration."""
    cal = _CAL.get(index)
    if cal is None:
        return calibrate(index)
    clock = sm_clock_mhz(index)
    moved = clock is not None and cal.sm_clock_mhz is not None and not _agree(clock, cal.sm_clock_mhz)
    if moved or not _agree(_timed_cycles_per_s(SPIN_CHECK_CYCLES), cal.cycles_per_s):
        return calibrate(index)
    return cal


@dataclass
class Ledger:
    """The spins of one case: (start event, end event, intended seconds) each."""

    spins: list = field(default_factory=list)

    def add(self, start, end, seconds: float):
        self.spins.append((start, end, seconds))

    def result(self) -> dict:
        """{spin_intended_s, spin_measured_s} summed over the case's spins (waits for the last)."""
        if not self.spins:
            return {"spin_intended_s": None, "spin_measured_s": None}
        self.spins[-1][1].synchronize()
        measured = sum(a.elapsed_time(b) / 1e3 for a, b, _ in self.spins)
        return {"spin_intended_s": sum(s for _, _, s in self.spins), "spin_measured_s": measured}


_LEDGERS: list[Ledger] = []


@contextlib.contextmanager
def ledger():
    """Bracket every spin with CUDA events while open; yields the Ledger."""
    led = Ledger()
    _LEDGERS.append(led)
    try:
        yield led
    finally:
        _LEDGERS.remove(led)


def spin(seconds: float, index: int):
    """Spin `seconds` on cuda:index (the current device), in the open ledger if any."""
    cycles = int(round(seconds * cycles_per_s(index)))
    if not _LEDGERS:
        torch.cuda._sleep(cycles)
        return
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(cycles)
    b.record()
    _LEDGERS[-1].add(a, b, seconds)


def drift(facts: list[dict]) -> tuple[float | None, str]:
    """(the worst rank's measured / intended - 1, a degraded note or '') over the ranks' ledgers."""
    worst = None
    for f in facts:
        want, got = f.get("spin_intended_s"), f.get("spin_measured_s")
        if want and got is not None:
            d = got / want - 1.0
            worst = d if worst is None or abs(d) > abs(worst) else worst
    if worst is None or abs(worst) <= SPIN_DRIFT_TOLERANCE:
        return worst, ""
    return worst, (f"timed workload's spins measured {worst:+.1%} off their intended time (tolerance "
                   f"{SPIN_DRIFT_TOLERANCE:.0%}): the SM clock changed inside the case")


@contextlib.contextmanager
def case_spins(devices, timed: bool):
    """One case's timed steps on the timed workload: re-check each CUDA device it drives, then a
    ledger around the steps. Yields a dict that holds {spin_intended_s, spin_measured_s} on exit
    (empty elsewhere: CPU, or a model that does not spin)."""
    out: dict = {}
    cuda = [d for d in devices if getattr(d, "type", None) == "cuda"] if timed else []
    if not cuda:
        yield out
        return
    current = torch.cuda.current_device()
    for d in cuda:
        index = d.index if d.index is not None else current
        if index == current:
            recheck(index)
        else:
            with torch.cuda.device(index):  # a rank driving several devices (layer)
                recheck(index)
    with ledger() as led:
        yield out
    out.update(led.result())


def columns(facts: list[dict]) -> tuple[dict, str]:
    """The training row's spin columns over the ranks' case_spins dicts, and the degraded note."""
    got = [f for f in facts if f and f.get("spin_intended_s")]
    worst, note = drift(got)
    return {"spin_intended_s": sum(f["spin_intended_s"] for f in got) if got else None,
            "spin_measured_s": sum(f["spin_measured_s"] for f in got) if got else None,
            "spin_drift": worst}, note
