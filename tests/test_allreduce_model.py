"""The alpha-beta cost model: the fit recovers known alpha and beta from synthetic times, the
crossover and n_half computations, and the coefficients of every algorithm."""

import math

import numpy as np
import pytest

from bench.allreduce import REGISTRY
from bench.allreduce.model import fit, measured_crossover, model_crossover, n_half, predict
from bench.allreduce.summary import analyse

SIZES = [4096 * 2**k for k in range(15)]  # 4 KiB .. 64 MiB, as the default suite


def _synthetic(cost, worlds, alpha, beta, noise=0.003, seed=0):
    rng = np.random.default_rng(seed)
    ws, ss, ts = [], [], []
    for n in worlds:
        for s in SIZES:
            ws.append(n)
            ss.append(s)
            ts.append(predict(cost, n, s, alpha, beta) * (1 + noise * rng.uniform(-1, 1)))
    return ws, ss, ts


@pytest.mark.parametrize("name", REGISTRY.names())
@pytest.mark.parametrize("worlds", [(2,), (4,), (3,), (2, 4), (2, 3, 5, 8)])
def test_fit_recovers_alpha_and_beta_within_1_percent(name, worlds):
    cost = REGISTRY.get(name).cost
    for alpha, bw_gbps in ((50e-6, 2.0), (2e-6, 150.0), (300e-6, 0.5)):
        beta = 1 / (bw_gbps * 1e9)
        f = fit(cost, *_synthetic(cost, worlds, alpha, beta))
        assert f is not None and f.points == len(worlds) * len(SIZES)
        assert f.alpha_us == pytest.approx(alpha * 1e6, rel=0.01)
        assert f.bandwidth_gbps == pytest.approx(bw_gbps, rel=0.01)
        assert f.max_abs_rel_residual < 0.01


def test_fit_without_noise_is_exact_and_needs_two_points():
    cost = REGISTRY.get("ring").cost
    f = fit(cost, *_synthetic(cost, (4,), 10e-6, 1e-9, noise=0))
    assert f.alpha_s == pytest.approx(10e-6, rel=1e-9) and f.beta_s_per_byte == pytest.approx(1e-9, rel=1e-9)
    assert f.rms_rel_residual < 1e-9
    assert fit(cost, [4], [4096], [1e-3]) is None  # one point cannot give two parameters
    assert fit(cost, [1, 1], [4096, 8192], [1e-3, 2e-3]) is None  # world 1: no steps, no bytes


def test_coefficients_are_the_papers():
    """Thakur, Rabenseifner & Gropp 2005 (the issue's table), at powers of two and not."""
    c = {name: REGISTRY.get(name).cost for name in REGISTRY.names()}
    for n in (2, 3, 4, 5, 8, 12, 1024):
        lg = math.ceil(math.log2(n))
        assert c["ring"](n) == pytest.approx((2 * (n - 1), 2 * (n - 1) / n))
        assert c["native"](n) == c["ring"](n)
        assert c["tree"](n) == (2 * lg, 2 * lg)
        assert c["star"](n) == (2 * (n - 1), 2 * (n - 1))
        p2 = 2 ** int(math.log2(n))
        extra = 0 if p2 == n else 2
        assert c["halving_doubling"](n) == pytest.approx((2 * math.log2(p2) + extra, 2 * (p2 - 1) / p2 + extra))
    assert c["halving_doubling"](8) == (6, 1.75)  # 2 log2 8 steps, 2*7/8 bytes
    assert c["halving_doubling"](6) == (6, 2 * 3 / 4 + 2)  # p' = 4, plus the fold and unfold


def test_model_crossover_closed_form():
    ring, tree = REGISTRY.get("ring").cost, REGISTRY.get("tree").cost
    alpha, beta = 50e-6, 1 / 2e9
    # world 4: tree 4 alpha + 4 S beta, ring 6 alpha + 1.5 S beta -> S* = 2 alpha / (2.5 beta)
    x = model_crossover(tree, ring, 4, (alpha, beta), (alpha, beta))
    assert x.kind == "crossover" and x.size_bytes == pytest.approx(2 * alpha / (2.5 * beta))
    t = predict(tree, 4, x.size_bytes, alpha, beta)
    assert predict(ring, 4, x.size_bytes, alpha, beta) == pytest.approx(t)
    # world 2: same step count, ring moves half the bytes: ring is never slower
    assert model_crossover(tree, ring, 2, (alpha, beta), (alpha, beta)).kind == "ring_always"
    # a tree whose per-byte cost is lower than ring's and latency higher: inverted
    x = model_crossover(tree, ring, 4, (1e-3, 1e-12), (1e-6, 1e-9))
    assert x.kind == "inverted" and x.size_bytes > 0
    assert model_crossover(tree, ring, 4, (1e-6, 1e-12), (1e-3, 1e-9)).kind == "tree_always"


