"""Composed layouts on one DeviceMesh (bench.training.dims, layout, composed): the degree
arithmetic and mesh coordinates, each layout's degrees, the TP plan of a stage, the configs of the
strategies and pipeline kinds, the memory formula, the report's layout table; and, in one world-4
launch, every layout's first step equal to the single-process reference (loss and every gradient,
gathered from its shards); the matrix under GPipe, 1F1B, interleaved and checkpointing, and the 3D
layout at world 8 through the CLI (both slow)."""

from types import SimpleNamespace

import pandas as pd
import pytest

from bench.errors import BenchError
from bench.pipeline.config import PipelineConfig, expand_pipeline
from bench.pipeline.kind import KIND as PIPELINE
from bench.results.store import load_run
from bench.strategies.config import CaseSpec, StrategiesConfig, expand_strategies
from bench.suite import load_suite
from bench.training import REGISTRY
from bench.training.base import Ctx, reference_check
from bench.training.dims import ParallelDims
from bench.training.footprint import Footprint, layout_memory
from bench.training.layout import LAYOUTS, batch_ranks, layout_dims
from bench.training.layout_table import layout_rows
from bench.training.memory import case_bytes
from bench.training.summary import strategy_line
from bench.training.tp import plan
from bench.workloads import get_spec
from conftest import ROOT, run_cli, spawn


# ---- pure ----------------------------------------------------------------------------------------

def test_degree_arithmetic_shows_itself():
    with pytest.raises(BenchError, match=r"^pp\(2\) \* tp\(3\) = 6 != world\(4\); choose degrees"):
        ParallelDims(world=4, pp=2, tp=3)
    with pytest.raises(BenchError, match=r"pp\(2\) \* dp\(2\) \* fsdp\(2\) \* tp\(2\) = 16 != world\(8\)"):
        ParallelDims(world=8, pp=2, dp_replicate=2, dp_shard=2, tp=2)
    with pytest.raises(BenchError, match=r"dp_shard 0 must be >= 1"):
        ParallelDims(world=4, dp_shard=0)


