"""The Hockney alpha-beta cost model: fit, prediction, crossover and n_half (pure functions).

    t(n, S) = a(n) * alpha + b(n) * S * beta        (seconds; S in bytes)

with (a, b) = Algorithm.cost(n), the step and byte coefficients of Thakur, Rabenseifner & Gropp
(2005). alpha is seconds per step, beta seconds per byte; shown as alpha in us and 1/beta in GB/s
(1e9 B/s, as nccl-tests). The fit is non-negative least squares on *relative* residuals (each
point weighted by 1/t): times span four decades across a sweep, and an unweighted fit would
ignore every size but the largest.
"""

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from bench.timing.stats import GB

Cost = Callable[[int], tuple[float, float]]  # world -> (a, b)


@dataclass(frozen=True, kw_only=True)
class Fit:
    alpha_s: float  # seconds per step
    beta_s_per_byte: float  # seconds per byte
    points: int
    rel_residuals: tuple[float, ...]  # (fitted - measured) / measured, in input order

    @property
    def alpha_us(self) -> float:
        return self.alpha_s * 1e6

    @property
    def bandwidth_gbps(self) -> float:
        """1 / beta in GB/s; inf when the fit found no per-byte cost."""
        return 1 / self.beta_s_per_byte / GB if self.beta_s_per_byte > 0 else math.inf

    @property
    def rms_rel_residual(self) -> float:
        return float(np.sqrt(np.mean(np.square(self.rel_residuals))))

    @property
    def max_abs_rel_residual(self) -> float:
        return float(np.max(np.abs(self.rel_residuals)))


def predict(cost: Cost, world: int, size_bytes: float, alpha_s: float, beta_s_per_byte: float,
            messages: float | None = None) -> float:
    """Model time; `messages` (the real message count of the call, e.g. a chunked ring's
    2(n-1) * ceil(S / (n * chunk))) replaces the step coefficient a(n) when given."""
    a, b = cost(world)
    if messages is not None:
        a = messages
    return a * alpha_s + b * size_bytes * beta_s_per_byte


def fit(cost: Cost, worlds: Sequence[int], sizes: Sequence[float], times_s: Sequence[float],
        messages: Sequence[float] | None = None) -> Fit | None:
    """Fit alpha and beta to measured (world, size, time) points. None when the points cannot
    determine both (fewer than two usable points, or no step/byte term, e.g. world 1 only).

    messages: per point, the messages the call really sent (Algorithm.messages; the `messages`
    column of the results), used as the alpha coefficient instead of cost(n)'s a(n). Without it
    a chunked ring's per-chunk latency would be charged to beta."""
    rows, t = [], []
    msgs = list(messages) if messages is not None else [None] * len(times_s)
    if len(msgs) != len(times_s):
        raise ValueError(f"messages has {len(msgs)} entries for {len(times_s)} points")
    for n, s, y, m in zip(worlds, sizes, times_s, msgs):
        a, b = cost(n)
        if m is not None and not (isinstance(m, float) and math.isnan(m)):
            a = float(m)
        if y > 0 and (a > 0 or b > 0):
            rows.append((a, b * s))
            t.append(y)
    if len(rows) < 2:
        return None
    design = np.asarray(rows, dtype=np.float64) / np.asarray(t)[:, None]  # relative residuals
    scale = design.max(axis=0)
    if not np.all(scale > 0):
        return None
    from scipy.optimize import nnls  # lazy: scipy only when a model is fitted, not at every command's start

    coef, _ = nnls(design / scale, np.ones(len(t)))
    alpha, beta = (coef / scale).tolist()
    model = np.asarray(rows) @ np.array([alpha, beta])
    rel = (model - np.asarray(t)) / np.asarray(t)
    return Fit(alpha_s=alpha, beta_s_per_byte=beta, points=len(t), rel_residuals=tuple(float(r) for r in rel))


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
