"""The collectives kind's acceptance without history: `--min-busbw`, as nccl-tests'
NCCL_TESTS_MIN_BW (a run whose average busbw over its large sizes is below the threshold exits 1)."""

from dataclasses import dataclass

import pandas as pd

from bench.errors import BenchError


@dataclass(frozen=True)
class MinBusbwFailure:
    collective: str
    world: int
    avg_busbw_gbps: float
    min_busbw_gbps: float
    sizes: int

    def __str__(self):
        return (f"{self.collective} at world {self.world}: average busbw {self.avg_busbw_gbps:.3f} GB/s over "
                f"{self.sizes} large size(s) is below --min-busbw {self.min_busbw_gbps:g} GB/s")


def parse_min_busbw(text: str) -> float | dict:
    """'50' (every collective) or 'all_reduce=40,all_gather=30[,*=10]' -> float or dict (GB/s)."""
    text = str(text).strip()
    try:
        if "=" not in text:
            v = float(text)
            if not v > 0:
                raise ValueError
            return v
        out = {}
        for part in text.split(","):
            name, _, val = part.partition("=")
            v = float(val)
            if not name.strip() or not v > 0:
                raise ValueError
            out[name.strip()] = v
        return out
    except ValueError:
        raise BenchError(f"--min-busbw '{text}': expected GB/s > 0, e.g. 50 or all_reduce=40,all_gather=30") from None


def min_busbw_failures(results: pd.DataFrame, threshold_gbps: float | dict, large_sizes=None) -> list[MinBusbwFailure]:
    """Collectives whose average busbw over the large sizes is below the threshold.

    Average = arithmetic mean of `busbw_gbps` over every row of the collective (and world) at the
    large sizes, as nccl-tests averages its "Avg bus bandwidth". Large sizes: `large_sizes` (a
    collection of byte counts), by default the sizes >= 1/16 of the collective's largest (the top 5
    of a x2 sweep). threshold: one GB/s figure for all, or {collective: GB/s} with an optional
    '*' default; collectives with no threshold are not checked. Rows with size 0 (barrier) and
    null busbw are ignored.
    """
    df = results.copy()
    df["busbw_gbps"] = pd.to_numeric(df["busbw_gbps"], errors="coerce")
    df["size_bytes"] = pd.to_numeric(df["size_bytes"], errors="coerce")
    df = df[df["busbw_gbps"].notna() & (df["size_bytes"] > 0)]
    out = []
    for (coll, world), g in df.groupby(["collective", "world"], sort=True):
        limit = threshold_gbps.get(coll, threshold_gbps.get("*")) if isinstance(threshold_gbps, dict) else threshold_gbps
        if limit is None:
            continue
        if large_sizes is not None:
            big = g[g["size_bytes"].isin(set(int(s) for s in large_sizes))]
        else:
            big = g[g["size_bytes"] >= g["size_bytes"].max() / 16]
        if big.empty:
            continue
        avg = float(big["busbw_gbps"].mean())
        if avg < float(limit):
            out.append(MinBusbwFailure(str(coll), int(world), avg, float(limit), int(big["size_bytes"].nunique())))
    return out
