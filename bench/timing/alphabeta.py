"""Hockney's alpha-beta cost model, shared by every kind that fits one (pure functions).

    t(n, S) = a(n) * alpha + b(n) * S * beta        (seconds; S in bytes)

One convention everywhere: alpha is seconds per step (per message), beta seconds per byte; the
bandwidth 1 / beta is shown in GB/s (1e9 B/s, as nccl-tests). (a, b) are the step and byte
coefficients of the algorithm that moves the bytes: Thakur, Rabenseifner & Gropp (2005) for the
allreduce algorithms (bench/allreduce/algorithms.py), (1, 1) for one point-to-point message
(one_message: the pipeline planner's link between stages).

The fit is non-negative least squares on *relative* residuals (each point weighted by 1/t):
times span four decades across a sweep, and an unweighted fit would ignore every size but the
largest (a small message's latency counts as much as a large one's bandwidth).
"""

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from bench.timing.stats import GB

Cost = Callable[[int], tuple[float, float]]  # world -> (a, b): steps, and bytes moved per byte of S


def one_message(world: int) -> tuple[float, float]:
    """The cost of one message of S bytes between two ranks: one step, S bytes (t = alpha + S * beta)."""
    return 1.0, 1.0


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
