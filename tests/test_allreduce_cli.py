"""`distbench allreduce`: bad input is one line with exit code 2 and nothing written; a tiny
run writes measured rows, the model tables and labelled predictions."""

import pytest

from bench.cli import main
from bench.results.store import load_run
from conftest import assert_usage_error, run_cli

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
    assert set(res["algorithm"]) == {"ring", "tree", "star", "halving_doubling", "native"}
    assert set(res["kind"]) == {"algorithm"} and set(res["world"]) == {1, 3}
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


def test_each_nccl_setting_gets_a_fresh_launch_recorded_in_its_rows(tmp_path, monkeypatch):
    """The NCCL variant plumbing, exercised on gloo (which ignores NCCL_ALGO): the setting reaches
    the fresh ranks, labels native's rows, is recorded in them, and is gone afterwards."""
    import json
    import os

    from bench.allreduce.cli import launch_all
    from bench.allreduce.config import AllreduceConfig

    monkeypatch.delenv("NCCL_ALGO", raising=False)
    cfg = AllreduceConfig(world=(2,), sizes=("4K", "8K"), algorithms=("tree", "native"), warmup=1, iters=2,
                          budget_s=0.001, telemetry=False, out=str(tmp_path / "res"), predict_worlds=(2,),
                          predict_sizes=("4K",))
    assert launch_all(cfg, "gloo", [(2, {}), (2, {"NCCL_ALGO": "Tree"})], {}) == 0
    assert "NCCL_ALGO" not in os.environ
    run = load_run(next((tmp_path / "res" / "allreduce").iterdir()))
    res = run["results"]
    variant = res[res["variant"] == "NCCL_ALGO=Tree"]
    assert set(variant["algorithm"]) == {"native"}  # a variant launch runs native only
    assert all(json.loads(e)["NCCL_ALGO"] == "Tree" for e in variant["nccl_env"])
    base = res[res["variant"] == ""]
    assert set(base["algorithm"]) == {"tree", "native"}
    assert all("NCCL_ALGO" not in json.loads(e) for e in base["nccl_env"])
    assert set(run.meta["launches"]) == {"2", "2:NCCL_ALGO=Tree"}
    assert "native[NCCL_ALGO=Tree]" in set(run["model"]["label"])
