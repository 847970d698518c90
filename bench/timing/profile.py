"""`--profile` (training kinds) and `--profile-size` (the sweeps): torch.profiler traces beside the
timed numbers, and a breakdown read back from them.

The profiled ops run OUTSIDE the timed region (after a size's or case's timed measurement), so
`--profile` changes no timing. One profiler session per case and rank, with the schedule
wait=1, warmup=1, active=3 (5 steps, the last 3 recorded); every step's work sits inside
`record_function(label)` (collectives / allreduce: "<case_id>@<size>B"; strategies / pipeline:
"<case_id>@step<k>"). The Chrome trace goes to `<run dir>/traces/<case key>.rank<r>.json`, which
Perfetto (ui.perfetto.dev) and HTA (HolisticTraceAnalysis, one folder of per-rank traces) open.

`trace_breakdown(path)` reads one such trace back: within the recorded steps' spans (the
record_function labels, else the ProfilerStep#k events), communication = CPU op events whose
names contain send / recv / wait / all_reduce / broadcast / c10d / gloo / nccl, and the
backends' own spans (gloo:..., nccl:..., record_param_comms; union of their intervals), compute =
every other CPU op (union), exposed communication = communication outside compute, idle = span
less both.
"""

import json
import re
from pathlib import Path
from typing import Callable

import torch

from bench.units import parse_size

SCHEDULE = {"wait": 1, "warmup": 1, "active": 3}
STEPS = sum(SCHEDULE.values())  # profiled steps per case (5)
COMM_WORDS = re.compile(r"send|recv|wait|all_?reduce|broadcast|c10d|gloo|nccl")  # in an op name, any case
OP_CATS = ("cpu_op",)  # Chrome-trace category of CPU operator events (aten::..., c10d::allreduce_, ...)
# record_function spans the backends open around their own work (gloo:all_reduce, nccl:all_reduce,
# record_param_comms): user_annotation events, counted as communication (never as compute)
COMM_ANNOTATIONS = ("gloo:", "nccl:", "record_param_comms")


def size_profiled(profile: str, size: int) -> bool:
    """`--profile-size SIZE` of the collectives / allreduce kinds: is this size the one traced?"""
    return bool(profile) and parse_size(profile) == size


def size_note(profile: str, sizes) -> list[str]:
    """A note when `--profile-size SIZE` names no measured size (nothing would be traced)."""
    if not profile or parse_size(profile) in set(sizes):
        return []
    return [(f"--profile-size {profile}: no case is measured at {parse_size(profile)} bytes, nothing is traced; "
             f"sizes: {', '.join(map(str, sorted(set(sizes))))}")]


def relative(path: Path, run_dir) -> str:
    """A trace's path relative to the run directory (what the rows' profile_trace column holds)."""
    return str(Path(path).relative_to(Path(run_dir)))


def trace_file(run_dir, case_key: str, rank: int) -> Path:
    """<run dir>/traces/<case key>.rank<r>.json; the key made safe as a file name."""
    safe = re.sub(r"[^A-Za-z0-9._@=+-]+", "_", case_key)
    return Path(run_dir) / "traces" / f"{safe}.rank{rank}.json"


