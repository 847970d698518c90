"""PARAM comms output (facebookresearch/param, train/comms/pt/comms.py) -> distbench result rows.

Formats, from the tool's source:
- since 2022 (comms.py printPreamble / reportBenchTimeColl at 1e115ff): a header `COMMS-RES
  total-size (B) nElementsPerRank Time(us):p50 p75 p95 Min Max AlgBW(GB/s) BusBW(GB/s)
  TotalTime(us):p50`, and per size `COMMS-RES-<collective>-<dtype>[-<tag>]` with those values;
- 2020-2021 (comms.py at fa6d244): `COMMS-RES size (B) num-elements Latency(us):p50 p75 p95
  algBW(GB/s) busBW(GB/s)`, rows `COMMS-RES <values>` that do not name the collective (give
  --collective) nor the dtype (PARAM's default, float32, is assumed and noted);
- the preamble: `PARAM COMM environment: {'world_size': N, ...}` (older: `MPI environment: ...`)
  and `backend: B nw-stack: .. args.b: .. args.e: .. args.f: .. args.z: Z ..`.
pt2pt and quantized (COMMS-RES-QUANT) tables are not collectives distbench times: left out, noted.

What the numbers mean (reportBenchTimeColl): each rank times `numIters` ops issued back to back
(--z 1: waiting for each; --z 0, the default: several in flight) and divides by their number; the
figure is the median over ranks of those per-rank means (p50), Min / Max the fastest and slowest
rank; AlgBW = size / p50; BusBW = AlgBW x PARAM's bus factor (nccl-tests' factors). Stored as mode
`throughput` with blocking from --z, rank_reduce `median` (over ranks), and the rank spread in
rank_median_min_s / rank_median_max_s.
"""

import re

from bench.imports import Parsed, read_input, result_row
from bench.errors import BenchError, unknown

TOOL = "param"
# PARAM --collective -> distbench collective (pytorch_dist_backend.py: all_to_all and all_gather_base
# use the single-tensor calls)
COLLECTIVES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "all_gather_base": "all_gather_single",
               "reduce_scatter": "reduce_scatter", "reduce_scatter_base": "reduce_scatter_single",
               "all_to_all": "all_to_all_single", "all_to_all_single": "all_to_all_single",
               "all_to_allv": "all_to_all_single", "broadcast": "broadcast", "reduce": "reduce", "gather": "gather",
               "scatter": "scatter", "barrier": "barrier"}
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bf16": "bfloat16", "fp16": "float16",
          "int": "int32", "long": "int64", "byte": "uint8", "char": "int8"}
REDUCING = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_single")

# header label (lower case, units dropped) -> our name
LABELS = {"size": "size", "total-size": "size", "num-elements": "count", "nelementsperrank": "count",
          "latency:p50": "p50", "time:p50": "p50", "p75": "p75", "p95": "p95", "min": "min", "max": "max",
          "algbw": "algbw", "busbw": "busbw", "totaltime:p50": "total", "totallatency:p50": "total",
          "complatency:p50": "comp", "tflops": "tflops"}  # the last two: --mode comms-compute (2023-2024)
# one header label: `BusBW(GB/s)`, `Time(us):p50`, `total-size`; comms-compute prints `{:>12}` BusBW(GB/s)
# before `{:>20}` TotalLatency(us):p50, 20 characters, so the two are glued: `BusBW(GB/s)TotalLatency(us):p50`
_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(?:\([^)]*\))?(?::p\d+)?")

DEFINITIONS = {
    "time_median_s": "PARAM Time(us):p50 (us -> s): the median over ranks of each rank's mean op time over numIters "
                     "ops issued back to back (--z 1 waits for each, --z 0 keeps several in flight)",
    "rank_median_min_s": "PARAM Min: the fastest rank's mean op time", "rank_median_max_s": "PARAM Max: the slowest "
    "rank's mean op time", "rank_skew_s": "Max - Min",
    "algbw_gbps": "PARAM AlgBW: size / p50, GB/s (1e9 B/s)",
    "busbw_gbps": "PARAM BusBW: AlgBW x PARAM's bus factor (nccl-tests' factors)",
    "size_bytes": "PARAM total-size (B) (memSize)", "count": "PARAM nElementsPerRank",
    "wrong": "null: PARAM prints no wrong-element count in its results table",
    "mode": "throughput (blocking from --z)", "rank_reduce": "median: the median over ranks (PARAM's p50)",
    "not stored": "PARAM p75 / p95 over ranks, TotalTime(us):p50 (TotalLatency), and in --mode comms-compute "
                  "CompLatency(us):p50 (the compute kernels' time) and TFlops",
}

_WORLD = re.compile(r"'world_size':\s*(\d+)")
_ARGS = re.compile(r"backend:\s*(\S+).*?args\.b:\s*(\S+)\s+args\.e:\s*(\S+)\s+args\.f:\s*(\S+)\s+args\.z:\s*(\S+)")
_DTYPES = re.compile(r"args\.data_types?:\s*\[?'?([A-Za-z0-9_]+)")


def _labels(header: str, where: str) -> list[str]:
    """'COMMS-RES  total-size (B)  nElementsPerRank ... BusBW(GB/s) ...' -> ['size', 'count', ..]."""
    toks: list[str] = []
    for t in header.split()[1:]:
        if t.startswith("(") and toks:  # '(B)' belongs to the label before it
            continue
        toks += _LABEL.findall(t) or [t]
    out = []
    for t in toks:
        key = re.sub(r"\((?:us|gb/s|b)\)", "", t.lower())
        if key not in LABELS:
            raise BenchError(f"{where}: unknown PARAM column '{t}' in header: {' '.join(header.split())}; known: "
                             f"{', '.join(sorted(LABELS))}")
        out.append(LABELS[key])
    return out


