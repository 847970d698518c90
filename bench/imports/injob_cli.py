"""`distbench injob TRACE... --against RUN_DIR`: the collectives a training job ran, as its own records
tell (torch profiler traces, NCCL Inspector output, flight recorder dumps: bench.imports.injob), per
collective and size beside a stored distbench collectives run: in-job / benchmark.

`--save` also stores the in-job figures as a run (kind collectives, suite `injob`, meta.json
`source.tool` the format's name), which `distbench report RUN_DIR SAVED_RUN` draws beside the
benchmark. Reads files only: no torch, nothing launched.
"""

import json
import math
import sys

import pandas as pd

from bench.errors import BenchError
from bench.imports import Parsed, flight_recorder, kineto, nccl_inspector, result_row, store
from bench.imports.injob import ELEMENT_BYTES, REDUCING, Read, compare, machine_warnings, read_bytes, summarize
from bench.results import runs as runs_mod
from bench.results.store import load_run
from bench.units import format_size

FORMATS = ("table", "json", "csv")
READERS = (kineto, nccl_inspector, flight_recorder)
TIME = ("per size: each rank's median over its calls, then min / median / max over ranks; time = the max over "
        "ranks (distbench's latency-mode reduction); busbw = size / time x the bus factor at the group size "
        "(nccl-tests doc/PERFORMANCE.md, bench/timing/busbw.py); ratio = in-job time / the benchmark's time_median_s")


def add_parser(sub):
    p = sub.add_parser("injob", help="collectives inside a training job (torch profiler traces, NCCL Inspector "
                                     "output, flight recorder dumps) beside a stored collectives run")
    p.add_argument("traces", nargs="+", metavar="TRACE",
                   help="the job's records, one file per rank (torch profiler Chrome trace .json / .json.gz, "
                        "NCCL Inspector .log or .prom, flight recorder dump); one kind per call")
    p.add_argument("--against", default=None, metavar="RUN_DIR",
                   help="the stored distbench collectives run the in-job times are judged against "
                        "(results/<suite>/<run_id>); without it, the in-job figures alone")
    p.add_argument("--format", default="table", type=str.lower, choices=FORMATS,
                   help=f"output format: {' | '.join(FORMATS)} (default table)")
    p.add_argument("--save", action="store_true",
                   help="also store the in-job figures as a run under --out (suite injob): `distbench report "
                        "RUN_DIR SAVED_RUN` draws them beside the benchmark")
    p.add_argument("--out", default="results", metavar="DIR", help="results root that --save writes to "
                                                                   "(default results/)")
    p.set_defaults(func=cmd_injob)


def read_all(paths) -> list[Read]:
    """Every file read by the reader its content asks for; one kind of record per call."""
    reads = []
    for i, path in enumerate(paths):
        data = read_bytes(path)
        mod = next((m for m in READERS if m.looks_like(data)), None)
        if mod is None:
            raise BenchError(f"'{path}': neither a torch profiler trace, NCCL Inspector output nor a flight recorder "
                             "dump")
        reads.append(mod.read(path, data, i))
    sources = sorted({r.source for r in reads})
    if len(sources) > 1:
        raise BenchError(f"the files hold {', '.join(sources)} records: give one kind per call (each defines its "
                         "time its own way)")
    return reads


def _against(path) -> tuple[pd.DataFrame, dict, str]:
    run_dir = runs_mod.resolve_run_dir(path)
    run = load_run(run_dir)
    res = run.tables.get("results")
    if run.meta.get("kind") != "collectives" or res is None or "collective" not in res:
        raise BenchError(f"--against '{path}' is a run of kind '{run.meta.get('kind', '?')}'; give a run of "
                         "`distbench collectives` (or an imported one)")
    return res, run.meta, str(run_dir)


