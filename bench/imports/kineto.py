"""torch profiler traces (Kineto's Chrome trace JSON, `prof.export_chrome_trace(path)`, one file per
rank, .gz too) -> the collectives each rank ran, with size, dtype, process group and duration.

What is read (the keys as torch writes them):
- trace metadata: `distributedInfo` {backend, rank, world_size, pg_count, pg_config, nccl_version}
  (torch/profiler/profiler.py _get_distributed_info), `deviceProperties[].name` (the GPUs),
  `host_name`.
- On GPU (NCCL): every kernel event whose name starts with `ncclKernel_` / `ncclDevKernel_`; its
  duration is the time the kernel ran on the GPU, which includes the time it spins waiting for the
  other ranks' kernels. Its collective, sizes, dtype and group come from its own args where torch
  copies record_param_comms' metadata onto the kernel ("Collective name", "In msg nelems", "Out msg
  nelems", "dtype", "Group size", "Process Group Name", "Process Group Description", "Process Group
  Ranks": keys of torch/csrc/profiler/util.h, filled by saveNcclMeta in util.cpp from
  ParamCommsUtils.hpp's ParamCommsDebugInfo); older traces link the kernel by its "correlation" to
  the cudaLaunchKernel event and take the record_param_comms or `nccl:<collective>` span around that
  launch (the latter's "Input Dims" / "Input type" when recorded with record_shapes=True).
- On CPU (gloo): ProcessGroupGloo writes no record_param_comms; each collective is a
  `gloo:<collective>` span on gloo's worker thread (ProcessGroupGloo.cpp AsyncWork::execute, opened by
  recordAsyncWorkProfilingInfo), from the moment the worker starts the collective until it is done:
  it includes waiting for the other ranks to arrive. Its size is the "Input Dims" of that span,
  recorded only with record_shapes=True. gloo runs reduce_scatter_tensor as an all_reduce of the whole
  input: it shows (and is compared) as that all_reduce.
- record_param_comms spans on the host without GPU kernels (an NCCL job profiled without CUDA
  activity) time the launch only, not the collective: refused, with how to profile instead.
"""

import bisect
import json
import re
from pathlib import Path

from bench.errors import BenchError
from bench.imports.injob import (ELEMENT_BYTES, Call, Read, collective_of, counted, dtype_of, read_bytes, size_of,
                                 total_numel, unknown_groups)

SOURCE = "torch-profiler"
KERNEL_PREFIXES = ("ncclKernel_", "ncclDevKernel_")
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "hipLaunchKernel",
            "hipExtLaunchKernel")
GPU_TIMING = ("the NCCL kernel's duration on the GPU (from its launch's collective record), including the time "
              "it waits on the GPU for the other ranks' kernels")
GLOO_TIMING = ("the gloo:<collective> span on gloo's worker thread: from when the worker starts the collective "
               "until it is done, INCLUDING host-side waits for the other ranks to arrive")


