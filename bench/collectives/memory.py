"""What a collectives launch needs per rank (the Kind's memory answer, asked by preflight).

A collective case's memory is the collective's own answer (Collective.buff_numel, like nccl-tests'
getBuffSize) summed by bench.collectives.base.case_numel: send + recv buffers (one in-place),
and while checked a fresh set of them plus the expected result; the chunked compare adds at
most CHECK_SCRATCH_BYTES. Rooted collectives are counted at the root (the rank that holds most).
"""

from bench.collectives import REGISTRY as COLLECTIVES
from bench.collectives.base import CHECK_SCRATCH_BYTES, case_numel
from bench.kind import Memory
from bench.sweep.memory import elem_bytes, sizes_that_fit
from bench.units import format_size


def collective_case_bytes(collective: str, size_bytes: int, elem_bytes: int, world: int, check: int = 1,
                          placement: str | None = None) -> int:
    """Per-rank peak bytes of one collective case at total-array size S = size_bytes, in
    `placement` (default: the larger of the collective's placements): case_numel x element size,
    plus CHECK_SCRATCH_BYTES when checked."""
    coll = COLLECTIVES.get(collective)
    count = size_bytes // max(elem_bytes, 1)
    places = [placement] if placement else list(coll.placements)
    numel = max(case_numel(coll, count, max(world, 1), p == "in-place", bool(check)) for p in places)
    return numel * elem_bytes + (CHECK_SCRATCH_BYTES if check and coll.sized else 0)


def collectives_bytes_per_rank(cfg, world: int, sizes=None) -> tuple[int, str]:
    """(bytes, label) of the case that needs the most memory per rank, over the config's
    collectives, dtypes and sizes (or `sizes`, bytes) at this world. Sizes are the requested
    total-array bytes (rounding to whole elements and shards only shrinks them)."""

    sizes = list(cfg.size_list()) if sizes is None else list(sizes)
    best, label = 0, "nothing"
    for name in cfg.collective_names():
        for dtype in cfg.dtypes:
            e = elem_bytes(dtype)
            for s in sizes:
                b = collective_case_bytes(name, s, e, world, cfg.check)
                if b > best:
                    best, label = b, f"{name} {dtype} at {format_size(s)}B, world {world}"
    return best, label


MEMORY = Memory(need=collectives_bytes_per_rank, fits=sizes_that_fit(collectives_bytes_per_rank))