def activities(device: torch.device) -> list:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def profile_steps(step: Callable[[int], None], label: Callable[[int], str], path: Path, device: torch.device,
                  sync: Callable[[], None] = lambda: None, steps: int = STEPS,
                  before: Callable[[int], None] = lambda k: None) -> Path:
    """Run `step(k)` `steps` times under torch.profiler (schedule wait=1, warmup=1, active=3),
    each inside record_function(label(k)) (`before(k)`, e.g. data loading and a barrier, runs
    outside the label); write the Chrome trace to `path` (every rank calls this with its own
    path: collectives must be issued the same on every rank)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sched = torch.profiler.schedule(**SCHEDULE, repeat=1)
    # record_shapes: the collectives' spans carry their sizes (gloo writes no record_param_comms), which
    # `distbench injob` reads back (bench/imports/kineto.py)
    with torch.profiler.profile(activities=activities(device), schedule=sched, record_shapes=True,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for k in range(steps):
            before(k)
            with torch.profiler.record_function(label(k)):
                step(k)
                sync()
            prof.step()
    return path


def profile_ops(op: Callable[[], object], label: str, path: Path, device: torch.device,
                sync: Callable[[], None] = lambda: None) -> Path:
    """STEPS calls of op() (one per profiler step; a returned Work is waited for)."""

    def step(_k):
        work = op()
        if work is not None and hasattr(work, "wait"):
            work.wait()

    return profile_steps(step, lambda _k: label, path, device, sync)


# ---- reading a trace back -------------------------------------------------------------------------

def _union(ivs) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in ivs if b > a):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _clip(ivs, windows) -> list[tuple[float, float]]:
    """The parts of `ivs` inside the union of `windows`."""
    out = []
    for a, b in _union(ivs):
        for c, d in windows:
            lo, hi = max(a, c), min(b, d)
            if hi > lo:
                out.append((lo, hi))
    return _union(out)


def _minus(ivs, cut) -> list[tuple[float, float]]:
    out = []
    for a, b in _union(ivs):
        pieces = [(a, b)]
        for c, d in cut:
            nxt = []
            for x, y in pieces:
                if d <= x or c >= y:
                    nxt.append((x, y))
                    continue
                if c > x:
                    nxt.append((x, c))
                if d < y:
                    nxt.append((d, y))
            pieces = nxt
        out += pieces
    return out


def _length(ivs) -> float:
    return sum(b - a for a, b in _union(ivs))


def is_comm(name: str) -> bool:
    n = name.lower()
    return COMM_WORDS.search(n) is not None


def trace_breakdown(trace_path, label: str | None = None, backend_spans: bool = True) -> dict:
    """{"compute_s", "comm_s", "idle_s", "span_s", "steps"} of one Chrome trace (seconds).

    span: the union of the record_function spans whose name starts with `label` (e.g. the case id:
    the labelled steps only); without a label, the recorded ProfilerStep#k events (a step from one
    prof.step() to the next, so whatever ran between the labels too). Inside it: comm = union of
    communication events, compute = union of the other CPU ops, exposed_comm = comm less compute
    (the backends' async spans overlap compute), idle = span less both; compute + exposed_comm +
    idle = span. backend_spans=False leaves out the backends' async spans (gloo:send lasts from
    the isend until the peer took the data): comm is then only the time the thread spent inside
    communication calls, and a blocked Work.wait() (no event of its own on gloo) reads as idle."""
    data = json.loads(Path(trace_path).read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    xs = [e for e in events if e.get("ph") == "X" and "dur" in e and "ts" in e]
    iv = lambda e: (float(e["ts"]) * 1e-6, (float(e["ts"]) + float(e["dur"])) * 1e-6)  # noqa: E731 (us -> s)
    if label is not None:
        steps = [iv(e) for e in xs if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(label)]
    else:
        steps = [iv(e) for e in xs if str(e.get("name", "")).startswith("ProfilerStep#")]
    window = _union(steps)
    ops = [e for e in xs if e.get("cat") in OP_CATS and not str(e.get("name", "")).startswith("ProfilerStep#")]
    backend = [e for e in xs if backend_spans and e.get("cat") == "user_annotation"
               and str(e.get("name", "")).startswith(COMM_ANNOTATIONS)]
    comm = _clip([iv(e) for e in ops if is_comm(str(e.get("name", "")))] + [iv(e) for e in backend], window)
    compute = _clip([iv(e) for e in ops if not is_comm(str(e.get("name", "")))], window)
    span = _length(window)
    return {"compute_s": _length(compute), "comm_s": _length(comm), "exposed_comm_s": _length(_minus(comm, compute)),
            "idle_s": max(0.0, span - _length(compute + comm)), "span_s": span, "steps": len(steps)}
