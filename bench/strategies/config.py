"""Suite configs of the `strategies` and `pipeline` kinds and their expansion into cases (pure:
no ranks needed). Every check that can fail on user input happens here, before any launch."""

from dataclasses import dataclass

from bench.errors import BenchError, unknown
from bench.strategies import NAMES
from bench.strategies.pp import CHECKPOINTS, SCHEDULES, validate
from bench.workloads.models import PRESETS, get_spec
from bench.suite import RunConfig, at_least


@dataclass(frozen=True, kw_only=True)
class CaseSpec:
    """One measured case: a row of the results table."""

    strategy: str
    model: str  # preset name
    world: int  # processes of the launch (1 for single-process strategies)
    chunks: int = 1  # micro-batches per mini-batch (pipeline)
    schedule: str = ""  # pipeline schedule, "" elsewhere
    checkpoint: str = "never"
    batch: int  # global mini-batch, samples
    micro_batch: int = 0  # samples per micro-batch in fixed-micro-batch mode; 0: fixed mini-batch
    balance: tuple[int, ...] = ()
    bucket_cap_mb: float = 25.0

    @property
    def sweep_mode(self) -> str:
        return "micro-batch" if self.micro_batch else "mini-batch"

    @property
    def case_id(self) -> str:
        bal = "-".join(map(str, self.balance)) or "even"
        return (f"{self.strategy}.{self.model}.w{self.world}.m{self.chunks}.{self.schedule or 'none'}."
                f"{self.checkpoint}.b{self.batch}.mb{self.micro_batch}.bal{bal}")


def _presets(models):
    for m in models:
        get_spec(m)


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
    schedules: tuple[str, ...] = ("gpipe", "1f1b")
    checkpoint: tuple[str, ...] = ("never",)
    batch: int = 1024  # fixed mini-batch mode: split into `chunks` micro-batches
    micro_batch: tuple[int, ...] = ()  # fixed micro-batch mode when given: mini-batch = micro_batch x chunks
    balance: tuple[int, ...] = ()  # blocks per stage (empty: as even as possible)
    warmup: int = 2  # discarded steps after the check step (the first step also infers shapes)
    steps: int = 6  # timed steps (>= 5)
    check: int = 1  # 1: compare the first step with the single-process reference
    efficiency: bool = True  # also the one-process micro-batch efficiency curve
    seed: int = 0
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
        if self.tp != 1:
            raise BenchError(f"tp {self.tp} inside pipeline stages is not implemented; allowed: 1")
        for s in self.schedules:
            if s not in SCHEDULES:
                raise unknown("schedule", s, SCHEDULES)
        for c in self.checkpoint:
            if c not in CHECKPOINTS:
                raise unknown("checkpoint mode", c, CHECKPOINTS)
        for w in self.world:
            want = sorted({s * self.tp for s in self.stages})
            if w not in want:
                raise BenchError(f"world size {w} does not match stages x tp: "
                                 + ", ".join(f"{s} x {self.tp} = {s * self.tp}" for s in self.stages))
        expand_pipeline(self)  # every case validates

    def worlds(self) -> tuple[int, ...]:
        return tuple(sorted({s * self.tp for s in self.stages}))


def expand_pipeline(cfg: PipelineConfig) -> tuple[list[CaseSpec], list[str]]:
    spec = get_spec(cfg.model)
    cases, notes, skipped = [], [], {}
    for stages in cfg.stages:
        for sched in cfg.schedules:
            for m in cfg.chunks:
                if sched == "1f1b" and m < stages and not cfg.strict:
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


@dataclass(frozen=True, kw_only=True)
class StrategiesConfig(RunConfig):
    """Fields of a `kind = "strategies"` suite; CLI options override them."""

    name: str = "strategies"
    description: str = ""
    strategies: tuple[str, ...] = NAMES
    models: tuple[str, ...] = ("mlp-small", "gpt-small")
    world: tuple[int, ...] = (2,)  # multi-process strategies; dp and layer run at world 1
    batch: int = 32
    chunks: int = 4  # pp micro-batches
    schedule: str = "1f1b"  # pp schedule
    checkpoint: str = "never"
    bucket_cap_mb: float = 25.0  # ddp gradient bucket
    warmup: int = 2
    steps: int = 6
    check: int = 1
    seed: int = 0

    def __post_init__(self):
        super().__post_init__()
        for s in self.strategies:
            if s not in NAMES:
                raise unknown("strategy", s, NAMES)
        _presets(self.models)
        at_least("world size", self.world)
        at_least("batch", self.batch)
        at_least("steps", self.steps, 5)
        at_least("warmup", self.warmup, 0)
        if self.bucket_cap_mb <= 0:
            raise BenchError(f"bucket_cap_mb {self.bucket_cap_mb} must be > 0")
        expand_strategies(self)

    def worlds(self) -> tuple[int, ...]:
        from bench.strategies import get

        single = any(get(s).SINGLE_PROCESS for s in self.strategies)
        multi = any(not get(s).SINGLE_PROCESS for s in self.strategies)
        return tuple(sorted(({1} if single else set()) | (set(self.world) if multi else set())))


def expand_strategies(cfg: StrategiesConfig) -> tuple[list[CaseSpec], list[str]]:
    from bench.strategies import get
    from bench.strategies.tp import validate as tp_validate

    cases, notes = [], []
    for model in cfg.models:
        spec = get_spec(model)
        for s in cfg.strategies:
            single = get(s).SINGLE_PROCESS
            for w in ((1,) if single else cfg.world):
                if not single and w < 2 and s in ("pp",):
                    notes.append(f"pp skipped at world {w}: needs >= 2 stages")
                    continue
                if s in ("ddp", "fsdp") and cfg.batch % w:
                    raise BenchError(f"batch {cfg.batch} is not divisible by world size {w} for {s}")
                if s == "tp":
                    tp_validate(spec, w)
                kw = {}
                if s == "pp":
                    validate(schedule=cfg.schedule, stages=w, chunks=cfg.chunks, batch=cfg.batch, depth=spec.depth,
                             strict=True, preset=spec.preset)
                    kw = {"chunks": cfg.chunks, "schedule": cfg.schedule, "checkpoint": cfg.checkpoint}
                cases.append(CaseSpec(strategy=s, model=model, world=w, batch=cfg.batch,
                                      bucket_cap_mb=cfg.bucket_cap_mb if s == "ddp" else 0.0, **kw))
    return cases, notes


def all_presets() -> list[str]:
    return sorted(PRESETS)
