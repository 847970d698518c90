"""bench.strategies: every registered strategy, after one step, gives the loss and every
parameter gradient of the single-process reference within bench.training.base.TOLERANCE (CPU,
gloo, world 2; single-process strategies at world 1); each strategy's own checks and degree
arithmetic (ParallelDims); bad input at the CLI; every strategy through the CLI end to end.
Parametrized over bench.training.REGISTRY: a new strategy module is covered without editing
this file (VARIANTS only adds settings to the default cases)."""

from types import SimpleNamespace

import pytest
import torch

from bench.errors import BenchError
from bench.results.store import load_run
from bench.strategies.config import CaseSpec, StrategiesConfig, expand_strategies
from bench.strategies.kind import KIND
from bench.training import REGISTRY
from bench.training.base import ATOL, RTOL, Ctx, Trainer, reference_check
from bench.training.dims import ParallelDims
from bench.training.layer import LayerTrainer
from bench.training.pp import PPTrainer
from bench.workloads import get_spec
from conftest import assert_usage_error, run_cli, spawn

PRESETS = ("mlp-tiny", "gpt-tiny")
# Settings beyond the defaults, per strategy (extra Ctx fields): schedules, checkpointing, balance.
VARIANTS = {
    "pp": [("mlp-tiny", {"schedule": "gpipe", "chunks": 2}),
           ("mlp-tiny", {"schedule": "1f1b", "chunks": 4, "checkpoint": "always"}),
           ("gpt-tiny", {"schedule": "1f1b", "chunks": 2, "checkpoint": "except_last"}),
           ("mlp-tiny", {"schedule": "interleaved", "chunks": 2}),
           ("gpt-tiny", {"schedule": "gpipe", "chunks": 4, "balance": (1, 3)})],
    "layer": [("gpt-tiny", {"balance": (3, 1)})],
}


def world_of(name: str) -> int:
    s = REGISTRY.get(name)
    return 1 if s.single_process else s.min_world


# Composed layouts (bench.training.composed) run at world 4 / 8: tests/test_layouts.py checks them
# in one launch; the per-strategy launches here cover the single strategies.
SINGLE = [n for n in REGISTRY.names() if not REGISTRY.get(n).composed]


def cases_of(name: str) -> list[tuple[str, dict]]:
    return [(p, {}) for p in PRESETS] + VARIANTS.get(name, [])


def _one_step_each(info, strategy, cases):
    """Every case of one strategy in one launch; one reference check per case."""
    out = []
    for preset, extra in cases:
        ctx = Ctx(spec=get_spec(preset), rank=info.rank, world=info.world, device=info.device, batch=8, seed=3,
                  steps=2, **extra)
        t = REGISTRY.get(strategy).setup(ctx)
        t.step(check=True)
        loss, grads = t.loss(), t.grads()
        out.append({**reference_check(t, loss, grads), "degraded": t.degraded, "case": f"{preset} {extra}"})
    return out


def test_variants_name_registered_strategies():
    assert set(VARIANTS) <= set(REGISTRY.names())


@pytest.mark.parametrize("strategy", SINGLE)
def test_one_step_matches_single_process(strategy):
    cases = cases_of(strategy)
    res = spawn(_one_step_each, world_of(strategy), strategy, cases)
    assert sorted(res) == list(range(world_of(strategy)))
    for r, outs in res.items():
        assert len(outs) == len(cases)
        for out in outs:
            assert out["missing"] == [], out
            assert out["wrong"] == 0, f"rank {r}: {out} (tolerance rtol={RTOL} atol={ATOL})"
            assert out["checked_tensors"] > 2


# ---- pure: each strategy's own checks, the degree arithmetic, the config ---------------------------

@pytest.mark.parametrize("strategy", REGISTRY.names())
def test_every_strategy_states_itself(strategy):
    s = REGISTRY.get(strategy)
    assert s.name == strategy and s.doc.strip().splitlines()[0]  # `distbench list` shows the first line
    assert callable(s.setup) and isinstance(s.single_process, bool)
    w = world_of(strategy)
    dims = s.dims(w)
    assert isinstance(dims, ParallelDims) and dims.dp * dims.tp * dims.pp == dims.world == w
    for preset in PRESETS:
        case = CaseSpec(strategy=strategy, model=preset, world=w, batch=8,
                        **({"chunks": 2, "schedule": "gpipe"} if "pp" in strategy else {}))
        assert s.check(get_spec(preset), case) is None, f"{strategy} skips a plain {preset} case"


