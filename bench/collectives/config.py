"""The collectives suite config and its expansion into cases (pure: no ranks needed)."""

from dataclasses import dataclass

import torch

from bench.collectives import REGISTRY
from bench.errors import BenchError, unknown
from bench.collectives.acceptance import parse_min_busbw
from bench.suite import RunConfig, at_least
from bench.timing.loop import MODES
from bench.timing.stats import RANK_REDUCTIONS
from bench.units import dtype_name, parse_dtype, parse_op, parse_size, size_sweep, sweep_sizes

PLACEMENTS = ("out-of-place", "in-place")


@dataclass(frozen=True, kw_only=True)
class CollectivesConfig(RunConfig):
    """Fields of a `kind = "collectives"` suite file; every CLI option overrides one of them."""

    name: str = "collectives"  # results go to <out>/<name>/<run_id>/
    description: str = ""
    collectives: tuple[str, ...] = ("all",)  # registry names, or "all"
    world: tuple[int, ...] = (2,)  # one launch (one process group) per world size
    # ranks per communicator: the world runs world / n groups of n consecutive ranks at once, each the
    # collective (nccl-tests' NCCL_TESTS_SPLIT="DIV n"); () or n = world: one group of every rank
    group_sizes: tuple[int, ...] = ()
    dtypes: tuple[str, ...] = ("float32",)
    ops: tuple[str, ...] = ("sum",)  # for reducing collectives only
    roots: tuple[int, ...] = (0,)  # for rooted collectives only
    placements: tuple[str, ...] = PLACEMENTS  # where the collective has them
    modes: tuple[str, ...] = ("latency",)
    # how every rank's time of one iteration becomes the figure: max | avg | min | rank0 (nccl-tests' -a
    # 3 / 1 / 2 / 0); auto: avg in the nccl-tests mode (nccl-tests' default), max (the slowest rank) otherwise
    rank_reduce: str = "auto"
    sizes: tuple[str, ...] = ()  # explicit sizes; when empty, the min/max/step sweep
    min_bytes: str = "1K"
    max_bytes: str = "64M"
    step_factor: float = 2.0
    warmup: int = 5  # floor of warm-up ops per size
    iters: int = 20  # floor of timed ops per size
    budget_s: float = 0.1  # timed seconds to aim for per size (iterations adapt)
    check: int = 1  # correctness checks per size, outside the timed region
    skip_unsupported: bool = False  # skip (and record) dtype/op pairs the backend refuses
    min_busbw: str = ""  # acceptance: exit 1 when a collective's average busbw over the large sizes is below
    # this many GB/s ('50', or 'all_reduce=40,*=10'; nccl-tests' NCCL_TESTS_MIN_BW); "" = no check
    blocking: int = 1  # throughput mode: 1 waits for each op, 0 keeps a block's ops in flight (PARAM's --z)
    profile: str = ""  # a size, e.g. "1M": after its timed measurement, 5 ops under torch.profiler ("": off)

    def __post_init__(self):
        super().__post_init__()
        at_least("world size", self.world)
        at_least("group size", self.group_sizes, 2)
        for m in self.modes:
            if m not in MODES:
                raise unknown("timing mode", m, MODES)
        if self.rank_reduce not in ("auto", *RANK_REDUCTIONS):
            raise unknown("rank reduction", self.rank_reduce, ("auto", *RANK_REDUCTIONS))
        for p in self.placements:
            if p not in PLACEMENTS:
                raise unknown("placement", p, PLACEMENTS)
        for d in self.dtypes:
            parse_dtype(d)
        for o in self.ops:
            parse_op(o)
        at_least("warmup", self.warmup, 0)
        at_least("iters", self.iters)
        at_least("check", self.check, 0)
        if not self.budget_s > 0:
            raise BenchError(f"budget_s {self.budget_s} must be > 0")
        at_least("root", self.roots, 0)
        if self.min_busbw:
            parse_min_busbw(self.min_busbw)  # raises BenchError on a bad threshold
        if self.blocking not in (0, 1):
            raise BenchError(f"blocking {self.blocking} must be 0 or 1 (PARAM's --z: 1 blocking, 0 several in flight)")
        if self.profile:
            parse_size(self.profile)
        size_sweep(parse_size(self.min_bytes), parse_size(self.max_bytes), self.step_factor)  # validates
        self.size_list()

    def size_list(self) -> list[int]:
        return sweep_sizes(self.sizes, self.min_bytes, self.max_bytes, self.step_factor)

    def collective_names(self) -> list[str]:
        return REGISTRY.select(self.collectives)


