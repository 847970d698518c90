"""The `collectives` kind: every collective primitive across message sizes, nccl-tests style.

One unit = one case (collective, dtype, op, root, mode) at one size, both placements; its
tables are the results rows (one per placement), every rank's raw samples and per-rank medians.
"""

from bench.collectives.acceptance import min_busbw_failures, parse_min_busbw
from bench.collectives.columns import COLUMNS
from bench.collectives.summary import CollectivesLive, collectives_summary
from bench.kind import KINDS, Kind, Reading, Report, drawn_by, later, memory_later
from bench.options import deprecated, overrides
from bench.suite import int_list
from bench.sweep.reading import COMM_METRICS, COMM_SETTINGS, narrow_sized

CASES = "bench.collectives.cases"  # the launch side (units, measure, plan): torch, imported when a launch needs it


def add_options(p):
    p.add_argument("-c", "--collective", "--collectives", dest="collectives", default=None,
                   help="comma list of collectives or 'all' (see `distbench list`)")
    p.add_argument("--dtype", "--dtypes", dest="dtypes", default=None, help="dtypes, comma list, e.g. float32,bfloat16")
    p.add_argument("--op", "--ops", dest="ops", default=None, help="sum | avg | max | min | product (comma list)")
    p.add_argument("--root-rank", "--root-ranks", dest="roots", default=None,
                   help="root rank of the rooted collectives (broadcast, reduce, gather, scatter), comma list")
    deprecated(p, "--root", "--root-rank")
    deprecated(p, "--roots", "--root-ranks")
    p.add_argument("--group-size", dest="group_sizes", default=None, metavar="N",
                   help="ranks per communicator, comma list: the world runs world/N groups of N consecutive ranks at "
                        "once, each the collective (nccl-tests' NCCL_TESTS_SPLIT=\"DIV N\"); default: one group")
    p.add_argument("--placement", dest="placements", default=None, help="out-of-place,in-place")
    p.add_argument("--mode", "--modes", dest="modes", default=None, help="latency,throughput,nccl-tests")
    p.add_argument("--rank-reduce", dest="rank_reduce", default=None,
                   help="figure from the ranks' times: max | avg | min | rank0 (nccl-tests -a 3/1/2/0); "
                        "default auto: avg in the nccl-tests mode, max otherwise")
    p.add_argument("--sizes", default=None, help="explicit sizes, e.g. 4K,1M,64M (overrides the sweep)")
    p.add_argument("-b", "--min-bytes", dest="min_bytes", default=None, help="sweep start, e.g. 1K")
    p.add_argument("-e", "--max-bytes", dest="max_bytes", default=None, help="sweep end, e.g. 64M")
    p.add_argument("-f", "--step-factor", dest="step_factor", type=float, default=None, help="sweep factor (> 1)")
    p.add_argument("-w", "--warmup", type=int, default=None, help="warm-up ops per size (floor)")
    p.add_argument("-n", "--iters", type=int, default=None, help="timed ops per size (floor)")
    p.add_argument("--budget-s", type=float, default=None, help="timed seconds to aim for per size")
    p.add_argument("--check", type=int, default=None, help="correctness checks per size (0: none)")
    p.add_argument("--min-busbw", dest="min_busbw", default=None,
                   help="GB/s, or per collective 'all_reduce=40,*=10': exit 1 when the average busbw over the large "
                        "sizes is below it (nccl-tests' NCCL_TESTS_MIN_BW)")
    p.add_argument("--blocking", type=int, default=None,
                   help="throughput mode: 1 waits for each op (default), 0 keeps a block's ops in flight (PARAM --z 0)")
    p.add_argument("--profile-size", dest="profile", default=None, metavar="SIZE",
                   help="trace SIZE (e.g. 1M) of every case with torch.profiler after its timed measurement: "
                        "<run dir>/traces/<case>.rank<r>.json (Perfetto, HTA); timings unchanged")
    deprecated(p, "--profile", "--profile-size")
    p.add_argument("--skip-unsupported", action="store_const", const=True, default=None,
                   help="skip dtype/op pairs the backend refuses instead of failing")


def options(args) -> dict:
    ov = overrides(args, ("rank_reduce", "collectives", "dtypes", "ops", "placements", "modes", "sizes", "min_bytes", "max_bytes",
                          "step_factor", "warmup", "iters", "budget_s", "check", "skip_unsupported", "blocking", "min_busbw"))
    if args.roots is not None:
        ov["roots"] = int_list(args.roots, "root")
    if args.group_sizes is not None:
        ov["group_sizes"] = int_list(args.group_sizes, "group size")
    if args.profile is not None:
        ov["profile"] = args.profile
    return ov


def acceptance(run, cfg) -> list[str]:
    """--min-busbw: collectives whose average busbw over the large sizes is below the threshold."""
    if not cfg.min_busbw or "results" not in run.tables:
        return []
    return [str(f) for f in min_busbw_failures(run["results"], parse_min_busbw(cfg.min_busbw))]


KIND = KINDS.register(Kind(
    module=__name__, name="collectives", help="time every collective primitive across message sizes",
    config="bench.collectives.config:CollectivesConfig",
    columns=COLUMNS, tables=("results", "samples", "ranks", "telemetry"), add_options=add_options, options=options,
    units=later(CASES, "units"), measure=later(CASES, "measure"), plan=later(CASES, "plan"),
    estimate_s=later(CASES, "estimate_s"), acceptance=acceptance, memory=memory_later("bench.collectives.memory"),
    listing=later(CASES, "listing"),
    # gate groups: one per case_id (a collective at one dtype, op, root and mode; shown by its collective)
    read=Reading(metrics=COMM_METRICS, group="case_id", narrow=narrow_sized("-c", "collective"),
                 aliases=("collective",), settings=COMM_SETTINGS, sized=True),
    report=Report(title="Collectives", section=drawn_by("bench.collectives.plots", "section"),
                  summary=collectives_summary, live=CollectivesLive,
                  headline=drawn_by("bench.collectives.plots", "headline")),
))
