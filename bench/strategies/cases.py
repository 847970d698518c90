"""The strategies kind's launch side (bench.strategies.kind registers it through bench.kind.later,
so that a command that only reads runs never imports torch): the cases of a launch, the memory a
launch needs per rank, and the registered strategies `distbench list` shows."""

from bench.kind import first_doc_line
from bench.strategies.config import StrategiesConfig, expand_strategies
from bench.training import REGISTRY
from bench.training.memory import memory_of

MEMORY = memory_of(expand_strategies)


def units(cfg: StrategiesConfig, world: int, meta: dict):
    cases, notes = expand_strategies(cfg)
    return [c for c in cases if c.world == world], notes


def listing() -> list[str]:
    return [f"strategy    {s.name:<24} {first_doc_line(s.doc)}" for s in REGISTRY]
