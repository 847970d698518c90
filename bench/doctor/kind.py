"""The `doctor` kind: find the slow link, rank or node of a cluster, with evidence (docs/doctor.md).

Three units, on every rank: `pairs` (bandwidth and latency of every ordered pair of ranks, in the
rounds of bench.doctor.schedule), `compute` (a fixed matmul per rank) and `groups` (all_reduce
within each node and across one rank per node). After the launch the verdict
(bench.doctor.verdict) is stored as the `doctor_suspects` table; suspects found exit 1.
"""

from dataclasses import dataclass

from bench.doctor.columns import COLUMNS
from bench.doctor.config import DoctorConfig
from bench.doctor.exclude import exclude_of, rank_hosts
from bench.doctor.summary import DoctorLive, doctor_summary, thresholds_of
from bench.doctor.verdict import verdict_of
from bench.kind import KINDS, Kind, Memory, Metric, Reading, Report, drawn_by
from bench.options import overrides
from bench.results.store import RunWriter, load_run
from bench.units import parse_size


@dataclass(frozen=True)
class Unit:
    name: str  # pairs | compute | groups
    world: int

    @property
    def key(self) -> str:
        return f"doctor.{self.name}.w{self.world}"

    @property
    def label(self) -> str:
        return self.name


def add_options(p):
    p.add_argument("--small-bytes", dest="small_bytes", default=None, help="latency size (default 4K)")
    p.add_argument("--large-bytes", dest="large_bytes", default=None, help="bandwidth size (default 4M)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per ordered pair and size (default 7)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up: untimed repetitions before them (default 1)")
    p.add_argument("--compute-n", dest="compute_n", type=int, default=None,
                   help="matmul side (default 0: 512 fp32 on CPU, 8192 bf16 on GPU)")
    p.add_argument("--compute-reps", dest="compute_reps", type=int, default=None, help="timed repetitions per rank")
    p.add_argument("--compute-iters", dest="compute_iters", type=int, default=None,
                   help="matmuls per repetition (default 0: 32 on CPU, 50 on GPU)")
    p.add_argument("--compute-mode", dest="compute_mode", default=None,
                   help="each (one rank at a time) | all (at once) | auto (all on GPU, each on CPU)")
    p.add_argument("--no-groups", dest="groups", action="store_const", const=False, default=None,
                   help="skip the group all_reduces")
    p.add_argument("--group-bytes", dest="group_bytes", default=None, help="group all_reduce size (default 1M)")
    p.add_argument("--cluster-fingerprint", dest="fingerprint", action="store_const", const=True, default=None,
                   help="a cluster fingerprint: also measure what the planner prices: all_reduce, all_gather, reduce_scatter within each "
                        "node, across nodes and over the world (distbench plan --cluster-fingerprint RUN)")
    p.add_argument("--cluster-fingerprint-sizes", dest="fingerprint_sizes", default=None,
                   help="the fingerprint's sizes, comma list (default 64K,2M)")
    p.add_argument("--mad-k", dest="mad_k", type=float, default=None, help="outlier: more than K MADs (default 4)")
    p.add_argument("--min-shortfall", dest="min_shortfall", type=float, default=None,
                   help="bandwidth outlier: also this share below the class median (default 0.3)")
    p.add_argument("--node-shortfall", dest="node_shortfall", type=float, default=None,
                   help="a node's or node link's median bandwidth: also this share below the pairs it is judged "
                   "against (default 0.3)")
    p.add_argument("--latency-excess", dest="latency_excess", type=float, default=None,
                   help="latency outlier: also this share above the class median (default 1.0)")
    p.add_argument("--latency-verdict", dest="latency_verdict", default=None,
                   help="on | off | auto (default: judged unless ranks share cores)")
    p.add_argument("--compute-excess", dest="compute_excess", type=float, default=None,
                   help="compute outlier: also this share above the median rank (default 0.3)")
    p.add_argument("--compute-statistic", dest="compute_statistic", default=None,
                   help="min (each rank's best repetition, default) | median")
    p.add_argument("--group-factor", dest="group_factor", type=float, default=None,
                   help="a group all_reduce slower than this x its expectation is a suspect (default 0: shown only)")


def options(args) -> dict:
    ov = overrides(args, ("reps", "warmup", "compute_n", "compute_reps", "compute_iters", "groups", "fingerprint",
                          "fingerprint_sizes", "mad_k", "min_shortfall",
                          "node_shortfall", "latency_excess", "compute_excess", "group_factor"))
    for name in ("small_bytes", "large_bytes", "group_bytes", "compute_mode", "latency_verdict", "compute_statistic"):  # one value each, not lists
        if getattr(args, name, None) is not None:
            ov[name] = args.__dict__[name]
    return ov


