"""bench.allreduce: every algorithm equals the closed form and the native all_reduce exactly (world
1..5, awkward counts), message counts (the chunked ring), the alpha-beta cost model (fit, crossover,
n_half, coefficients, the analysis tables), bad input at the CLI, and tiny runs end to end (model
tables, labelled predictions, a fresh launch per NCCL setting). Parametrized over the registry:
a new algorithm module is tested without editing this file."""

import json
import math
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist

import bench.allreduce.ring as ring_mod
from bench.allreduce import REGISTRY, Plan
from bench.allreduce.analysis import analyse
from bench.allreduce.config import AllreduceConfig
from bench.allreduce.cases import plan
from bench.allreduce.kind import KIND
from bench.allreduce.model import measured_crossover, model_crossover, n_half
from bench.allreduce.ring import default_chunk_bytes
from bench.cli import main
from bench.sweep.values import Ctx, arange, reduce_expected, reduce_values
from bench.harness.run import run as run_plan
from bench.results.store import load_run
from bench.timing.alphabeta import fit, predict
from conftest import ROOT, assert_usage_error, run_cli, spawn


# ---- exact results on every rank --------------------------------------------------------------------
ODD_LARGE = 100_003  # prime: no even split over any world, several ring chunks


def _counts(world):
    return sorted({1, 7, world - 1, ODD_LARGE})


def _chunks(count):
    """Ring chunk sizes in elements: one chunk per segment, and several (tiny ones on small counts:
    each chunk is one message, so a 3-element chunk of a large array would only cost time)."""
    return (0, 3) if count < 1000 else (0, 4096)


def _cases(count):
    for alg in REGISTRY:
        for chunk in (_chunks(count) if alg.name == "ring" else (0,)):
            yield alg, chunk


