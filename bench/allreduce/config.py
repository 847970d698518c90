"""The allreduce suite config (`kind = "allreduce"`) and its expansion into cases (pure)."""

import typing
from dataclasses import dataclass

import torch

from bench.allreduce import OPS, REGISTRY
from bench.allreduce.ring import default_chunk_bytes
from bench.distributed.env import resolve_backend
from bench.errors import BenchError, did_you_mean, unknown
from bench.timing.loop import MODES
from bench.timing.stats import RANK_REDUCTIONS
from bench.units import dtype_name, parse_dtype, parse_size, parse_size_list, sweep_sizes
from bench.suite import RunConfig, at_least

# NCCL_ALGO / NCCL_PROTO values NCCL accepts (NCCL docs, "Environment Variables"); case-insensitive.
# PAT is left out: NCCL implements it for all_gather / reduce_scatter only and would silently fall
# back for all_reduce, labelling a row with an algorithm that did not run.
NCCL_ALGOS = ("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree")
NCCL_PROTOS = ("LL", "LL128", "Simple")
AUTO = ("auto",)
AUTO_NCCL_ALGOS = ("Ring", "Tree")  # NVLS / CollNet only where the machine has them: ask for them
AUTO_NCCL_PROTOS = ("LL", "LL128", "Simple")
POW2_WORLDS = tuple(2**k for k in range(1, 11))  # 2 .. 1024


@dataclass(frozen=True, kw_only=True)
class AllreduceConfig(RunConfig):
    """Fields of a `kind = "allreduce"` suite file; every CLI option overrides one of them."""

    name: str = "allreduce"  # results go to <out>/<name>/<run_id>/
    description: str = ""
    algorithms: tuple[str, ...] = ("all",)  # registry names (ring, tree, star, halving_doubling, native) or "all"
    world: tuple[int, ...] = (2, 4)  # one launch (one process group) per world size
    dtypes: tuple[str, ...] = ("float32",)
    ops: tuple[str, ...] = ("sum",)  # sum | max | min | product
    modes: tuple[str, ...] = ("latency",)
    # how every rank's time of one iteration becomes the figure: max | avg | min | rank0 (nccl-tests' -a
    # 3 / 1 / 2 / 0); auto: avg in the nccl-tests mode (nccl-tests' default), max (the slowest rank) otherwise
    rank_reduce: str = "auto"
    sizes: tuple[str, ...] = ()  # explicit sizes; when empty, the min/max/step sweep
    min_bytes: str = "4K"
    max_bytes: str = "64M"
    step_factor: float = 2.0
    # Internal (set by plan, not an option): an NCCL probe launch, which runs each native call once,
    # untimed and without rows, with NCCL's TUNING log on, so that its timed twin runs without it.
    nccl_probe: bool = False
    chunk_bytes: str = "auto"  # ring: bytes per pipelined chunk (> 0); auto: the backend's (ring.default_chunk_bytes)
    nccl_algos: tuple[str, ...] = AUTO  # nccl only: one native launch per NCCL_ALGO value (auto: Ring, Tree)
    nccl_protos: tuple[str, ...] = AUTO  # nccl only: one native launch per NCCL_PROTO value (auto: all three)
    warmup: int = 2  # floor of warm-up ops per size
    iters: int = 5  # floor of timed ops per size
    budget_s: float = 0.02  # timed seconds to aim for per size and algorithm
    check: int = 1  # correctness checks per size, outside the timed region
    predict_worlds: tuple[int, ...] = POW2_WORLDS  # model predictions (not measurements) at these worlds
    predict_sizes: tuple[str, ...] = ("4K", "1M", "64M")
    profile: str = ""  # a size, e.g. "1M": after its timed measurement, 5 ops under torch.profiler ("": off)
    empty_ok: typing.ClassVar[tuple[str, ...]] = ("nccl_algos", "nccl_protos", "predict_worlds")  # (): auto / none

    def __post_init__(self):
        super().__post_init__()
        at_least("world size", (*self.world, *self.predict_worlds))
        for m in self.modes:
            if m not in MODES:
                raise unknown("timing mode", m, MODES)
        if self.rank_reduce not in ("auto", *RANK_REDUCTIONS):
            raise unknown("rank reduction", self.rank_reduce, ("auto", *RANK_REDUCTIONS))
        for d in self.dtypes:
            parse_dtype(d)
        for o in self.ops:
            if o not in OPS:
                raise unknown("allreduce op", o, OPS)
        self.algorithm_names()
        at_least("warmup", self.warmup, 0)
        at_least("iters", self.iters)
        at_least("check", self.check, 0)
        if not self.budget_s > 0:
            raise BenchError(f"budget_s {self.budget_s} must be > 0")
        self.chunk_asked()
        self.size_list()
        parse_size_list(list(self.predict_sizes))
        if self.profile:
            parse_size(self.profile)
        canonical(self.nccl_algos, NCCL_ALGOS, "NCCL_ALGO")
        canonical(self.nccl_protos, NCCL_PROTOS, "NCCL_PROTO")

    def chunk(self) -> int:
        """The ring's chunk in bytes for this run (ring_chunk_bytes: 0 = one chunk per segment)."""
        return self.ring_chunk_bytes()

    def chunk_asked(self) -> int | None:
        """Ring chunk in bytes asked for (None: auto); a size <= 0 is bad input."""
        text = str(self.chunk_bytes).strip()
        if text.lower() == "auto":
            return None
        if text.startswith("-") or (text[:1].isdigit() and parse_size(text) == 0):
            raise BenchError(f"chunk size '{self.chunk_bytes}' must be > 0 bytes (the ring sends each segment "
                             "in chunks of this size), e.g. 256K or 1M")
        return parse_size(text)

    def ring_chunk_bytes(self) -> int:
        """The ring's chunk for this run: what was asked, else the backend's default (0 on nccl:
        one chunk per segment; 1 MiB elsewhere). plan() puts the launch's backend into the config."""
        backend = self.backend if self.backend != "auto" else resolve_backend("auto")
        return default_chunk_bytes(backend, self.chunk_asked())

    def size_list(self) -> list[int]:
        return sweep_sizes(self.sizes, self.min_bytes, self.max_bytes, self.step_factor)

    def algorithm_names(self) -> list[str]:
        return REGISTRY.select(self.algorithms)

    def nccl_asked(self) -> bool:
        """Did the user ask for NCCL settings (anything but the default 'auto' or an empty list)?"""
        return any(v not in (AUTO, ()) for v in (self.nccl_algos, self.nccl_protos))

    def nccl_variants(self) -> list[dict[str, str]]:
        """The environment of each extra native launch on nccl: one variable changed at a time."""
        algos = AUTO_NCCL_ALGOS if self.nccl_algos == AUTO else canonical(self.nccl_algos, NCCL_ALGOS, "NCCL_ALGO")
        protos = AUTO_NCCL_PROTOS if self.nccl_protos == AUTO else canonical(self.nccl_protos, NCCL_PROTOS,
                                                                             "NCCL_PROTO")
        return [{"NCCL_ALGO": a} for a in algos] + [{"NCCL_PROTO": p} for p in protos]


