"""The `pipeline` suite config and its expansion into cases (pure: no ranks needed)."""

from dataclasses import dataclass

from bench.errors import BenchError, unknown
from bench.suite import RunConfig, at_least
from bench.training.case import CaseSpec
from bench.training.dims import ParallelDims
from bench.training.layout import check_dims
from bench.training.pp import CHECKPOINTS, validate
from bench.training.schedules import canonical, get as schedule, torch_class
from bench.training.tp import validate as tp_validate
from bench.workloads.models import get_spec


@dataclass(frozen=True, kw_only=True)
class PipelineConfig(RunConfig):
    """Fields of a `kind = "pipeline"` suite; CLI options override them."""

    name: str = "pipeline"
    description: str = ""
    model: str = "mlp-pipe"  # preset (bench.workloads.models.PRESETS)
    stages: tuple[int, ...] = (2,)  # pipeline ranks; world = stages x dp x fsdp x tp
    tp: int = 1  # tensor-parallel degree inside a stage (bench.training.layout)
    dp: int = 1  # DDP replicas of the whole pipeline (mesh dimension dp_replicate)
    fsdp: int = 1  # FSDP2 shards of every stage (mesh dimension dp_shard)
    world: tuple[int, ...] = ()  # must equal stages x dp x fsdp x tp when given
    chunks: tuple[int, ...] = (1, 2, 4, 8)
    schedules: tuple[str, ...] = ("gpipe", "1f1b")  # bench.training.schedules: ours or torch's names
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
        at_least("tp", (self.tp,))
        at_least("dp", (self.dp,))
        at_least("fsdp", (self.fsdp,))
        # our names for the schedules (torch's accepted too); one the installed torch lacks is refused
        object.__setattr__(self, "schedules", tuple(dict.fromkeys(canonical(s) for s in self.schedules)))
        for s in self.schedules:
            if s not in ("gpipe", "1f1b"):  # torch >= 2.4 has both; the others import torch's pipelining (~1.4 s)
                torch_class(s)
        for c in self.checkpoint:
            if c not in CHECKPOINTS:
                raise unknown("checkpoint mode", c, CHECKPOINTS)
        for w in self.world:  # each given world must be some stages x dp x fsdp x tp
            if w not in self.worlds():
                self.dims(w, self.stages[0])  # raises, showing the arithmetic
        expand_pipeline(self)  # every case validates

    @property
    def inner(self) -> int:
        """Ranks per pipeline rank: dp x fsdp x tp."""
        return self.dp * self.fsdp * self.tp

    def dims(self, world: int, stages: int) -> ParallelDims:
        return ParallelDims(world=world, pp=stages, dp_replicate=self.dp, dp_shard=self.fsdp, tp=self.tp)

    def inner_label(self) -> tuple[str, str]:
        """('dp x tp', 'dp 2 x tp 2'): the degrees beside stages in messages (tp alone when none)."""
        used = [(n, getattr(self, n)) for n in ("dp", "fsdp", "tp") if getattr(self, n) > 1] or [("tp", self.tp)]
        return " x ".join(n for n, _ in used), " x ".join(f"{n} {d}" for n, d in used)

    def worlds(self) -> tuple[int, ...]:
        return tuple(sorted({s * self.inner for s in self.stages}))


def expand_pipeline(cfg: PipelineConfig) -> tuple[list[CaseSpec], list[str]]:
    spec = get_spec(cfg.model)
    cases, notes, skipped = [], [], {}
    if cfg.tp > 1:
        tp_validate(spec, cfg.tp)
    for stages in cfg.stages:
        for sched in cfg.schedules:
            for m in cfg.chunks:
                why = schedule(sched).rule(stages, m)
                if why and not cfg.strict:  # a sweep runs the combinations each schedule can run
                    skipped.setdefault((stages, sched), []).append((m, why))
                    continue
                for mb in (cfg.micro_batch or (0,)):
                    # fixed micro-batch mode: micro_batch samples per micro-batch of every data-parallel pipeline
                    batch = mb * m * cfg.dp * cfg.fsdp if mb else cfg.batch
                    d = cfg.dims(stages * cfg.inner, stages)
                    local = d.local_batch(batch)  # each pipeline's share
                    check_dims(spec, d, batch, sched)
                    if local != batch and local % m:
                        raise BenchError(f"batch {batch} / dp x fsdp {batch // local} = {local} samples per pipeline "
                                         f"is not divisible by chunks {m}; choose a batch that is a multiple of "
                                         f"{m * batch // local}")
                    validate(schedule=sched, stages=stages, chunks=m, batch=local, depth=spec.depth,
                             balance=cfg.balance, strict=True, preset=spec.preset)
                    for ck in cfg.checkpoint:
                        cases.append(CaseSpec(strategy="pp", model=cfg.model, world=stages * cfg.inner, chunks=m,
                                              schedule=sched, checkpoint=ck, batch=batch, micro_batch=mb,
                                              balance=cfg.balance, tp=cfg.tp, dp=cfg.dp, fsdp=cfg.fsdp))
    for (stages, sched), ms in skipped.items():
        chunks = ",".join(str(m) for m, _ in ms)
        why = ("needs chunks >= stages (those ran under gpipe only)" if sched == "1f1b" and "gpipe" in cfg.schedules
               else ms[-1][1])
        notes.append(f"{sched} skipped for chunks {chunks} at {stages} stages: it {why}")
    if not cases:
        raise BenchError("no pipeline case can run: " + "; ".join(notes))
    return cases, notes
