"""distbench plan across layouts: pp x dp x fsdp x tp candidates composed from a pipeline calibration
and the target machine's collectives (bench.plan.comm, plan_compose), each term an exact
formula here; validation over held-out layouts with Kendall's tau and the top pick's shortfall."""

import json
import statistics

import pandas as pd
import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.plan import model as pl
from bench.plan import comm as pc
from bench.plan import fit as pf
from bench.plan import search as ps
from bench.plan import validate as pv
from bench.training.replay import replay

from plan_fixtures import BASE, CAL, OVERHEAD, PER_SAMPLE, TRUE, machine_meta, order_of, stored

# The target machine's collectives, exact alpha-beta lines (seconds, S in bytes)
AR = (10e-6, 1 / 1e9)  # all_reduce at 2 ranks, one node
AG = (20e-6, 1 / 2e9)  # all_gather
RS = (15e-6, 1 / 2e9)  # reduce_scatter
AR_INTER = (50e-6, 1 / 1e8)  # all_reduce at 2 ranks across two nodes
SIZES = (1024, 2**20, 2**24)

# mlp-pipe (width 512, depth 8) in 2 stages of 4 blocks: one tp rank holds, per stage, a Colwise
# block (w^2 + w) / 2 and a Rowwise one w^2 / 2 + w, twice; a whole stage is 4 (w^2 + w).
W = 512
P_FULL = 4 * (W * W + W)
P_TP2 = 2 * ((W * W + W) / 2 + W * W / 2 + W)
BOUNDARY = W * 4  # float32 activation per sample at a layer's output


def t(line, nbytes):
    return line[0] + nbytes * line[1]


def comm_rows(inter=False):
    rows = [(c, 2, "intra", s, t(line, s)) for c, line in (("all_reduce", AR), ("all_gather", AG),
                                                           ("reduce_scatter", RS)) for s in SIZES]
    return rows + ([("all_reduce", 2, "inter", s, t(AR_INTER, s)) for s in SIZES] if inter else [])


def comm_run(tmp_path, name="comm", meta=None, inter=False):
    """A stored collectives run (as distbench collectives writes it) of the exact lines above."""
    d = tmp_path / name
    d.mkdir()
    pd.DataFrame([{"run_id": name, "case_id": f"{c}.{s}.{scope}", "collective": c, "world": n, "size_bytes": s,
                   "nodes": 2 if scope == "inter" else 1, "time_median_s": y}
                  for c, n, scope, s, y in comm_rows(inter)]).to_parquet(d / "results.parquet")
    (d / "meta.json").write_text(json.dumps({"run_id": name, "kind": "collectives", "suite": "collectives",
                                             **machine_meta(), **(meta or {})}))
    return d


def test_the_alpha_beta_of_each_collective_is_recovered_and_scaled_to_an_unmeasured_group():
    comm = pc.fit_rows(comm_rows(inter=True), "collectives run comm")
    f = comm.fits[("all_reduce", 2, "intra", 1)]
    assert (f.alpha_s, f.beta_s_per_byte) == (pytest.approx(AR[0], rel=1e-9), pytest.approx(AR[1], rel=1e-9))
    assert comm.seconds("all_reduce", 2, 4096, "inter") == (pytest.approx(t(AR_INTER, 4096)), "")
    assert comm.seconds("all_reduce", 1, 4096) == (0.0, "")
    # 4 ranks from 2: alpha x (4 - 1) / (2 - 1), beta x (2 * 3 / 4) / (2 * 1 / 2) (the ring's factors)
    got, note = comm.seconds("all_reduce", 4, 2**20)
    assert got == pytest.approx(3 * AR[0] + 2**20 * AR[1] * 1.5) and note == "all_reduce at 4 ranks scaled from 2 (ring)"
    got, note = comm.seconds("all_gather", 2, 4096, "inter")
    assert got == pytest.approx(t(AG, 4096)) and note == "all_gather inter-node not measured (used intra-node)"
    assert pc.none().seconds("all_reduce", 2, 4096) == (0.0, "all_reduce not measured in " + pc.DEFAULT + " (term 0)")


def test_each_source_is_named_from_the_run(tmp_path):
    assert pc.comm_of(comm_run(tmp_path, "c1")).source == "collectives run c1"
    assert pc.comm_of(comm_run(tmp_path, "c2", {"source": {"tool": "nccl-tests"}})).source == "nccl-tests import c2"
    sim = {"simcluster": {"nodes": [{"link_rate": "500 Mbit/s"}, {"link_rate": "500 Mbit/s"}], "ranks_per_node": 2}}
    got = pc.comm_of(comm_run(tmp_path, "c3", sim))
    assert got.source == "simcluster link 500 Mbit/s (run c3)" and got.ranks_per_node == 2
    assert pc.comm_of(comm_run(tmp_path, "c1b")).ranks_per_node == 0  # one node
    two = machine_meta(nodes=2, world=4)  # 4 ranks over 2 nodes
    assert pc.comm_of(comm_run(tmp_path, "c5", two)).ranks_per_node == 2
    got = pc.comm_of(comm_run(tmp_path, "c4", inter=True))
    assert ("all_reduce", 2, "inter", 1) in got.fits and ("all_reduce", 2, "intra", 1) in got.fits


