"""Every strategy, after one step, gives the loss and every parameter gradient of the
single-process reference within bench.strategies.base.TOLERANCE (CPU, gloo, world 2; dp and
layer are single-process strategies and run at world 1)."""

import pytest
import torch

from bench.strategies.base import ATOL, RTOL

CASES = [  # (strategy, preset, world, extra ctx fields)
    ("ddp", "mlp-tiny", 2, {}),
    ("ddp", "gpt-tiny", 2, {}),
    ("fsdp", "mlp-tiny", 2, {}),
    ("fsdp", "gpt-tiny", 2, {}),
    ("tp", "mlp-tiny", 2, {}),
    ("tp", "gpt-tiny", 2, {}),
    ("pp", "mlp-tiny", 2, {"schedule": "gpipe", "chunks": 2}),
    ("pp", "mlp-tiny", 2, {"schedule": "1f1b", "chunks": 4, "checkpoint": "always"}),
    ("pp", "gpt-tiny", 2, {"schedule": "1f1b", "chunks": 2, "checkpoint": "except_last"}),
    ("pp", "mlp-tiny", 2, {"schedule": "interleaved", "chunks": 2}),
    ("pp", "gpt-tiny", 2, {"schedule": "gpipe", "chunks": 4, "balance": (1, 3)}),
    ("dp", "mlp-tiny", 1, {}),
    ("layer", "gpt-tiny", 1, {"balance": (3, 1)}),
]


def _one_step(info, strategy, preset, extra):
    from bench.strategies import get
    from bench.strategies.base import Ctx, reference_check
    from bench.workloads import get_spec

    ctx = Ctx(spec=get_spec(preset), rank=info.rank, world=info.world, device=info.device, batch=8, seed=3,
              steps=2, **extra)
    t = get(strategy).setup(ctx)
    t.step(check=True)
    loss, grads = t.loss(), t.grads()
    return {**reference_check(t, loss, grads), "degraded": t.degraded}


@pytest.mark.parametrize("strategy,preset,world,extra", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[3].get('schedule', '')}{c[3].get('checkpoint', '')}" for c in CASES])
def test_one_step_matches_single_process(strategy, preset, world, extra, spawn_ranks):
    res = spawn_ranks(_one_step, world, strategy, preset, extra)
    for r, out in res.items():
        assert out["missing"] == [], out
        assert out["wrong"] == 0, f"rank {r}: {out} (tolerance rtol={RTOL} atol={ATOL})"
        assert out["checked_tensors"] > 2


def test_dp_on_cpu_is_flagged_pass_through():
    if torch.cuda.device_count() >= 2:
        pytest.skip("real DataParallel here")
    from bench.strategies import dp
    from bench.strategies.base import Ctx
    from bench.workloads import get_spec

    t = dp.setup(Ctx(spec=get_spec("mlp-tiny"), rank=0, world=1, device=torch.device("cpu"), batch=4, seed=0,
                     steps=1))
    assert t.degraded == "no CUDA: DataParallel is a pass-through"


def test_bench_strategies_end_to_end_tiny(tmp_path):
    """Every strategy through the CLI on the tiny presets: one row per case, dp/layer honestly at
    world 1 and flagged on CPU, every case checked against the reference."""
    import pandas as pd

    from conftest import run_cli

    out = tmp_path / "results"
    p = run_cli("strategies", "--models", "mlp-tiny,gpt-tiny", "--batch", "8", "--chunks", "2", "--steps", "5",
                "--warmup", "1", "--out", str(out), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "# Summary" in p.stdout
    res = pd.read_parquet(next((out / "strategies").iterdir()) / "results.parquet")
    assert sorted(set(res.strategy)) == ["ddp", "dp", "fsdp", "layer", "pp", "tp"]
    assert len(res) == 12 and (res.wrong == 0).all() and (res.checks == 1).all()
    assert set(res.loc[res.strategy.isin(["dp", "layer"]), "world"]) == {1}
    assert set(res.loc[~res.strategy.isin(["dp", "layer"]), "world"]) == {2}
    if torch.cuda.device_count() == 0:
        assert (res.loc[res.strategy == "dp", "degraded"] == "no CUDA: DataParallel is a pass-through").all()
        assert res.loc[res.strategy == "layer", "degraded"].str.contains("on cpu").all()
    gpt = res[res.family == "gpt"]
    assert (gpt.tokens_per_s == gpt.samples_per_s * 16).all()
