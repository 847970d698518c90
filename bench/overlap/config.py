"""The overlap kind's suite config (`kind = "overlap"`): the collectives and sizes run against a
compute action, the compute action itself, and the training steps whose exposed communication is
measured."""

import typing
from dataclasses import dataclass

from bench.errors import BenchError
from bench.suite import RunConfig, at_least
from bench.units import parse_size

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
COMPUTES = ("gemm", "sleep")
TRAINING = ("ddp", "fsdp")


@dataclass(frozen=True, kw_only=True)
class OverlapConfig(RunConfig):
    """Fields of a `kind = "overlap"` suite file; every CLI option overrides one of them."""

    name: str = "overlap"  # results go to <out>/<name>/<run_id>/
    description: str = ""
    world: tuple[int, ...] = (2,)
    collectives: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
    sizes: tuple[str, ...] = ("64K", "1M", "8M")
    dtype: str = "float32"
    compute: str = "gemm"  # gemm: matmuls of gemm_n (compute that uses the cores / SMs); sleep: a
    # host sleep on CPU, a spin kernel on CUDA, of compute_s (compute of known duration: the yardstick)
    gemm_n: int = 256  # side of the square matmul (float32 on CPU, the run's dtype on CUDA)
    gemm_iters: int = 8  # matmuls per compute action
    compute_s: float = 0.02  # sleep: seconds of one compute action
    compute_threads: int = 1  # CPU: torch intra-op threads of the compute thread (torch.set_num_threads)
    reps: int = 15  # timed repetitions of each part (comm alone, compute alone, both), interleaved
    warmup: int = 2  # untimed repetitions before them
    training: tuple[str, ...] = ("ddp",)  # training steps measured after the collectives: ddp, fsdp; () none
    model: str = "mlp-pipe"  # the reference model of the training steps (bench.workloads PRESETS)
    batch: int = 16  # samples per rank per step
    bucket_cap_mb: tuple[float, ...] = (1.0, 4.0, 25.0)  # DDP bucket sizes, MB (bucket_cap_mb), one training variant each
    steps: int = 10  # timed training steps of each variant, interleaved
    nccl_ctas: tuple[int, ...] = ()  # nccl: one launch per value k under NCCL_MIN_CTAS=NCCL_MAX_CTAS=k (NCCL's channels)

    empty_ok: typing.ClassVar[tuple[str, ...]] = ("collectives", "training", "nccl_ctas")  # either part may be left out

    def __post_init__(self):
        super().__post_init__()
        at_least("world size", self.world, 2)
        for c in self.collectives:
            if c not in COLLECTIVES:
                raise BenchError(f"collective '{c}' is not one of {', '.join(COLLECTIVES)}")
        for s in self.sizes:
            if parse_size(s) < 4:
                raise BenchError(f"size '{s}' must be at least 4 bytes (one float32), e.g. 64K")
        if self.compute not in COMPUTES:
            raise BenchError(f"compute '{self.compute}' is not one of {', '.join(COMPUTES)}")
        for t in self.training:
            if t not in TRAINING:
                raise BenchError(f"training '{t}' is not one of {', '.join(TRAINING)}")
        at_least("gemm_n", self.gemm_n)
        at_least("gemm_iters", self.gemm_iters)
        at_least("compute_threads", self.compute_threads)
        at_least("reps", self.reps)
        at_least("warmup", self.warmup, 0)
        at_least("batch", self.batch)
        at_least("steps", self.steps, 5)
        if not self.compute_s > 0:
            raise BenchError(f"compute_s {self.compute_s} must be > 0 (seconds of one compute action)")
        at_least("nccl_ctas", self.nccl_ctas)
        for b in self.bucket_cap_mb:
            if not b > 0:
                raise BenchError(f"bucket_cap_mb {b} must be > 0 (DDP's bucket_cap_mb)")