AR_SHARED = (2e-3, 1 / 4e8)  # all_reduce at 2 ranks while another group of 2 runs it on the same cores


def test_a_layouts_groups_are_priced_as_measured_running_at_once(tmp_path):
    """A --group-size run's rows (world 4, groups of 2, two at once) fit apart from the whole-world
    ones; a pp2 x tp2 candidate (two tp groups at once) takes them, and says so where it cannot."""
    d = comm_run(tmp_path, "split")
    df = pd.read_parquet(d / "results.parquet")
    split = pd.DataFrame([{"run_id": "split", "case_id": "all_reduce.w4.g2", "collective": "all_reduce", "world": 4,
                           "group_size": 2, "groups": 2, "size_bytes": s, "nodes": 1,
                           "time_median_s": t(AR_SHARED, s)} for s in SIZES])
    pd.concat([df, split]).to_parquet(d / "results.parquet")
    comm = pc.comm_of(d)
    assert comm.seconds("all_reduce", 2, 4096) == (pytest.approx(t(AR, 4096)), "")  # alone: the world-2 rows
    assert comm.seconds("all_reduce", 2, 4096, at_once=2) == (pytest.approx(t(AR_SHARED, 4096)), "")
    got, note = comm.seconds("all_gather", 2, 4096, at_once=2)
    assert got == pytest.approx(t(AG, 4096)) and note == "all_gather measured with 1 group(s) at once, the layout runs 2"
    cals = pf.fit_layouts(CAL, order_of)
    cand = pl.Candidate(stages=2, tp=2, schedule="1f1b", chunks=4, micro_batch=256)
    p = ps.predict(cals, cand, where=ps.Where(comm=comm))
    ar = t(AR_SHARED, 256 * BOUNDARY)
    want = _replayed("1f1b", 4, 256, {(0, "F"): 2 * ar, (0, "B"): ar, (1, "F"): 2 * ar, (1, "B"): 2 * ar}, tp=2)
    assert p.step_s == pytest.approx(want, rel=1e-6) and "group(s) at once" not in p.extrapolated
    alone = ps.predict(cals, cand, where=ps.Where(comm=pc.fit_rows(comm_rows(), "collectives run comm")))
    assert "all_reduce measured with 1 group(s) at once, the layout runs 2" in alone.extrapolated


def test_the_fits_take_the_throughput_rows_where_the_run_has_both_modes(tmp_path):
    """A step issues its collectives back to back, no barrier before each: throughput-mode rows
    (the groups unaligned) are taken over latency-mode ones (a barrier aligns every group)."""
    d = comm_run(tmp_path, "modes")
    df = pd.read_parquet(d / "results.parquet").assign(mode="latency")
    fast = df[df.collective == "all_reduce"].assign(mode="throughput", time_median_s=lambda x: x.time_median_s / 2)
    pd.concat([df, fast]).to_parquet(d / "results.parquet")
    comm = pc.comm_of(d)
    assert comm.seconds("all_reduce", 2, 4096)[0] == pytest.approx(t(AR, 4096) / 2)
    assert comm.seconds("all_gather", 2, 4096)[0] == pytest.approx(t(AG, 4096))  # latency only: taken
    assert comm.source == "collectives run modes (throughput, latency mode)"
    assert pc.comm_of(comm_run(tmp_path, "nomode")).source == "collectives run nomode"


def test_a_group_wider_than_a_node_uses_the_inter_node_figures():
    """Mesh (pp, dp, fsdp, tp), tp innermost: a tp group is tp consecutive ranks, fsdp spans tp x fsdp."""
    assert pc.scopes(2, 1, 1, 0) == {"tp": "intra", "fsdp": "intra", "dp": "intra", "pp": "intra"}
    assert pc.scopes(2, 2, 1, 2) == {"tp": "intra", "fsdp": "inter", "dp": "inter", "pp": "inter"}
    assert pc.scopes(2, 1, 1, 4) == {"tp": "intra", "fsdp": "intra", "dp": "intra", "pp": "intra"}
    assert pc.scopes(2, 1, 1, 4, tp_across=True)["tp"] == "inter"


def _replayed(schedule, m, b, extra, tp=1, step=0.0):
    """The pipeline of the fixtures (TRUE lines, OVERHEAD per action) replayed with each action's
    compute / tp plus `extra[(stage, kind)]`, plus `step` once."""
    order = order_of(schedule, 2, m)
    return replay(order, {k: ln.at(b) / tp + OVERHEAD + extra.get(k, 0.0) for k, ln in TRUE.items()}).step_s + step


