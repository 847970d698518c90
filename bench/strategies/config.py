"""The `strategies` suite config and its expansion into cases (pure: no ranks needed). Every check
that can fail on user input happens here or in the strategy's own check(), before any launch."""

from dataclasses import dataclass

from bench.errors import BenchError
from bench.strategies import REGISTRY
from bench.strategies.dims import ParallelDims
from bench.strategies.schedules import canonical
from bench.suite import RunConfig, at_least
from bench.workloads.models import get_spec


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
    # composed layouts (bench.strategies.layout): degrees inside the world; pp = world / (tp x dp x fsdp)
    tp: int = 1  # tensor-parallel degree
    dp: int = 1  # DDP replicas (mesh dimension dp_replicate)
    fsdp: int = 1  # FSDP2 shards (mesh dimension dp_shard)

    @property
    def composed(self) -> bool:
        return self.tp * self.dp * self.fsdp > 1

    @property
    def dims(self) -> ParallelDims:
        """The case's degrees: a composed case's own; otherwise its strategy's at its world."""
        if not self.composed:
            return REGISTRY.get(self.strategy).dims(self.world)
        inner = self.tp * self.dp * self.fsdp
        return ParallelDims(world=self.world, pp=max(self.world // inner, 1), dp_replicate=self.dp,
                            dp_shard=self.fsdp, tp=self.tp)

    @property
    def layout(self) -> str:
        """'pp2.dp2.tp2' for a composed case, '' otherwise (one parallelism: the strategy says it)."""
        return self.dims.layout if self.composed else ""

    @property
    def samples_per_micro_batch(self) -> int:
        """What one micro-batch of one data-parallel pipeline holds (the results' micro_batch): the
        fixed micro-batch, else the pipeline's share of the mini-batch (batch / (dp x fsdp) for a
        composed case; a plain strategy's own batch) over the chunks."""
        if self.micro_batch:
            return self.micro_batch
        return (self.dims.local_batch(self.batch) if self.composed else self.batch) // self.chunks

    @property
    def sweep_mode(self) -> str:
        return "micro-batch" if self.micro_batch else "mini-batch"

    @property
    def key(self) -> str:  # the harness's unit key
        return self.case_id

    @property
    def case_id(self) -> str:
        bal = "-".join(map(str, self.balance)) or "even"
        return (f"{self.strategy}.{self.model}.w{self.world}.m{self.chunks}.{self.schedule or 'none'}."
                f"{self.checkpoint}.b{self.batch}.mb{self.micro_batch}.bal{bal}"
                + (f".{self.layout}" if self.composed else ""))


@dataclass(frozen=True, kw_only=True)
class StrategiesConfig(RunConfig):
    """Fields of a `kind = "strategies"` suite; CLI options override them."""

    name: str = "strategies"
    description: str = ""
    strategies: tuple[str, ...] = tuple(REGISTRY.names())
    models: tuple[str, ...] = ("mlp-small", "gpt-small")
    world: tuple[int, ...] = (2,)  # multi-process strategies; dp and layer run at world 1
    layout_world: tuple[int, ...] = (4,)  # composed layouts (ddp+tp, pp+fsdp, ...: bench.strategies.layout)
    batch: int = 32
    chunks: int = 4  # pp micro-batches
    schedule: str = "1f1b"  # pp schedule
    checkpoint: str = "never"
    bucket_cap_mb: float = 25.0  # ddp gradient bucket
    warmup: int = 2
    steps: int = 6
    check: int = 1
    seed: int = 0
    profile: int = 0  # 1: 5 more steps per case under torch.profiler, after the timed ones (0: off)

    def __post_init__(self):
        super().__post_init__()
        REGISTRY.select(self.strategies)  # unknown names fail with a did-you-mean
        object.__setattr__(self, "schedule", canonical(self.schedule))  # ours or torch's name -> ours
        for m in self.models:
            get_spec(m)
        at_least("world size", self.world)
        at_least("layout world", self.layout_world)
        at_least("batch", self.batch)
        at_least("steps", self.steps, 5)
        at_least("warmup", self.warmup, 0)
        if self.profile not in (0, 1):
            raise BenchError(f"profile {self.profile} must be 0 or 1 (1: trace 5 steps per case after the timed ones)")
        if not 0 < self.bucket_cap_mb <= 2**20:  # DDP takes int(MB * 2**20) bytes as an int64
            raise BenchError(f"bucket_cap_mb {self.bucket_cap_mb} must be > 0 and at most {2**20} (1 TiB)")
        expand_strategies(self)

    def worlds(self) -> tuple[int, ...]:
        return tuple(sorted({w for s in self.strategies for w in self.worlds_of(s)}))

    def worlds_of(self, strategy: str) -> tuple[int, ...]:
        s = REGISTRY.get(strategy)
        return (1,) if s.single_process else self.layout_world if s.composed else self.world


def expand_strategies(cfg: StrategiesConfig) -> tuple[list[CaseSpec], list[str]]:
    """Every (model, strategy, world) case; each strategy checks its own (raises or notes a skip)."""
    cases, notes = [], []
    for model in cfg.models:
        spec = get_spec(model)
        for s in cfg.strategies:
            strategy = REGISTRY.get(s)
            for w in cfg.worlds_of(s):
                pipelined = s == "pp" or (strategy.composed and strategy.dims(strategy.min_world).pp > 1)
                kw = {"chunks": cfg.chunks, "schedule": cfg.schedule, "checkpoint": cfg.checkpoint} if pipelined else {}
                if strategy.composed and w >= strategy.min_world and w % strategy.min_world == 0:
                    d = strategy.dims(w)
                    kw.update(tp=d.tp, dp=d.dp_replicate, fsdp=d.dp_shard)
                case = CaseSpec(strategy=s, model=model, world=w, batch=cfg.batch,
                                bucket_cap_mb=cfg.bucket_cap_mb if s == "ddp" else 0.0, **kw)
                skip = strategy.check(spec, case)
                if skip:
                    notes.append(skip)
                    continue
                cases.append(case)
    return cases, list(dict.fromkeys(notes))
