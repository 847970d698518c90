"""What an allreduce launch needs per rank (the Kind's memory answer, asked by preflight):
the block of every algorithm at one size, bench/allreduce/kind.py; each algorithm says its own
scratch (Algorithm.scratch_bytes)."""

from bench.allreduce import REGISTRY
from bench.sweep.memory import elem_bytes, sizes_that_fit
from bench.kind import Memory
from bench.units import format_size

# The exact input pattern is built from an int64 index over the whole array with int64/float64
# temporaries (bench.collectives.base.reduce_values / reduce_expected, not tiled here): about
# 8 B (index) + 4 x 8 B (temporaries) per element at the peak of building inputs and expected.
PATTERN_BYTES_PER_ELEMENT = 40


def allreduce_case_bytes(algorithms, size_bytes: int, elem_bytes: int, world: int, chunk_bytes: int,
                         check: int = 1) -> int:
    """Per-rank peak bytes of one allreduce block (every algorithm at one size), bench/allreduce/kind.py:
    inputs S + expected S (when checked) + working copy S (x = inputs.clone()) + the scratch every
    algorithm run so far keeps + the compare mask (1 B / element), or, while the pattern is built,
    inputs + expected + PATTERN_BYTES_PER_ELEMENT x count; the larger of the two."""
    count = max(size_bytes // max(elem_bytes, 1), 1)
    kept = size_bytes * (2 if check else 1)
    scratch = sum(REGISTRY.get(a).scratch_bytes(size_bytes, world, chunk_bytes) for a in algorithms)
    timed = kept + size_bytes + scratch + (count if check else 0)
    building = kept + PATTERN_BYTES_PER_ELEMENT * count
    return max(timed, building)


def allreduce_bytes_per_rank(cfg, world: int, sizes=None) -> tuple[int, str]:
    """(bytes, label) of the largest allreduce block of the config at this world."""

    sizes = list(cfg.size_list()) if sizes is None else list(sizes)
    algs = cfg.algorithm_names()
    best, label = 0, "nothing"
    for dtype in cfg.dtypes:
        e = elem_bytes(dtype)
        for s in sizes:
            b = allreduce_case_bytes(algs, s, e, world, cfg.chunk(), cfg.check)
            if b > best:
                best, label = b, f"allreduce ({', '.join(algs)}) {dtype} at {format_size(s)}B, world {world}"
    return best, label


MEMORY = Memory(need=allreduce_bytes_per_rank, fits=sizes_that_fit(allreduce_bytes_per_rank))