def test_pp_x_tp_is_the_pipeline_split_over_tp_plus_its_all_reduces_and_sharded_state():
    cals = pf.fit_layouts(CAL, order_of)
    where = ps.Where(comm=pc.fit_rows(comm_rows(), "collectives run comm"))
    p = ps.predict(cals, pl.Candidate(stages=2, tp=2, schedule="1f1b", chunks=4, micro_batch=256), where=where)
    ar = t(AR, 256 * BOUNDARY)  # one all-reduce of the micro-batch's activation per pair each way, but the
    # model's input needs no gradient: stage 0's first pair has no backward one
    want = _replayed("1f1b", 4, 256, {(0, "F"): 2 * ar, (0, "B"): ar, (1, "F"): 2 * ar, (1, "B"): 2 * ar}, tp=2)
    assert p.step_s == pytest.approx(want, rel=1e-6)
    assert p.comm_source == "collectives run comm" and p.candidate.world == 4
    # memory: base - 8 B x P_full + 8 B x P_tp2 + q x held x b x (the stage's activations under tp / alone)
    held = pl.inflight(order_of("1f1b", 2, 4))
    ratio = {0: (4 * W * 2 / 2 + W) / (4 * W * 2 + W), 1: 0.5}
    want_peak = max(BASE[r] - 8 * P_FULL + 8 * P_TP2 + PER_SAMPLE * held[r] * 256 * ratio[r] for r in (0, 1))
    assert p.peak_bytes == pytest.approx(want_peak, rel=1e-6)
    assert "2 rank(s) per stage not calibrated" in p.extrapolated


PIECE = W * W + W  # one MLP block's parameters: FSDP2 shards (and gathers) each piece on its own
GATHERS = {"gpipe": {0: {"F0", "F1", "F2", "F3", "B0"}, 1: {"F0", "F1", "F2", "F3", "B0"}},
           "1f1b": {0: {"F0", "F1", "B0", "B1", "B2"}, 1: {"F0", "B0", "B1", "B2", "B3"}}}


def test_fsdp_gathers_a_stage_only_where_torchs_pipelining_left_it_sharded():
    """torch.distributed.pipelining reshards after every forward (reshard_after_forward) and keeps
    the parameters between backward micro-batches (set_reshard_after_backward(False)): an action
    gathers where its stage is sharded: in GPipe every F and the first B; in 1F1B's steady state
    the B (after an F) and not the F (after a B)."""
    from bench.plan.compose import fsdp_gathers

    for schedule, want in GATHERS.items():
        got = fsdp_gathers(order_of(schedule, 2, 4))
        assert {s: {f"{k}{i}" for ss, k, i in got if ss == s} for s in (0, 1)} == want, schedule


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pp_x_fsdp_gathers_every_piece_where_sharded_and_reduce_scatters_every_piece_once(schedule):
    cals = pf.fit_layouts(CAL, order_of)
    where = ps.Where(comm=pc.fit_rows(comm_rows(), "collectives run comm"))
    p = ps.predict(cals, pl.Candidate(stages=2, fsdp=2, schedule=schedule, chunks=4, micro_batch=128), where=where)
    ag, rs = 4 * t(AG, PIECE * 4), 4 * t(RS, PIECE * 4)  # 4 pieces a stage, one collective each
    order = order_of(schedule, 2, 4)
    dur = {k: ln.at(128) + OVERHEAD for k, ln in TRUE.items()}
    dur.update({(s, a[0], int(a[1:])): dur[(s, a[0])] + ag for s in (0, 1) for a in GATHERS[schedule][s]})
    assert p.step_s == pytest.approx(replay(order, dur).step_s + rs, rel=1e-6)
    assert p.comm_s["fsdp_reduce_scatter_s"] == pytest.approx(rs)
    assert p.comm_s["tp_fsdp_per_action_s"] == pytest.approx(5 * ag)  # per step, on the busiest rank
    held = pl.inflight(order)
    largest = W * W + W  # one block gathered with its gradient: 8 B x the largest piece
    want_peak = max(BASE[r] - 8 * P_FULL + 8 * P_FULL / 2 + 8 * largest + PER_SAMPLE * held[r] * 128 for r in (0, 1))
    assert p.peak_bytes == pytest.approx(want_peak, rel=1e-6)


def test_an_uncalibrated_dp_with_collectives_pays_the_gradient_all_reduce():
    cals = pf.fit_layouts(CAL, order_of)
    where = ps.Where(comm=pc.fit_rows(comm_rows(), "collectives run comm"))
    p = ps.predict(cals, pl.Candidate(stages=2, dp=2, schedule="1f1b", chunks=4, micro_batch=128), where=where)
    assert p.step_s == pytest.approx(_replayed("1f1b", 4, 128, {}, step=t(AR, P_FULL * 4)), rel=1e-6)
    # without a communication calibration it stays the floor it was, and says so
    floor = ps.predict(cals, pl.Candidate(stages=2, dp=2, schedule="1f1b", chunks=4, micro_batch=128))
    assert floor.step_s == pytest.approx(_replayed("1f1b", 4, 128, {}), rel=1e-6)
    assert "dp 2 not calibrated" in floor.extrapolated


