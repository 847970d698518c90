"""Collectives inside a training job: what the job's own records say each collective took, per rank,
set beside a stored distbench collectives run at the same collective, size, dtype and group size.

The readers (bench.imports.kineto: torch profiler traces; bench.imports.nccl_inspector: NCCL
Inspector's JSON lines and Prometheus dump; bench.imports.flight_recorder: PyTorch's flight recorder
dumps) turn each file into a `Read`: one `Call` per recorded collective with its rank, distbench's
name for it, its size as distbench sizes a case (the total array, as nccl-tests' `size` column:
max(send, receive) bytes of a rank), dtype, process group and duration. `summarize` takes per rank
the median over its calls, then the ranks' spread (min / median / max over ranks, so a straggler
shows); `compare` sets the stored run's row beside each size (exact size only).

Nothing here imports torch: `distbench injob` launches nothing.
"""

import gzip
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.errors import BenchError
from bench.results.fingerprint import of_run
from bench.timing.busbw import bus_factor

# ---- names ------------------------------------------------------------------------------------

# torch's names of a collective -> distbench's. "Collective name" of record_param_comms (torch/csrc/
# distributed/c10d/ProcessGroupNCCL.cpp, RECORD_PARAM_COMMS_DATA), the profiling titles after "nccl:" /
# "gloo:" (ProcessGroupNCCL.cpp, ProcessGroupGloo.cpp) and the flight recorder's profiling_name.
TORCH_NAMES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "broadcast": "broadcast", "reduce": "reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather_single",
    "_all_gather_base": "all_gather_single", "all_gather_into_tensor": "all_gather_single",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter_single",
    "reduce_scatter_tensor": "reduce_scatter_single", "all_to_all": "all_to_all_single",
    "all_to_allv": "all_to_all_single", "alltoall_base": "all_to_all_single", "alltoall": "all_to_all",
    "gather": "gather", "scatter": "scatter",
}
# What is recorded but is not one collective of a size: point-to-point, barriers, the watchdog's
# waits, and coalesced calls (several collectives under one record).
NOT_COMPARED = ("send", "recv", "barrier", "wait", "monitored_barrier", "coalesced", "recv_anysource")
# the list and the single-tensor form of one collective: a benchmark of either is the nearest row
TWINS = {"all_gather": "all_gather_single", "all_gather_single": "all_gather",
         "reduce_scatter": "reduce_scatter_single", "reduce_scatter_single": "reduce_scatter",
         "all_to_all": "all_to_all_single", "all_to_all_single": "all_to_all"}
# distbench collective -> the nccl-tests name of its bus factor (bench.timing.busbw.FACTORS)
FACTOR_NAMES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "all_gather_single": "all_gather",
                "reduce_scatter": "reduce_scatter", "reduce_scatter_single": "reduce_scatter",
                "all_to_all": "alltoall", "all_to_all_single": "alltoall", "broadcast": "broadcast",
                "reduce": "reduce", "gather": "gather", "scatter": "scatter"}
REDUCING = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_single")
# torch.all_reduce, broadcast and reduce work on the tensor they are given; the others write elsewhere
IN_PLACE = ("all_reduce", "broadcast", "reduce")

# dtype spellings -> distbench's names. c10::toString(ScalarType) ("Float", "BFloat16": record_param_comms'
# "dtype", the flight recorder's input_dtypes) and caffe2::TypeMeta names ("float", "c10::BFloat16": the
# profiler's "Input type" with record_shapes=True, torch/csrc/profiler/util.cpp inputTypes).
DTYPES = {
    "float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16", "c10::half": "float16",
    "c10::bfloat16": "bfloat16", "long": "int64", "long int": "int64", "int": "int32", "short": "int16",
    "short int": "int16", "char": "int8", "signed char": "int8", "byte": "uint8", "unsigned char": "uint8",
    "bool": "bool", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "c10::float8_e4m3fn": "float8_e4m3fn", "c10::float8_e5m2": "float8_e5m2",
}
ELEMENT_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
                 "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


def collective_of(torch_name: str) -> str | None:
    """distbench's name of a torch collective ('nccl:_allgather_base' -> 'all_gather_single'); None for
    what is not compared (NOT_COMPARED) or not known."""
    name = str(torch_name).split(":", 1)[-1].strip()
    if any(w in name for w in NOT_COMPARED):
        return None
    return TORCH_NAMES.get(name)