def _py(v):
    if v is None or v is pd.NA:
        return None
    if hasattr(v, "item"):
        v = v.item()
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _us(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{v * 1e6:.1f}"


def _num(v, fmt="{:.3f}") -> str:
    return "-" if v is None or pd.isna(v) else fmt.format(v)


def _size(r) -> str:
    lo, hi = int(r["size_bytes"]), r.get("size_max_bytes")
    return format_size(lo) if hi is None or pd.isna(hi) else f"{format_size(lo)}..<{format_size(int(hi))}"


def render_table(rows: pd.DataFrame, reads: list[Read], against: str | None) -> str:
    files = ", ".join(sorted({r.rank for r in reads if r.rank}, key=lambda x: (len(x), x)))
    lines = [f"# in-job: {len(reads)} {reads[0].source} file(s), rank(s) {files or '?'}; backend "
             f"{'+'.join(sorted({r.backend for r in reads if r.backend})) or '?'}; "
             f"{', '.join(sorted({d for r in reads for d in r.devices})) or 'no GPU named in the records'}",
             f"# in-job time: {reads[0].timing}", f"# {TIME}"]
    if any(r.host_waits for r in reads):
        lines.append("# NOTE: these in-job times include host-side waits (for the other ranks, for a thread): they "
                     "read high against a benchmark whose ranks start together")
    if against:
        lines.append(f"# against: {against}")
    head = (f"{'collective':<22} {'dtype':<9} {'group':<14} {'n':>3} {'size':>11} {'calls':>6} {'rank min us':>12} "
            f"{'median us':>10} {'max us':>10} {'slowest':>8} {'busbw GB/s':>10}")
    if against:
        head += f" | {'bench us':>10} {'bench busbw':>11} {'in-job/bench':>12}  note"
    lines.append(head)
    for r in rows.to_dict("records"):
        line = (f"{r['collective']:<22} {r['dtype'] or '?':<9} {str(r['group'])[:14]:<14} {int(r['group_size']) or '?':>3} "
                f"{_size(r):>11} {int(r['calls']):>6} {_us(r['time_rank_min_s']):>12} {_us(r['time_rank_median_s']):>10} "
                f"{_us(r['time_rank_max_s']):>10} {str(r['slowest_rank']):>8} {_num(r['busbw_gbps']):>10}")
        if against:
            line += (f" | {_us(r['bench_time_s']):>10} {_num(r['bench_busbw_gbps']):>11} "
                     f"{_num(r['ratio'], '{:.2f}x'):>12}  {r['note']}")
        lines.append(line.rstrip())
    if rows.empty:
        lines.append("# no collective of a size in the records (see the notes)")
    return "\n".join(lines) + "\n"


def render_json(rows: pd.DataFrame, reads: list[Read], against: str | None, warnings: list[str]) -> str:
    doc = {"in_job": {"source": reads[0].source, "timing": reads[0].timing,
                      "host_waits": any(r.host_waits for r in reads),
                      "files": [{"file": r.file, "rank": r.rank, "backend": r.backend, "devices": r.devices,
                                 "hosts": r.hosts, "nccl_version": r.nccl_version, "calls": len(r.calls),
                                 "notes": r.notes} for r in reads]},
           "time": TIME, "against": against, "machine_warnings": warnings,
           "rows": [{k: _py(v) for k, v in rec.items()} for rec in rows.to_dict("records")]}
    return json.dumps(doc, indent=1) + "\n"


def _save(rows: pd.DataFrame, reads: list[Read], out: str) -> str:
    """The in-job figures as a stored run of the collectives kind (bench.imports.store), one launch per
    group size; mode `injob`, rank_reduce `max` (the time shown), no samples."""
    if reads[0].source == nccl_inspector.PROM_SOURCE:
        raise BenchError("--save: Prometheus dumps hold size ranges, not sizes; save from the JSON output "
                         "(NCCL_INSPECTOR_PROM_DUMP=0)")
    cpu = not any(r.devices for r in reads) and all(r.backend == "gloo" for r in reads)
    unknown = int((rows["group_size"] < 1).sum())  # a stored row needs its world (bench.imports.injob.unknown_groups)
    if unknown:
        print(f"distbench: note: --save: {unknown} row(s) of an unknown group size not stored", file=sys.stderr)
    if unknown == len(rows):
        return None
    parsed = []
    for n, g in rows[rows["group_size"] >= 1].groupby("group_size", sort=True):
        p = Parsed(file=", ".join(r.file for r in reads), format=reads[0].source, world=int(n),
                   backend="+".join(sorted({r.backend for r in reads if r.backend})) or "nccl",
                   device_type="cpu" if cpu else "cuda", nccl_version=reads[0].nccl_version,
                   hosts=sorted({h for r in reads for h in r.hosts}),
                   devices=[d for r in reads for d in r.devices][:int(n)],
                   notes=[f"{r.file}: {x}" for r in reads for x in r.notes])
        for r in g.to_dict("records"):
            eb = ELEMENT_BYTES.get(r["dtype"])
            p.rows.append(result_row(
                collective=r["collective"], size_bytes=int(r["size_bytes"]), count=r["size_bytes"] // eb if eb else None,
                dtype=r["dtype"] or "unknown", op="sum" if r["collective"] in REDUCING else "", root=-1,
                placement=r["placement"], world=int(n), mode="injob", rank_reduce="max", blocking=True,
                time_s=r["time_s"], algbw_gbps=r["algbw_gbps"], busbw_gbps=r["busbw_gbps"], wrong=None,
                extra={"samples": int(r["calls"]), "rank_median_min_s": r["time_rank_min_s"],
                       "rank_median_max_s": r["time_rank_max_s"],
                       "rank_skew_s": r["time_rank_max_s"] - r["time_rank_min_s"]}))
        parsed.append(p)
    definitions = {"time_median_s": f"{reads[0].timing}; per rank the median over its calls, then the max over ranks",
                   "mode": "injob: collectives as a training job ran them, between its compute (not a benchmark)",
                   "samples": "calls of every rank", "rank_median_min_s / max_s": "min / max over ranks of the "
                   "per-rank medians"}
    return str(store(parsed, tool=reads[0].source, definitions=definitions, out=out, suite="injob",
                     argv=["distbench", *sys.argv[1:]] if sys.argv[1:2] == ["injob"] else None))


def cmd_injob(args) -> int:
    reads = read_all(args.traces)
    rows = summarize(reads)
    warnings, against = [], None
    if args.against:
        results, meta, against = _against(args.against)
        rows = compare(rows, results)
        warnings = machine_warnings(reads, meta)
    saved = _save(rows, reads, args.out) if args.save and not rows.empty else None
    if args.format == "json":
        sys.stdout.write(render_json(rows, reads, against, warnings))
    elif args.format == "csv":
        sys.stdout.write(rows.to_csv(index=False, float_format="%.17g"))
    else:
        sys.stdout.write(render_table(rows, reads, against))
    for r in reads:
        for n in r.notes:
            print(f"distbench: note: {r.file}: {n}", file=sys.stderr)
    for w in warnings:
        print(f"distbench: warning: machine class differs: {w}; the ratio compares two machines", file=sys.stderr)
    if args.save and saved is None:
        print("distbench: note: --save: nothing to store (no collective of a size)", file=sys.stderr)
    if saved:
        print(f"# saved: {saved} (distbench report {against or 'RUN_DIR'} {saved})")
    return 0
