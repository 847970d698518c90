"""nccl-tests' words and distbench's for them: programs, types, reduce ops, NCCL's version code
(the options: bench.imports.nccl_options). Shared by the text reader (nccl_text) and the JSON reader (nccl_json)."""

import re
from pathlib import Path

from bench.errors import BenchError, unknown

# nccl-tests program -> distbench collective (the contiguous-buffer forms nccl-tests times); alltoallv
# (src/alltoallv.cu, 2026: uneven per-peer counts, distance-weighted or from a traffic matrix) keeps its
# own name: distbench has no unit of that pattern, so nothing of distbench's pairs with it
PROGRAMS = {"all_reduce": "all_reduce", "all_gather": "all_gather_single", "reduce_scatter": "reduce_scatter_single",
            "alltoall": "all_to_all_single", "broadcast": "broadcast", "reduce": "reduce", "gather": "gather",
            "scatter": "scatter", "sendrecv": "sendrecv", "alltoallv": "alltoallv"}
TYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16", "int8": "int8",
         "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
         "int": "int32", "char": "int8", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
OPS = {"sum": "sum", "prod": "product", "max": "max", "min": "min", "avg": "avg", "none": "", "premulsum": "premulsum"}


def collective_of(program: str) -> str:
    """'./build/all_reduce_perf_mpi' -> 'all_reduce'."""
    name = Path(str(program)).name
    name = re.sub(r"_perf.*$", "", name)
    if name not in PROGRAMS:
        raise unknown("nccl-tests program", Path(str(program)).name, [f"{p}_perf" for p in PROGRAMS])
    return PROGRAMS[name]


def nccl_version_text(code) -> str:
    """NCCL_VERSION_CODE -> 'X.Y.Z' (2.9 on: X*10000 + Y*100 + Z; before: X*1000 + Y*100 + Z)."""
    try:
        c = int(code)
    except (TypeError, ValueError):
        return ""
    if c >= 20900:
        return f"{c // 10000}.{c // 100 % 100}.{c % 100}"
    return f"{c // 1000}.{c // 100 % 10}.{c % 100}" if c > 0 else ""


def number(text: str, what: str, path: str, line: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise BenchError(f"'{path}' line {line}: {what} '{text}' is not a number") from None


def distbench_name(name: str | None) -> str | None:
    """--collective as nccl-tests names it (all_gather, alltoall) or as distbench does."""
    if name is None:
        return None
    base = re.sub(r"_perf.*$", "", str(name))
    if base in PROGRAMS:
        return PROGRAMS[base]
    from bench.collectives import REGISTRY  # lazy: the units import torch; only a name nccl-tests does not use asks them

    return REGISTRY.get(base).name  # unknown: a did-you-mean BenchError
