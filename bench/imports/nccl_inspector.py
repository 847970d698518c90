"""NCCL Inspector (the profiler plugin in NVIDIA/nccl plugins/profiler/inspector/) -> the collectives
each rank ran, with size, communicator and time.

Its JSON output (inspector_json.cc: one object per completed collective, one per line, in
`<dump dir>/<hostname>-pid<pid>.log`):
    {"header": {"id", "comm_name", "rank", "n_ranks", "nnodes"},
     "metadata": {"inspector_output_format_version", "git_rev", "rec_mechanism", "dump_timestamp_us",
                  "hostname", "pid"},
     "coll_perf": {"coll", "coll_sn", "coll_msg_size_bytes", "coll_exec_time_us", "coll_timing_source",
                   "coll_algobw_gbs", "coll_busbw_gbs"}}   (or "p2p_perf": point-to-point, not compared)
`coll` is ncclFuncToString (inspector.cc: AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, ...);
`coll_msg_size_bytes` is the call's count x type size (inspector.cc), a rank's send count for AllGather
and its receive count for ReduceScatter (inspectorComputeOpBw multiplies those by n_ranks):
distbench's size is that x n_ranks. `coll_exec_time_us` is the longest channel's kernel time on the
GPU (`coll_timing_source` kernel_gpu), else host timestamps of the kernel (kernel_cpu) or of the
whole collective (collective_cpu): the source is kept and named. No dtype is recorded.

Its Prometheus output (NCCL_INSPECTOR_PROM_DUMP=1, inspector_prom.cc,
`nccl_inspector_metrics_<GPU UUID>.prom`): per GPU, communicator, collective, algorithm/protocol
and power-of-two size range (`message_size="4-5GB"`, the range's lower end floor(size/unit) in
units of 1024), `nccl_collective_exec_time_microseconds` = the mean time of the calls of the dump
interval and `nccl_bus_bandwidth_gbs` their geometric mean busbw: no single calls, no exact sizes and
no call count. Parsed with prometheus_client's text parser.
"""

import json
import re

from prometheus_client.parser import text_string_to_metric_families

from bench.errors import BenchError
from bench.imports.injob import Call, Read, counted, unknown_groups

SOURCE = "nccl-inspector"
PROM_SOURCE = "nccl-inspector-prometheus"
COLLS = {"AllReduce": "all_reduce", "AllGather": "all_gather_single", "ReduceScatter": "reduce_scatter_single",
         "Broadcast": "broadcast", "Reduce": "reduce"}
PER_RANK_COUNT = ("all_gather_single", "reduce_scatter_single")  # the size counts one rank's share
TIMING = ("NCCL Inspector's coll_exec_time_us: the longest channel's kernel time on the GPU (kernel_gpu); "
          "host timestamps where the GPU clock was not read (kernel_cpu, collective_cpu: named in the notes)")
PROM_TIMING = ("NCCL Inspector's Prometheus nccl_collective_exec_time_microseconds: the mean kernel time of a "
               "bucket's calls over the dump interval (a size range, not a size; no per-call times)")
UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


def looks_like(data: bytes) -> bool:
    head = data[:65536]
    return b'"coll_perf"' in head or b'"p2p_perf"' in head or b"nccl_collective_exec_time_microseconds" in head \
        or b"nccl_bus_bandwidth_gbs" in head


def _objects(path, text: str):
    """Every JSON object in the file (one per line as the plugin writes them; pretty-printed objects,
    as its README shows them, read too)."""
    dec, i, n = json.JSONDecoder(), 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            return
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            line = text.count("\n", 0, e.pos) + 1
            raise BenchError(f"'{path}' line {line}: not NCCL Inspector JSON ({e.msg}); a log cut off mid-object "
                             "cannot be read past that point") from None
        yield obj


