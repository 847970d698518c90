"""The one formatting vocabulary for humans: bytes, rates, percentages, labels. Seconds and
bytes internally; scaled only here, for display."""

import math

_TYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double",
         "int32": "int32", "int64": "int64", "int8": "int8", "uint8": "uint8"}


def missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def num(x, fmt: str) -> str:
    """format(x, fmt), or '-' for a missing value."""
    return "-" if missing(x) else format(x, fmt)


def nbytes(n) -> str:
    """1536 -> '1.5K', 1048576 -> '1M' (powers of 1024, 3 significant digits); '-' if missing."""
    if missing(n) or (isinstance(n, float) and not math.isfinite(n)):
        return "-"
    for unit, f in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= f:
            return f"{n / f:.3g}{unit}"
    return f"{n:.3g}"


def mib(n) -> str:
    return "-" if missing(n) else f"{n / 2**20:.0f}"


def pct(x) -> str:
    return "-" if missing(x) else f"{100 * x:.0f}%"


def nccl_type(dtype: str) -> str:
    """nccl-tests' name of a dtype ('float32' -> 'float')."""
    return _TYPE.get(dtype, dtype)


def variant_label(algorithm: str, variant: str | None) -> str:
    """What tables and the model call an allreduce: 'ring', 'native[NCCL_ALGO=Tree]'."""
    return f"{algorithm}[{variant}]" if variant else algorithm


def row_label(r: dict) -> str:
    return variant_label(r["algorithm"], r.get("variant") or "")
