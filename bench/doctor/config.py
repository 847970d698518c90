"""The doctor's suite config (`kind = "doctor"`): what it measures and the verdict's thresholds."""

from dataclasses import dataclass

from bench.errors import BenchError
from bench.suite import RunConfig, at_least
from bench.units import parse_size

COMPUTE_MODES = ("auto", "each", "all")


@dataclass(frozen=True, kw_only=True)
class DoctorConfig(RunConfig):
    """Fields of a `kind = "doctor"` suite file; every CLI option overrides one of them."""

    name: str = "doctor"  # results go to <out>/<name>/<run_id>/
    description: str = ""
    world: tuple[int, ...] = (4,)  # self-launch only; under torchrun / srun / simcluster the launcher's
    small_bytes: str = "4K"  # latency: median one-way time of a ping-pong (round trip / 2)
    large_bytes: str = "4M"  # bandwidth: size / median time of one send and its 1-element ack
    reps: int = 7  # timed repetitions per ordered pair and size (the median is kept; raw samples too)
    warmup: int = 1  # untimed repetitions before them (NCCL creates a pair's communicator here)
    compute_n: int = 0  # matmul side: 0 = 512 fp32 on CPU (one thread), 8192 bf16 on GPU
    compute_reps: int = 7  # timed repetitions per rank (the verdict uses compute_statistic of them)
    compute_iters: int = 0  # matmuls per repetition; 0 = 32 on CPU, 50 on GPU: a repetition then lasts
    # about 0.1-0.2 s, longer than a CFS quota period (100 ms), so a rank under a CPU quota cannot
    # run a whole repetition inside its quota and look fast
    compute_mode: str = "auto"  # each: one rank at a time; all: every rank at once; auto: all on GPU
    # (one GPU each, heat and power shared), each on CPU (ranks may share cores: at once, a rank's
    # time would be its share of the cores, not its speed)
    groups: bool = True  # all_reduce within each node and across one rank per node
    group_bytes: str = "1M"  # the group all_reduce's size
    fingerprint: bool = False  # also every collective the planner prices at its placements (bench.doctor.fingerprint)
    fingerprint_sizes: tuple[str, ...] = ("64K", "2M")  # two sizes or more: an alpha-beta fit per placement
    fingerprint_ops: int = 2  # ops back to back per timed repetition
    # The verdict (docs/doctor.md): a value is an outlier of its class when it is worse than the
    # class median by more than mad_k scaled MADs AND by more than the relative floor.
    mad_k: float = 4.0  # MADs (scaled by 1.4826: one sigma of a normal sample)
    min_shortfall: float = 0.3  # bandwidth: at least 30% below the class median (a rank pair)
    node_shortfall: float = 0.2  # a node's or a node link's median bandwidth: at least this far below the pairs
    # it is judged against (a median over many rank pairs is steadier than one pair: docs/doctor.md)
    latency_excess: float = 1.0  # latency: at least 100% above the class median (2x)
    latency_verdict: str = "auto"  # on | off | auto: judged unless ranks shared cores (oversubscribed)
    compute_excess: float = 0.3  # compute time: at least 30% above the median rank
    compute_statistic: str = "min"  # min: each rank's best repetition (outside load only adds time; a
    # quota or a throttle slows every repetition); median: its median repetition
    group_factor: float = 0.0  # a group all_reduce slower than this x its expectation is a suspect; 0: shown only

    def __post_init__(self):
        super().__post_init__()
        at_least("world size", self.world)
        at_least("reps", self.reps)
        at_least("warmup", self.warmup, 0)
        at_least("compute_reps", self.compute_reps)
        at_least("compute_n", self.compute_n, 0)
        at_least("compute_iters", self.compute_iters, 0)
        at_least("fingerprint_ops", self.fingerprint_ops)
        if self.fingerprint and len({parse_size(x) for x in self.fingerprint_sizes}) < 2:
            raise BenchError(f"fingerprint_sizes {list(self.fingerprint_sizes)}: give two sizes or more (an alpha-beta "
                             "fit needs two), e.g. 64K,2M")
        for field in ("small_bytes", "large_bytes", "group_bytes"):
            if parse_size(getattr(self, field)) < 4:
                raise BenchError(f"{field} '{getattr(self, field)}' must be at least 4 bytes (one float32), e.g. 4K")
        if parse_size(self.large_bytes) <= parse_size(self.small_bytes):
            raise BenchError(f"large_bytes {self.large_bytes} must be larger than small_bytes {self.small_bytes}")
        if self.latency_verdict not in ("auto", "on", "off"):
            raise BenchError(f"latency_verdict '{self.latency_verdict}' is not one of auto, on, off")
        if self.compute_statistic not in ("min", "median"):
            raise BenchError(f"compute_statistic '{self.compute_statistic}' is not one of min, median")
        if self.compute_mode not in COMPUTE_MODES:
            raise BenchError(f"compute_mode '{self.compute_mode}' is not one of {', '.join(COMPUTE_MODES)}")
        for field in ("mad_k", "min_shortfall", "node_shortfall", "latency_excess", "compute_excess"):
            if not getattr(self, field) > 0:
                raise BenchError(f"{field} {getattr(self, field)} must be > 0")
        for field in ("min_shortfall", "node_shortfall"):
            if not getattr(self, field) < 1:
                raise BenchError(f"{field} {getattr(self, field)} must be < 1 (a share of the class median)")
        if not self.group_factor >= 0:
            raise BenchError(f"group_factor {self.group_factor} must be >= 0 (0: groups are shown, not judged)")

    def thresholds(self) -> dict:
        return {k: getattr(self, k) for k in ("mad_k", "min_shortfall", "node_shortfall", "latency_excess", "compute_excess",
                                              "group_factor", "latency_verdict", "compute_statistic")}
