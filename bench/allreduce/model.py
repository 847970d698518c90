"""The allreduce kind's reading of Hockney's alpha-beta model: crossover and n_half (pure functions).

    t(n, S) = a(n) * alpha + b(n) * S * beta        (seconds; S in bytes)

with (a, b) = Algorithm.cost(n), the step and byte coefficients of Thakur, Rabenseifner & Gropp
(2005). The model's fit and prediction are shared with the other kinds (bench/timing/alphabeta.py:
alpha seconds per step, beta seconds per byte, shown as alpha in us and 1/beta in GB/s); what is
the allreduce kind's own is here: where ring starts beating tree, and the size reaching half the
peak bus bandwidth.
"""

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bench.timing.alphabeta import Cost


@dataclass(frozen=True, kw_only=True)
class Crossover:
    """Where ring starts beating tree. kind:
    'crossover'   tree faster below size_bytes, ring faster above (the textbook shape);
    'ring_always' / 'tree_always'   one of them is faster at every size;
    'inverted'    ring faster below size_bytes, tree faster above;
    'mixed'       measured only: they trade places more than once; size_bytes is the first size
                  from which ring is faster, `changes` how many times the faster one changes."""

    kind: str
    size_bytes: float | None = None
    changes: int = 0


def measured_crossover(sizes: Sequence[float], t_tree: Sequence[float], t_ring: Sequence[float]) -> Crossover:
    """Classify measured times (sizes increasing) by where the faster of tree and ring changes;
    each change is placed by geometric interpolation between the two measured sizes around it
    (log time ratio linear in log size). Ties count as ring."""
    s = np.asarray(sizes, dtype=np.float64)
    d = np.log(np.asarray(t_ring, dtype=np.float64) / np.asarray(t_tree, dtype=np.float64))  # <= 0: ring faster
    ring = d <= 0
    flips = [k for k in range(1, len(d)) if ring[k] != ring[k - 1]]
    if not flips:
        return Crossover(kind="ring_always" if ring[0] else "tree_always")
    if len(flips) == 1:
        kind = "crossover" if ring[-1] else "inverted"
        return Crossover(kind=kind, size_bytes=_interp(s, d, flips[0]), changes=1)
    first = next(k for k in flips if ring[k])
    return Crossover(kind="mixed", size_bytes=_interp(s, d, first), changes=len(flips))


def _interp(s: np.ndarray, d: np.ndarray, k: int) -> float:
    """Zero of d between s[k-1] and s[k], linear in log s."""
    f = d[k - 1] / (d[k - 1] - d[k])
    return float(math.exp(math.log(s[k - 1]) + f * (math.log(s[k]) - math.log(s[k - 1]))))


def model_crossover(tree_cost: Cost, ring_cost: Cost, world: int, tree: tuple[float, float],
                    ring: tuple[float, float]) -> Crossover:
    """Solve t_tree(S) = t_ring(S) for S with (alpha, beta) per algorithm."""
    at, bt = tree_cost(world)
    ar, br = ring_cost(world)
    lat = at * tree[0] - ar * ring[0]  # t_tree - t_ring at S = 0
    slope = bt * tree[1] - br * ring[1]  # d(t_tree - t_ring)/dS
    # equal within rounding (two fits of the same data) is equal
    lat = 0.0 if abs(lat) <= 1e-9 * (at * tree[0] + ar * ring[0]) else lat
    slope = 0.0 if abs(slope) <= 1e-9 * (bt * tree[1] + br * ring[1]) else slope
    if slope > 0:
        return Crossover(kind="ring_always") if lat >= 0 else Crossover(kind="crossover", size_bytes=-lat / slope)
    if slope < 0:
        return Crossover(kind="tree_always") if lat <= 0 else Crossover(kind="inverted", size_bytes=lat / -slope)
    return Crossover(kind="ring_always" if lat >= 0 else "tree_always")  # ties count as ring


def n_half(sizes: Sequence[float], busbw_gbps: Sequence[float]) -> tuple[float, bool]:
    """(size reaching half the peak busbw, at_or_below_smallest). Interpolated linearly in log
    size between the last size below half the peak and the first at or above it."""
    s = np.asarray(sizes, dtype=np.float64)
    bw = np.asarray(busbw_gbps, dtype=np.float64)
    half = np.nanmax(bw) / 2
    k = int(np.nonzero(bw >= half)[0][0])
    if k == 0:
        return float(s[0]), True
    f = (half - bw[k - 1]) / (bw[k] - bw[k - 1])
    return float(math.exp(math.log(s[k - 1]) + f * (math.log(s[k]) - math.log(s[k - 1])))), False
