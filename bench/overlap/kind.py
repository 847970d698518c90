"""The `overlap` kind: how much communication a step hides, and what communication and compute
cost each other (docs/overlap.md).

Units, on every rank: `pair` (one collective at one size against the compute action: alone,
alone, together; bench.overlap.measure), then the training variants (`ddp` at each
bucket_cap_mb: the step against the step under no_sync and the bucket all-reduces alone; `fsdp`
with explicit and implicit prefetch; bench.overlap.training).
"""

import dataclasses
from dataclasses import dataclass

from bench.errors import BenchError
from bench.kind import KINDS, Kind, Memory, Metric, Reading, Report, drawn_by
from bench.kind import LaunchPlan, Plan, one_launch_per_world
from bench.options import overrides
from bench.overlap.columns import COLUMNS
from bench.overlap.config import COLLECTIVES, OverlapConfig
from bench.overlap.summary import OverlapLive, overlap_summary
from bench.suite import int_list
from bench.units import parse_size


@dataclass(frozen=True)
class Unit:
    test: str  # pair | ddp | fsdp
    case_id: str
    size: int = 0  # pair: the collective's bytes
    collective: str = ""
    bucket_mb: float = 0.0  # ddp
    prefetch: str = ""  # fsdp: explicit | implicit

    @property
    def key(self) -> str:
        return f"{self.case_id}@{self.size}B" if self.test == "pair" else self.case_id

    @property
    def label(self) -> str:
        if self.test == "pair":
            return f"{self.collective} {self.size} B"
        return f"ddp bucket_cap_mb={self.bucket_mb:g}" if self.test == "ddp" else f"fsdp prefetch {self.prefetch}"


def add_options(p):
    p.add_argument("-c", "--collective", "--collectives", dest="collectives", default=None,
                   help="comma list of collectives or 'all' (see `distbench list`)")
    p.add_argument("--sizes", default=None, help="message sizes, comma list, e.g. 64K,1M,8M")
    p.add_argument("--dtype", dest="dtype", default=None, help="dtype of the collectives' buffers, e.g. float32")
    p.add_argument("--compute", default=None, help="the compute action: gemm (matmuls) | sleep (known duration)")
    p.add_argument("--gemm-n", dest="gemm_n", type=int, default=None, help="gemm: side of the square matmul")
    p.add_argument("--gemm-iters", dest="gemm_iters", type=int, default=None, help="gemm: matmuls per compute action")
    p.add_argument("--compute-s", dest="compute_s", type=float, default=None,
                   help="sleep: seconds of one compute action")
    p.add_argument("--compute-threads", dest="compute_threads", type=int, default=None,
                   help="CPU: torch intra-op threads of the compute thread")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions of each part (default 15)")
    p.add_argument("--warmup", type=int, default=None, help="untimed warm-up repetitions before them")
    p.add_argument("--training", default=None, help="training variants after the collectives: ddp,fsdp or none")
    p.add_argument("--model", default=None, help="model preset of the training steps, e.g. mlp-pipe")
    p.add_argument("--batch", type=int, default=None, help="samples per rank per step (each rank's mini-batch)")
    p.add_argument("--bucket-cap-mb", dest="bucket_cap_mb", default=None, help="ddp bucket size, MB")
    p.add_argument("--steps", type=int, default=None, help="timed steps (>= 5)")
    p.add_argument("--nccl-ctas", dest="nccl_ctas", default=None,
                   help="nccl: NCCL channel counts, comma list; one launch each under NCCL_MIN_CTAS=NCCL_MAX_CTAS")


def options(args) -> dict:
    ov = overrides(args, ("collectives", "sizes", "training", "bucket_cap_mb"))
    if args.nccl_ctas is not None:
        ov["nccl_ctas"] = int_list(args.nccl_ctas, "nccl_ctas")
    if ov.get("collectives") == ("all",):
        ov["collectives"] = COLLECTIVES
    if ov.get("training") == ("none",):
        ov["training"] = ()
    if "bucket_cap_mb" in ov:
        try:
            ov["bucket_cap_mb"] = tuple(float(x) for x in ov["bucket_cap_mb"])
        except ValueError:
            raise BenchError(f"--bucket-cap-mb '{args.bucket_cap_mb}' is not a comma list of numbers, e.g. 1,4,25") from None
    for name in ("dtype", "compute", "gemm_n", "gemm_iters", "compute_s", "compute_threads", "reps", "warmup", "model",
                 "batch", "steps"):
        if getattr(args, name, None) is not None:
            ov[name] = getattr(args, name)
    return ov


CTAS = ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS")


