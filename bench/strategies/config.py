"""The `strategies` suite config and its expansion into cases (pure: no ranks needed). Every check
that can fail on user input happens here or in the strategy's own check(), before any launch."""

from dataclasses import dataclass

from bench.errors import BenchError
from bench.suite import RunConfig, at_least
from bench.training import REGISTRY
from bench.training.case import CaseSpec
from bench.training.schedules import canonical
from bench.workloads.models import get_spec


@dataclass(frozen=True, kw_only=True)
class StrategiesConfig(RunConfig):
    """Fields of a `kind = "strategies"` suite; CLI options override them."""

    name: str = "strategies"
    description: str = ""
    strategies: tuple[str, ...] = tuple(REGISTRY.names())
    models: tuple[str, ...] = ("mlp-small", "gpt-small")
    world: tuple[int, ...] = (2,)  # multi-process strategies; dp and layer run at world 1
    layout_world: tuple[int, ...] = (4,)  # composed layouts (ddp+tp, pp+fsdp, ...: bench.training.layout)
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
