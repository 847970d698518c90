"""Energy over a case's timed span, from NVML's total energy counter read on each rank.

nvmlDeviceGetTotalEnergyConsumption: millijoules used by the GPU since the driver was loaded
(Volta and newer; NVML API reference, "Device Queries"). Its resolution is 1 mJ, but the value
moves in steps: about every 10 ms on the GPU of nvidia-ml-py's own test (gpuopenanalytics/pynvml
pull request 18), and the A100 / H100 power sensor behind it is read in a 25 ms window every
100 ms (Yang et al., "Part-time Power Measurements: nvidia-smi's Lack of Attention", SC24,
arXiv 2312.02741); Zeus (ml-energy/zeus, release 0.6.1) gets 0 J for windows shorter than the
update period. Each edge of a span may then miss up to one update period of energy, so a span
must last MIN_SPAN_S = MIN_PERIODS x COUNTER_PERIOD_S (the coarse end of that range) for the
figure to be within 2 / MIN_PERIODS (20%); a shorter span, or one over which the counter did not
move, gives no figure and says why (`energy_note`). Nothing is estimated from power samples.

One rank: `Span.start(devices)` and `Span.stop(**counts)` read the counter of every GPU the rank
drives (found by identity, bench.telemetry.nvml.resolve) at the span's two edges; the record goes
to rank 0 with the case's telemetry. Rank 0: `summarize(records)` sums over the GPUs (a GPU that
several ranks share is counted once, from its lowest rank's reading) and divides by the counts
the kind gave: ops, steps, samples, and the bus bytes of one op over every rank.
"""

import time

from bench.telemetry import nvml

COUNTER_PERIOD_S = 0.1  # the counter's update period taken: the coarse end of the published 10-100 ms
MIN_PERIODS = 10  # a span shorter than this many periods gives no figure (edge error > 2/10)
MIN_SPAN_S = MIN_PERIODS * COUNTER_PERIOD_S
CPU = "no GPU: the rank runs on cpu"

# The energy columns of every results row (bench.telemetry.summary.TELEMETRY_SUMMARY declares them).
COUNTS = {"ops": "energy_per_op_j", "steps": "energy_per_step_j", "samples": "energy_per_sample_j"}


class Meter:
    """One rank's NVML handles for the GPUs it drives, loaded when the rank's telemetry starts
    (nvmlInit is per process: local rank 0's sampler has its own)."""

    def __init__(self, nvml_module=None, use_nvml: bool = True, clock=time.perf_counter):
        self.module, self.use_nvml, self.clock = nvml_module, use_nvml, clock
        self.nv, self.status, self.devices = None, None, []  # status None: not loaded yet
        self._resolved: dict = {}  # (device type, index) -> (uuid, handle) or why

    def _load(self) -> str:
        if self.status is None:
            self.nv, self.status = nvml.load(self.module) if self.use_nvml else (None, "NVML: disabled")
            if self.nv is not None:
                try:
                    self.devices = nvml.nvml_devices(self.nv)
                except Exception as e:  # noqa: BLE001 - any NVML failure: no figure, with the reason
                    self.status = f"NVML: cannot list devices: {nvml.reason(e)}"
        return self.status

    def gpus(self, devices) -> tuple[list, str]:
        """([(uuid, handle)] of the CUDA devices among `devices`, '') or ([], why there are none)."""
        cuda = [d for d in devices if getattr(d, "type", None) == "cuda"]
        if not cuda:
            return [], CPU
        why = self._load()
        if why:
            return [], why
        out = []
        for d in cuda:
            key = (d.type, d.index)
            if key not in self._resolved:
                dev, how = nvml.resolve(nvml.cuda_identity(d), self.devices)
                self._resolved[key] = (dev["uuid"], dev["handle"]) if dev else f"NVML: {how}"
            got = self._resolved[key]
            if isinstance(got, str):
                return [], got
            if got not in out:
                out.append(got)
        return out, ""

    def read(self, gpus) -> tuple[float, dict] | str:
        """(clock, {uuid: mJ}) read now, or why the counter cannot be read."""
        vals = {}
        for uuid, h in gpus:
            try:
                vals[uuid] = int(self.nv.nvmlDeviceGetTotalEnergyConsumption(h))
            except Exception as e:  # noqa: BLE001 - NotSupported (before Volta), NoPermission, GPU lost ...
                return f"energy counter: {nvml.reason(e)} ({uuid})"
        return self.clock(), vals

    def close(self):
        if self.nv is not None:
            nvml.shutdown(self.nv)
        self.nv, self.status, self._resolved = None, None, {}