def _check_rank(info) -> list[str]:
    """Runs on every rank; returns what went wrong here (empty when all is exact)."""
    bad = []
    n, r = info.world, info.rank
    for count in _counts(n):
        idx = arange(0, count, info.device)
        for dtype in (torch.float32, torch.int32):
            for op in ("sum", "max", "min", "product"):
                c = Ctx(rank=r, world=n, count=count, dtype=dtype, device=info.device, op=op)
                native = reduce_values(r, idx, c)
                dist.all_reduce(native, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                                            "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}[op])
                want = reduce_expected(idx, c)
                for alg, chunk in _cases(count):
                    x = reduce_values(r, idx, c)
                    alg.allreduce(x, Plan(rank=r, world=n, op=op, chunk_numel=chunk))
                    tag = f"{alg.name} chunk={chunk} count={count} {dtype} {op} rank={r}"
                    if not torch.equal(x, want):
                        bad.append(f"{tag}: {(x != want).sum().item()} element(s) differ from closed form")
                    if not torch.equal(x, native):
                        bad.append(f"{tag}: differs from native all_reduce")
        g = torch.Generator().manual_seed(1234 + r)
        data = torch.randn(count, generator=g, dtype=torch.float32)
        native = data.clone()
        dist.all_reduce(native)
        for alg, chunk in _cases(count):
            x = data.clone()
            alg.allreduce(x, Plan(rank=r, world=n, op="sum", chunk_numel=chunk))
            if not torch.allclose(x, native, rtol=1e-5, atol=1e-5):
                bad.append(f"{alg.name} chunk={chunk} count={count} random float32 rank={r}: not allclose")
    return bad


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_every_algorithm_is_exact(world):
    results = spawn(_check_rank, world, timeout_s=300.0)
    assert sorted(results) == list(range(world))
    bad = [m for r in sorted(results) for m in results[r]]
    assert not bad, "\n".join(bad[:20])

# ---- message counts ---------------------------------------------------------------------------------
def sent_by_ring(world: int, count: int, chunk_numel: int, monkeypatch) -> list[int]:
    """Non-empty sends per rank, counted by running the ring's schedule with a fake exchange."""
    counts = []
    for r in range(world):
        n = [0]

        def fake_exchange(sends=(), recvs=(), group=None):
            n[0] += sum(1 for t, _ in sends if t.numel())
            return []

        monkeypatch.setattr(ring_mod, "exchange", fake_exchange)
        REGISTRY.get("ring").allreduce(torch.zeros(count), Plan(rank=r, world=world, chunk_numel=chunk_numel))
        counts.append(n[0])
    return counts


@pytest.mark.parametrize("world,count,chunk", [(2, 1 << 20, 1 << 16), (3, 1000, 64), (4, 4096, 0), (5, 7, 1),
                                               (4, 4096, 10_000), (4, 37, 6), (6, 61, 4), (3, 29, 6)])
def test_ring_messages_match_what_it_sends(world, count, chunk, monkeypatch):
    want = REGISTRY.get("ring").messages(world, count, chunk)
    assert max(sent_by_ring(world, count, chunk, monkeypatch)) == want
    if chunk == 0 or chunk >= count:
        assert want == 2 * (world - 1)  # one chunk per segment: the textbook a(n)


def test_messages_of_every_algorithm():
    n, count = 8, 1 << 20
    assert REGISTRY.get("ring").messages(n, count, count // 64) == 2 * 7 * 8
    assert REGISTRY.get("ring").messages(n, count, 0) == 14
    assert REGISTRY.get("tree").messages(n, count) == 6
    assert REGISTRY.get("star").messages(n, count) == 14
    assert REGISTRY.get("halving_doubling").messages(6, count) == 6  # 2 log2 4 + fold 2
    assert REGISTRY.get("native").messages(n, count, 123) == 14
    for a in REGISTRY:
        assert a.messages(1, count) == 0 and a.messages(n, 0) == 0


def test_fit_with_real_message_counts_recovers_alpha_and_beta():
    ring = REGISTRY.get("ring")
    alpha, beta = 20e-6, 1 / 5e9
    worlds, sizes, msgs, times = [], [], [], []
    for n in (2, 4):
        for s in (4096, 65536, 1 << 20, 16 << 20, 64 << 20):
            m = ring.messages(n, s // 4, (1 << 20) // 4)  # float32, 1 MiB chunks
            worlds.append(n), sizes.append(s), msgs.append(m)
            times.append(predict(ring.cost, n, s, alpha, beta, messages=m))
    f = fit(ring.cost, worlds, sizes, times, messages=msgs)
    assert f.alpha_s == pytest.approx(alpha, rel=1e-6) and f.beta_s_per_byte == pytest.approx(beta, rel=1e-6)
    assert f.max_abs_rel_residual < 1e-9
    old = fit(ring.cost, worlds, sizes, times)  # a = 2(n-1): the chunks' latency leaks into the fit
    assert old.max_abs_rel_residual > 0.05
    assert abs(old.alpha_s - alpha) / alpha > 0.05 or abs(old.beta_s_per_byte - beta) / beta > 0.05


def test_fit_without_messages_is_unchanged():
    ring = REGISTRY.get("ring")
    t = [predict(ring.cost, 2, s, 1e-5, 1e-9) for s in (1e3, 1e6)]
    f = fit(ring.cost, [2, 2], [1e3, 1e6], t)
    assert f.alpha_s == pytest.approx(1e-5) and f.beta_s_per_byte == pytest.approx(1e-9)


def test_nccl_defaults_to_one_chunk_per_segment():
    assert default_chunk_bytes("nccl") == 0
    assert default_chunk_bytes("gloo") == 1 << 20
    assert default_chunk_bytes("nccl", asked=256 << 10) == 256 << 10

# ---- the cost model ---------------------------------------------------------------------------------
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


def _hd(n):
    p2 = 2 ** int(math.log2(n))
    extra = 0 if p2 == n else 2  # fold and unfold of the ranks beyond the power of two
    return 2 * math.log2(p2) + extra, 2 * (p2 - 1) / p2 + extra


# (a(n), b(n)) of t = a alpha + b S beta: Thakur, Rabenseifner & Gropp 2005; native uses ring's.
COSTS = {
    "ring": lambda n: (2 * (n - 1), 2 * (n - 1) / n),
    "tree": lambda n: (2 * math.ceil(math.log2(n)), 2 * math.ceil(math.log2(n))),
    "star": lambda n: (2 * (n - 1), 2 * (n - 1)),
    "halving_doubling": _hd,
    "native": lambda n: (2 * (n - 1), 2 * (n - 1) / n),
}


@pytest.mark.parametrize("name", REGISTRY.names())
def test_coefficients_are_the_papers(name):
    """At powers of two and not; a new algorithm must state its coefficients in COSTS."""
    assert name in COSTS, f"add {name}'s (a(n), b(n)) to COSTS"
    for n in (2, 3, 4, 5, 8, 12, 1024):
        assert REGISTRY.get(name).cost(n) == pytest.approx(COSTS[name](n)), n


def test_halving_doubling_coefficients_by_hand():
    hd = REGISTRY.get("halving_doubling").cost
    assert hd(8) == (6, 1.75)  # 2 log2 8 steps, 2*7/8 bytes
    assert hd(6) == (6, 2 * 3 / 4 + 2)  # p' = 4, plus the fold and unfold


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

# ---- the kind: bad input, tiny runs end to end ------------------------------------------------------
CASES = [
    (["-a", "rign"], "unknown allreduce algorithm 'rign' (did you mean 'ring'?)"),
    (["-a", "ring,tre"], "unknown allreduce algorithm 'tre' (did you mean 'tree'?)"),
    (["--chunk-bytes", "0"], "chunk size '0' must be > 0 bytes"),
    (["--chunk-bytes=-1M"], "chunk size '-1M' must be > 0 bytes"),
    (["--chunk-bytes", "big"], "bad size 'big'"),
    (["--nccl-algo", "Rng"], "unknown NCCL_ALGO value 'Rng' (did you mean 'Ring'?)"),
    (["--nccl-proto", "ll129"], "unknown NCCL_PROTO value 'll129' (did you mean 'LL128'?)"),
    (["--nccl-algo", "Tree"], "apply to the nccl backend only, and this run uses gloo"),
    (["--nccl-proto", "Simple", "--backend", "gloo"], "apply to the nccl backend only, and this run uses gloo"),
    (["--op", "avg"], "unknown allreduce op 'avg'"),
    (["--nproc", "0"], "world size 0 must be >= 1"),
    (["--mode", "latncy"], "unknown timing mode 'latncy' (did you mean 'latency'?)"),
    (["--predict-worlds", "0"], "world size 0 must be >= 1"),
]


@pytest.mark.parametrize("argv,message", CASES, ids=[c[1][:30] for c in CASES])
def test_bad_input_is_one_line_exit_2(argv, message, tmp_path, capsys):
    out = tmp_path / "results"
    rc = main(["allreduce", "--out", str(out), "--sizes", "4K", *argv])
    assert_usage_error(rc, capsys.readouterr().err, message, out)


def test_bad_input_through_the_real_entry_point_has_no_traceback(tmp_path):
    p = run_cli("allreduce", "--out", str(tmp_path / "r"), "--nccl-algo", "NVLS", timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "Traceback" not in p.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_tiny_run_writes_rows_model_and_labelled_predictions(tmp_path):
    suite = tmp_path / "tiny.toml"
    suite.write_text('kind = "allreduce"\nname = "tiny"\nworld = [1, 3]\nsizes = ["4K", "64K", "1M"]\n'
                     'warmup = 1\niters = 2\nbudget_s = 0.001\nchunk_bytes = "16K"\n'
                     'predict_worlds = [2, 1024]\npredict_sizes = ["1M"]\ntelemetry = false\n')
    p = run_cli("allreduce", "--suite", str(suite), "--out", str(tmp_path / "res"), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "MODEL PREDICTIONS" in p.stdout and "NOT measurements" in p.stdout
    assert "for EVERY algorithm" in p.stdout  # the busbw note under the table
    run_dir = next((tmp_path / "res" / "tiny").iterdir())
    run = load_run(run_dir)
    res = run["results"]
    assert set(res["algorithm"]) == set(REGISTRY.names())
    assert set(res["kind"]) == {KIND.name} and run.meta["kind"] == KIND.name  # one name everywhere
    assert set(res["world"]) == {1, 3}
    assert int(res["wrong"].sum()) == 0 and (res["checks"] >= 1).all()
    assert set(res.loc[res["algorithm"] == "ring", "chunk_bytes"]) == {16384}
    assert (res["bus_factor"] == 2 * (res["world"] - 1) / res["world"]).all()
    assert res["nccl_env"].notna().all()
    for table in ("model", "residuals", "predictions", "crossover"):
        assert table in run.tables and len(run[table]) > 0, table
    preds = run["predictions"]
    assert set(preds["source"]) == {"model"} and set(preds["world"]) == {2, 1024}
    assert set(preds["fit_worlds"]) == {"3"}  # world 1 has no steps to fit
    cross = run["crossover"]
    assert list(cross["world"]) == [3]
    assert set(run.meta["launches"]) == {"1", "3"}
    assert not (run_dir / "parts").exists()


@pytest.mark.slow
def test_each_nccl_setting_gets_a_fresh_launch_recorded_in_its_rows(tmp_path, monkeypatch, capsys):
    """The NCCL variant plumbing, exercised on gloo (which ignores NCCL_ALGO): the plan made for
    nccl has one more native-only launch; run on gloo, the setting reaches the fresh ranks, labels
    native's rows, is recorded in them, and is gone afterwards."""
    for v in ("NCCL_ALGO", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"):
        monkeypatch.delenv(v, raising=False)
    cfg = AllreduceConfig(world=(2,), sizes=("4K", "8K"), algorithms=("tree", "native"), warmup=1, iters=2,
                          budget_s=0.001, telemetry=False, out=str(tmp_path / "res"), predict_worlds=(2,),
                          predict_sizes=("4K",), nccl_algos=("Tree",), nccl_protos=())
    p = plan(cfg, "nccl", (2,))
    assert [(lp.world, lp.env.get("NCCL_ALGO"), lp.key) for lp in p.launches] == [
        (2, None, ""), (2, "Tree", "2:NCCL_ALGO=Tree:probe"), (2, "Tree", "2:NCCL_ALGO=Tree")]
    assert run_plan(KIND, cfg, "gloo", p) == 0
    assert "NCCL_ALGO" not in os.environ
    stored = load_run(next((tmp_path / "res" / "allreduce").iterdir()))
    res = stored["results"]
    variant = res[res["variant"] == "NCCL_ALGO=Tree"]
    assert set(variant["algorithm"]) == {"native"}  # a variant launch runs native only
    assert all(json.loads(e)["NCCL_ALGO"] == "Tree" for e in variant["nccl_env"])
    assert not any("NCCL_DEBUG" in json.loads(e) for e in res["nccl_env"])  # issue 17 item 7: timed without logging
    assert len(variant) == 2  # the probe launch wrote no rows
    base = res[res["variant"] == ""]
    assert set(base["algorithm"]) == {"tree", "native"}
    assert all("NCCL_ALGO" not in json.loads(e) for e in base["nccl_env"])
    assert set(stored.meta["launches"]) == {"2", "2:NCCL_ALGO=Tree:probe", "2:NCCL_ALGO=Tree"}
    assert "native[NCCL_ALGO=Tree]" in set(stored["model"]["label"])


@pytest.mark.parametrize("backend,asked,want", [("nccl", None, 0), ("gloo", None, 1 << 20), ("nccl", "256K", 256 << 10),
                                                ("gloo", "16K", 16 << 10)])
def test_ring_chunk_is_the_backends_default_unless_asked(backend, asked, want, monkeypatch):
    """Issue 17 item 5: the suite's chunk_bytes forced 1 MiB on NCCL; the plan resolves the backend's
    default (bench.allreduce.ring.default_chunk_bytes) and every ring case carries it."""
    from bench.allreduce import cases as ar_kind

    for v in ("TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_STEP_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(v, raising=False)
    cfg = AllreduceConfig(algorithms=("ring", "tree"), nccl_algos=(), nccl_protos=(), sizes=("1M",), world=(2,),
                          **({"chunk_bytes": asked} if asked else {}))
    lp = ar_kind.plan(cfg, backend, (2,)).launches[0]
    cases = [c for u in ar_kind.units(lp.config, 2, {})[0] for c in u.cases]
    assert {c.chunk_bytes for c in cases if c.algorithm == "ring"} == {want}
    assert {c.chunk_bytes for c in cases if c.algorithm == "tree"} == {0}
    assert load_suite_chunk() == "auto"  # the shipped suite no longer pins 1M


def load_suite_chunk():
    import tomllib

    return tomllib.loads((ROOT / "suites" / "allreduce.toml").read_text()).get("chunk_bytes", "auto")