def dtype_of(text) -> str:
    """distbench's dtype name of a torch spelling; '' when the record does not say or the name is new."""
    return DTYPES.get(str(text or "").strip().lower(), "")


def total_numel(dims) -> int:
    """Elements of every tensor in a list of shapes ([[4, 8], [2]] -> 34; [] -> 0)."""
    out = 0
    for shape in dims or []:
        if isinstance(shape, (list, tuple)) and all(isinstance(d, int) for d in shape):
            n = 1
            for d in shape:
                n *= d
            out += n if shape else 0
    return out


def size_of(collective: str, in_numel: int, out_numel: int, group_size: int, element_bytes: int) -> int:
    """A collective's size as distbench sizes its case: the total array, max(send, receive) elements of
    a rank (nccl-tests writeBenchmarkLinePreamble); gather and scatter count every rank's share (a
    rank's record holds its own part only when it is not the root)."""
    numel = max(in_numel, out_numel)
    if collective == "gather":
        numel = max(numel, in_numel * group_size)
    if collective == "scatter":
        numel = max(numel, out_numel * group_size)
    return numel * element_bytes


# ---- records ----------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Call:
    """One collective as a job recorded it on one rank."""

    rank: str  # the rank's label: its global rank, or its rank in the communicator (NCCL Inspector)
    collective: str  # distbench's name
    size_bytes: int  # the total array (see size_of); a range's lower end for Prometheus buckets
    dtype: str  # distbench's name, '' where the record does not say (NCCL Inspector)
    group: str  # process group / communicator name
    group_size: int  # ranks in it: the n of the bus factor
    duration_s: float
    size_max_bytes: int | None = None  # Prometheus: the range's upper end (exclusive); None: exact size

    @property
    def placement(self) -> str:
        return "in-place" if self.collective in IN_PLACE else "out-of-place"


@dataclass(kw_only=True)
class Read:
    """What one file holds: its calls and the facts of its machine, as far as the file tells."""

    file: str
    source: str  # torch-profiler | nccl-inspector | nccl-inspector-prometheus | flight-recorder
    timing: str  # what duration_s measures, one sentence
    calls: list[Call] = field(default_factory=list)
    rank: str = ""
    world: int | None = None
    backend: str = ""
    devices: list[str] = field(default_factory=list)  # GPU names; [] on CPU or where the file does not say
    hosts: list[str] = field(default_factory=list)
    nccl_version: str = ""
    host_waits: bool = False  # the duration includes host-side waiting (for the other ranks, for the thread)
    notes: list[str] = field(default_factory=list)


def read_bytes(path) -> bytes:
    """The file's bytes, gunzipped when gzip; a missing, empty or unreadable file is one BenchError."""
    p = Path(path)
    if not p.exists():
        raise BenchError(f"'{path}': no such file")
    if p.is_dir():
        raise BenchError(f"'{path}' is a directory; give the trace or dump files (one per rank)")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise BenchError(f"'{path}': cannot read it ({e.strerror or type(e).__name__})") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise BenchError(f"'{path}': a gzip file that cannot be read ({e})") from None
    if not data.strip():
        raise BenchError(f"'{path}' is empty: no collectives recorded")
    return data


def counted(what: str, n: int, why: str) -> list[str]:
    """A note '<n> <what> not compared: <why>' when n > 0."""
    return [f"{n} {what} not compared: {why}"] if n else []


UNKNOWN_GROUP = "group size unknown"


def unknown_groups(calls: list[Call], why: str) -> list[str]:
    """A note for the calls whose group size the records do not give (group_size 0): their rows keep
    their time and algbw; busbw (the bus factor at n ranks) is left blank and no benchmark row is matched."""
    n = sum(c.group_size < 1 for c in calls)
    return [f"{UNKNOWN_GROUP} for {n} call(s) ({why}): busbw left blank, not set beside a benchmark row"] if n else []


# ---- the summary: per rank, then the ranks' spread -----------------------------------------------

KEYS = ["collective", "dtype", "group", "group_size", "size_bytes", "size_max_bytes"]


