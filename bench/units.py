"""Sizes with K/M/G suffixes (powers of 1024), dtypes and reduce ops by name.

torch is imported where a dtype or a reduce op is made (parse_dtype, torch_op, DTYPES,
EXACT_INT_LIMIT), not with this module: the sizes serve every command, and a command that reads
stored runs or prints help never imports torch."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from bench.errors import BenchError, unknown

if TYPE_CHECKING:
    import torch

_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)

DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8")  # torch's names
DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
                 "fp64": "float64", "double": "float64", "float": "float32", "int": "int32"}

# Largest integer n such that every integer in [0, n] is exact in the dtype (EXACT_INT_LIMIT: by torch dtype).
EXACT_INT_LIMIT_BY_NAME = {
    "float32": 2**24, "float16": 2**11, "bfloat16": 2**8, "float64": 2**53,
    "int64": 2**62, "int32": 2**31 - 1, "int8": 127, "uint8": 255,
}

REDUCE_OPS = ("sum", "avg", "max", "min", "product")


def parse_size(text) -> int:
    """'4K' -> 4096. Bytes; suffixes K, M, G are powers of 1024 (an optional B/iB is allowed)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise BenchError(f"bad size {text}: must be >= 0")
        return _not_absurd(text, text)
    m = _SIZE_RE.match(str(text))
    if not m or len(m.group(1)) > 30:  # int() refuses over 4300 digits; anything this long is absurd anyway
        raise BenchError(
            f"bad size '{str(text)[:40]}': expected an integer with an optional suffix K, M or G "
            "(powers of 1024), e.g. 512, 4K, 1M, 8G"
        )
    return _not_absurd(int(m.group(1)) * _SUFFIX[m.group(2).upper()], text)


MAX_SIZE_BYTES = 2**50  # 1 PiB: no buffer is larger; beyond it element counts overflow downstream


def _not_absurd(n: int, text) -> int:
    if n > MAX_SIZE_BYTES:
        raise BenchError(f"bad size '{text}': {n} bytes is absurd; at most {MAX_SIZE_BYTES} (1048576G)")
    return n


def parse_size_list(text) -> list[int]:
    items = text if isinstance(text, (list, tuple)) else str(text).split(",")
    sizes = [parse_size(s) for s in items if str(s).strip() != ""]
    if not sizes:
        raise BenchError(f"bad size list '{text}': give at least one size, e.g. 4K,1M")
    return sizes


def size_sweep(min_bytes: int, max_bytes: int, step_factor: float) -> list[int]:
    """Geometric sweep min, min*f, ... <= max (nccl-tests -b/-e/-f)."""
    if min_bytes > max_bytes:
        raise BenchError(f"min bytes {min_bytes} > max bytes {max_bytes}: min must be <= max")
    if not step_factor > 1:
        raise BenchError(f"step factor {step_factor} must be > 1")
    if min_bytes <= 0:
        raise BenchError(f"min bytes {min_bytes} must be > 0")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(int(s))
        if len(sizes) > MAX_SWEEP_SIZES:
            raise BenchError(f"sweep {min_bytes}..{max_bytes} by step factor {step_factor} has over "
                             f"{MAX_SWEEP_SIZES} sizes; use a larger step factor or explicit --sizes")
        f = s * step_factor
        if f >= max_bytes + 1:  # also a huge factor, whose product would not convert to int
            break
        nxt = int(f)
        s = nxt if nxt > s else s + 1
    return sizes


MAX_SWEEP_SIZES = 4096


def sweep_sizes(sizes, min_bytes, max_bytes, step_factor: float) -> list[int]:
    """Explicit `sizes` when given, else the geometric sweep min..max by step_factor."""
    if sizes:
        return parse_size_list(list(sizes))
    return size_sweep(parse_size(min_bytes), parse_size(max_bytes), step_factor)


def format_size(n: int) -> str:
    for unit, f in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= f and n % f == 0:
            return f"{n // f}{unit}"
    return str(n)


@functools.cache
def _torch_tables() -> dict:
    import torch  # lazy: see the module docstring

    return {"DTYPES": {n: getattr(torch, n) for n in DTYPE_NAMES},
            "EXACT_INT_LIMIT": {getattr(torch, n): v for n, v in EXACT_INT_LIMIT_BY_NAME.items()}}


def __getattr__(name: str):
    """DTYPES ({name: torch.dtype}) and EXACT_INT_LIMIT ({torch.dtype: n}), made on first use (PEP 562)."""
    if name in ("DTYPES", "EXACT_INT_LIMIT"):
        return _torch_tables()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parse_dtype(name: str) -> torch.dtype:
    key = DTYPE_ALIASES.get(str(name).lower(), str(name).lower())
    if key not in DTYPE_NAMES:
        raise unknown("dtype", name, DTYPE_NAMES)
    return _torch_tables()["DTYPES"][key]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def parse_op(name: str) -> str:
    key = {"prod": "product", "mean": "avg"}.get(str(name).lower(), str(name).lower())
    if key not in REDUCE_OPS:
        raise unknown("reduce op", name, REDUCE_OPS)
    return key


def torch_op(name: str):
    import torch.distributed as dist  # lazy: see the module docstring

    return {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
            "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}[name]
