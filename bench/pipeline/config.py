"""The `pipeline` suite config and its expansion into cases (pure: no ranks needed)."""

from dataclasses import dataclass

from bench.errors import BenchError, unknown
from bench.strategies.config import CaseSpec
from bench.strategies.dims import ParallelDims
from bench.strategies.pp import CHECKPOINTS, validate
from bench.strategies.schedules import canonical, torch_class
from bench.suite import RunConfig, at_least
from bench.workloads.models import get_spec


@dataclass(frozen=True, kw_only=True)
class PipelineConfig(RunConfig):
    """Fields of a `kind = "pipeline"` suite; CLI options override them."""

    name: str = "pipeline"
    description: str = ""
    model: str = "mlp-pipe"  # preset (bench.workloads.models.PRESETS)
    stages: tuple[int, ...] = (2,)  # pipeline ranks; world = stages x tp
    tp: int = 1  # tensor-parallel degree inside a stage (only 1 is implemented)
    world: tuple[int, ...] = ()  # must equal stages x tp when given
    chunks: tuple[int, ...] = (1, 2, 4, 8)
    schedules: tuple[str, ...] = ("gpipe", "1f1b")  # bench.strategies.schedules: ours or torch's names
    checkpoint: tuple[str, ...] = ("never",)
    batch: int = 1024  # fixed mini-batch mode: split into `chunks` micro-batches
    micro_batch: tuple[int, ...] = ()  # fixed micro-batch mode when given: mini-batch = micro_batch x chunks
    balance: tuple[int, ...] = ()  # blocks per stage (empty: as even as possible)
    warmup: int = 2  # discarded steps after the check step (the first step also infers shapes)
    steps: int = 6  # timed steps (>= 5)
    check: int = 1  # 1: compare the first step with the single-process reference
    efficiency: bool = True  # also the one-process micro-batch efficiency curve
    seed: int = 0
    profile: int = 0  # 1: 5 more steps per case under torch.profiler, after the timed ones (0: off)
    strict: bool = False  # schedules given explicitly: a 1f1b case with chunks < stages is an error

    def __post_init__(self):
        super().__post_init__()
        get_spec(self.model)
        at_least("stages", self.stages)
        at_least("chunks", self.chunks)
        at_least("batch", self.batch)
        at_least("micro-batch", self.micro_batch)
        at_least("steps", self.steps, 5)
        at_least("warmup", self.warmup, 0)
        if self.profile not in (0, 1):
            raise BenchError(f"profile {self.profile} must be 0 or 1 (1: trace 5 steps per case after the timed ones)")
        if self.tp != 1:
            raise BenchError(f"tp {self.tp} inside pipeline stages is not implemented; allowed: 1")
        # our names for the schedules (torch's accepted too); one the installed torch lacks is refused
        object.__setattr__(self, "schedules", tuple(dict.fromkeys(canonical(s) for s in self.schedules)))
        for s in self.schedules:
            if s not in ("gpipe", "1f1b"):  # torch >= 2.4 has both; the others import torch's pipelining (~1.4 s)
                torch_class(s)
        for c in self.checkpoint:
            if c not in CHECKPOINTS:
                raise unknown("checkpoint mode", c, CHECKPOINTS)
        for w in self.world:  # each given world must be some stages x tp
            if w not in self.worlds():
                ParallelDims(world=w, pp=self.stages[0], tp=self.tp)  # raises, showing the arithmetic
        expand_pipeline(self)  # every case validates

    def worlds(self) -> tuple[int, ...]:
        return tuple(sorted({s * self.tp for s in self.stages}))


def expand_pipeline(cfg: PipelineConfig) -> tuple[list[CaseSpec], list[str]]:
    spec = get_spec(cfg.model)
    cases, notes, skipped = [], [], {}
    for stages in cfg.stages:
        for sched in cfg.schedules:
            for m in cfg.chunks:
                if sched == "1f1b" and m < stages and not cfg.strict:  # a default sweep: GPipe covers it
                    skipped.setdefault((stages, sched), []).append(m)
                    continue
                for mb in (cfg.micro_batch or (0,)):
                    batch = mb * m if mb else cfg.batch
                    validate(schedule=sched, stages=stages, chunks=m, batch=batch, depth=spec.depth,
                             balance=cfg.balance, strict=True, preset=spec.preset)
                    for ck in cfg.checkpoint:
                        cases.append(CaseSpec(strategy="pp", model=cfg.model, world=stages * cfg.tp, chunks=m,
                                              schedule=sched, checkpoint=ck, batch=batch, micro_batch=mb,
                                              balance=cfg.balance))
    for (stages, sched), ms in skipped.items():
        notes.append(f"{sched} skipped for chunks {','.join(map(str, ms))} at {stages} stages: it needs "
                     f"chunks >= stages (those ran under gpipe only)")
    return cases, notes
