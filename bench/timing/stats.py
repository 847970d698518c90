"""Statistics of raw timing samples (seconds). Keep the samples; derive these from them.

Percentiles use numpy's default linear interpolation. `noisy` follows torch.utils.benchmark's
warning rule: IQR / median > 0.1. Bandwidths are computed from a time statistic
(bytes / median seconds), never by averaging per-iteration rates.
"""

from dataclasses import asdict, dataclass

import numpy as np

NOISY_IQR_OVER_MEDIAN = 0.1
GB = 1e9  # nccl-tests' GB/s is 1e9 bytes per second


@dataclass(frozen=True, kw_only=True)
class TimeStats:
    n: int
    median_s: float
    p5_s: float
    p25_s: float
    p75_s: float
    p95_s: float
    min_s: float
    max_s: float
    mean_s: float
    stdev_s: float  # sample standard deviation (ddof=1); 0 for a single sample
    cv: float  # stdev / mean
    iqr_s: float
    noisy: bool

    def columns(self, prefix: str = "time_") -> dict:
        d = asdict(self)
        d.pop("n")
        return {f"{prefix}{k}" if k != "noisy" else k: v for k, v in d.items()}


def summarize(samples) -> TimeStats:
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples")
    p5, p25, p50, p75, p95 = np.percentile(x, [5, 25, 50, 75, 95])
    mean = float(x.mean())
    stdev = float(x.std(ddof=1)) if x.size > 1 else 0.0
    iqr = float(p75 - p25)
    return TimeStats(
        n=int(x.size), median_s=float(p50), p5_s=float(p5), p25_s=float(p25), p75_s=float(p75),
        p95_s=float(p95), min_s=float(x.min()), max_s=float(x.max()), mean_s=mean, stdev_s=stdev,
        cv=stdev / mean if mean > 0 else float("nan"), iqr_s=iqr,
        noisy=bool(p50 > 0 and iqr / p50 > NOISY_IQR_OVER_MEDIAN),
    )


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """nccl-tests algbw: S / t, in GB/s (1e9 B/s). S is the total array size in bytes."""
    if seconds <= 0 or size_bytes <= 0:
        return float("nan")
    return size_bytes / seconds / GB


def busbw_gbps(size_bytes: int, seconds: float, bus_factor: float) -> float:
    """nccl-tests busbw: algbw * factor (2(n-1)/n all_reduce; (n-1)/n all_gather, reduce_scatter,
    all_to_all, scatter, gather; 1 broadcast, reduce, sendrecv) -- doc/PERFORMANCE.md."""
    return algbw_gbps(size_bytes, seconds) * bus_factor


# How one figure is made from every rank's time of the same iteration (column `rank_reduce`):
# nccl-tests' `-a` (src/common.cu:119-120 `average = 1` by default; 321-326 and 1390:
# 0 = rank 0, 1 = average, 2 = min, 3 = max, at a0b82b2). max: when the op had finished on every
# rank (this suite's default for latency and throughput); avg: nccl-tests' default (the
# nccl-tests mode's default).
RANK_REDUCTIONS = ("max", "avg", "min", "rank0")


def rank_reduce_for(asked: str, mode: str) -> str:
    """The reduction a row uses: `asked`, or with "auto" avg for the nccl-tests mode, else max."""
    if asked == "auto":
        return "avg" if mode == "nccl-tests" else "max"
    return asked


MODE_TEXT = {
    "latency": "latency mode (one op per sample; CUDA: device time without the host's dispatch)",
    "throughput": "throughput mode (ops back to back under one timer, / ops)",
    "nccl-tests": "nccl-tests mode (ops back to back in one stream, one sync, host time / ops)",
}
REDUCE_TEXT = {"max": "max over ranks", "avg": "average over ranks", "min": "min over ranks", "rank0": "rank 0's"}


def figure_text(mode: str, rank_reduce: str) -> str:
    """What a time figure is, in words: 'median over samples of latency mode (...), max over ranks'."""
    return f"median over samples of {MODE_TEXT.get(mode, mode)}, {REDUCE_TEXT.get(rank_reduce, rank_reduce)}"


def reduce_ranks(per_rank: np.ndarray, how: str = "max") -> np.ndarray:
    """[ranks, iters] -> one time per iteration, reduced over ranks as RANK_REDUCTIONS says."""
    x = np.asarray(per_rank, dtype=np.float64)
    if how == "max":
        return x.max(axis=0)
    if how == "avg":
        return x.mean(axis=0)
    if how == "min":
        return x.min(axis=0)
    if how == "rank0":
        return x[0]
    raise ValueError(f"unknown rank reduction {how!r}")


def completion_times(per_rank: np.ndarray) -> np.ndarray:
    """[ranks, iters] -> per-iteration max over ranks: when the collective finished everywhere."""
    return np.asarray(per_rank, dtype=np.float64).max(axis=0)