def test_measured_crossover_shapes():
    s = [1024, 2048, 4096, 8192]
    tree = [1.0, 1.0, 1.0, 1.0]
    x = measured_crossover(s, tree, [2.0, 2.0, 0.5, 0.5])
    assert x.kind == "crossover" and x.changes == 1
    assert x.size_bytes == pytest.approx(2048 * 2 ** 0.5)  # log ratio +log2 -> -log2: midway in log size
    assert measured_crossover(s, tree, [0.5] * 4).kind == "ring_always"
    assert measured_crossover(s, tree, [1.0] * 4).kind == "ring_always"  # ties count as ring
    assert measured_crossover(s, tree, [2.0] * 4).kind == "tree_always"
    assert measured_crossover(s, tree, [0.5, 0.5, 2.0, 2.0]).kind == "inverted"
    x = measured_crossover(s, tree, [0.5, 2.0, 0.5, 0.5])
    assert x.kind == "mixed" and x.changes == 2 and x.size_bytes == pytest.approx(2048 * 2 ** 0.5)
    # model times sampled on a grid give back the model's crossover (log-linear interpolation is
    # not exact, so within one grid step)
    ring, treec = REGISTRY.get("ring").cost, REGISTRY.get("tree").cost
    tt = [predict(treec, 4, v, 50e-6, 1e-9) for v in SIZES]
    tr = [predict(ring, 4, v, 50e-6, 1e-9) for v in SIZES]
    x = measured_crossover(SIZES, tt, tr)
    exact = model_crossover(treec, ring, 4, (50e-6, 1e-9), (50e-6, 1e-9)).size_bytes
    assert x.kind == "crossover" and exact / 2 < x.size_bytes < exact * 2


def test_n_half():
    sizes = [1, 2, 4, 8]
    assert n_half(sizes, [1.0, 2.0, 4.0, 8.0]) == (pytest.approx(4.0), False)
    assert n_half(sizes, [5.0, 6.0, 8.0, 7.0]) == (1.0, True)
    assert n_half(sizes, [1.0, 3.0, 8.0, 8.0])[0] == pytest.approx(2 * 2 ** 0.2)  # 4 = 3 + (8-3)*0.2


def _rows(world, oversub, alpha=100e-6, beta=1e-9):
    out = []
    for name in ("ring", "tree", "native"):
        cost = REGISTRY.get(name).cost
        for s in SIZES:
            t = predict(cost, world, s, alpha, beta)
            out.append({"run_id": "r", "suite": "s", "algorithm": name, "variant": "", "dtype": "float32",
                        "op": "sum", "mode": "latency", "world": world, "size_bytes": s, "time_median_s": t,
                        "busbw_gbps": s / t / 1e9 * 2 * (world - 1) / world, "oversubscribed": oversub})
    return out


def test_analyse_tables_fit_crossover_and_predictions():
    rows = _rows(2, False) + _rows(4, True, alpha=400e-6)
    t = analyse(rows, predict_worlds=[2, 1024], predict_sizes=[4096, 1 << 20])
    ring = {m["fit_worlds"]: m for m in t["model"] if m["label"] == "ring"}
    assert set(ring) == {"2", "4", "2,4"}
    assert ring["2"]["used_for_predictions"] and not ring["4"]["used_for_predictions"]  # 4 is oversubscribed
    assert ring["2"]["alpha_us"] == pytest.approx(100) and ring["4"]["alpha_us"] == pytest.approx(400)
    assert ring["2"]["bandwidth_gbps"] == pytest.approx(1.0)
    assert ring["4"]["oversubscribed"] and ring["2,4"]["oversubscribed"]
    assert ring["2"]["latency_size_bytes"] == 4096 and ring["2"]["peak_size_bytes"] == SIZES[-1]
    preds = t["predictions"]
    assert {p["source"] for p in preds} == {"model"} and {p["fit_worlds"] for p in preds} == {"2"}
    assert len(preds) == 3 * 2 * 2
    p = next(p for p in preds if p["label"] == "tree" and p["world"] == 1024 and p["size_bytes"] == 4096)
    assert p["predicted_time_s"] == pytest.approx(20 * 100e-6 + 20 * 4096 * 1e-9)
    assert p["measured_time_s"] is None
    cross = {c["world"]: c for c in t["crossover"]}
    assert cross[2]["measured_kind"] == "ring_always" and cross[2]["model_kind"] == "ring_always"
    assert cross[4]["measured_kind"] == "crossover" and cross[4]["oversubscribed"]
    assert cross[4]["model_bytes"] == pytest.approx(2 * 400e-6 / (2.5 * 1e-9))