@pytest.mark.parametrize("strategy", REGISTRY.names())
def test_default_config_expands_every_strategy_at_its_world(strategy):
    cfg = StrategiesConfig(strategies=(strategy,), models=PRESETS, batch=8, chunks=2, layout_world=(world_of(strategy),))
    cases, _ = expand_strategies(cfg)
    assert {(c.strategy, c.model, c.world) for c in cases} == {(strategy, p, world_of(strategy)) for p in PRESETS}
    assert set(KIND.worlds(cfg)) == {world_of(strategy)}
    units, _ = KIND.units(cfg, world_of(strategy), {})
    assert units == [c for c in cases if c.world == world_of(strategy)]


def test_default_config_runs_every_registered_strategy():
    assert StrategiesConfig().strategies == tuple(REGISTRY.names())


def test_parallel_dims_arithmetic_and_errors():
    d = ParallelDims(world=8, dp_replicate=2, tp=2, pp=2)
    assert d.local_batch(32) == 16
    with pytest.raises(BenchError, match=r"pp\(2\) \* dp\(2\) = 4 != world\(8\)"):
        ParallelDims(world=8, dp_replicate=2, pp=2)
    with pytest.raises(BenchError, match="tp 0 must be >= 1"):
        ParallelDims(world=2, dp_replicate=2, tp=0)
    with pytest.raises(BenchError, match=r"batch 7 is not divisible by dp\(2\); choose a multiple of 2"):
        ParallelDims(world=2, dp_shard=2).local_batch(7)


def test_dp_on_cpu_is_flagged_pass_through():
    if torch.cuda.device_count() >= 2:
        pytest.skip("real DataParallel here")
    t = REGISTRY.get("dp").setup(Ctx(spec=get_spec("mlp-tiny"), rank=0, world=1, device=torch.device("cpu"),
                                     batch=4, seed=0, steps=1))
    assert t.degraded == "no CUDA: DataParallel is a pass-through"


# ---- the CLI ------------------------------------------------------------------------------------

CLI_CASES = [
    (["-s", "fsdpp"], "unknown strategy 'fsdpp' (did you mean 'fsdp'?)"),
    (["--models", "gpt-tinny"], "unknown model preset 'gpt-tinny' (did you mean 'gpt-tiny'?)"),
    (["--batch", "7", "-s", "ddp"], "batch 7 is not divisible by dp(2); choose a multiple of 2"),
    (["--steps", "4"], "steps 4 must be >= 5"),
]


@pytest.mark.parametrize("argv,message", CLI_CASES, ids=[c[1][:32] for c in CLI_CASES])
def test_bad_input_is_one_line_exit_2(argv, message, tmp_path, capsys):
    from bench.cli import main

    out = tmp_path / "results"
    rc = main(["strategies", *argv, "--out", str(out)])
    assert_usage_error(rc, capsys.readouterr().err, message, out)


@pytest.mark.slow
def test_bench_strategies_end_to_end_tiny(tmp_path):
    """Every strategy through the CLI on the tiny presets: one row per case, single-process ones
    honestly at world 1 and flagged on CPU, every case checked against the reference."""
    out = tmp_path / "results"
    p = run_cli("strategies", "--models", ",".join(PRESETS), "--batch", "8", "--chunks", "2", "--steps", "5",
                "--warmup", "1", "--out", str(out), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "# Summary" in p.stdout
    run = load_run(next((out / "strategies").iterdir()))
    res = run["results"]
    assert set(res["kind"]) == {KIND.name} and run.meta["kind"] == KIND.name  # one name everywhere
    # The default suite (suites/strategies.toml): every strategy that runs at world <= 4; the 3D
    # layout pp+ddp+tp needs world 8 and is left to `make bench-pipeline TP=2 DP=2`.
    ran = sorted(n for n in REGISTRY.names() if world_of(n) <= 4)
    assert "pp+ddp+tp" not in ran and ran == sorted(run.meta["config"]["strategies"])
    assert sorted(set(res.strategy)) == ran
    assert len(res) == len(PRESETS) * len(ran) and (res.wrong == 0).all() and (res.checks == 1).all()
    for s in ran:
        assert set(res.loc[res.strategy == s, "world"]) == {world_of(s)}, s
    if torch.cuda.device_count() == 0:
        assert (res.loc[res.strategy == "dp", "degraded"] == "no CUDA: DataParallel is a pass-through").all()
        assert res.loc[res.strategy == "layer", "degraded"].str.contains("on cpu").all()
    gpt = res[res.family == "gpt"]
    assert (gpt.tokens_per_s == gpt.samples_per_s * 16).all()


CUDA0, CUDA1 = torch.device("cuda", 0), torch.device("cuda", 1)


def test_sync_waits_for_every_device_a_process_drives(monkeypatch):
    """dp / layer drive several GPUs: every one is synchronized, not only cuda:0 (issue 12)."""
    seen = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: seen.append(d))
    layer = SimpleNamespace(module=SimpleNamespace(devices=[CUDA0, CUDA1, CUDA1]))
    assert LayerTrainer.device_list(layer) == [CUDA0, CUDA1]
    Trainer.sync(SimpleNamespace(device_list=lambda: [CUDA0, CUDA1, torch.device("cpu")]))
    assert seen == [CUDA0, CUDA1]