def calls_frame(reads: list[Read]) -> pd.DataFrame:
    rows = [{"rank": c.rank, "collective": c.collective, "dtype": c.dtype, "group": c.group,
             "group_size": c.group_size, "size_bytes": c.size_bytes,
             "size_max_bytes": -1 if c.size_max_bytes is None else c.size_max_bytes, "placement": c.placement,
             "duration_s": c.duration_s} for r in reads for c in r.calls]
    return pd.DataFrame(rows, columns=["rank", *KEYS, "placement", "duration_s"])


def summarize(reads: list[Read]) -> pd.DataFrame:
    """One row per collective, dtype, group and size: per rank the median over its calls
    (`calls` = calls of all ranks), then over ranks min / median / max of those medians, the slowest
    rank, and `time_s` = the max over ranks (distbench's latency-mode reduction) with its algbw and
    busbw (nccl-tests' bus factor at the group size, bench.timing.busbw)."""
    df = calls_frame(reads)
    if df.empty:
        return pd.DataFrame(columns=[*KEYS, "placement", "calls", "ranks", "time_rank_min_s", "time_rank_median_s",
                                     "time_rank_max_s", "slowest_rank", "time_s", "algbw_gbps", "busbw_gbps"])
    per_rank = df.groupby([*KEYS, "placement", "rank"], sort=True, dropna=False)["duration_s"].agg(
        rank_median_s="median", n="count").reset_index()
    out = []
    for key, g in per_rank.groupby([*KEYS, "placement"], sort=True, dropna=False):
        row = dict(zip([*KEYS, "placement"], key))
        slow = g.loc[g["rank_median_s"].idxmax()]
        row.update(calls=int(g["n"].sum()), ranks=len(g), time_rank_min_s=float(g["rank_median_s"].min()),
                   time_rank_median_s=float(g["rank_median_s"].median()),
                   time_rank_max_s=float(g["rank_median_s"].max()), slowest_rank=str(slow["rank"]))
        row["time_s"] = row["time_rank_max_s"]
        algbw = row["size_bytes"] / row["time_s"] / 1e9 if row["time_s"] > 0 else float("nan")
        n = int(row["group_size"])  # 0: the records do not say (unknown_groups): no bus factor, no busbw
        row.update(algbw_gbps=algbw, busbw_gbps=algbw * bus_factor(FACTOR_NAMES.get(row["collective"], ""), n)
                   if n >= 1 else float("nan"))
        out.append(row)
    res = pd.DataFrame(out)
    res["size_max_bytes"] = res["size_max_bytes"].map(lambda v: None if v == -1 else int(v)).astype("object")
    return res.sort_values(["collective", "group", "size_bytes"], kind="stable").reset_index(drop=True)


# ---- beside a stored run ------------------------------------------------------------------------

MODE_ORDER = {"latency": 0, "throughput": 1, "nccl-tests": 2}


def _bench_rows(results: pd.DataFrame) -> pd.DataFrame:
    df = results.copy()
    if "group_size" not in df:
        df["group_size"] = pd.NA
    df["_n"] = pd.to_numeric(df["group_size"], errors="coerce").fillna(pd.to_numeric(df["world"], errors="coerce"))
    return df[pd.to_numeric(df["time_median_s"], errors="coerce") > 0]


def _pick(cands: pd.DataFrame, collective: str, placement: str, dtype: str) -> pd.Series:
    """The benchmark row nearest the in-job call among rows of its size: the same collective before
    its list / single twin, the same placement, the in-job dtype (float32 first when the record has
    none), op sum, latency mode before throughput and nccl-tests."""
    def rank(r):
        return (r["collective"] != collective, r["placement"] != placement,
                (r["dtype"] != dtype) if dtype else (r["dtype"] != "float32"),
                str(r.get("op") or "") not in ("sum", "", "none"), MODE_ORDER.get(str(r.get("mode")), 9))
    order = sorted(range(len(cands)), key=lambda i: rank(cands.iloc[i]))
    return cands.iloc[order[0]]