def read_json(path, data: bytes) -> Read:
    text = data.decode("utf-8", errors="replace")
    r = Read(file=str(path), source=SOURCE, timing=TIMING, backend="nccl")
    p2p, other, sources, hosts = 0, {}, {}, set()
    for obj in _objects(path, text):
        head, meta = obj.get("header") or {}, obj.get("metadata") or {}
        if meta.get("hostname"):
            hosts.add(str(meta["hostname"]))
        if "p2p_perf" in obj:
            p2p += 1
            continue
        perf = obj.get("coll_perf")
        if not isinstance(perf, dict):
            continue
        coll = COLLS.get(str(perf.get("coll")))
        if coll is None:
            other[str(perf.get("coll"))] = other.get(str(perf.get("coll")), 0) + 1
            continue
        n = int(head.get("n_ranks") or 0)
        size = int(perf.get("coll_msg_size_bytes") or 0) * (n if coll in PER_RANK_COUNT else 1)
        src = str(perf.get("coll_timing_source") or "kernel_gpu (not written: format before v4)")
        sources[src] = sources.get(src, 0) + 1
        name = str(head.get("comm_name") or "")
        r.calls.append(Call(rank=str(head.get("rank", "?")), collective=coll, size_bytes=size, dtype="",
                            group=name if name and name != "unknown" else str(head.get("id", "?")), group_size=n,
                            duration_s=float(perf.get("coll_exec_time_us") or 0) / 1e6))
    r.hosts = sorted(hosts)
    r.rank = ",".join(sorted({c.rank for c in r.calls}))
    r.notes += [f"{n} collective(s) timed by {src}" for src, n in sorted(sources.items()) if src != "kernel_gpu"]
    r.host_waits = any(s != "kernel_gpu" for s in sources)
    r.notes += counted("point-to-point operation(s)", p2p, "not one collective of a size")
    r.notes += [f"{n} {c} collective(s) not compared: no distbench size for it from the plugin's fields"
                for c, n in sorted(other.items())]
    r.notes += unknown_groups(r.calls, "no header.n_ranks")
    if not r.calls and not r.notes:
        raise BenchError(f"'{path}': no coll_perf record in this NCCL Inspector output")
    return r


def size_range(label: str) -> tuple[int, int]:
    """'4-5GB' -> (4 GiB, 5 GiB) as inspectorPromFormatMessageSizeRange writes it; '0B' -> (0, 1)."""
    m = re.fullmatch(r"(\d+)-(\d+)(B|KB|MB|GB|TB)", label.strip())
    if label.strip() == "0B":
        return 0, 1
    if not m:
        raise BenchError(f"message_size '{label}' is not a range like '4-5GB'")
    unit = UNITS[m.group(3)]
    return int(m.group(1)) * unit, int(m.group(2)) * unit


def read_prometheus(path, data: bytes) -> Read:
    text = data.decode("utf-8", errors="replace")
    r = Read(file=str(path), source=PROM_SOURCE, timing=PROM_TIMING, backend="nccl")
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as e:
        raise BenchError(f"'{path}': not Prometheus text format ({e})") from None
    p2p, other = 0, {}
    for fam in families:
        for s in fam.samples:
            if s.name == "nccl_p2p_exec_time_microseconds":
                p2p += 1
            if s.name != "nccl_collective_exec_time_microseconds":
                continue
            lab = s.labels
            coll = COLLS.get(lab.get("collective", ""))
            if coll is None:
                other[lab.get("collective", "")] = other.get(lab.get("collective", ""), 0) + 1
                continue
            n = int(lab.get("nranks") or 0)
            lo, hi = size_range(lab.get("message_size", ""))
            k = n if coll in PER_RANK_COUNT else 1
            r.hosts = sorted({*r.hosts, lab.get("node", "")} - {"", "unknown"})
            r.calls.append(Call(rank=f"{lab.get('node', '?')}:{lab.get('gpu', '?')}", collective=coll,
                                size_bytes=lo * k, size_max_bytes=hi * k, dtype="", group=lab.get("comm_name", "?"),
                                group_size=n, duration_s=float(s.value) / 1e6))
    r.rank = ",".join(sorted({c.rank for c in r.calls}))
    r.notes.append("Prometheus buckets: each time is the mean over a bucket's calls (count not exported); "
                   "sizes are ranges")
    r.notes += counted("point-to-point metric(s)", p2p, "not one collective of a size")
    r.notes += [f"{n} {c} bucket(s) not compared: no distbench size for it" for c, n in sorted(other.items())]
    r.notes += unknown_groups(r.calls, "no nranks label")
    if not r.calls:
        raise BenchError(f"'{path}': no nccl_collective_exec_time_microseconds sample in this Prometheus dump")
    return r


def read(path, data: bytes, index: int = 0) -> Read:
    if b"nccl_collective_exec_time_microseconds" in data or b"nccl_bus_bandwidth_gbs" in data[:65536]:
        if not data.lstrip()[:1] == b"{":
            return read_prometheus(path, data)
    return read_json(path, data)
