"""The pipeline kind's launch side (bench.pipeline.kind registers it through bench.kind.later, so
that a command that only reads runs never imports torch): the cases of a launch, the memory a
launch needs per rank, and the micro-batch efficiency curve measured once after the cases."""

from bench.pipeline.config import PipelineConfig, expand_pipeline
from bench.training.measure import efficiency_curve
from bench.training.memory import memory_of

MEMORY = memory_of(expand_pipeline)


def units(cfg: PipelineConfig, world: int, meta: dict):
    cases, notes = expand_pipeline(cfg)
    return [c for c in cases if c.world == world], notes


def efficiency(cfg: PipelineConfig, launch) -> dict | None:
    """Rank 0, once (at the smallest world): the micro-batch efficiency curve; others wait."""
    if not cfg.efficiency or launch.info.world != min(cfg.worlds()):
        return None
    rows = efficiency_curve(cfg, launch.info.device, launch.run_id, launch.info.world) if launch.info.rank == 0 else []
    launch.comm.barrier()
    return {"microbatch_efficiency": rows}
