"""What a training launch needs per rank (the Kind's memory answer, asked by preflight): the
case that needs the most, each strategy answering for itself (Strategy.memory), plus the
single-process reference when checked; what would fit is the largest batch that does."""

import dataclasses
import math

from bench.kind import Memory
from bench.strategies import REGISTRY
from bench.strategies.footprint import Footprint, layout_memory
from bench.workloads.models import get_spec


def case_bytes(case, check: bool = True) -> int:
    """Per-rank peak bytes of one training case (strategies CaseSpec)."""
    f = Footprint(get_spec(case.model), case.batch, case.world)
    own = layout_memory(f, case.dims) if case.composed else REGISTRY.get(case.strategy).memory(f)
    need = own + (f.check_bytes() if check else 0)
    return int(math.ceil(need))


def training_bytes_per_rank(cases, check: bool = True) -> tuple[int, str]:
    """(bytes, label) of the case that needs the most, over strategies CaseSpecs (one world)."""
    best, label = 0, "nothing"
    for c in cases:
        b = case_bytes(c, check)
        if b > best:
            best, label = b, f"{c.strategy} on {c.model}, batch {c.batch}, world {c.world}"
    return best, label


def memory_of(expand):
    """The Kind's Memory for a training kind whose cases come from `expand(cfg)`."""
    def cases(cfg, world):
        return [c for c in expand(cfg)[0] if c.world == world]

    def need(cfg, world: int) -> tuple[int, str]:
        return training_bytes_per_rank(cases(cfg, world), bool(cfg.check))

    def fits(cfg, world: int, budget: float) -> list[str]:
        cs = cases(cfg, world)
        b = max((c.batch for c in cs), default=0)
        while b > 1:
            b //= 2
            if training_bytes_per_rank([dataclasses.replace(c, batch=b) for c in cs], bool(cfg.check))[0] <= budget:
                return [f"batch {b}"]
        return []

    return Memory(need=need, fits=fits)
