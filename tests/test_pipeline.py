"""bench.pipeline: arithmetic on synthetic timelines with known answers, chunk/schedule validation,
bad input at the CLI, and the end-to-end `make bench-pipeline CHUNKS=1,2` on a tiny preset."""

import math
import os
import subprocess
import sys

import pandas as pd
import pytest

from bench.errors import BenchError
from bench.pipeline.config import PipelineConfig, expand_pipeline
from bench.pipeline.kind import KIND
from bench.results.store import load_run
from bench.training.breakdown import breakdown, overlap, union
from bench.training.pp import validate
from bench.training.replay import balanced, gpipe_order, one_f_one_b_order, replay
from bench.training.theory import gpipe_bubble, megatron_bubble
from conftest import ROOT, assert_usage_error


def test_textbook_forms():
    assert gpipe_bubble(2, 1) == 0.5
    assert gpipe_bubble(4, 8) == pytest.approx(3 / 11)
    assert megatron_bubble(4, 8) == pytest.approx(3 / 8)
    assert megatron_bubble(4, 8, v=2) == pytest.approx(3 / 16)
    assert gpipe_bubble(1, 5) == 0.0
    assert gpipe_bubble(2, 4, v=2) == pytest.approx(1 / 9)


@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (3, 6), (4, 8)])
def test_replay_balanced_gpipe_matches_gpipe_formula(p, m):
    # equal stages, backward = 2 x forward: GPipe's (p-1)/(m+p-1) exactly
    dur = {(s, k): (1.0 if k == "F" else 2.0) for s in range(p) for k in ("F", "B")}
    r = replay(gpipe_order(p, m), dur)
    assert r.step_s == pytest.approx(3.0 * (m + p - 1))
    for rank in range(p):
        assert r.bubble[rank] == pytest.approx(gpipe_bubble(p, m))


@pytest.mark.parametrize("p,m", [(2, 2), (2, 8), (4, 4), (4, 8)])
def test_replay_1f1b_has_gpipe_bubble_with_equal_stages(p, m):
    dur = {(s, k): (1.0 if k == "F" else 2.0) for s in range(p) for k in ("F", "B")}
    r = replay(one_f_one_b_order(p, m), dur)
    assert r.step_s == pytest.approx(3.0 * (m + p - 1))
    assert r.mean_bubble == pytest.approx(gpipe_bubble(p, m))


def test_replay_balanced_interleaved_matches_extended_form():
    from bench.training.replay import from_pipeline_order
    from torch.distributed.pipelining.schedules import _Action, _ComputationType

    # Interleaved 1F1B, p=2, v=2, m=2 as torch orders it (depth first): rank r holds stages r, r+2
    F, B = _ComputationType.FORWARD, _ComputationType.FULL_BACKWARD
    raw = {0: [_Action(0, F, 0), _Action(0, F, 1), _Action(2, F, 0), _Action(2, F, 1), None,
               _Action(2, B, 0), _Action(2, B, 1), _Action(0, B, 0), _Action(0, B, 1)],
           1: [None, _Action(1, F, 0), _Action(1, F, 1), _Action(3, F, 0), _Action(3, B, 0), _Action(3, F, 1),
               _Action(3, B, 1), _Action(1, B, 0), _Action(1, B, 1)]}
    dur = {(s, k): 1.0 for s in range(4) for k in "FB"}
    r = replay(from_pipeline_order(raw), dur)
    assert r.mean_bubble == pytest.approx(gpipe_bubble(2, 2, v=2))


def test_replay_imbalance_is_separated_from_schedule():
    # stage 1 twice as slow: the replay shows more bubble than the balanced replay
    dur = {(0, "F"): 1.0, (0, "B"): 1.0, (1, "F"): 2.0, (1, "B"): 2.0}
    order = gpipe_order(2, 2)
    r, b = replay(order, dur), replay(order, balanced(dur))
    # known answer, hand-simulated: F0(0-1) F1(1-2) | s1: F0(1-3) F1(3-5) B0(5-7) B1(7-9) | s0: B0(7-8) B1(9-10)
    assert r.step_s == pytest.approx(10.0)
    assert r.busy_s == {0: 4.0, 1: 8.0}
    assert r.bubble[0] == pytest.approx(0.6) and r.bubble[1] == pytest.approx(0.2)
    assert b.mean_bubble == pytest.approx(1 / 3)
    assert r.mean_bubble - b.mean_bubble == pytest.approx(0.4 - 1 / 3)


def test_replay_rejects_an_impossible_order():
    with pytest.raises(ValueError, match="cannot progress"):
        replay({0: [(0, "B", 0), (0, "F", 0)], 1: [(1, "F", 0), (1, "B", 0)]},
               {(s, k): 1.0 for s in (0, 1) for k in "FB"})


def test_interval_helpers():
    assert union([(0, 2), (1, 3), (5, 6)]) == [(0.0, 3.0), (5.0, 6.0)]
    assert overlap([(0, 4)], [(1, 2), (3, 10)]) == pytest.approx(2.0)