@dataclass(frozen=True, kw_only=True)
class CaseSpec:
    """One block of the sweep: a collective at one dtype/op/root/mode over all sizes."""

    collective: str
    dtype: str
    op: str  # "" for data movement
    root: int  # -1 where the collective has none
    mode: str
    world: int
    sizes: tuple[int, ...]  # total-array bytes after rounding to whole elements and shards
    placements: tuple[str, ...]
    group: int = 0  # ranks per communicator when the world runs several at once (0: one, every rank)

    @property
    def case_id(self) -> str:
        return (f"{self.collective}.{self.dtype}.{self.op or 'none'}.root{self.root}.{self.mode}.w{self.world}"
                + (f".g{self.group}" if self.group else ""))


def round_size(size_bytes: int, elem_bytes: int, world: int, sharded: bool) -> tuple[int, int]:
    """(bytes, count): whole elements, and a multiple of world elements if the collective shards."""
    count = max(size_bytes // elem_bytes, 1)
    if sharded:
        count = max(count // world, 1) * world
    return count * elem_bytes, count


def groups_of(cfg: CollectivesConfig, world: int) -> list[int]:
    """The communicator sizes of a launch at `world`: 0 for every rank in one, else each --group-size
    that divides the world into several (a size equal to the world is the one group)."""
    for n in cfg.group_sizes:
        if world % n:
            allowed = ", ".join(str(d) for d in range(2, world + 1) if world % d == 0)
            raise BenchError(f"group size {n} does not divide world size {world}; allowed: {allowed}")
    return sorted({0 if n == world else n for n in cfg.group_sizes} or {0})


def expand(cfg: CollectivesConfig, world: int) -> tuple[list[CaseSpec], list[str]]:
    """Cases for one world size, and notes on what was left out and why."""
    cases, notes = [], []
    for name in cfg.collective_names():
        for group in groups_of(cfg, world):
            cases += _expand_one(cfg, name, world, group, notes)
    return cases, notes


def _expand_one(cfg: CollectivesConfig, name: str, world: int, group: int, notes: list) -> list[CaseSpec]:
    cases, n = [], group or world
    coll = REGISTRY.get(name)
    if n < coll.min_world:
        where = "world" if n == world else "group size"
        notes.append(f"{name} skipped at {where} {n}: needs world >= {coll.min_world}")
        return cases
    places = tuple(p for p in coll.placements if p in cfg.placements)
    if not places:
        notes.append(f"{name} skipped: it has only {'/'.join(coll.placements)}")
        return cases
    roots = cfg.roots if coll.has_root else (-1,)
    for r in roots:
        if r >= n:
            where = f"world size {world}" if n == world else f"group size {n}"
            raise BenchError(f"root {r} is not a rank at {where}; allowed: 0..{n - 1}")
    dtypes = cfg.dtypes if coll.sized else ("float32",)
    for dname in dtypes:
        dtype = parse_dtype(dname)
        esize = torch.empty((), dtype=dtype).element_size()
        if coll.sized:
            sizes = []
            for s in cfg.size_list():
                b, _ = round_size(s, esize, n, coll.sharded)
                if b not in sizes:
                    sizes.append(b)
        else:
            sizes = [0]
        for op in (tuple(parse_op(o) for o in cfg.ops) if coll.reduces else ("",)):
            for r in sorted(set(roots)):
                for mode in cfg.modes:
                    cases.append(CaseSpec(collective=name, dtype=dtype_name(dtype), op=op, root=r, mode=mode,
                                          world=world, sizes=tuple(sizes), placements=places, group=group))
    return cases