class _Loader:
    def __init__(self):
        self.calls = 0

    def next(self, device):
        self.calls += 1
        return (f"x{self.calls}", f"y{self.calls}")


def test_prefetched_batch_is_the_one_the_timed_step_uses():
    t = SimpleNamespace(batches=_Loader(), _next=None, input_device=lambda: "cpu")
    Trainer.prefetch(t)
    assert Trainer.next_batch(t) == ("x1", "y1") and t.batches.calls == 1  # no load inside the step
    assert Trainer.next_batch(t) == ("x2", "y2")  # without a prefetch it still loads


@pytest.mark.parametrize("first, last, dp, loads", [(True, False, 1, 1), (False, False, 1, 0), (False, True, 1, 1),
                                                     (False, False, 2, 1)])
def test_only_first_and_last_pipeline_stages_load_data(first, last, dp, loads):
    """A middle stage loads nothing, unless the pipeline is one of several data-parallel ones: then
    every rank loads its slice (the reference check gathers the global mini-batch from them)."""
    t = SimpleNamespace(batches=_Loader(), _next=None, first=first, last=last, ctx=SimpleNamespace(device="cpu"),
                        dims=ParallelDims(world=2 * dp, pp=2, dp_replicate=dp))
    PPTrainer.prefetch(t)
    assert t.batches.calls == loads
    assert (t._next == (None, None)) == (loads == 0)


def _pp_left_alive(info, schedule):
    """One pipeline trainer built and stepped, then dropped with the cycle collector off: does
    anything keep it (its modules, activations) alive? Issue 17 item 3."""
    import gc
    import weakref

    ctx = Ctx(spec=get_spec("mlp-tiny"), rank=info.rank, world=info.world, device=torch.device("cpu"), batch=8,
              seed=0, steps=3, chunks=2, schedule=schedule)
    gc.collect()
    gc.disable()
    try:
        t = REGISTRY.get("pp").setup(ctx)
        t.prefetch()
        t.step()
        refs = [weakref.ref(t), weakref.ref(t.schedule), *[weakref.ref(m) for m in t.mods]]
        del t
        return [r() is not None for r in refs]
    finally:
        gc.enable()


@pytest.mark.parametrize("schedule", ["gpipe", "interleaved"])
def test_pipeline_trainer_is_freed_without_the_cycle_collector(schedule):
    res = spawn(_pp_left_alive, 2, schedule)
    assert res == {0: [False] * len(res[0]), 1: [False] * len(res[1])}, res


def test_efficiency_curve_of_a_composed_run_uses_its_stages_and_one_pipelines_batch(monkeypatch):
    """Issue 31 item 10: at world 8 of stages 2 x dp 2 x tp 2 the curve is that of one pipeline of
    2 stages on batch / dp = 8 samples (not 8 stages on the whole 16): the batch the model runs,
    the rows' batch and micro-batch, and the ideal p-stage step all use them."""
    from bench.pipeline.config import PipelineConfig
    from bench.training import measure

    seen = []

    class Recording(measure.Batches):
        def __init__(self, spec, batch, *a, **k):
            seen.append(batch)
            super().__init__(spec, batch, *a, **k)

    monkeypatch.setattr(measure, "Batches", Recording)
    cfg = PipelineConfig(model="mlp-tiny", stages=(2,), dp=2, tp=2, batch=16, chunks=(1, 2, 4), schedules=("gpipe",),
                         steps=5, warmup=0)
    rows = measure.efficiency_curve(cfg, torch.device("cpu"), "r", 8)
    assert seen == [8]
    assert [(r["chunks"], r["batch"], r["micro_batch"], r["stages"]) for r in rows] == [
        (1, 8, 8, 2), (2, 8, 4, 2), (4, 8, 2, 2)]
    for r in rows:
        m = r["chunks"]
        assert r["ideal_pipeline_step_s"] == r["step_median_s"] * (m + 2 - 1) / (m * 2)
        assert r["case_id"] == f"efficiency.mlp-tiny.b8.m{m}"
    plain = measure.efficiency_curve(PipelineConfig(model="mlp-tiny", stages=(2,), batch=16, chunks=(2,), steps=5,
                                                    schedules=("gpipe",)), torch.device("cpu"), "r", 2)
    assert [(r["batch"], r["micro_batch"], r["stages"]) for r in plain] == [(16, 8, 2)] and seen[-1] == 16