def units(cfg: OverlapConfig, world: int, meta: dict):
    ctas = f".ctas{cfg.nccl_ctas[0]}" if len(cfg.nccl_ctas) == 1 else ""  # a launch of one channel count
    out = [Unit("pair", f"overlap.{c}.{cfg.dtype}.{cfg.compute}{ctas}", size=parse_size(s), collective=c)
           for c in cfg.collectives for s in cfg.sizes]
    if "ddp" in cfg.training:
        out += [Unit("ddp", f"overlap.ddp.{cfg.model}.bucket{b:g}MB{ctas}", bucket_mb=b) for b in cfg.bucket_cap_mb]
    if "fsdp" in cfg.training:
        out += [Unit("fsdp", f"overlap.fsdp.{cfg.model}.{p}{ctas}", prefetch=p) for p in ("implicit", "explicit")]
    return out, []


def plan(cfg: OverlapConfig, backend: str, worlds) -> Plan:
    """One launch per world; with nccl_ctas, one per world and channel count, each under
    NCCL_MIN_CTAS = NCCL_MAX_CTAS = k (NCCL reads them once per process: a fresh launch each)."""
    if not cfg.nccl_ctas:
        return one_launch_per_world(cfg, backend, worlds)
    if backend != "nccl":
        raise BenchError(f"nccl_ctas {list(cfg.nccl_ctas)} sets NCCL's channels and this run uses {backend}; "
                         "drop it or use --backend nccl")
    from bench.distributed.launch import launched_externally  # lazy: the launch side only

    if launched_externally():
        raise BenchError(f"nccl_ctas {list(cfg.nccl_ctas)} needs a fresh launch per value; under torchrun / srun "
                         "set NCCL_MIN_CTAS and NCCL_MAX_CTAS in the job's environment instead")
    return Plan(launches=[LaunchPlan(world=w, config=dataclasses.replace(cfg, nccl_ctas=(k,)),
                                     env={v: str(k) for v in CTAS}, key=f"{w}:ctas{k}", part_prefix=f"w{w}-ctas{k}-")
                          for w in worlds for k in cfg.nccl_ctas])


def estimate_s(cfg: OverlapConfig, unit: Unit) -> float:
    """Seconds, generously: three parts per repetition; a part's time is not known before it runs."""
    if unit.test == "pair":
        per = (cfg.compute_s if cfg.compute == "sleep" else 0.05) + 0.05
        return 3 * (cfg.warmup + cfg.reps) * per * 4 + 10
    return 3 * (cfg.warmup + cfg.steps) * 0.5 + 20


def need(cfg: OverlapConfig, world: int) -> tuple[int, str]:
    """Bytes per rank: the largest collective's buffers (the whole array twice: all_gather's
    output and all_to_all's input and output), the matmul's three matrices, and for training a
    generous 64 MiB for the model, its gradients and a second (unsharded) copy."""
    coll = 2 * max((parse_size(s) for s in cfg.sizes), default=0) if cfg.collectives else 0
    gemm = 3 * cfg.gemm_n ** 2 * 4 if cfg.compute == "gemm" else 0
    return max(coll + gemm, (64 << 20) if cfg.training else 0), "the largest collective's buffers and the matmul"


def fits(cfg: OverlapConfig, world: int, budget: float) -> list[str]:
    return [s for s in cfg.sizes if 2 * parse_size(s) <= budget]


def measure(unit: Unit, launch) -> dict:
    """Every rank; rows on rank 0."""
    if unit.test == "pair":
        from bench.overlap.measure import measure_pair  # lazy: torch only when a launch measures

        return measure_pair(unit, launch)
    from bench.overlap import training  # lazy: torch (and DDP / FSDP) only when a launch measures

    return training.measure_ddp(unit, launch) if unit.test == "ddp" else training.measure_fsdp(unit, launch)


KIND = KINDS.register(Kind(
    module=__name__, name="overlap", help="how much communication a step hides: a collective against compute "
                                          "(alone, alone, together) and DDP / FSDP steps' exposed communication",
    config=OverlapConfig, columns=COLUMNS, tables=("results", "overlap_samples", "telemetry"),
    add_options=add_options, options=options, units=units, measure=measure, estimate_s=estimate_s, plan=plan,
    memory=Memory(need=need, fits=fits),
    read=Reading(metrics=(Metric("time_median_s", True, True), Metric("hidden_share", False, False),
                          Metric("overlap_exposed_s", True, False)),
                 group="overlap_test",
                 settings=("gemm_n", "gemm_iters", "compute_threads", "compute_target_s", "batch", "model", "nccl_ctas")),
    report=Report(title="Overlap: communication hidden behind compute", section=drawn_by("bench.overlap.plots", "section"),
                  headline=drawn_by("bench.overlap.plots", "headline"), summary=overlap_summary, live=OverlapLive),
))