def parse_runs(path, collective: str | None = None, world: int | None = None) -> list[Parsed]:
    """A PARAM log is one run (the import CLI reads every tool's files as lists of runs)."""
    return [parse(path, collective, world)]


def parse(path, collective: str | None = None, world: int | None = None) -> Parsed:
    text = read_input(path)
    path = str(path)
    out = Parsed(file=path, format="text")
    labels, data, dtype_arg, blocking, args_m = None, [], None, None, None
    skipped = set()
    for no, ln in enumerate(text.splitlines(), 1):
        s = ln.strip()
        if m := _WORLD.search(s):
            if "environment" in s:
                out.world = out.world or int(m.group(1))
        if m := _ARGS.search(s):
            args_m = m
            blocking = m.group(5) == "1"
        if m := _DTYPES.search(s):
            dtype_arg = m.group(1)
        if s.startswith(("$ ", "+ ")) and "comms.py" in s:
            out.command = s[2:].strip()
        if not s.startswith(("COMMS-RES", "COMMS-QUANT-RES")):
            continue
        head = s.split()[0]
        if "QUANT" in head:
            skipped.add("quantized (COMMS-RES-QUANT) table")
            continue
        if any(w in s for w in ("pingLatency", "pingPongLatency")):
            labels = None
            skipped.add("pt2pt table (ping / ping-pong latency: not a collective)")
            continue
        if re.search(r"\bsize\b|total-size|total-pair-size", s):
            if "total-pair-size" in s:
                labels = None
                skipped.add("paired (--pair) table")
                continue
            labels = _labels(s, f"'{path}' line {no}")
            continue
        if labels is None:
            if skipped:
                continue
            raise BenchError(f"'{path}' line {no}: a COMMS-RES row before any COMMS-RES header")
        data.append((no, head, s.split()[1:], labels))
    if not data:
        if skipped:
            raise BenchError(f"'{path}': only {', '.join(sorted(skipped))}: no collective results to import")
        raise BenchError(f"'{path}': not PARAM comms output (no 'COMMS-RES' results table found)")
    if world and out.world and world != out.world:
        raise BenchError(f"'{path}' says world_size {out.world}; --world {world} disagrees")
    out.world = world or out.world
    if not out.world:
        raise BenchError(f"'{path}': does not say the world size (no \"PARAM COMM environment: {{'world_size': N\" "
                         "line); give --world N")
    if blocking is None:
        blocking = False
        out.notes.append("no args.z in the log: PARAM's default --z 0 (non-blocking) assumed")
    if not out.command and args_m:
        out.command = (f"comms.py --backend {args_m.group(1)} --b {args_m.group(2)} --e {args_m.group(3)} "
                       f"--f {args_m.group(4)} --z {args_m.group(5)}"
                       + (f" --collective {collective}" if collective else "") + "  (reconstructed from the log)")
    out.version = ""
    _rows(out, data, path, collective, dtype_arg, blocking)
    if not out.rows:
        raise BenchError(f"'{path}': no rows of collective '{collective}' (the log's rows name "
                         f"{', '.join(sorted({h for _, h, _, _ in data}))})")
    out.notes += [f"left out: {s}" for s in sorted(skipped)]
    return out


def _rows(out: Parsed, data: list, path: str, collective: str | None, dtype_arg: str | None, blocking: bool):
    """The COMMS-RES rows -> out.rows (a cut-off last row is noted and left out)."""
    for i, (no, head, vals, labs) in enumerate(data):
        name_dtype = head[len("COMMS-RES"):].lstrip("-")
        if name_dtype:  # COMMS-RES-<collective>-<dtype>[-<tag>]
            coll, _, rest = name_dtype.partition("-")
            dtype = rest.split("-")[0] if rest else (dtype_arg or "float32")
        else:
            coll, dtype = collective, dtype_arg
            if coll is None:
                raise BenchError(f"'{path}': an older PARAM log whose rows do not name the collective; give "
                                 "--collective NAME (PARAM's --collective, e.g. all_reduce)")
            if dtype is None:
                dtype = "float32"
                if "float32 assumed" not in " ".join(out.notes):
                    out.notes.append("rows do not name the dtype: PARAM's default float32 assumed")
        if collective and name_dtype and coll != collective:
            continue  # --collective selects one of several tables
        if coll not in COLLECTIVES:
            raise unknown("PARAM collective", coll, COLLECTIVES)
        if len(vals) < len(labs):
            if i == len(data) - 1:
                out.notes.append(f"cut off: the last row (line {no}) is incomplete and was left out")
                break
            raise BenchError(f"'{path}' line {no}: {len(vals)} values, expected {len(labs)}")
        try:
            f = {k: float(v) for k, v in zip(labs, vals)}
        except ValueError:
            raise BenchError(f"'{path}' line {no}: a value is not a number: {' '.join(vals)}") from None
        name = COLLECTIVES[coll]
        rmin, rmax = f.get("min"), f.get("max")
        extra = {}
        if rmin is not None and rmax is not None:
            extra = {"rank_median_min_s": rmin * 1e-6, "rank_median_max_s": rmax * 1e-6,
                     "rank_skew_s": (rmax - rmin) * 1e-6}
        out.rows.append(result_row(
            collective=name, size_bytes=int(f["size"]), count=int(f["count"]) if "count" in f else None,
            dtype=DTYPES.get(dtype, dtype), op="sum" if name in REDUCING else "", root=0 if name in
            ("broadcast", "reduce", "gather", "scatter") else -1, placement="out-of-place", world=out.world,
            mode="throughput", rank_reduce="median", blocking=blocking, time_s=f["p50"] * 1e-6,
            algbw_gbps=f.get("algbw"), busbw_gbps=f.get("busbw"), wrong=None, extra=extra))