def test_without_collectives_a_composed_term_is_zero_and_marked():
    cals = pf.fit_layouts(CAL, order_of)
    p = ps.predict(cals, pl.Candidate(stages=2, tp=2, schedule="1f1b", chunks=4, micro_batch=256))
    assert p.step_s == pytest.approx(_replayed("1f1b", 4, 256, {}, tp=2), rel=1e-6)
    assert p.comm_source == pc.DEFAULT and pc.DEFAULT in p.extrapolated


def test_tp_across_nodes_uses_the_inter_node_all_reduce():
    cals = pf.fit_layouts(CAL, order_of)
    comm = pc.fit_rows(comm_rows(inter=True), "collectives run comm")
    cand = pl.Candidate(stages=2, tp=2, schedule="1f1b", chunks=4, micro_batch=256)
    p = ps.predict(cals, cand, where=ps.Where(comm=comm, ranks_per_node=2, tp_across=True))
    ar = t(AR_INTER, 256 * BOUNDARY)
    assert p.step_s == pytest.approx(_replayed("1f1b", 4, 256, {(0, "F"): 2 * ar, (0, "B"): ar, (1, "F"): 2 * ar,
                                                                (1, "B"): 2 * ar}, tp=2), rel=1e-6)


def test_candidates_cover_every_layout_of_a_world_and_refuse_what_cannot_run():
    cals = pf.fit_layouts(CAL, order_of)
    cands, skipped = ps.candidates(cals, [2, 4], ["gpipe", "zbv"], [4], 1024, dps=[1, 2], tps=[1, 2], fsdps=[1, 2])
    at4 = {c.layout for c in cands if c.world == 4}
    assert at4 == {"pp4", "pp2 dp2", "pp2 fsdp2", "pp2 tp2"}
    assert not any(c.dp > 1 and c.fsdp > 1 for c in cands)
    assert any("fsdp inside the stages is refused with split-backward schedules" in s for s in skipped)
    with pytest.raises(BenchError, match="calibration runs hold composed layouts"):
        pf.fit_layouts([pl.Observation(**{**CAL[0].__dict__, "tp": 2})], order_of)


def test_kendall_tau_shortfall_and_per_layout_errors_on_known_rows():
    def row(layout_tp, chunks, pred, meas, peak=(100.0, 100.0), stages=2):
        return {"run_id": "v", "case_id": f"c{chunks}", "candidate": f"tp{layout_tp} m={chunks}", "stages": stages,
                "dp": 1, "tp": layout_tp, "fsdp": 1, "layout": pl.layout_label(stages, 1, layout_tp), "chunks": chunks,
                "micro_batch": 1024 // chunks, "predicted_step_s": pred, "measured_step_s": meas,
                "predicted_bubble": float("nan"), "measured_bubble": float("nan"),
                "predicted_peak_bytes": peak[0], "measured_peak_bytes": peak[1], "comm_source": "collectives run c"}

    # predicted throughput order 1 > 2 > 3 > 4, measured 1 > 3 > 2 > 4: 5 concordant pairs, 1 discordant
    rows = [row(1, 1, 1.0, 1.0), row(1, 2, 2.0, 3.0), row(1, 4, 3.0, 2.0), row(1, 8, 4.0, 4.0)]
    (sweep,) = pv.sweeps(rows)
    assert sweep["kendall_tau"] == pytest.approx(4 / 6) and sweep["shortfall"] == 0.0
    # the model picks pp4 (fastest predicted), measured 1024 / 2.0 = 512 beside the best 1024 / 1.0
    rows = [row(1, 1, 1.0, 2.0, stages=4), row(2, 2, 1.5, 1.0, peak=(110.0, 100.0))]  # pp4 and pp2 x tp2: world 4
    got = {s["layout"]: s for s in pv.sweeps(rows)}
    assert got["2 layouts"]["shortfall"] == pytest.approx(0.5) and got["2 layouts"]["kendall_tau"] == -1.0
    assert pv.per_layout(rows) == {"pp4": {"cases": 1, "step_mape_pct": pytest.approx(50.0),
                                           "peak_mape_pct": pytest.approx(0.0), "comm_source": "collectives run c"},
                                   "pp2 tp2": {"cases": 1, "step_mape_pct": pytest.approx(50.0),
                                               "peak_mape_pct": pytest.approx(10.0),
                                               "comm_source": "collectives run c"}}