def test_breakdown_on_a_synthetic_timeline():
    # rank 0: compute 0-2, waits 2-6 (rank 1 computes 3-5: 2 s idle, 2 s exposed comm), compute 6-7
    # rank 1: span 1-7, waits 1-3, compute 3-5, 0.5 s of bookkeeping, waits 5.5-7
    spans = {0: (0.0, 7.0), 1: (1.0, 7.0)}
    compute = {0: [(0, 2), (6, 7)], 1: [(3, 5)]}
    waits = {0: [(2, 6)], 1: [(1, 3), (5.5, 7)]}
    bd = breakdown(spans, compute, waits)
    assert bd[0].step_wall_s == 7.0
    assert (bd[0].compute_s, bd[0].idle_s, bd[0].exposed_comm_s, bd[0].overhead_s) == (3.0, 2.0, 2.0, 0.0)
    # rank 1: 1 s before its span + waits overlapping rank 0's compute (1-2, 6-7) = 3 s idle
    assert bd[1].compute_s == 2.0 and bd[1].idle_s == pytest.approx(3.0)
    assert bd[1].exposed_comm_s == pytest.approx(1.5) and bd[1].overhead_s == pytest.approx(0.5)
    for b in bd.values():
        assert b.compute_s + b.idle_s + b.exposed_comm_s + b.overhead_s == pytest.approx(b.step_wall_s)
    assert bd[1].bubble == pytest.approx(3 / 7)


@pytest.mark.parametrize("kw,message", [
    ({"schedule": "1f1b", "stages": 4, "chunks": 2}, "1f1b needs chunks >= stages: chunks 2 < stages 4"),
    ({"schedule": "interleaved", "stages": 2, "chunks": 5, "batch": 10, "depth": 4}, "chunks 5 % rounds 2 = 1"),
    ({"chunks": 3}, "batch 8 is not divisible by chunks 3"),
    ({"chunks": 0}, "chunks 0 must be >= 1"),
    ({"balance": (1, 2)}, "balance 1,2 sums to 3; the model has 4 layers"),
    ({"balance": (4,)}, "has 1 entries"),
    ({"schedule": "gpip"}, "unknown schedule 'gpip' (did you mean 'gpipe'?)"),
])
def test_validation(kw, message):
    args = {"schedule": "gpipe", "stages": 2, "chunks": 2, "batch": 8, "depth": 4, **kw}
    with pytest.raises(BenchError, match=None) as e:
        validate(**args)
    assert message in str(e.value)


def test_a_sweep_skips_each_combination_its_schedule_cannot_run_and_says_why():
    """A suite sweeps stages x chunks x schedules: DualPipeV needs chunks >= 2 x ranks, so at 4
    ranks chunks 4 is left out (noted) while chunks 16 runs, and at 2 ranks both run."""
    cases, notes = expand_pipeline(PipelineConfig(model="mlp-pipe", stages=(2, 4), chunks=(4, 16), batch=1024,
                                                  schedules=("dualpipev",)))
    assert sorted((c.world, c.chunks) for c in cases) == [(2, 4), (2, 16), (4, 16)]
    assert notes == ["dualpipev skipped for chunks 4 at 4 stages: it needs chunks >= pipeline stages "
                     "(2 x 4 ranks = 8): chunks 4 < 8"]
    with pytest.raises(BenchError, match="no pipeline case can run: dualpipev skipped for chunks 4 at 4 stages"):
        PipelineConfig(model="mlp-pipe", stages=(4,), chunks=(4,), batch=1024, schedules=("dualpipev",))


def test_1f1b_below_stages_is_skipped_in_a_default_sweep():
    
    cases, notes = expand_pipeline(PipelineConfig(model="mlp-tiny", chunks=(1, 2), batch=8))
    assert {(c.schedule, c.chunks) for c in cases} == {("gpipe", 1), ("gpipe", 2), ("1f1b", 2)}
    assert any("1f1b skipped for chunks 1" in n for n in notes)
    with pytest.raises(BenchError, match="1f1b needs chunks >= stages"):
        PipelineConfig(model="mlp-tiny", chunks=(1, 2), batch=8, strict=True)


def test_fixed_micro_batch_mode():
    
    cases, _ = expand_pipeline(PipelineConfig(model="mlp-tiny", chunks=(2, 4), micro_batch=(3,), schedules=("gpipe",)))
    assert [(c.chunks, c.batch, c.micro_batch, c.sweep_mode) for c in cases] == [(2, 6, 3, "micro-batch"),
                                                                                 (4, 12, 3, "micro-batch")]


def test_units_per_world_and_the_launcher_world():
    """units() are pure: the cases of one world, no ranks needed; at_world narrows the stages to the
    world torchrun / srun chose."""
    cfg = PipelineConfig(model="mlp-tiny", stages=(1, 2), chunks=(2,), batch=8, schedules=("gpipe",))
    assert tuple(KIND.worlds(cfg)) == (1, 2)
    for w in (1, 2):
        units, _ = KIND.units(cfg, w, {})
        assert units and {u.world for u in units} == {w} and units == KIND.units(cfg, w, {})[0]
    assert KIND.at_world(cfg, 2).stages == (2,) and tuple(KIND.worlds(KIND.at_world(cfg, 2))) == (2,)
    with pytest.raises(BenchError, match=r"world 3 is not stages x tp of this suite: pp\(1\) = 1 != world\(3\); pp\(2\) = 2 != world\(3\); pass --stages 3"):
        KIND.at_world(cfg, 3)  # the suite cannot run at a world that is not stages x tp