def canonical(values, allowed, what: str) -> tuple[str, ...]:
    """Case-insensitive match onto NCCL's spelling; 'auto' passes through."""
    by_lower = {a.lower(): a for a in allowed}
    out = []
    for v in values:
        if v == "auto":
            continue
        if str(v).lower() not in by_lower:
            hint = did_you_mean(str(v).lower(), list(by_lower))
            hint = f" (did you mean '{by_lower[hint.split(chr(39))[1]]}'?)" if hint else ""
            raise BenchError(f"unknown {what} value '{v}'{hint}; allowed: {', '.join(allowed)}")
        out.append(by_lower[str(v).lower()])
    return tuple(out)


def variant_label(env) -> str:
    """'NCCL_ALGO=Ring,NCCL_PROTO=LL' from an environment; '' when neither is set."""
    return ",".join(f"{k}={env[k]}" for k in ("NCCL_ALGO", "NCCL_PROTO") if env.get(k))


@dataclass(frozen=True, kw_only=True)
class CaseSpec:
    """One algorithm at one dtype/op/mode over all sizes, at one world (and NCCL variant)."""

    algorithm: str
    dtype: str
    op: str
    mode: str
    world: int
    sizes: tuple[int, ...]  # bytes, whole elements
    chunk_bytes: int  # ring's chunk; 0 for the others
    variant: str = ""  # NCCL_ALGO / NCCL_PROTO of the launch, native only

    @property
    def label(self) -> str:
        """What tables and the model call this algorithm: 'ring', 'native[NCCL_ALGO=Tree]'."""
        return f"{self.algorithm}[{self.variant}]" if self.variant else self.algorithm

    @property
    def case_id(self) -> str:
        chunk = f".chunk{self.chunk_bytes}" if self.chunk_bytes else ""
        var = f".{self.variant.replace(',', '.')}" if self.variant else ""
        return f"allreduce.{self.algorithm}{chunk}{var}.{self.dtype}.{self.op}.{self.mode}.w{self.world}"

    def chunk_numel(self, elem_bytes: int) -> int:
        return max(self.chunk_bytes // elem_bytes, 1) if self.chunk_bytes else 0


def expand(cfg: AllreduceConfig, world: int, variant: str = "") -> list[CaseSpec]:
    """Cases for one launch; `variant` (the launch's NCCL_ALGO / NCCL_PROTO) labels native."""
    names = cfg.algorithm_names()
    ring_chunk = cfg.ring_chunk_bytes()
    cases = []
    for dname in cfg.dtypes:
        dtype = parse_dtype(dname)
        esize = torch.empty((), dtype=dtype).element_size()
        sizes: list[int] = []
        for s in cfg.size_list():
            b = max(s // esize, 1) * esize
            if b not in sizes:
                sizes.append(b)
        for op in cfg.ops:
            for mode in cfg.modes:
                for name in names:
                    cases.append(CaseSpec(algorithm=name, dtype=dtype_name(dtype), op=op, mode=mode, world=world,
                                          sizes=tuple(sizes), chunk_bytes=ring_chunk if name == "ring" else 0,
                                          variant=variant if name == "native" else ""))
    return cases


def predict_size_list(cfg: AllreduceConfig) -> list[int]:
    return parse_size_list(list(cfg.predict_sizes))