def _stored_tp(tmp_path, name, cals, comm, cases):
    """A pp2 x tp2 run whose every step and peak is what the composed model says (exact)."""
    obs = []
    for schedule, m in cases:
        c = pl.Candidate(stages=2, tp=2, schedule=schedule, chunks=m, micro_batch=1024 // m)
        p = ps.predict(cals, c, where=ps.Where(comm=comm))
        o = pl.Observation(**{**CAL[0].__dict__, "schedule": schedule, "chunks": m, "micro_batch": 1024 // m,
                              "step_s": p.step_s, "peak_bytes": {0: p.peak_bytes, 1: p.peak_bytes},
                              "case_id": f"{schedule}.m{m}.tp2", "run_id": name})
        obs.append(o)
    d = stored(tmp_path, name, obs, machine_meta(world=4))
    res = pd.read_parquet(d / "results.parquet")
    res["world"], res["pp_degree"], res["dp_degree"], res["fsdp_degree"], res["tp_degree"] = 4, 2, 1, 1, 2
    res.to_parquet(d / "results.parquet")
    return d


def test_plan_world_4_ranks_every_layout_and_validate_judges_held_out_tp(tmp_path, capsys):
    cal, comm_dir = stored(tmp_path, "cal", CAL), comm_run(tmp_path)
    comm = pc.comm_of(comm_dir)
    assert main(["plan", str(cal), "--world", "4", "--stages", "2", "--schedules", "gpipe,1f1b", "--chunks", "2,4",
                 "--comm", str(comm_dir), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {p["layout"] for p in got["recommended"]} <= {"pp2 dp2", "pp2 fsdp2", "pp2 tp2"}
    assert all(p["comm_source"] == "collectives run comm" for p in got["recommended"])
    assert main(["plan", str(cal), "--world", "4", "--stages", "2", "--schedules", "gpipe,1f1b", "--chunks", "2,4",
                 "--comm", str(comm_dir), "--top", "20"]) == 0
    text = capsys.readouterr().out
    assert "pp2 tp2 " in text and "pp2 fsdp2 " in text and "pp2 dp2 " in text and "why " in text
    cals = pf.fit_layouts(CAL, order_of)
    val = _stored_tp(tmp_path, "val", cals, comm, [("gpipe", 2), ("gpipe", 4), ("1f1b", 4)])
    assert main(["plan", str(cal), "--validate", str(val), "--comm", str(comm_dir), "--out", str(tmp_path / "o"),
                 "--format", "json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert len(v["cases"]) == 3 and v["step_mape_pct"] == pytest.approx(0.0, abs=1e-6)
    assert v["peak_mape_pct"] == pytest.approx(0.0, abs=1e-6)
    assert v["per_layout"]["pp2 tp2"]["comm_source"] == "collectives run comm"
    (sweep,) = v["sweeps"]
    assert sweep["kendall_tau"] == pytest.approx(1.0) and sweep["shortfall"] == 0.0


def test_the_plan_says_which_calibrated_layouts_shared_their_cores(tmp_path, capsys):
    """Calibration runs with more ranks than cores carry the host's time-sharing: the plan says so
    (text and JSON) instead of ranking them as if measured on free cores."""
    cal = stored(tmp_path, "cal", CAL)
    argv = ["plan", str(cal), "--stages", "2", "--schedules", "gpipe", "--chunks", "2,4"]
    assert main(argv) == 0
    assert "shared their cores" not in capsys.readouterr().out
    res = pd.read_parquet(cal / "results.parquet").assign(oversubscribed=True)
    res.to_parquet(cal / "results.parquet")
    assert main(argv) == 0
    assert ("calibration runs that shared their cores (more ranks than cores): pp2; their predictions carry "
            "that time-sharing") in capsys.readouterr().out
    assert main([*argv, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"]["oversubscribed_layouts"] == ["pp2"]


# ---- the timed family's tp plan: known times / tp and one all-reduce of a known size each way ----

def _timed_tp_block(info):
    import torch
    import torch.distributed as dist

    from bench.workloads.models import TimedBlock

    torch.manual_seed(0)
    ref = TimedBlock(16, (1e-3, 2e-3, 3e-3))
    blk = TimedBlock(16, (1e-3, 2e-3, 3e-3))
    blk.load_state_dict(ref.state_dict())
    blk.tp_shard(dist.group.WORLD, info.world)
    x = torch.randn(4, 16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    blk(x).sum().backward()
    ref(x_ref).sum().backward()
    return {"same_out": bool(torch.equal(blk(x.detach()), ref(x_ref.detach()))),
            "same_grads": bool(torch.equal(x.grad, x_ref.grad) and torch.equal(blk.weight.grad, ref.weight.grad)),
            "times": [t / blk.tp for t in blk.times], "sent": blk.sent_bytes}


def test_the_timed_tp_plan_splits_the_known_times_and_all_reduces_the_activation_each_way():
    from conftest import spawn

    got = spawn(_timed_tp_block, 2)
    for r in (0, 1):
        assert got[r]["same_out"] and got[r]["same_grads"]  # the numbers are the single-process ones
        assert got[r]["times"] == pytest.approx([0.5e-3, 1e-3, 1.5e-3])
        # forward, backward (the input gradient: x requires it here), then the second forward: 4 x 16 x 4 B each
        assert got[r]["sent"] == [4 * 16 * 4] * 3


def test_a_timed_pp_x_tp_prediction_is_the_exact_replay_of_the_known_times_plus_the_all_reduces():
    """The yardstick: calibrated on the timed pipeline alone (its known times), pp2 x tp2 is predicted
    as the replay of the known times / 2 with one all-reduce of b x width x 4 B per block in every F,
    B and I: what the timed tp plan runs."""
    from bench.training.replay import exact_durations
    from bench.workloads.models import even_balance, get_spec, split_pieces

    spec = get_spec("timed")
    bounds = split_pieces(spec, even_balance(spec.depth, 2))
    known = exact_durations(spec, bounds, split=False)
    obs = []
    for schedule, m in (("gpipe", 2), ("gpipe", 4), ("1f1b", 4)):
        order = order_of(schedule, 2, m)
        obs.append(pl.Observation(model="timed", stages=2, schedule=schedule, chunks=m, micro_batch=8 // m,
                                  step_s=replay(order, {k: v for k, v in known.items() if k[1] in "FB"}).step_s,
                                  stage_s={k: v for k, v in known.items() if k[1] in "FB"},
                                  peak_bytes={0: 1e8, 1: 1e8}, case_id=f"{schedule}{m}", run_id="cal"))
    cals = pf.fit_layouts(obs, order_of)
    comm = pc.fit_rows(comm_rows(), "collectives run comm")
    p = ps.predict(cals, pl.Candidate(stages=2, tp=2, schedule="1f1b", chunks=2, micro_batch=4),
                   where=ps.Where(comm=comm))
    ar = t(AR, 4 * spec.width * 4)
    exact = exact_durations(spec, bounds, split=False, tp=2)
    # 4 blocks per stage: 4 all-reduces in every F and B, but 3 in stage 0's B (block 0's input needs no gradient)
    ars = {(0, "F"): 4, (0, "B"): 3, (1, "F"): 4, (1, "B"): 4}
    want = replay(order_of("1f1b", 2, 2), {key: exact[key] + n * ar for key, n in ars.items()}).step_s
    assert p.step_s == pytest.approx(want, rel=1e-6)


def test_a_measured_composed_layout_is_predicted_as_measured_and_its_configurations_left_out(tmp_path, capsys):
    """pp2 x tp2 runs given as calibration: fitted as a pipeline's (their stage times hold the tp
    collectives), a pp2 x tp2 candidate is their replay, not a composition, and says so."""
    half = {k: pl.Line(a=ln.a / 2, c=ln.c / 2) for k, ln in TRUE.items()}

    def tp_obs(schedule, m, run="cal"):
        b, order = 1024 // m, order_of(schedule, 2, m)
        return pl.Observation(**{**CAL[0].__dict__, "tp": 2, "schedule": schedule, "chunks": m, "micro_batch": b,
                                 "run_id": run,
                                 "stage_s": {k: ln.at(b) for k, ln in half.items()}, "case_id": f"{schedule}{m}.tp2",
                                 "step_s": replay(order, {k: ln.at(b) + OVERHEAD for k, ln in half.items()}).step_s})

    measured = pf.fit_measured(CAL + [tp_obs("gpipe", m) for m in (1, 2, 8)] + [tp_obs("1f1b", 8)], order_of)
    assert list(measured) == [(1, 1, 2)] and measured[(1, 1, 2)].tp == 2
    cals = pf.fit_layouts(CAL, order_of)
    p = ps.predict(cals, pl.Candidate(stages=2, tp=2, schedule="1f1b", chunks=4, micro_batch=256),
                   where=ps.Where(measured=measured))
    want = replay(order_of("1f1b", 2, 4), {k: ln.at(256) + OVERHEAD for k, ln in half.items()}).step_s
    assert p.step_s == pytest.approx(want, rel=1e-6) and p.comm_source == "measured in the pp2 tp2 calibration"
    assert pv._calibrated(cals, tp_obs("gpipe", 2, run="val"), ps.Where(measured=measured))
    assert not pv._calibrated(cals, tp_obs("gpipe", 4, run="val"), ps.Where(measured=measured))


def test_oversubscribed_cases_are_scored_apart():
    def row(flag, pred, meas):
        return {"predicted_step_s": pred, "measured_step_s": meas, "predicted_peak_bytes": 1.0,
                "measured_peak_bytes": 1.0, "predicted_bubble": float("nan"), "measured_bubble": float("nan"),
                "oversubscribed": flag}

    got = pv.by_sharing([row(True, 0.9, 1.0), row(True, 0.8, 1.0), row(False, 1.01, 1.0)])
    assert got == {"oversubscribed": {"cases": 2, "step_mape_pct": pytest.approx(15.0), "peak_mape_pct": 0.0},
                   "not_oversubscribed": {"cases": 1, "step_mape_pct": pytest.approx(1.0), "peak_mape_pct": 0.0}}


@pytest.mark.parametrize("extra, message", [
    (["--ranks-per-node", "-1"], "--ranks-per-node -1 is not a rank count; give an integer >= 0"),
    (["--comm", "{cal}"], "has no collectives cases; pass a distbench collectives run"),
    (["--tp", "2,x"], "tp '2,x' is not a comma list of integers"),
    (["--tp", "3"], "tp degree 3 does not divide width 512 of mlp-pipe"),
])
def test_bad_layout_options_are_one_line(tmp_path, capsys, extra, message):
    cal = stored(tmp_path, "cal", CAL)
    argv = ["plan", str(cal), "--schedules", "gpipe", "--chunks", "4", *[a.format(cal=cal) for a in extra]]
    code = main(argv)
    out, err = capsys.readouterr()
    if message.startswith("tp degree"):  # no candidate of that degree: listed as skipped, not an error
        assert code == 0 and message in out
    else:
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err


def test_tp_and_fsdp_degrees_are_not_swapped():
    cals = pf.fit_layouts(CAL, order_of)
    cands, _ = ps.candidates(cals, [2], ["gpipe"], [4], 1024, dps=[1], tps=[2], fsdps=[1])
    assert {c.layout for c in cands} == {"pp2 tp2"}
    cands, _ = ps.candidates(cals, [2], ["gpipe"], [4], 1024, dps=[1], tps=[1], fsdps=[2])
    assert {c.layout for c in cands} == {"pp2 fsdp2"}


def test_a_composed_layout_takes_the_target_p2p_link():
    from plan_fixtures import BOUNDARY as PIPE_BOUNDARY, LINK, observe_linked

    cals = pf.fit_layouts([observe_linked(s, m) for s, m in (("gpipe", 1), ("gpipe", 2), ("gpipe", 4), ("gpipe", 8),
                                                              ("1f1b", 2), ("1f1b", 8))], order_of, link=LINK,
                          boundary_bytes=PIPE_BOUNDARY)
    slow = pl.Link(alpha_s=1e-3, beta_s_per_byte=1 / 1e8, source="inter-node", sizes=(1024, 2**26))
    cand = pl.Candidate(stages=2, tp=2, schedule="1f1b", chunks=4, micro_batch=256)
    p = ps.predict(cals, cand, link=slow)
    wire = slow.seconds(256 * PIPE_BOUNDARY)  # F of stage 0 sends forward, B of stage 1 sends back
    assert p.step_s == pytest.approx(_replayed("1f1b", 4, 256, {(0, "F"): wire, (1, "B"): wire}, tp=2), rel=1e-5)
    assert "p2p from inter-node, not the calibration's link (sendrecv-run)" in p.extrapolated


def test_communication_of_another_machine_is_marked_never_applied_silently():
    cals = pf.fit_layouts(CAL, order_of)
    gpu = pc.Comm(source="nccl-tests import n1", fits=pc.fit_rows(comm_rows(), "x").fits, machine="NVIDIA H100, nccl")
    p = ps.predict(cals, pl.Candidate(stages=2, tp=2, schedule="1f1b", chunks=4, micro_batch=256),
                   where=ps.Where(comm=gpu))
    assert "communication measured on NVIDIA H100, nccl, predicted for " in p.extrapolated
    same = pc.Comm(source="collectives run c", fits=gpu.fits, machine="")
    assert "communication measured" not in ps.predict(cals, p.candidate, where=ps.Where(comm=same)).extrapolated


@pytest.mark.parametrize("tp,fsdp", [(2, 1), (1, 2)])
def test_a_layouts_host_cost_is_fitted_at_one_depth_and_composes_another(tp, fsdp):
    """tp / fsdp actions cost more than their compute share and their collectives as a collectives
    run prices them (DTensor's dispatch, FSDP2's hooks and copies): measured at one pipeline depth
    (pp1, both stages on one rank, world 2), the two factors are recovered exactly, and a pp2
    candidate of that layout (not measured) is the composition with them, labelled."""
    from bench.plan import compose as pcm
    from bench.workloads.specs import get_spec

    f, h = 1.5, 2.0
    cals, spec = pf.fit_layouts(CAL, order_of), get_spec("mlp-pipe")
    comm = pc.fit_rows(comm_rows(), "collectives run comm")
    obs = []
    for m in (4, 8):
        c = pl.Candidate(stages=1, tp=tp, fsdp=fsdp, schedule="interleaved", chunks=m, micro_batch=1024 // (m * fsdp))
        got = pcm.actions(cals, c, comm, spec, pl.torch_order, pc.scopes(tp, fsdp, 1, 0, False), [])
        assert got.cal is cals[1]  # stage times of the world-2 pipeline (pp2), not of another world
        per: dict = {}
        for s, k, i in got.order[0]:
            per.setdefault((s, k), []).append(got.gather[s] if (s, k, i) in got.gathers else 0.0)
        stage = {key: f * got.compute[key] + h * (got.comm.get(key, 0.0) + statistics.median(v))
                 for key, v in per.items()}
        obs.append(pl.Observation(**{**CAL[0].__dict__, "stages": 1, "tp": tp, "fsdp": fsdp, "schedule": "interleaved",
                                     "chunks": m, "micro_batch": c.micro_batch, "stage_s": stage, "run_id": "w2",
                                     "case_id": f"pp1.m{m}"}))
    host = pcm.fit_host(obs, cals, comm, spec, pl.torch_order)
    (cost,) = host.values()
    assert (cost.tp, cost.fsdp, cost.cases, cost.layouts) == (tp, fsdp, 2, (pl.layout_label(1, 1, tp, fsdp),))
    assert cost.compute == pytest.approx(f, rel=1e-9) and cost.comm == pytest.approx(h, rel=1e-9)
    cand = pl.Candidate(stages=2, tp=tp, fsdp=fsdp, schedule="1f1b", chunks=4, micro_batch=256 // fsdp)
    where = ps.Where(comm=comm, host=host, measured=pf.fit_measured(obs, pl.torch_order))
    p = ps.predict(cals, cand, where=where)  # measured at pp1 only: composed at pp2, with the host cost
    got = pcm.actions(cals, cand, comm, spec, pl.torch_order, pc.scopes(tp, fsdp, 1, 0, False), [])
    dur = {key: f * t + OVERHEAD + h * got.comm.get(key, 0.0) for key, t in got.compute.items()}
    dur.update({(s, k, i): dur[(s, k)] + h * got.gather[s] for s, k, i in got.gathers})
    rs = sum(t(RS, piece * 4) for piece in [W * W + W] * 4) if fsdp > 1 else 0.0
    assert p.step_s == pytest.approx(replay(got.order, dur).step_s + rs, rel=1e-6)
    assert p.comm_source == f"collectives run comm; {cost.label()}"
    assert cost.label().startswith(f"{'tp' if tp > 1 else 'fsdp'}2 host cost from pp1 ")
    plain = ps.predict(cals, cand, where=ps.Where(comm=comm))  # without: compute share and collectives alone
    assert plain.step_s < p.step_s and plain.comm_source == "collectives run comm"


def test_a_composed_candidate_starts_from_the_stage_times_of_its_own_world():
    """On a shared host a stage time carries as many ranks computing at once as its run had: pp1 x tp2
    (world 2) starts from the pp2 pipeline's (world 2), pp2 x tp2 (world 4) from pp2 x dp2's."""
    from plan_fixtures import observe_dp
    from bench.plan.compose import base_for

    cals = pf.fit_layouts(CAL + [observe_dp(s, m) for s in ("gpipe", "1f1b") for m in (2, 8)], order_of)
    one = pl.Candidate(stages=1, tp=2, schedule="interleaved", chunks=4, micro_batch=256)
    two = pl.Candidate(stages=2, tp=2, schedule="1f1b", chunks=4, micro_batch=256)
    assert base_for(cals, one) is cals[1] and base_for(cals, two) is cals[2]
    assert base_for({2: cals[2]}, one) is cals[2]  # no calibration of its world: the nearest ranks per stage


def test_a_calibrated_dp_degree_at_another_world_is_composed_from_the_stage_times_of_its_own():
    """pp1 x dp2 (world 2) with pp2 (world 2) and pp2 x dp2 (world 4) calibrated: on a shared host
    the pp2 x dp2 stage times carry four ranks on the cores, so with a communication run the
    candidate is composed from pp2's stage times plus its gradient all-reduce (measured on 2 cores:
    predicted from pp2 x dp2's, pp1 x dp2 read 2.4x too slow); without one it stays pp2 x dp2's."""
    from plan_fixtures import observe_dp
    from bench.plan.compose import compose
    from bench.workloads.specs import get_spec

    cals = pf.fit_layouts(CAL + [observe_dp(s, m) for s in ("gpipe", "1f1b") for m in (2, 8)], order_of)
    comm = pc.fit_rows(comm_rows(), "collectives run comm")
    cand = pl.Candidate(stages=1, dp=2, schedule="interleaved", chunks=4, micro_batch=128)
    p = ps.predict(cals, cand, where=ps.Where(comm=comm))
    want = compose(cals, cand, comm, get_spec("mlp-pipe"), pl.torch_order)
    assert p.step_s == pytest.approx(want.step_s, rel=1e-12) and p.comm_source == "collectives run comm"
    assert p.comm_s["dp_all_reduce_s"] > 0
    assert "2 rank(s) per stage not calibrated at world 2 (stage times of the pp2 calibration)" in p.extrapolated
    alone = ps.predict(cals, cand)  # no communication run: the calibrated degree's own pipeline, as before
    assert alone.step_s == pytest.approx(pl.predict(cals[2], cand, pl.torch_order).step_s, rel=1e-12)
    two = pl.Candidate(stages=2, dp=2, schedule="1f1b", chunks=4, micro_batch=128)  # its own world: as calibrated
    assert ps.predict(cals, two, where=ps.Where(comm=comm)).step_s == pytest.approx(
        pl.predict(cals[2], two, pl.torch_order).step_s, rel=1e-12)


def test_a_composed_case_the_pipelines_cannot_price_is_left_out_of_the_host_cost():
    """A measured pp2 x tp2 case in a checkpoint mode the pipelines never ran: the composition
    cannot price it (the mode's recompute is unknown), so it fits no host cost, and no error: it
    is still its own layout's measured calibration."""
    from bench.plan.compose import fit_host
    from bench.workloads.specs import get_spec

    cals = pf.fit_layouts(CAL, order_of)
    o = pl.Observation(**{**CAL[0].__dict__, "tp": 2, "checkpoint": "always", "run_id": "ckpt"})
    comm = pc.fit_rows(comm_rows(), "collectives run comm")
    assert fit_host([o], cals, comm, get_spec("mlp-pipe"), order_of) == {}