CLI_CASES = [
    (["pipeline", "--chunks", "0"], "chunks 0 must be >= 1"),
    (["pipeline", "--chunks", "abc"], "bad chunks 'abc'"),
    (["pipeline", "--chunks", "3", "--batch", "8"], "batch 8 is not divisible by chunks 3"),
    (["pipeline", "--chunks", "1", "--schedule", "1f1b"], "1f1b needs chunks >= stages"),
    (["pipeline", "--schedule", "1f1c"], "unknown schedule '1f1c' (did you mean '1f1b'?)"),
    (["pipeline", "--model", "mlp-tinny"], "unknown model preset 'mlp-tinny' (did you mean 'mlp-tiny'?)"),
    (["pipeline", "--model", "mlp-tiny", "--balance", "1,1"], "balance 1,1 sums to 2"),
    (["pipeline", "--nproc", "3"], "world 3 is not stages x tp of this suite: pp(2) = 2 != world(3); pass --stages 3"),
    (["pipeline", "--tp", "2", "--dp", "2", "--nproc", "4"],
     "world 4 is not stages x dp x tp of this suite: pp(2) * dp(2) * tp(2) = 8 != world(4); choose a world of stages x 4"),
    (["pipeline", "--tp", "3"], "tp degree 3 does not divide width 512 of mlp-pipe"),
    (["pipeline", "--dp", "3"], "batch 4096 is not divisible by dp(3); choose a multiple of 3"),
    (["pipeline", "--fsdp", "0"], "fsdp 0 must be >= 1"),
    (["pipeline", "--tp", "2,4"], "tp takes one value, got 2,4"),
    (["pipeline", "--checkpoint", "sometimes"], "unknown checkpoint mode 'sometimes'"),
]


@pytest.mark.parametrize("argv,message", CLI_CASES, ids=[c[1][:32] for c in CLI_CASES])
def test_bad_input_is_one_line_exit_2(argv, message, tmp_path, capsys):
    from bench.cli import main

    out = tmp_path / "results"
    rc = main([*argv, "--out", str(out)])
    assert_usage_error(rc, capsys.readouterr().err, message, out)


@pytest.mark.slow
def test_make_bench_pipeline_end_to_end(tmp_path):
    """`make bench-pipeline CHUNKS=1,2` on the tiny preset: rows, per-rank and per-step tables,
    memory fields typed, correctness checked, summary printed."""
    out = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(["make", "-s", "bench-pipeline", "CHUNKS=1,2", "PYTHON_BIN=" + sys.executable,
                        f"ARGS=--model mlp-tiny --batch 8 --steps 5 --warmup 1 --out {out}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "# Summary" in p.stdout and "1f1b skipped for chunks 1" in p.stdout
    run = next((out / "pipeline").iterdir())
    res = pd.read_parquet(run / "results.parquet")
    stored = load_run(run)
    assert set(res["kind"]) == {KIND.name} and stored.meta["kind"] == KIND.name  # one name everywhere
    assert sorted(zip(res.schedule, res.chunks)) == [("1f1b", 2), ("gpipe", 1), ("gpipe", 2)]
    assert (res.wrong == 0).all() and (res.checks == 1).all()
    assert (res.steps >= 5).all()
    for col in ("bubble_measured", "bubble_gpipe_theory", "bubble_megatron_theory", "replay_bubble",
                "replay_schedule_bubble", "step_median_s", "samples_per_s"):
        assert res[col].notna().all(), col
    assert res.loc[res.chunks == 1, "bubble_gpipe_theory"].iloc[0] == 0.5
    ranks = pd.read_parquet(run / "strategy_ranks.parquet")
    assert len(ranks) == 2 * len(res)
    assert (ranks.memory_kind == "host").all()
    assert str(ranks.host_peak_rss_bytes.dtype) in ("int64", "Int64") and (ranks.host_peak_rss_bytes > 0).all()
    assert ranks.peak_allocated_bytes.isna().all()  # CUDA-only fields are null on CPU, not zero
    steps = pd.read_parquet(run / "strategy_steps.parquet")
    assert len(steps) == sum(res.steps) * 2
    total = steps.compute_s + steps.idle_s + steps.exposed_comm_s + steps.overhead_s
    assert ((total - steps.step_wall_s).abs() < 1e-6 + 1e-3 * steps.step_wall_s).all()
    eff = pd.read_parquet(run / "microbatch_efficiency.parquet")
    assert sorted(eff.chunks) == [1, 2] and math.isclose(eff.loc[eff.chunks == 1, "relative_throughput"].iloc[0], 1.0)
