"""The `allreduce` kind: allreduce algorithms built from point-to-point operations (ring, tree,
star, halving-doubling) beside the backend's own, across message sizes, with a fitted cost model.

One unit = every algorithm of one (dtype, op, mode) block at one size, so each size's line of the
side-by-side table finishes together and every algorithm meets the machine in the same state.
On nccl, one more native-only launch per NCCL_ALGO / NCCL_PROTO setting (NCCL caches some
settings per process, so each needs fresh processes). After the last launch the α-β model is
fitted over every launch of the run (bench.allreduce.analysis).
"""

from bench.allreduce.columns import COLUMNS
from bench.allreduce.summary import AllreduceLive, allreduce_summary
from bench.kind import KINDS, Kind, Reading, Report, drawn_by, later, memory_later
from bench.options import deprecated, overrides
from bench.suite import int_list
from bench.sweep.reading import COMM_METRICS, COMM_SETTINGS, narrow_sized

CASES = "bench.allreduce.cases"  # the launch side (units, measure, plan, the model fit): torch, imported when needed


def add_options(p):
    p.add_argument("-a", "--algorithm", "--algorithms", dest="algorithms", default=None,
                   help="comma list of ring, tree, star, halving_doubling, native, or 'all'")
    p.add_argument("--chunk-bytes", dest="chunk_bytes", default=None, help="ring's pipelined chunk, e.g. 256K (> 0)")
    p.add_argument("--nccl-algo", "--nccl-algos", dest="nccl_algos", default=None,
                   help="nccl only: NCCL_ALGO values, one fresh native launch each (default Ring,Tree)")
    p.add_argument("--nccl-proto", "--nccl-protos", dest="nccl_protos", default=None,
                   help="nccl only: NCCL_PROTO values, one fresh native launch each (default LL,LL128,Simple)")
    p.add_argument("--dtype", "--dtypes", dest="dtypes", default=None, help="dtypes, comma list, e.g. float32")
    p.add_argument("--op", "--ops", dest="ops", default=None, help="sum | max | min | product (comma list)")
    p.add_argument("--mode", "--modes", dest="modes", default=None, help="latency,throughput,nccl-tests")
    p.add_argument("--rank-reduce", dest="rank_reduce", default=None,
                   help="figure from the ranks' times: max | avg | min | rank0 (nccl-tests -a 3/1/2/0); "
                        "default auto: avg in the nccl-tests mode, max otherwise")
    p.add_argument("--sizes", default=None, help="explicit sizes, e.g. 4K,1M,64M (overrides the sweep)")
    p.add_argument("-b", "--min-bytes", dest="min_bytes", default=None, help="sweep start, e.g. 4K")
    p.add_argument("-e", "--max-bytes", dest="max_bytes", default=None, help="sweep end, e.g. 64M")
    p.add_argument("-f", "--step-factor", dest="step_factor", type=float, default=None, help="sweep factor (> 1)")
    p.add_argument("-w", "--warmup", type=int, default=None, help="warm-up ops per size (floor)")
    p.add_argument("-n", "--iters", type=int, default=None, help="timed ops per size (floor)")
    p.add_argument("--budget-s", type=float, default=None, help="timed seconds to aim for per size and algorithm")
    p.add_argument("--check", type=int, default=None, help="correctness checks per size (0: none)")
    p.add_argument("--profile-size", dest="profile", default=None, metavar="SIZE",
                   help="trace SIZE (e.g. 1M) of every case with torch.profiler after its timed measurement: "
                        "<run dir>/traces/<case>.rank<r>.json (Perfetto, HTA); timings unchanged")
    deprecated(p, "--profile", "--profile-size")
    p.add_argument("--predict-worlds", dest="predict_worlds", default=None,
                   help="world sizes for model predictions, e.g. 2,8,64,1024")
    p.add_argument("--predict-sizes", dest="predict_sizes", default=None, help="sizes for model predictions, e.g. 4K,1M")


def options(args) -> dict:
    ov = overrides(args, ("rank_reduce", "algorithms", "nccl_algos", "nccl_protos", "dtypes", "ops", "modes", "sizes", "min_bytes",
                          "max_bytes", "step_factor", "warmup", "iters", "budget_s", "check", "predict_sizes",
                          "chunk_bytes"))
    ov["predict_worlds"] = int_list(args.predict_worlds, "prediction world size")
    if args.profile is not None:
        ov["profile"] = args.profile
    return ov


KIND = KINDS.register(Kind(
    module=__name__, name="allreduce", help="allreduce algorithms (ring, tree, star, halving_doubling, native) across message sizes, "
                           "with a fitted alpha-beta cost model", config="bench.allreduce.config:AllreduceConfig",
    columns=COLUMNS,
    tables=("results", "samples", "ranks", "telemetry", "model", "residuals", "crossover", "predictions", "nccl_tuning"),
    add_options=add_options, options=options, units=later(CASES, "units"), measure=later(CASES, "measure"),
    plan=later(CASES, "plan"), finish=later(CASES, "finish"), estimate_s=later(CASES, "estimate_s"),
    memory=memory_later("bench.allreduce.memory"), listing=later(CASES, "listing"),
    read=Reading(keys=("algorithm", "variant"), metrics=COMM_METRICS, group="algorithm",
                 narrow=narrow_sized("-a", "algorithm"), aliases=("algorithm", "algorithms"), settings=COMM_SETTINGS,
                 sized=True),
    report=Report(title="Allreduce algorithms", section=drawn_by("bench.allreduce.plots", "section"),
                  summary=allreduce_summary, live=AllreduceLive,
                  headline=drawn_by("bench.allreduce.plots", "headline")),
))