def looks_like(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head[:1] in (b"{", b"[") and b"traceEvents" in data[:1 << 20]


def _load(path, data: bytes) -> dict:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BenchError(f"'{path}': not a complete Chrome trace JSON ({e}); a trace cut off while written "
                         "cannot be read") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise BenchError(f"'{path}': no traceEvents list: not a torch profiler trace")
    return doc


def _rank_of(path, info: dict, index: int) -> tuple[str, list[str]]:
    if isinstance(info.get("rank"), int):
        return str(info["rank"]), []
    m = re.search(r"rank[-_.]?(\d+)", Path(path).name)
    if m:
        return m.group(1), [f"rank {m.group(1)} taken from the file name (no distributedInfo in the trace)"]
    return str(index), [f"no rank in the trace or its name: called rank {index} (its place among the files)"]


def _groups(info: dict) -> dict[str, tuple[str, int]]:
    """pg_name -> (name to show, its size) from distributedInfo.pg_config."""
    out = {}
    for pg in info.get("pg_config") or []:
        if isinstance(pg, dict) and "pg_name" in pg:
            ranks = pg.get("ranks") or []
            size = int(pg.get("pg_size") or len(ranks) or 0)
            out[str(pg["pg_name"])] = (str(pg.get("pg_desc") or pg["pg_name"]), size)
    return out


def _ranks_count(text) -> int:
    """'[0, 1, 2, 3]' -> 4 (torch writes the list as a string, truncated with '...' when long)."""
    nums = re.findall(r"-?\d+", str(text or ""))
    return len(nums) if "..." not in str(text) else 0


def _from_metadata(a: dict, info: dict, groups: dict) -> tuple[str | None, int, str, str, int, str]:
    """(collective, size_bytes, dtype, group, group_size, why-skipped) from record_param_comms' keys."""
    coll = collective_of(a.get("Collective name", ""))
    if coll is None:
        return None, 0, "", "", 0, str(a.get("Collective name"))
    dtype = dtype_of(a.get("dtype"))
    pg = str(a.get("Process Group Name", a.get("Process Group ID", "")))
    name, pg_size = groups.get(pg, (str(a.get("Process Group Description") or pg), 0))
    n = int(a.get("Group size") or 0) or _ranks_count(a.get("Process Group Ranks")) or pg_size \
        or int(info.get("world_size") or 0)
    if not dtype or dtype not in ELEMENT_BYTES:
        return None, 0, "", "", 0, f"dtype {a.get('dtype')!r}"
    size = size_of(coll, int(a.get("In msg nelems") or 0), int(a.get("Out msg nelems") or 0), n, ELEMENT_BYTES[dtype])
    return coll, size, dtype, name or "default_pg", n, ""


def _from_inputs(name: str, a: dict, info: dict, groups: dict) -> tuple[str | None, int, str, str, int, str]:
    """The same from a `nccl:<x>` / `gloo:<x>` span's "Input Dims" and "Input type" (record_shapes=True);
    the group is the only one, or unknown (the spans do not name theirs)."""
    coll = collective_of(name)
    if coll is None:
        return None, 0, "", "", 0, name
    dims, types = a.get("Input Dims"), a.get("Input type") or []
    if not dims:
        return None, 0, "", "", 0, "no Input Dims"
    dtype = dtype_of(types[0] if types else "")
    if dtype not in ELEMENT_BYTES:
        return None, 0, "", "", 0, f"dtype {types[:1]!r}"
    if len(groups) == 1:
        group, n = next(iter(groups.values()))
    else:
        group, n = ("?" if groups else "default_pg"), int(info.get("world_size") or 0)
    numel = total_numel(dims)  # the inputs only: an all_gather's output is n of them
    return coll, size_of(coll, numel, numel * n if coll.startswith("all_gather") else 0, n,
                         ELEMENT_BYTES[dtype]), dtype, group, n, ""


class _Spans:
    """Host spans that may hold a collective's record, per thread, to find the one around a launch."""

    def __init__(self, events):
        self.by_thread: dict = {}
        for e in events:
            name = str(e.get("name", ""))
            if name == "record_param_comms" or name.startswith("nccl:"):
                self.by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        for spans in self.by_thread.values():
            spans.sort(key=lambda e: float(e["ts"]))
        self.starts = {k: [float(e["ts"]) for e in v] for k, v in self.by_thread.items()}

    def around(self, launch: dict) -> list[dict]:
        """The spans on the launch's thread that contain its start, innermost last."""
        key = (launch.get("pid"), launch.get("tid"))
        spans, t = self.by_thread.get(key, []), float(launch["ts"])
        i = bisect.bisect_right(self.starts.get(key, []), t)
        return [e for e in spans[max(0, i - 8):i] if float(e["ts"]) + float(e.get("dur", 0)) >= t]


def _gpu_calls(xs, kernels, rank, info, groups, notes) -> list[Call]:
    launches = {e["args"]["correlation"]: e for e in xs if str(e.get("name", "")) in LAUNCHES
                and isinstance(e.get("args"), dict) and "correlation" in e["args"]}
    spans = _Spans(xs)
    calls, skipped, unlinked = [], {}, 0
    for k in kernels:
        a = k.get("args") or {}
        if "Collective name" in a:
            got = _from_metadata(a, info, groups)
        else:
            launch = launches.get(a.get("correlation"))
            around = spans.around(launch) if launch else []
            rec = [e for e in around if "Collective name" in (e.get("args") or {})]
            ann = [e for e in around if str(e.get("name", "")).startswith("nccl:")]
            if rec:
                got = _from_metadata(rec[-1]["args"], info, groups)
            elif ann:
                got = _from_inputs(ann[-1]["name"], ann[-1].get("args") or {}, info, groups)
            else:
                unlinked += 1
                continue
        coll, size, dtype, group, n, why = got
        if coll is None:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        calls.append(Call(rank=rank, collective=coll, size_bytes=size, dtype=dtype, group=group, group_size=n,
                          duration_s=float(k["dur"]) / 1e6))
    notes += counted("NCCL kernel(s)", unlinked, "no collective record around their launch (profile with "
                     "record_shapes=True, or a torch that copies the collective's metadata onto the kernel)")
    notes += [f"{n} NCCL kernel(s) of '{why}' not compared: not one collective of a size" for why, n in
              sorted(skipped.items())]
    return calls


def _gloo_calls(spans, rank, info, groups, notes) -> list[Call]:
    calls, skipped, no_dims = [], {}, 0
    for e in spans:
        got = _from_inputs(e["name"], e.get("args") or {}, info, groups)
        coll, size, dtype, group, n, why = got
        if coll is None:
            if why == "no Input Dims" and collective_of(e["name"]) is not None:
                no_dims += 1
            else:
                skipped[why] = skipped.get(why, 0) + 1
            continue
        calls.append(Call(rank=rank, collective=coll, size_bytes=size, dtype=dtype, group=group, group_size=n,
                          duration_s=float(e["dur"]) / 1e6))
    if len(groups) > 1 and calls:
        notes.append(f"{len(groups)} process groups in the job: gloo's spans do not say which group ran them; "
                     f"group '?' of the world size {info.get('world_size')} assumed")
    notes += counted("gloo span(s)", no_dims, "no Input Dims (record the trace with "
                     "torch.profiler.profile(record_shapes=True) to have the sizes)")
    notes += [f"{n} '{why}' span(s) not compared: not one collective of a size" for why, n in sorted(skipped.items())]
    return calls


def read(path, data: bytes, index: int = 0) -> Read:
    """One rank's trace -> its calls. An NCCL trace without GPU kernels and a trace with no
    collective at all are BenchErrors naming the file."""
    doc = _load(path, data)
    info = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    rank, notes = _rank_of(path, info, index)
    props = [d for d in doc.get("deviceProperties") or [] if isinstance(d, dict) and d.get("name")]
    xs = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e and "dur" in e]
    groups = _groups(info)
    kernels = [e for e in xs if e.get("cat") == "kernel" and str(e.get("name", "")).startswith(KERNEL_PREFIXES)]
    gloo = [e for e in xs if str(e.get("name", "")).startswith("gloo:")]
    used = {(k.get("args") or {}).get("device") for k in kernels}  # the GPUs this rank ran kernels on
    devices = [str(d["name"]) for d in props if d.get("id") in used] or [str(d["name"]) for d in props]
    r = Read(file=str(path), source=SOURCE, timing=GPU_TIMING if kernels else GLOO_TIMING, rank=rank,
             world=info.get("world_size"), backend=str(info.get("backend") or ("nccl" if kernels else "gloo" if gloo
                                                                                else "")),
             devices=sorted(set(devices)) if kernels else [], hosts=[str(doc["host_name"])] if doc.get("host_name")
             else [], nccl_version=str(info.get("nccl_version") or ""), host_waits=not kernels, notes=notes)
    if kernels:
        r.calls = _gpu_calls(xs, kernels, rank, info, groups, r.notes)
        r.notes += counted("gloo span(s)", len(gloo), "the trace's NCCL kernels are read (one backend per trace)")
    elif gloo:
        r.calls = _gloo_calls(gloo, rank, info, groups, r.notes)
    elif any(e.get("name") == "record_param_comms" for e in xs):
        raise BenchError(f"'{path}': NCCL collectives recorded on the host only (no GPU kernels in the trace): "
                         "their spans time the launch, not the collective; profile with "
                         "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
    else:  # the notes so far (where its rank came from) say nothing of collectives
        raise BenchError(f"no collective in '{path}': a torch profiler trace with no NCCL kernel and no "
                         "gloo:<collective> span (profile the steps that communicate)")
    r.notes += unknown_groups(r.calls, "the trace has no distributedInfo world_size or pg_config, and its records "
                                       "no 'Group size'")
    return r