def units(cfg: DoctorConfig, world: int, meta: dict):
    names = ("pairs", "compute", "groups") if cfg.groups else ("pairs", "compute")
    return [Unit(n, world) for n in names + (("fingerprint",) if cfg.fingerprint else ())], []


def estimate_s(cfg: DoctorConfig, unit: Unit) -> float:
    """Seconds, generously: a round is 2 phases x 2 sizes x (warmup + reps) barriers and transfers."""
    if unit.name == "pairs":
        return (unit.world + 1) * 4 * (cfg.warmup + cfg.reps) * 0.05
    if unit.name == "compute":
        return unit.world * (cfg.compute_reps + 1) * 0.15
    if unit.name == "fingerprint":
        return 3 * 3 * len(cfg.fingerprint_sizes) * (cfg.warmup + cfg.reps) * cfg.fingerprint_ops * 0.3 + 10
    return 2 * (cfg.warmup + cfg.reps) * 0.2


def need(cfg: DoctorConfig, world: int) -> tuple[int, str]:
    """Bytes per rank: the pair buffers (sent and received, both sizes), the probe's three matrices
    (float32 on CPU; bfloat16 8192 x 8192 by default on GPU) or the group buffer, the largest."""
    pairs = 2 * (parse_size(cfg.small_bytes) + parse_size(cfg.large_bytes))
    cpu = 3 * (cfg.compute_n or 512) ** 2 * 4
    gpu = 0 if cfg.backend == "gloo" else 3 * (cfg.compute_n or 8192) ** 2 * 2
    return max(pairs, cpu, gpu, parse_size(cfg.group_bytes)), "the pair buffers, the matmul probe or the group buffer"


def fits(cfg: DoctorConfig, world: int, budget: float) -> list[str]:
    return [f"--large-bytes {parse_size(cfg.large_bytes) // 4}"] if budget > 0 else []


def measure(unit: Unit, launch) -> dict:
    """Every rank; rows on rank 0 (bench.doctor.measure)."""
    from bench.doctor.measure import measure_unit  # lazy: torch only when a launch measures

    return measure_unit(unit, launch)


def finish(run_dir, cfg: DoctorConfig):
    """After the launch: the verdict of the stored rows, as the `doctor_suspects` table (replaced,
    never appended: a resumed run judges all its rows again)."""
    run = load_run(run_dir)
    suspects = verdict_of(run.tables.get("results"), thresholds_of(run.meta, cfg))
    (run.dir / "doctor_suspects.parquet").unlink(missing_ok=True)
    rows = [{"run_id": run.meta.get("run_id"), "position": i, "suspect": s.name, "scope": s.scope, "factor": s.factor,
             "mads": s.mads, "evidence": s.evidence} for i, s in enumerate(suspects, 1)]
    w = RunWriter.at(run_dir, part_prefix="verdict-")
    w.write_case({"doctor_suspects": rows})
    block = exclude_of(suspects, rank_hosts(run.meta))
    w.update_meta(lambda m: {**m, "exclude": block})


def acceptance(run, cfg) -> list[str]:
    """Suspects found: exit 1 (a pre-job health check fails)."""
    suspects = verdict_of(run.tables.get("results"), thresholds_of(run.meta, cfg))
    if not suspects:
        return []
    return [f"doctor: {len(suspects)} suspect(s); the top one: {suspects[0].evidence}"]


KIND = KINDS.register(Kind(
    module=__name__, name="doctor", help="find the slow link, rank or node of a cluster, with evidence "
                                         "(pair matrix, compute probe, groups; exit 1 when suspects are found)",
    config=DoctorConfig, columns=COLUMNS, tables=("results", "samples", "telemetry", "doctor_suspects"),
    add_options=add_options, options=options, units=units, measure=measure, finish=finish, acceptance=acceptance,
    estimate_s=estimate_s, memory=Memory(need=need, fits=fits),
    read=Reading(metrics=(Metric("time_median_s", True, True), Metric("algbw_gbps", False, False)),
                 group="doctor_test"),
    report=Report(title="Doctor: pair matrix and suspects", section=drawn_by("bench.doctor.plots", "section"),
                  headline=drawn_by("bench.doctor.plots", "headline"),
                  summary=doctor_summary, live=DoctorLive),
))