class Span:
    """This rank's timed span of one case. A span never started leaves `record` None (the kind
    marks none); meter None (telemetry off) makes both calls no-ops."""

    def __init__(self, meter: Meter | None, rank: int):
        self.meter, self.rank = meter, rank
        self.record: dict | None = None
        self._start = None

    def start(self, devices):
        if self.meter is None:
            return
        gpus, why = self.meter.gpus(list(devices))
        first = why or self.meter.read(gpus)
        self._start = (gpus, first)

    def stop(self, **counts):
        """counts: ops, steps, samples (what the span holds) and bus_bytes_per_op (one op's bus
        bytes summed over every rank), as the kind knows them; the same on every rank."""
        if self.meter is None or self._start is None:
            return
        gpus, first = self._start
        rec = {"rank": self.rank, "why": "", "span_s": None, "gpus": {}, "counts": counts}
        last = first if isinstance(first, str) else self.meter.read(gpus)
        if isinstance(last, str):
            rec["why"] = last
        else:
            rec["span_s"] = last[0] - first[0]
            rec["gpus"] = {u: (first[1][u], last[1][u]) for u in last[1]}
        self.record, self._start = rec, None


def _num(x: float) -> str:
    return f"{x:.3g}"


def _why_absent(gpus: dict, span_s: float) -> str:
    """'' when the counter gives a figure over this span, else why not."""
    for uuid, (a, b) in gpus.items():
        if b < a:
            return f"counter went backwards on {uuid} (driver reloaded?)"
    if span_s < MIN_SPAN_S:
        return (f"span {_num(span_s)} s < {_num(MIN_SPAN_S)} s ({MIN_PERIODS} x the counter's "
                f"{_num(COUNTER_PERIOD_S * 1e3)} ms update period): counter too coarse")
    for uuid, (a, b) in gpus.items():
        if b == a:
            return f"counter did not move on {uuid} over {_num(span_s)} s"
    return ""


def _note(recs: list[dict]) -> str:
    whys = {r["rank"]: r["why"] for r in recs if r["why"]}
    if len(set(whys.values())) == 1 and len(whys) == len(recs):
        return next(iter(whys.values()))
    return "; ".join(f"rank {k}: {v}" for k, v in sorted(whys.items()))


def summarize(records: list) -> dict:
    """The energy columns of one case from every rank's record (None: a rank that marked no
    span). All None when no rank marked one; figures None with `energy_note` saying why when a
    rank had no counter, a GPU's span was too short or its counter did not move."""
    out = {c: None for c in ("energy_j", "energy_span_s", "energy_note", *COUNTS.values(), "energy_per_gb_j")}
    recs = sorted((r for r in records if r), key=lambda r: r["rank"])
    if not recs:
        return out
    gpus: dict = {}  # uuid -> (start mJ, end mJ), from the lowest rank that drives it
    spans = {}
    for r in recs:
        for uuid, edge in r["gpus"].items():
            if uuid not in gpus:
                gpus[uuid], spans[uuid] = edge, r["span_s"]
    out["energy_span_s"] = max(spans.values()) if spans else None
    why = _note(recs) or _why_absent(gpus, min(spans.values(), default=0.0))
    out["energy_note"] = why
    if why:
        return out
    energy = sum(b - a for a, b in gpus.values()) / 1e3  # mJ -> J
    out["energy_j"] = energy
    counts = recs[0]["counts"]
    for name, col in COUNTS.items():
        if counts.get(name):
            out[col] = energy / counts[name]
    if counts.get("ops") and counts.get("bus_bytes_per_op"):
        out["energy_per_gb_j"] = energy / (counts["ops"] * counts["bus_bytes_per_op"] / 1e9)  # GB = 1e9 B
    return out
