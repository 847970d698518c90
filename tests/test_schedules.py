"""Every torch.distributed.pipelining schedule (issue 21): the rules and placements against
torch's own classes, the replay of torch's own action order, the exact bubble of the timed
workload, the split backward's I and W actions, waits split into wait-for-peer and transfer."""

import types

import pytest
import torch
import torch.nn as nn

from bench.errors import BenchError
from bench.pipeline.config import PipelineConfig, expand_pipeline
from bench.training import schedules as S
from bench.training.breakdown import breakdown
from bench.training.measure import _minus, step_spans
from bench.training.pp import validate
from bench.training.replay import exact_durations, from_pipeline_order, gpipe_order, replay
from bench.training.theory import gpipe_bubble
from bench.workloads.models import build_model, get_spec, split_pieces
from test_breakdown_peers import COMPUTE, SPANS, WAITS

MULTI = [s for s in S.SCHEDULES_TABLE if s.per_rank > 1]


def torch_orders(sch, p: int, m: int) -> dict:
    """torch's own schedule object, built per rank on stand-in stages (no process group): the
    compute actions of pipeline_order_with_comms (what _PipelineScheduleRuntime executes)."""
    cls = S.torch_class(sch.name)
    stages = [types.SimpleNamespace(num_stages=p * sch.per_rank, group_size=p, group_rank=0, stage_index=s,
                                    submod=nn.Linear(1, 1)) for s in sch.stage_ids(0, p)]
    return from_pipeline_order(cls(stages, m).pipeline_order_with_comms)


@pytest.mark.parametrize("sch", MULTI, ids=[s.name for s in MULTI])
def test_rules_are_torchs(sch):
    """Our rule refuses exactly the (ranks, chunks) that torch's class refuses."""
    cls = S.torch_class(sch.name)
    for p in (2, 3, 4):
        for m in range(1, 13):
            stages = [types.SimpleNamespace(num_stages=2 * p, group_size=p, group_rank=0, stage_index=s,
                                            submod=nn.Linear(1, 1)) for s in sch.stage_ids(0, p)]
            try:
                cls(stages, m)
                torch_ok = True
            except ValueError:
                torch_ok = False
            assert (sch.rule(p, m) is None) == torch_ok, (sch.name, p, m)


@pytest.mark.parametrize("sch", MULTI, ids=[s.name for s in MULTI])
@pytest.mark.parametrize("p", [2, 4])
def test_replay_covers_torchs_order(sch, p):
    """torch's order holds every action once, on the rank our placement puts its stage, and
    replays without a dependency cycle."""
    m = 2 * p
    order = torch_orders(sch, p, m)
    kinds = "FIW" if sch.split_backward else "FB"
    n = p * sch.per_rank
    seen = {}
    for r, acts in order.items():
        for s, k, i in acts:
            assert sch.rank_of(s, p) == r and s in sch.stage_ids(r, p)
            seen[(s, k, i)] = seen.get((s, k, i), 0) + 1
    want = {(s, k, i) for s in range(n) for k in kinds for i in range(m)}
    if sch.name == "dualpipev":  # some backwards run whole (B) instead of I then W
        got = {(s, "I" if k == "B" else k, i) for (s, k, i) in seen} | {(s, "W", i) for (s, k, i) in seen if k == "B"}
        assert got == want
    else:
        assert set(seen) == want and set(seen.values()) == {1}
    rp = replay(order, {(s, k): 1.0 for s in range(n) for k in "FBIW"}, n)
    assert 0 <= rp.mean_bubble < 1


