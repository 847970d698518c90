"""What a training launch needs per rank (the Kind's memory answer, asked by preflight): the
case that needs the most, each strategy answering for itself (Strategy.memory), plus the
single-process reference when checked; what would fit is the largest batch that does."""

import dataclasses
import math

from bench.kind import Memory
from bench.training import REGISTRY
from bench.training.footprint import Footprint, layout_ranks
from bench.training.schedules import get as get_schedule
from bench.workloads.models import get_spec


def footprint(case) -> Footprint:
    """The case's pieces, with the stages each pipeline rank holds (its schedule's placement) and
    the balance."""
    p = case.dims.pp
    sch = get_schedule(case.schedule or "gpipe")
    return Footprint(get_spec(case.model), case.batch, case.world,
                     stage_ids=tuple(tuple(sch.stage_ids(q, p)) for q in range(p)), balance=tuple(case.balance))


def rank_bytes(case, check: bool = True) -> list[int]:
    """Peak bytes of every rank of one training case (strategies CaseSpec), rank order: per stage
    and per TP / FSDP rank where the ranks differ (Strategy.ranks; a composed case's own degrees),
    else each rank the strategy's memory; the single-process reference charged to rank 0, which
    runs it."""
    f, s = footprint(case), REGISTRY.get(case.strategy)
    if case.composed or s.ranks is not None:
        return layout_ranks(f, case.dims, check)
    own = int(math.ceil(s.memory(f)))
    return [own + (int(math.ceil(f.check_bytes())) if check and r == 0 else 0) for r in range(case.world)]


def case_bytes(case, check: bool = True) -> int:
    """Peak bytes of the most loaded rank of one training case."""
    return max(rank_bytes(case, check))


def _rank_label(case, per: list[int]) -> str:
    """'', or ', rank 6 (stage 3)' when the ranks differ: the one that needs the most."""
    if len(set(per)) < 2:
        return ""
    r = per.index(max(per))
    dims = case.dims
    stages = footprint(case).stage_ids[dims.coords(r)["pp"]]
    where = f" (stage{'s' if len(stages) > 1 else ''} {'+'.join(map(str, stages))})" if dims.pp > 1 else ""
    return f", rank {r}{where}"


def training_bytes_per_rank(cases, check: bool = True) -> tuple[int, str]:
    """(bytes, label) of the rank that needs the most over strategies CaseSpecs (one world): its
    case, and the rank where the ranks differ."""
    best, label = 0, "nothing"
    for c in cases:
        per = rank_bytes(c, check)
        if max(per) > best:
            best, label = max(per), f"{c.strategy} on {c.model}, batch {c.batch}, world {c.world}{_rank_label(c, per)}"
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