def test_mesh_coordinates_pipeline_outermost_tp_innermost():
    d = ParallelDims(world=8, pp=2, dp_replicate=2, tp=2)
    assert d.layout == "pp2.dp2.tp2" and d.composed and d.dp == 2 and d.enabled == ("pp", "dp_replicate", "tp")
    # rank = ((pp * dp_replicate + r) * dp_shard + s) * tp + t, as init_device_mesh lays a row-major mesh out
    assert [tuple(d.coords(r)[n] for n in ("pp", "dp_replicate", "tp")) for r in range(8)] == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
    assert [d.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert batch_ranks(d) == [0, 2]  # pp 0, tp 0 of each data-parallel slice, in slice order
    h = ParallelDims(world=8, dp_replicate=2, dp_shard=2, tp=2)  # HSDP x TP: slices over both dp dims
    assert [h.dp_rank(r) for r in range(0, 8, 2)] == [0, 1, 2, 3] and h.local_batch(8) == 2
    assert not ParallelDims(world=2, pp=2).composed and ParallelDims(world=2, pp=2).layout == "pp2"


@pytest.mark.parametrize("name,world,degrees", [
    ("pp+tp", 4, {"pp": 2, "tp": 2}), ("pp+tp", 8, {"pp": 4, "tp": 2}),
    ("pp+ddp", 4, {"pp": 2, "dp_replicate": 2}), ("pp+fsdp", 8, {"pp": 2, "dp_shard": 4}),
    ("fsdp+tp", 4, {"dp_shard": 2, "tp": 2}), ("ddp+tp", 8, {"dp_replicate": 4, "tp": 2}),
    ("pp+ddp+tp", 8, {"pp": 2, "dp_replicate": 2, "tp": 2})])
def test_layout_degrees(name, world, degrees):
    assert layout_dims(name, world) == ParallelDims(world=world, **degrees)
    assert REGISTRY.get(name).composed and REGISTRY.get(name).min_world == 2 ** len(LAYOUTS[name])


def test_tp_plan_of_a_stage_pairs_blocks_inside_it():
    mlp = get_spec("mlp-pipe")
    p = plan(mlp, [3, 4, 5])  # a stage holding blocks 3..5: 3 Colwise, 4 Rowwise, 5 replicated
    assert {k: type(v).__name__ for k, v in p.items()} == {"3.0": "ColwiseParallel", "4.0": "RowwiseParallel"}
    assert set(plan(mlp)) == {f"{i}.0" for i in range(8)}
    gpt = get_spec("gpt-tiny")  # pieces: 0 embed, 1..4 blocks, 5 head
    assert set(plan(gpt, [0, 1])) == {"1.attn.q", "1.attn.k", "1.attn.v", "1.attn.out", "1.mlp.up", "1.mlp.down"}
    assert plan(gpt, [5]) == {}


def test_strategies_suite_runs_the_composed_layouts_at_world_4():
    cfg = load_suite(ROOT / "suites" / "strategies.toml", StrategiesConfig, "strategies")
    cases, notes = expand_strategies(cfg)
    at4 = {(c.strategy, c.model): c for c in cases if c.world == 4}
    assert {s for s, _ in at4} == {"ddp+tp", "fsdp+tp", "pp+tp", "pp+ddp", "pp+fsdp"}
    c = at4[("pp+fsdp", "gpt-small")]
    assert (c.fsdp, c.tp, c.dp, c.dims.pp, c.schedule, c.chunks) == (2, 1, 1, 2, "1f1b", 4)
    assert c.case_id == "pp+fsdp.gpt-small.w4.m4.1f1b.never.b32.mb0.baleven.pp2.fsdp2"
    assert all(x.world == 2 for x in cases if not REGISTRY.get(x.strategy).composed and not
               REGISTRY.get(x.strategy).single_process)
    assert cfg.worlds() == (1, 2, 4)
    # at one asked world, composed layouts that need more are left out with their reason
    _, notes = expand_strategies(StrategiesConfig(strategies=("pp+ddp+tp", "ddp+tp"), models=("mlp-tiny",),
                                                  batch=8, layout_world=(4,)))
    assert notes == ["pp+ddp+tp skipped at world 4: needs a multiple of 8 (each of its dimensions >= 2)"]


def test_pipeline_config_composes_with_tp_dp_fsdp():
    cfg = PipelineConfig(model="mlp-tiny", tp=2, dp=2, chunks=(2,), batch=8, schedules=("gpipe",))
    assert cfg.worlds() == (8,)
    cases, _ = expand_pipeline(cfg)
    assert [c.case_id for c in cases] == ["pp.mlp-tiny.w8.m2.gpipe.never.b8.mb0.baleven.pp2.dp2.tp2"]
    assert cases[0].dims == ParallelDims(world=8, pp=2, dp_replicate=2, tp=2)
    # fixed micro-batch mode: micro_batch samples per micro-batch of each data-parallel pipeline
    mb, _ = expand_pipeline(PipelineConfig(model="mlp-tiny", fsdp=2, chunks=(2,), micro_batch=(3,), schedules=("gpipe",)))
    assert [(c.batch, c.micro_batch, c.world) for c in mb] == [(12, 3, 4)]
    plain, _ = expand_pipeline(PipelineConfig(model="mlp-tiny", chunks=(2,), batch=8, schedules=("gpipe",)))
    # the results' micro_batch is what one pipeline's micro-batch holds, in either mode: batch 8 over
    # dp 2 x 2 chunks is 2 samples (it read 4, batch / chunks, while fixed mode said 3 for 3)
    assert [c.samples_per_micro_batch for c in (*cases, *mb, *plain)] == [2, 3, 4]
    assert plain[0].case_id == "pp.mlp-tiny.w2.m2.gpipe.never.b8.mb0.baleven" and not plain[0].composed
    assert PIPELINE.at_world(cfg, 8).stages == (2,)
    with pytest.raises(BenchError, match=r"mlp-tiny has 4 layers, fewer than the 8 pipeline stages"):
        PipelineConfig(model="mlp-tiny", tp=2, stages=(8,), chunks=(8,), batch=16, schedules=("gpipe",))
    with pytest.raises(BenchError, match=r"batch 8 / dp x fsdp 2 = 4 samples per pipeline is not divisible by chunks 8; choose a batch that is a multiple of 16"):
        PipelineConfig(model="mlp-tiny", dp=2, chunks=(8,), batch=8, schedules=("gpipe",))


@pytest.mark.parametrize("schedule", ["interleaved_zb", "zbv", "dualpipev"])
def test_fsdp_inside_stages_is_refused_under_split_backward(schedule):
    """torch's split-backward schedules gave wrong gradients with FSDP2 stages (test-slow's matrix
    runs the others): refused before any launch, with what to use instead."""
    with pytest.raises(BenchError, match=rf"schedule {schedule} with fsdp\(2\) inside the stages gives wrong "
                                         r"gradients.*use a schedule without split backward"):
        PipelineConfig(model="mlp-tiny", fsdp=2, chunks=(4,), batch=8, schedules=(schedule,))
    PipelineConfig(model="mlp-tiny", dp=2, chunks=(4,), batch=8, schedules=(schedule,))  # DDP replicas are fine


def test_layout_memory_formula():
    spec = get_spec("mlp-small")
    f = Footprint(spec, 32, 8)
    d = ParallelDims(world=8, pp=2, dp_replicate=2, tp=2)
    # per stage (4 blocks: Colwise, Rowwise, Colwise, Rowwise) and TP rank: 2 x ((w^2 + w) / 2 + w^2 / 2 + w)
    # parameters; stage 0 (the most loaded) also keeps the input: A = 16 samples x (4 w x 2 / tp + w) floats
    w = 256
    params = 2 * ((w * w + w) // 2 + w * w // 2 + w)
    acts = 16 * (4 * w * 2 // 2 + w) * 4
    assert layout_memory(f, d) == params * 8 + 4 * params + acts  # states, a replica's gradient buckets, A
    s = ParallelDims(world=8, pp=2, dp_shard=2, tp=2)  # states / fsdp + one piece (the Rowwise one) gathered
    assert layout_memory(f, s) == params * 8 // 2 + 8 * (w * w // 2 + w) + acts
    case = CaseSpec(strategy="pp", model="mlp-small", world=8, chunks=2, schedule="gpipe", batch=32, tp=2, dp=2)
    assert case_bytes(case, check=False) == int(-(-layout_memory(f, d) // 1))


def test_layout_table_compares_layouts_at_equal_world():
    base = {"_label": "r", "model": "m", "schedule": "", "chunks": 1, "bubble_measured": float("nan"),
            "bubble_max": float("nan"), "peak_memory_bytes": 2**20, "comm_share": 0.1, "wrong": 0, "degraded": ""}
    res = pd.DataFrame([
        {**base, "world": 4, "layout": "dp2.tp2", "strategy": "ddp+tp", "samples_per_s_per_device": 10.0},
        {**base, "world": 4, "layout": "pp2.tp2", "strategy": "pp+tp", "samples_per_s_per_device": 20.0,
         "bubble_measured": 0.3, "schedule": "1f1b"},
        {**base, "world": 2, "layout": "dp2", "strategy": "ddp", "samples_per_s_per_device": 5.0}])
    rows = layout_rows(res)
    assert list(rows["layout"]) == ["pp2.tp2", "dp2.tp2"]  # world 2 has one layout: nothing to compare
    assert list(rows["samples/s/device"]) == [20.0, 10.0] and list(rows["peak MiB/rank"]) == [1.0, 1.0]


def test_summary_line_names_the_layout():
    row = {"strategy": "pp", "layout": "pp2.dp2.tp2", "model": "mlp-tiny", "world": 8, "chunks": 2,
           "schedule": "gpipe", "checkpoint": "never", "batch": 8, "micro_batch": 2, "step_median_s": 0.1,
           "step_iqr_s": 0.0, "samples_per_s": 80.0, "samples_per_s_per_device": 10.0, "peak_memory_bytes": 2**20,
           "wrong": 0, "bubble_measured": 0.3, "bubble_gpipe_theory": 1 / 3, "replay_bubble": 0.3}
    assert strategy_line(row).startswith("  pp pp2.dp2.tp2 mlp-tiny")
    assert strategy_line({**row, "layout": "pp2"}).startswith("  pp       mlp-tiny")


# ---- every layout against the single-process reference, one world-4 launch ------------------------

# make test: each layout once (the two DDP ones with a second, optimizing step); make test-slow: the
# matrix (GPipe and 1F1B for every pipeline layout, GPT, interleaved, checkpointing).
QUICK = [("pp+tp", "mlp-tiny", {"schedule": "gpipe", "chunks": 2}, False),
         ("pp+ddp", "mlp-tiny", {"schedule": "1f1b", "chunks": 2}, True),
         ("pp+fsdp", "mlp-tiny", {"schedule": "1f1b", "chunks": 2}, False),
         ("fsdp+tp", "mlp-tiny", {}, False),
         ("ddp+tp", "gpt-tiny", {}, True)]
PP_KW = [{"schedule": "gpipe", "chunks": 2}, {"schedule": "1f1b", "chunks": 2}]
MATRIX = ([(s, p, kw, False) for s in ("pp+tp", "pp+ddp", "pp+fsdp") for p in ("mlp-tiny", "gpt-tiny") for kw in PP_KW]
          + [("pp+tp", "gpt-tiny", {"schedule": "1f1b", "chunks": 2, "checkpoint": "always"}, False),
             ("pp+fsdp", "mlp-tiny", {"schedule": "interleaved", "chunks": 2, "checkpoint": "except_last"}, True),
             ("pp+ddp", "gpt-tiny", {"schedule": "interleaved", "chunks": 2}, True)]
          + [(s, "mlp-tiny", {"schedule": x, "chunks": 4}, False) for s in ("pp+tp", "pp+ddp")
             for x in ("looped_bfs", "interleaved_zb", "zbv", "dualpipev")]
          + [("pp+fsdp", "mlp-tiny", {"schedule": "looped_bfs", "chunks": 4}, False)]
          + [(s, p, {}, True) for s in ("fsdp+tp", "ddp+tp") for p in ("mlp-tiny", "gpt-tiny")])


def _each_layout(info, cases):
    out = []
    for strategy, preset, kw, again in cases:
        ctx = Ctx(spec=get_spec(preset), rank=info.rank, world=info.world, device=info.device, batch=8, seed=3,
                  steps=3, dims=REGISTRY.get(strategy).dims(info.world), **kw)
        t = REGISTRY.get(strategy).setup(ctx)
        t.step(check=True)
        loss, grads, batch = t.loss(), t.grads(), t.global_batch()
        out.append({**reference_check(t, loss, grads, batch), "case": f"{strategy} {preset} {kw}", "role": t.role})
        if again:  # a second, optimizing step (torch DDP's reducer failed there under a pipeline schedule)
            t.opt.zero_grad(set_to_none=True)
            t.step()
    return out


def _check_all(res, cases):
    for r, outs in res.items():
        assert len(outs) == len(cases)
        for out in outs:
            assert out["missing"] == [] and out["wrong"] == 0, f"rank {r}: {out}"
            assert out["checked_tensors"] > 4


def test_every_layout_matches_single_process_at_world_4():
    res = spawn(_each_layout, 4, QUICK, timeout_s=300.0)
    _check_all(res, QUICK)
    roles = [o["role"] for o in res[3]]
    assert roles[:2] == ["stages 1 tp1", "stages 1 dp1"]  # rank 3 = (pp 1, tp 1) / (pp 1, dp 1)
    assert roles[3:] == ["dp_shard1 tp1", "dp_replicate1 tp1"]


def _one_rank_pipelines(info, dims_list):
    out = []
    for degrees in dims_list:
        ctx = Ctx(spec=get_spec("mlp-tiny"), rank=info.rank, world=info.world, device=info.device, batch=8, seed=3,
                  steps=3, dims=ParallelDims(world=info.world, pp=1, **degrees), schedule="interleaved", chunks=2)
        t = REGISTRY.get("pp").setup(ctx)
        t.step(check=True)
        out.append({**reference_check(t, t.loss(), t.grads(), t.global_batch()), "case": str(degrees), "role": t.role})
    return out


def test_a_one_rank_pipeline_inside_a_layout_matches_single_process():
    """pp 1 (both stages of Interleaved 1F1B on one rank) x tp / dp / fsdp at world 2: its pipeline
    group is the rank alone (before, the world was taken for it and torch's schedule asked for
    stages 2 and 3: KeyError: 2)."""
    cases = [{"tp": 2}, {"dp_replicate": 2}, {"dp_shard": 2}]
    res = spawn(_one_rank_pipelines, 2, cases, timeout_s=300.0)
    _check_all(res, cases)
    assert [o["role"].split()[:2] for o in res[1]] == [["stages", "0+1"]] * 3


def test_a_one_rank_pipeline_is_a_pipeline_case():
    """Its rows get the per-stage times and bubble columns (the planner validates on them); before,
    pp 1 read as no pipeline and the row had no stage times."""
    from bench.training.case import CaseSpec
    from bench.training.measure import _pipelined

    one = dict(model="mlp-tiny", world=2, chunks=8, tp=2, batch=64)
    assert _pipelined(CaseSpec(strategy="pp", schedule="interleaved", **one))
    assert not _pipelined(CaseSpec(strategy="pp", schedule="gpipe", **{**one, "tp": 1, "world": 1}))
    assert not _pipelined(CaseSpec(strategy="ddp+tp", **{**one, "dp": 1}))
    assert _pipelined(CaseSpec(strategy="pp", schedule="1f1b", model="mlp-tiny", world=2, chunks=8, batch=64))


@pytest.mark.slow
def test_layout_matrix_matches_single_process_at_world_4():
    """GPipe and 1F1B under every pipeline layout and model, interleaved, checkpointing; dp x tp on GPT."""
    _check_all(spawn(_each_layout, 4, MATRIX, timeout_s=600.0), MATRIX)


@pytest.mark.slow
def test_3d_layout_at_world_8_through_the_cli(tmp_path):
    """dp x tp x pp at world 8 on 2 cores: checked rows, the layout's columns, the oversubscription said."""
    r = run_cli("pipeline", "--model", "mlp-tiny", "--stages", "2", "--tp", "2", "--dp", "2", "--chunks", "2",
                "--schedule", "gpipe,1f1b", "--batch", "8", "--steps", "5", "--warmup", "0", "--no-efficiency",
                "--out", str(tmp_path), timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    run = load_run(next((tmp_path / "pipeline").iterdir()))
    res = run["results"]
    assert len(res) == 2 and set(res["schedule"]) == {"gpipe", "1f1b"}
    assert list(res["layout"].unique()) == ["pp2.dp2.tp2"] and int(res["wrong"].sum()) == 0
    assert (res["checks"] == 1).all() and res["degraded"].str.contains("oversubscribed").all()
    assert "OVERSUBSCRIBED" in r.stdout + r.stderr
    ranks = run["strategy_ranks"]
    assert len(ranks) == 16 and ranks["bubble"].notna().all()


def test_make_passes_the_layout_degrees():
    import subprocess

    out = subprocess.run(["make", "-n", "bench-pipeline", "CHUNKS=1,4,8", "TP=2", "DP=2", "FSDP=2", "DEPS="],
                         cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert "--chunks 1,4,8" in out and "--tp 2 --dp 2 --fsdp 2" in out


# ---- process groups of a case are destroyed at its end (issue 31 item 4) ---------------------------

def _live_groups_after_cases(info, cases):
    """Every rank: measure_case on each composed case in turn; the live process groups (torch's
    registry of them, the default group included) before the first case and after each."""
    import torch.distributed as dist

    from bench.distributed.comm import Comm
    from bench.training.measure import measure_case

    cfg = SimpleNamespace(check=1, warmup=0, steps=1, seed=0, profile=0)
    live = [len(dist.distributed_c10d._world.pg_map)]
    for case in cases:
        measure_case(case, cfg, Comm(info))
        live.append(len(dist.distributed_c10d._world.pg_map))
    return live


def test_each_composed_case_destroys_its_process_groups():
    """Each composed case builds a DeviceMesh (a process group per mesh dimension slice); after N
    cases as many groups live as before the first: the default group alone."""
    pp_tp = CaseSpec(strategy="pp+tp", model="mlp-tiny", world=4, chunks=2, schedule="gpipe", batch=8, tp=2)
    fsdp_tp = CaseSpec(strategy="fsdp+tp", model="mlp-tiny", world=4, batch=8, fsdp=2, tp=2)
    res = spawn(_live_groups_after_cases, 4, [pp_tp, fsdp_tp, pp_tp], timeout_s=300.0)
    assert res == {r: [1, 1, 1, 1] for r in range(4)}, res