def _match(bench: pd.DataFrame, row: dict) -> tuple[pd.Series | None, str]:
    """(the benchmark row for one summary row, or None; a note)."""
    if int(row["group_size"]) < 1:
        return None, f"{UNKNOWN_GROUP}: no benchmark row of its group size to set it beside"
    names = [row["collective"], *([TWINS[row["collective"]]] if row["collective"] in TWINS else [])]
    same = bench[bench["collective"].isin(names) & (bench["_n"] == int(row["group_size"]))]
    if row["dtype"]:
        same = same[same["dtype"] == row["dtype"]]
    lo, hi = int(row["size_bytes"]), row.get("size_max_bytes")
    if hi is None:
        at = same[pd.to_numeric(same["size_bytes"]) == lo]
        if at.empty:
            return None, "no benchmark row at this size"
    else:
        at = same[(pd.to_numeric(same["size_bytes"]) >= lo) & (pd.to_numeric(same["size_bytes"]) < int(hi))]
        sizes = sorted(set(pd.to_numeric(at["size_bytes"]).astype(int)))
        if not sizes:
            return None, "no benchmark row in this size range"
        if len(sizes) > 1:
            return None, f"several benchmark sizes in this range ({', '.join(map(str, sizes))}): no one size"
    best = _pick(at, row["collective"], row["placement"], row["dtype"])
    notes = []
    if best["collective"] != row["collective"]:
        notes.append(f"benchmark {best['collective']} (the {row['collective']} form was not measured)")
    if best["placement"] != row["placement"]:
        notes.append(f"benchmark {best['placement']}")
    if not row["dtype"]:
        notes.append(f"dtype not recorded; benchmark {best['dtype']}")
    if hi is not None:
        notes.append(f"size range {lo}..{int(hi) - 1} B; benchmark at {int(best['size_bytes'])} B")
    return best, "; ".join(notes)


def compare(summary: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """The summary with the stored run's figures beside each row: bench_time_s (its time_median_s),
    bench_busbw_gbps, the row's case_id, mode, rank_reduce and placement, and ratio = in-job time_s /
    bench_time_s (> 1: slower in the job); `note` says which row was taken, or why none."""
    bench = _bench_rows(results)
    out = []
    for row in summary.to_dict("records"):
        best, note = _match(bench, row)
        extra = {"bench_time_s": None, "bench_busbw_gbps": None, "bench_case_id": "", "bench_mode": "",
                 "bench_rank_reduce": "", "bench_placement": "", "ratio": None, "note": note}
        if best is not None:
            t = float(best["time_median_s"])
            extra.update(bench_time_s=t, bench_busbw_gbps=float(best["busbw_gbps"]) if pd.notna(best.get("busbw_gbps"))
                         else None, bench_case_id=str(best["case_id"]), bench_mode=str(best.get("mode") or ""),
                         bench_rank_reduce=str(best.get("rank_reduce") or ""), bench_placement=str(best["placement"]),
                         ratio=row["time_s"] / t)
        out.append({**row, **extra})
    return pd.DataFrame(out)


def machine_warnings(reads: list[Read], meta: dict) -> list[str]:
    """How the job's machine differs from the stored run's, as far as the records tell: the device
    (GPU model, or cpu), the backend, the node count and NCCL's major.minor (bench.results.fingerprint
    reads the stored run's meta.json). Empty: nothing the records say differs."""
    fp = of_run(meta)
    out = []
    gpus = sorted({d for r in reads for d in r.devices})
    backends = sorted({r.backend for r in reads if r.backend})
    if gpus and "+".join(gpus) != fp.device:
        out.append(f"the job ran on {', '.join(gpus)}, the benchmark on {fp.device}")
    elif not gpus and fp.device != "cpu" and "gloo" in backends:
        out.append(f"the job ran on CPU (gloo), the benchmark on {fp.device}")
    if backends and "+".join(backends) != fp.backend:
        out.append(f"the job's backend is {'+'.join(backends)}, the benchmark's {fp.backend}")
    hosts = sorted({h for r in reads for h in r.hosts if h})
    if hosts and len(hosts) != fp.nodes:
        out.append(f"the job's records come from {len(hosts)} host(s), the benchmark ran on {fp.nodes} node(s)")
    versions = sorted({".".join(re.findall(r"\d+", r.nccl_version)[:2]) for r in reads if r.nccl_version})
    if versions and fp.nccl and versions != [fp.nccl]:
        out.append(f"the job used NCCL {', '.join(versions)}, the benchmark NCCL {fp.nccl}")
    return out