def test_placements():
    zbv, inter = S.get("zbv"), S.get("interleaved")
    assert [zbv.stage_ids(r, 4) for r in range(4)] == [[0, 7], [1, 6], [2, 5], [3, 4]]
    assert [inter.stage_ids(r, 4) for r in range(4)] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert [zbv.rank_of(s, 4) for s in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    assert S.get("gpipe").stage_ids(3, 4) == [3]


def test_names_and_aliases():
    assert S.SCHEDULES == ("gpipe", "1f1b", "interleaved", "looped_bfs", "interleaved_zb", "zbv", "dualpipev")
    assert [S.canonical(n) for n in ("ZBVZeroBubble", "dualpipev", "Interleaved1F1B", "LOOPEDBFS")] == \
        ["zbv", "dualpipev", "interleaved", "looped_bfs"]
    with pytest.raises(BenchError, match="unknown schedule 'zbvv'"):
        S.canonical("zbvv")
    cfg = PipelineConfig(model="mlp-tiny", schedules=("ZBVZeroBubble", "gpipe"), chunks=(4,), batch=8)
    assert cfg.schedules == ("zbv", "gpipe")
    from bench.strategies.config import StrategiesConfig

    assert StrategiesConfig(strategies=("pp",), schedule="DualPipeV").schedule == "dualpipev"


def test_a_schedule_the_installed_torch_lacks_is_refused(monkeypatch):
    from torch.distributed.pipelining import schedules as ts

    monkeypatch.delattr(ts, "ScheduleDualPipeV")
    with pytest.raises(BenchError) as e:
        PipelineConfig(model="mlp-tiny", schedules=("dualpipev",), chunks=(4,), batch=8)
    msg = str(e.value)
    assert "schedule dualpipev needs torch.distributed.pipelining.ScheduleDualPipeV" in msg
    assert f"torch {torch.__version__} does not have" in msg and "allowed here: gpipe, 1f1b" in msg


@pytest.mark.parametrize("kw,message", [
    ({"schedule": "interleaved", "chunks": 5, "batch": 10},
     "schedule interleaved needs chunks divisible by its rounds max(1, chunks // stages) (torch's rule): "
     "chunks 5 % rounds 2 = 1"),
    ({"schedule": "interleaved_zb", "chunks": 7, "batch": 14}, "chunks 7 % rounds 3 = 1"),
    ({"schedule": "dualpipev", "chunks": 2}, "schedule dualpipev needs chunks >= pipeline stages (2 x 2 ranks = 4): "
                                             "chunks 2 < 4"),
    ({"schedule": "zbv", "chunks": 2, "balance": (2, 2)}, "schedule zbv with 2 stages needs 4"),
    ({"schedule": "looped_bfs", "chunks": 2, "depth": 3}, "the model has 3 layers, fewer than the 4 pipeline stages"),
])
def test_cases_a_schedule_cannot_run_are_refused(kw, message):
    args = {"stages": 2, "batch": 8, "depth": 8, **kw}
    with pytest.raises(BenchError) as e:
        validate(**args)
    assert message in str(e.value)


@pytest.mark.parametrize("argv,message", [
    (["--schedule", "dualpipev", "--chunks", "2"], "schedule dualpipev needs chunks >= pipeline stages (2 x 2 ranks = 4)"),
    (["--schedule", "zbv", "--chunks", "4", "--model", "mlp-tiny", "--stages", "4"],
     "mlp-tiny has 4 layers, fewer than the 8 pipeline stages"),
    (["--schedule", "zbvzerobubbl"], "unknown schedule 'zbvzerobubbl' (did you mean"),
])
def test_refused_before_the_launch_one_line_exit_2(argv, message, tmp_path, capsys):
    from bench.cli import main
    from conftest import assert_usage_error

    out = tmp_path / "results"
    rc = main(["pipeline", *argv, "--out", str(out)])
    assert_usage_error(rc, capsys.readouterr().err, message, out)


def test_every_schedule_expands():
    cfg = PipelineConfig(model="timed", stages=(2, 4), chunks=(8,), batch=16, schedules=S.SCHEDULES)
    cases, notes = expand_pipeline(cfg)
    assert sorted((c.world, c.schedule) for c in cases) == sorted((w, s) for w in (2, 4) for s in S.SCHEDULES)
    assert not notes


def test_exact_durations_of_the_timed_workload():
    spec = get_spec("timed")  # 8 blocks, F = I = W = t; block 0's input needs no gradient
    t = spec.fwd_s
    assert spec.bwd_input_s == spec.bwd_weight_s == t
    bounds = split_pieces(spec, (4, 4))
    full = exact_durations(spec, bounds, split=False)
    assert full[(0, "F")] == pytest.approx(4 * t) and full[(0, "B")] == pytest.approx(7 * t)
    assert full[(1, "B")] == pytest.approx(8 * t) and full[(1, "I")] == pytest.approx(4 * t)
    split = exact_durations(spec, bounds, split=True)  # the first stage runs its whole backward as W
    assert split[(0, "I")] == 0.0 and split[(0, "W")] == pytest.approx(7 * t)
    assert split[(1, "I")] == pytest.approx(4 * t) and split[(1, "W")] == pytest.approx(4 * t)
    slow = get_spec("timed-slow")  # block 2 at 2x: of 4 stages x 2 blocks, stage 1 holds blocks 2-3
    d = exact_durations(slow, split_pieces(slow, (2, 2, 2, 2)), split=True)
    assert d[(1, "F")] == pytest.approx(3 * t) and d[(1, "W")] == pytest.approx(3 * t) and d[(2, "F")] == pytest.approx(2 * t)


def test_exact_bubble_of_gpipe_is_the_formula():
    """Equal stages, B = 2F: the replayed exact bubble is GPipe's (p-1)/(m+p-1)."""
    p, m = 4, 8
    dur = {(s, k): (1.0 if k == "F" else 2.0) for s in range(p) for k in "FB"}
    assert replay(gpipe_order(p, m), dur).mean_bubble == pytest.approx(gpipe_bubble(p, m))


def test_exact_bubble_of_interleaved_is_narayanans_form():
    sch, p, m = S.get("interleaved"), 2, 4
    dur = {(s, k): 1.0 for s in range(4) for k in "FB"}
    assert replay(torch_orders(sch, p, m), dur).mean_bubble == pytest.approx(S.theory_bubble("interleaved", p, m))


def test_theory_formulas():
    assert S.theory_bubble("gpipe", 4, 8) == pytest.approx(3 / 11)
    assert S.theory_bubble("looped_bfs", 4, 8) == pytest.approx(3 / 19)
    assert S.theory_bubble("zbv", 4, 8) == 0.0  # F = I = W: ZB-V is bubble free
    # ZB-H1: T = (p-1)(F+I-W) = 3 over v m (F+I+W) = 48 of work
    assert S.theory_bubble("interleaved_zb", 4, 8) == pytest.approx(3 / 51)
    # DualPipeV: T = (p-1)(F&B + B - 3W) = 3 (3 + 2 - 3) = 6
    assert S.theory_bubble("dualpipev", 4, 8) == pytest.approx(6 / 54)
    assert S.theory_bubble("interleaved_zb", 2, 4, f=1, i=1, w=3) == 0.0  # negative bubble time: none


def test_timed_block_runs_input_and_weight_gradients_apart(monkeypatch):
    """torch's split backward on the timed blocks: the I action sleeps only the input-gradient
    times, the W action only the weight-gradient times (no clock read: the sleeps are counted)."""
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

    from bench.workloads import models

    slept = []
    spec = get_spec("timed-slow")
    t = spec.fwd_s
    monkeypatch.setattr(models.time, "sleep", lambda s: slept.append(round(s / t, 6)))  # in units of t
    model = build_model(spec, 0)[2:4]  # blocks 2 (2x slow) and 3
    x = torch.randn(4, spec.width, requires_grad=True)
    out = model(x)
    assert slept == [2, 1]  # forwards
    slept.clear()
    _, groups = stage_backward_input([out], [torch.ones_like(out)], [x], model.parameters())
    assert sorted(slept) == [1, 2] and x.grad is not None and all(p.grad is None for p in model.parameters())
    slept.clear()
    stage_backward_weight(model.parameters(), groups)
    assert sorted(slept) == [1, 2] and all(p.grad is not None for p in model.parameters())


def test_waits_are_split_into_wait_for_peer_and_transfer():
    bd = breakdown(SPANS, COMPUTE, WAITS)
    # rank 2 waits 0-3 on rank 1: 0-1 (rank 1 itself waits on computing rank 0) and 1.5-2.5
    # (rank 1 computes) are waiting for a peer; 1-1.5 and 2.5-3 are transfers
    assert bd[2].wait_pieces == ((0.0, 1.0), (1.5, 2.5))
    assert bd[2].stalled_by == ((0, 1.0), (1, 1.0))  # the first second is rank 0's, through rank 1
    assert bd[1].wait_pieces == ((0.0, 1.0),) and bd[1].stalled_by == ((0, 1.0),)
    assert bd[0].wait_pieces == () and bd[0].stalled_by == ()
    facts = [{"recs": [{"span": SPANS[r], "spans": [("fwd", r, 0, a, b) for a, b in COMPUTE[r]], "waits": WAITS[r]}]}
             for r in range(3)]
    rows = step_spans({"run_id": "x", "case_id": "c"}, facts, 0, bd)
    r2 = sorted((x["action"], x["start_s"], x["end_s"]) for x in rows if x["rank"] == 2 and x["action"] in ("wait", "comm"))
    assert r2 == [("comm", 1.0, 1.5), ("comm", 2.5, 3.0), ("wait", 0.0, 1.0), ("wait", 1.5, 2.5)]
    assert _minus(0.0, 3.0, [(0.0, 1.0), (1.5, 2.5)]) == [(1.0, 1.5), (2.5, 3.0)]


@pytest.mark.slow
def test_every_schedule_on_a_real_pipeline_is_right(tmp_path):
    """All seven schedules at world 2 on mlp-tiny: loss and every gradient equal the
    single-process reference (wrong == 0), I and W timed apart where the schedule splits them."""
    from bench.cli import main

    out = tmp_path / "results"
    rc = main(["pipeline", "--model", "mlp-tiny", "--schedule", ",".join(S.SCHEDULES), "--chunks", "4", "--batch", "8",
               "--steps", "5", "--warmup", "0", "--no-efficiency", "--no-telemetry", "--out", str(out)])
    assert rc == 0
    import pandas as pd

    run = next((out / "pipeline").iterdir())
    res = pd.read_parquet(run / "results.parquet")
    assert sorted(res.schedule) == sorted(S.SCHEDULES)
    assert (res.wrong == 0).all() and (res.checks == 1).all()
    split = res.schedule.isin([s.name for s in S.SCHEDULES_TABLE if s.split_backward])
    assert (res.loc[split, "bwd_input_s"] > 0).all() and (res.loc[split, "bwd_weight_s"] > 0).all()
    assert (res.loc[~split, "bwd_input_s"] == 0).all()
    assert res.bubble_exact.isna().all() and res.bubble_theory.notna().all()
    assert set(res.stage_placement) == {"loop", "v"}


@pytest.mark.slow
def test_timed_workload_exact_bubble_and_delay(tmp_path):
    """The yardstick end to end (ZB-V, world 2, 4 chunks, block 2 slow): bubble_exact is the
    replay of torch's own order with the known times; the exact per-rank bubble says the fast
    rank idles more, and its stalls are charged to the slow stage's rank. No timing is asserted."""
    from bench.cli import main
    import pandas as pd

    out = tmp_path / "results"
    rc = main(["pipeline", "--model", "timed-slow", "--schedule", "zbv", "--chunks", "4", "--batch", "8",
               "--steps", "5", "--warmup", "0", "--check", "0", "--no-efficiency", "--no-telemetry", "--out", str(out)])
    assert rc == 0
    run = next((out / "pipeline").iterdir())
    res = pd.read_parquet(run / "results.parquet").iloc[0]
    spec = get_spec("timed-slow")
    want = replay(torch_orders(S.get("zbv"), 2, 4), exact_durations(spec, split_pieces(spec, (2, 2, 2, 2)), split=True))
    assert res["bubble_exact"] == pytest.approx(want.mean_bubble) and res["exact_step_s"] == pytest.approx(want.step_s)
    assert 0 <= res["bubble_measured"] < 1 and res["bubble_theory"] == 0.0  # ZB-V: (p-1)(F+I-2W) < 0 with these mean chunk times
    ranks = pd.read_parquet(run / "strategy_ranks.parquet").set_index("rank")
    # V placement, 4 stages of 2 blocks: block 2 (slow) is in stage 1, on rank 1; rank 0 waits on it
    assert ranks.loc[0, "bubble_exact"] == pytest.approx(want.bubble[0]) and want.bubble[0] > want.bubble[1]
    assert ranks.loc[0, "stalled_by"].startswith("1:")
    spans = pd.read_parquet(run / "strategy_spans.parquet")
    assert {"wait", "bwd_input", "bwd_weight", "fwd"} <= set(spans.action)


def test_an_overlapped_pair_sends_its_outputs_when_the_pair_ends():
    """torch's OVERLAP_F_B (DualPipeV) runs its sub-actions one after the other and then their sends
    (_add_send_recv appends them after the whole action): another rank gets the first sub-action's
    output when the pair ends; the same rank (the V's turn) has it at once."""
    from bench.training.replay import Order, replay

    acts = {0: [(0, "F", 0), (0, "F", 1), (0, "B", 0), (0, "B", 1)],
            1: [(1, "F", 0), (1, "B", 0), (1, "F", 1), (1, "B", 1)]}
    dur = {(s, k): 1.0 for s in (0, 1) for k in ("F", "B")}
    plain = replay(dict(acts), dur)
    paired = replay(Order(acts, {(0, "F", 0): (0, "F", 1)}), dur)
    assert plain.timeline[(1, "F", 0)][1] == 1.0
    assert paired.timeline[(1, "F", 0)][1] == 2.0
    same_rank = replay(Order({0: acts[0][:2] + [(1, "F", 0), (1, "B", 0), (1, "F", 1), (1, "B", 1)] + acts[0][2:]},
                             {(0, "F", 0): (0, "F", 1)}), dur)
    assert same_rank.timeline[(1, "F", 0)][1] == 2.0  # after the pair on its own rank: no send


def test_dualpipev_exact_bubble_counts_the_pairs_sends():
    from bench.plan.model import torch_order

    order = torch_order("dualpipev", 4, 8)
    assert order.sent_with and all(a[1] == "F" for a in order.sent_with)
