"""`distbench telemetry-overhead`: what the telemetry sampler costs (see measure.py)."""

import json
import os
import sys

from bench.distributed.env import check_world, resolve_backend
from bench.distributed.launch import launch, run_in_group
from bench.errors import BenchError, unknown
from bench.options import deprecated
from bench.overhead.measure import analyse, rank_main

FORMATS = ("table", "json")


def add_parser(sub):
    p = sub.add_parser("telemetry-overhead",
                       help="time one all_reduce case with telemetry sampling on and off, interleaved")
    p.add_argument("--nproc", "--world", dest="world", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--backend", default="auto", help="process-group backend: auto | gloo | nccl")
    p.add_argument("--sizes", default="4K,1M", help="all_reduce sizes (default 4K,1M)")
    p.add_argument("--repeats", type=int, default=24,
                   help="times the round (on, off, off2) is repeated per size, order rotating (default 24)")
    p.add_argument("--telemetry-interval-s", dest="telemetry_interval_s", type=float, default=0.1,
                   help="seconds between telemetry samples (default 0.1)")
    p.add_argument("--budget-s", dest="budget_s", type=float, default=0.2, help="timed seconds per case (default 0.2)")
    p.add_argument("--mode", default="latency", help="latency | throughput")
    p.add_argument("--format", default="table", choices=FORMATS,
                   help="output format: table (the summary) | json (every number: arguments, rows, table)")
    p.add_argument("--output", default=None, metavar="FILE", help="file to write (default: stdout)")
    deprecated(p, "--interval-s", "--telemetry-interval-s")
    # the old --json PATH printed the table and also wrote the JSON: it still does
    deprecated(p, "--json", "--format json --output FILE", dest="json_path", default=None)
    p.set_defaults(func=cmd_overhead)


def cmd_overhead(args) -> int:
    from bench.timing.loop import MODES  # lazy: torch, for this command only (not for `distbench --help`)
    from bench.units import parse_size_list  # lazy: torch, for this command only (not for `distbench --help`)

    if args.mode not in MODES:
        raise unknown("timing mode", args.mode, MODES)
    for name, v in (("--repeats", args.repeats), ("--nproc", args.world)):
        if v < 1:
            raise BenchError(f"{name} {v} must be >= 1")
    if args.telemetry_interval_s <= 0 or args.budget_s <= 0:
        raise BenchError(f"--telemetry-interval-s ({args.telemetry_interval_s}) and --budget-s ({args.budget_s}) "
                         "must be > 0")
    if args.output and os.path.isdir(args.output):
        raise BenchError(f"--output '{args.output}' is a directory; give a file name")
    sizes = parse_size_list([s for s in args.sizes.split(",") if s.strip()])
    backend = resolve_backend(args.backend)
    check_world(args.world, backend)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        res = launch(run_in_group, (rank_main, backend, 300.0, sizes, args.repeats, args.telemetry_interval_s,
                                    args.budget_s, args.mode), nproc=args.world)[0]
    except Exception as e:  # noqa: BLE001 - a rank died: one line, as run_kind does
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"distbench: a rank failed: {first}", file=sys.stderr)
        return 1
    table = analyse(res["rows"])
    doc = json.dumps({"args": vars(args) | {"func": None}, "result": res, "table": table}, indent=1, default=str)
    text = doc + "\n" if args.format == "json" else _table_text(args, res, table)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if args.json_path:  # the old --json PATH: the table above and the numbers in PATH
        with open(args.json_path, "w") as f:
            f.write(doc)
    sys.stdout.flush()
    return 0


def _table_text(args, res, table) -> str:
    spc = res["samples_per_case"]
    lines = [f"# telemetry overhead: all_reduce {args.mode}, world={res['world']} backend={res['backend']} "
             f"device={res['device']} interval={args.telemetry_interval_s}s budget={args.budget_s}s "
             f"repeats={args.repeats} (on/off/off2 rotating)",
             f"# GPU metrics: {res['gpu_status'] or 'ok'}; samples per sampled case: "
             f"{min(spc) if spc else 0}..{max(spc) if spc else 0}",
             f"# {'size':>10} {'median on (us)':>15} {'median off (us)':>16} {'on/off':>7} {'paired':>7} "
             f"{'off2/off':>8} {'paired':>7}"]
    for r in table:
        lines.append(f"  {r['size_bytes']:>10} {r['median_on_s'] * 1e6:>15.2f} {r['median_off_s'] * 1e6:>16.2f} "
                     f"{r['ratio']:>7.4f} {r['paired_ratio_median']:>7.4f} {r['aa_ratio']:>8.4f} "
                     f"{r['aa_paired_ratio_median']:>7.4f}")
    worst = max(abs(r["ratio"] - 1) for r in table)
    noise = max(abs(r["aa_ratio"] - 1) for r in table)
    lines.append(f"# largest on/off median shift {worst:.2%}; the same statistic off2/off (noise alone) {noise:.2%}; "
                 f"target: below 2% and within noise")
    return "\n".join(lines) + "\n"
