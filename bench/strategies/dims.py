"""Degree arithmetic in one place (torchtitan's ParallelDims is the model): world = dp x tp x pp,
checked, with errors that show the arithmetic."""

from dataclasses import dataclass

from bench.errors import BenchError


@dataclass(frozen=True, kw_only=True)
class ParallelDims:
    world: int  # processes
    dp: int = 1  # data-parallel replicas (ddp, fsdp): each gets batch / dp samples
    tp: int = 1  # tensor-parallel degree
    pp: int = 1  # pipeline ranks (stages per rank are the schedule's business)

    def __post_init__(self):
        for name in ("world", "dp", "tp", "pp"):
            if getattr(self, name) < 1:
                raise BenchError(f"{name} {getattr(self, name)} must be >= 1")
        if self.dp * self.tp * self.pp != self.world:
            raise BenchError(f"dp({self.dp}) * tp({self.tp}) * pp({self.pp}) = {self.dp * self.tp * self.pp} "
                             f"!= world_size({self.world})")

    def local_batch(self, batch: int) -> int:
        """Samples per data-parallel replica."""
        if batch % self.dp:
            raise BenchError(f"batch {batch} is not divisible by dp({self.dp}); choose a multiple of {self.dp}")
        return batch // self.dp
