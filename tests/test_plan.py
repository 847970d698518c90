"""distbench plan's model (bench.plan.model, plan_fit): the calibration recovers known costs
exactly, and a prediction is what its own replay says."""

import pytest

from bench.errors import BenchError
from bench.plan import model as pl
from bench.plan import fit as pf
from bench.training.replay import gpipe_order, one_f_one_b_order, replay

from plan_fixtures import (
    TRUE, OVERHEAD, BASE, PER_SAMPLE, order_of, observe, CAL, CKPT_PER_SAMPLE, observe_ckpt, CAL_CKPT, LINK, BOUNDARY,
    observe_linked, ALLREDUCE, observe_dp,
)


def test_calibration_recovers_the_known_costs_overhead_and_memory():
    cal = pf.fit(CAL, order_of)
    for k, ln in TRUE.items():
        assert cal.costs[(2, "never")][k].a == pytest.approx(ln.a, rel=1e-9)
        assert cal.costs[(2, "never")][k].c == pytest.approx(ln.c, rel=1e-9)
    assert cal.overhead == {(2, "gpipe"): pytest.approx(OVERHEAD, rel=1e-6), (2, "1f1b"): pytest.approx(OVERHEAD, rel=1e-6)}
    assert cal.placement_overhead == {(2, 1, "loop"): pytest.approx(OVERHEAD, rel=1e-6)}
    assert cal.base_bytes[2] == pytest.approx(BASE, rel=1e-9)
    assert cal.bytes_per_inflight_sample == {"never": pytest.approx(PER_SAMPLE, rel=1e-9)}
    assert cal.micro_batches == (128, 1024) and cal.cases == 6


def test_a_held_out_case_is_predicted_exactly_when_the_model_holds():
    cal = pf.fit(CAL, order_of)
    held = observe("1f1b", 4)
    p = pl.predict(cal, pl.Candidate(stages=2, schedule="1f1b", chunks=4, micro_batch=256), order_of)
    assert p.step_s == pytest.approx(held.step_s, rel=1e-6)
    assert p.peak_bytes == pytest.approx(max(held.peak_bytes.values()), rel=1e-9)
    assert p.extrapolated == ""
    assert pl.mape([(p.step_s, held.step_s)]) == pytest.approx(0.0, abs=1e-4)


def test_overhead_is_per_schedule_and_an_uncalibrated_one_says_which_placement_it_used():
    """Measured on 2 CPU cores the per-action overhead differs by schedule and placement (about 1.3 ms
    with one stage per rank at 2 ranks, 0.5 ms with two, 2-4 ms at 4 ranks; 1F1B about 8% faster than
    GPipe with the same actions): one o per (ranks, schedule), and per placement (ranks, stages per
    rank, loop | v) for the schedules that were not calibrated."""
    import dataclasses

    cal = dataclasses.replace(pf.fit(CAL, order_of), overhead={(2, "gpipe"): 1.8e-3, (2, "1f1b"): 1.6e-3},
                              placement_overhead={(2, 1, "loop"): 1.7e-3, (2, 2, "v"): 0.5e-3,
                                                  (2, 2, "loop"): 0.9e-3, (4, 1, "loop"): 4e-3})
    assert pl.placement("zbv", 2) == (2, 2, "v") and pl.placement("interleaved", 4) == (4, 2, "loop")
    assert cal.overhead_for(2, "1f1b") == (1.6e-3, "")
    assert cal.overhead_for(2, "dualpipev") == (0.5e-3, "overhead of dualpipev at 2 rank(s) not calibrated "
                                                        "(used placement 2 rank(s) x 2 stage(s) v)")
    assert cal.overhead_for(4, "zbv")[0] == 0.5e-3 and cal.overhead_for(8, "gpipe")[0] == 4e-3
    p = pl.predict(cal, pl.Candidate(stages=2, schedule="gpipe", chunks=4, micro_batch=256), order_of)
    order = order_of("gpipe", 2, 4)
    assert p.step_s == pytest.approx(replay(order, {k: ln.at(256) + 1.8e-3 for k, ln in TRUE.items()}).step_s)


def test_a_per_step_cost_is_fitted_apart_from_the_per_action_overhead():
    """Measured on 2 CPU cores the overhead solved per case falls as micro-batches grow (pp4:
    about 2.8 ms per action at 4 micro-batches, 1.9 ms at 16): part of it is paid once per step
    (optimizer step, chunk split and merge, the runtime's setup), not per action. One per-step
    cost per pipeline depth, shared by its schedules, and one per-action overhead per schedule,
    fitted jointly: with 4 ms per step the fit recovers both, and a schedule calibrated at one
    micro-batch count only (1F1B at 8) is predicted exactly at another (4)."""
    step = 4e-3
    cal_obs = [pl.Observation(**{**o.__dict__, "step_s": o.step_s + step})
               for o in CAL if o.schedule == "gpipe" or o.chunks == 8]
    cal = pf.fit(cal_obs, order_of)
    assert cal.step_overhead == {2: pytest.approx(step, rel=1e-6)}
    assert cal.overhead == {(2, "gpipe"): pytest.approx(OVERHEAD, rel=1e-5), (2, "1f1b"): pytest.approx(OVERHEAD, rel=1e-5)}
    p = pl.predict(cal, pl.Candidate(stages=2, schedule="1f1b", chunks=4, micro_batch=256), order_of)
    assert p.step_s == pytest.approx(observe("1f1b", 4).step_s + step, rel=1e-6)


def test_one_micro_batch_count_leaves_the_per_step_cost_at_zero():
    """With a single micro-batch count per schedule the per-step cost and the per-action overhead
    cannot be told apart: the step cost stays 0 and the overhead takes it all (as before)."""
    cal = pf.fit([o for o in CAL if o.chunks == 8], order_of)
    assert cal.step_overhead == {2: 0.0}
    assert cal.overhead[(2, "gpipe")] == pytest.approx(OVERHEAD, rel=1e-6)


def test_each_checkpoint_mode_is_calibrated_and_predicted_apart():
    cal = pf.fit(CAL + CAL_CKPT, order_of)
    assert cal.checkpoints == ("always", "never")
    assert cal.costs[(2, "always")][(0, "B")].a == pytest.approx(TRUE[(0, "B")].a + TRUE[(0, "F")].a, rel=1e-9)
    assert cal.costs[(2, "never")][(0, "B")].a == pytest.approx(TRUE[(0, "B")].a, rel=1e-9)
    assert cal.bytes_per_inflight_sample == {"always": pytest.approx(CKPT_PER_SAMPLE, rel=1e-6),
                                             "never": pytest.approx(PER_SAMPLE, rel=1e-6)}
    assert cal.base_bytes[2] == pytest.approx(BASE, rel=1e-9)
    held = observe_ckpt("1f1b", 4)
    p = pl.predict(cal, pl.Candidate(stages=2, schedule="1f1b", chunks=4, micro_batch=256, checkpoint="always"),
                   order_of)
    assert p.step_s == pytest.approx(held.step_s, rel=1e-6)
    assert p.peak_bytes == pytest.approx(max(held.peak_bytes.values()), rel=1e-6)
    assert p.candidate.label == "pp2 1f1b m=4 b=256 ckpt=always" and p.extrapolated == ""


def test_checkpointing_is_picked_when_only_it_fits_the_memory_limit():
    """The article's trade-off: recompute costs time, and saves the activations of every
    micro-batch in flight. GPipe m=8 holds 8 x 128 samples on each rank."""
    cal = pf.fit(CAL + CAL_CKPT, order_of)
    preds = [pl.predict(cal, pl.Candidate(stages=2, schedule="gpipe", chunks=8, micro_batch=128, checkpoint=c),
                        order_of) for c in ("never", "always")]
    assert preds[0].samples_per_s > preds[1].samples_per_s
    best, over = pl.recommend(preds, memory_limit=120 * 2**20 + 2048 * 1024)
    assert [p.candidate.label for p in best] == ["pp2 gpipe m=8 b=128 ckpt=always"]
    assert [p.candidate.label for p in over] == ["pp2 gpipe m=8 b=128"]


def test_an_uncalibrated_checkpoint_mode_is_refused():
    cal = pf.fit(CAL, order_of)
    with pytest.raises(BenchError, match=r"checkpoint mode always was not calibrated \(have never\)"):
        pl.predict(cal, pl.Candidate(stages=2, schedule="gpipe", chunks=4, micro_batch=256, checkpoint="always"),
                   order_of)


def test_transfers_are_the_actions_whose_peer_stage_is_on_another_rank():
    """A forward sends its output to the next stage, a backward (B or I) its input gradient to the
    previous one; the V placement keeps its turn (stages p-1 and p) on one rank."""
    link = pl.Link(alpha_s=1e-3, beta_s_per_byte=1 / 1e9, source="x", sizes=(1, 2))
    assert pl.transfers("gpipe", 2, gpipe_order(2, 2), 1000, link, 1) == {(0, "F"): 1e-3 + 1e-6, (1, "B"): 1e-3 + 1e-6}
    zbv = pl.torch_order("zbv", 2, 4)
    got = pl.transfers("zbv", 2, zbv, 1000, link, 1)
    assert sorted(got) == [(0, "F"), (1, "I"), (2, "F"), (3, "I")]
    assert pl.transfers("gpipe", 2, gpipe_order(2, 2), 1000, None, 1) == {}


def test_a_calibration_with_a_link_keeps_the_transfers_out_of_the_overhead_and_predicts_another_link():
    cal = pf.fit([observe_linked(s, m) for s, m in (("gpipe", 1), ("gpipe", 2), ("gpipe", 4), ("gpipe", 8),
                                                   ("1f1b", 2), ("1f1b", 8))], order_of, link=LINK,
                 boundary_bytes=BOUNDARY)
    assert cal.overhead[(2, "gpipe")] == pytest.approx(OVERHEAD, rel=1e-6)
    held = observe_linked("1f1b", 4)
    cand = pl.Candidate(stages=2, schedule="1f1b", chunks=4, micro_batch=256)
    assert pl.predict(cal, cand, order_of).step_s == pytest.approx(held.step_s, rel=1e-6)
    slow = pl.Link(alpha_s=2e-3, beta_s_per_byte=1 / 1e8, source="inter-node", sizes=(1024, 2**26))
    p = pl.predict(cal, cand, order_of, link=slow)
    assert p.step_s == pytest.approx(observe_linked("1f1b", 4, link=slow).step_s, rel=1e-6)
    assert "p2p from inter-node, not the calibration's link (sendrecv-run)" in p.extrapolated


def test_a_link_is_fitted_on_relative_error_over_a_sendrecv_run():
    sizes = [2**k for k in range(10, 27, 2)]
    link = pf.fit_link(sizes, [30e-6 + n / 2e9 for n in sizes], source="r")
    assert link.alpha_s == pytest.approx(30e-6, rel=1e-6) and link.bandwidth_bytes_per_s == pytest.approx(2e9, rel=1e-6)
    assert link.sizes == (2**10, 2**26)


def test_a_weight_gradient_action_gets_no_overhead():
    """W receives and sends nothing: the per-action overhead goes to F, B and I only."""
    costs = {(0, k): pl.Line(a=1e-3, c=0.0) for k in "FIW"}
    order = {0: [(0, "F", 0), (0, "I", 0), (0, "W", 0)]}
    assert pl.durations(costs, order, 1, 5e-4) == {(0, "F"): 1.5e-3, (0, "I"): 1.5e-3, (0, "W"): 1e-3}


def test_inflight_counts_what_each_rank_holds_at_once():
    # GPipe holds every micro-batch; 1F1B at most p - r on rank r (Narayanan 2021, sec. 2.2)
    assert pl.inflight(gpipe_order(2, 8)) == {0: 8, 1: 8}
    assert pl.inflight(one_f_one_b_order(4, 8)) == {0: 4, 1: 3, 2: 2, 3: 1}
    assert pl.inflight({0: [(0, "F", 0), (0, "I", 0), (0, "W", 0)]}) == {0: 1}


def test_extrapolation_is_marked_with_the_reason():
    cal = pf.fit(CAL, order_of)
    p = pl.predict(cal, pl.Candidate(stages=4, schedule="1f1b", chunks=16, micro_batch=64), order_of)
    assert "4 model stages not calibrated (have 2)" in p.extrapolated
    assert "micro-batch 64 outside the calibrated 128..1024" in p.extrapolated


def test_recommend_ranks_by_throughput_and_drops_what_does_not_fit():
    cal = pf.fit(CAL, order_of)
    preds = [pl.predict(cal, pl.Candidate(stages=2, schedule=s, chunks=m, micro_batch=1024 // m), order_of)
             for s, m in (("gpipe", 1), ("gpipe", 8), ("1f1b", 8))]
    # GPipe holds the whole mini-batch (1 x 1024 or 8 x 128 samples); 1F1B at most 2 x 128 on rank 0
    best, over = pl.recommend(preds, memory_limit=120 * 2**20 + PER_SAMPLE * 512)
    assert [p.candidate.label for p in over] == ["pp2 gpipe m=1 b=1024", "pp2 gpipe m=8 b=128"]
    assert [p.candidate.label for p in best] == ["pp2 1f1b m=8 b=128"]
    assert [p.samples_per_s for p in best] == sorted((p.samples_per_s for p in best), reverse=True)


def test_mixed_models_and_no_cases_are_refused():
    with pytest.raises(BenchError, match="no pipeline cases"):
        pf.fit([], order_of)
    other = pl.Observation(**{**CAL[0].__dict__, "model": "gpt-tiny"})
    with pytest.raises(BenchError, match="mix models gpt-tiny, mlp-pipe"):
        pf.fit([CAL[0], other], order_of)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved", "looped_bfs", "interleaved_zb", "zbv",
                                      "dualpipev"])
def test_torch_order_is_built_without_a_process_group_for_every_schedule(schedule):
    """Each rank's order holds every (stage, micro-batch) of its stages once per action kind."""
    from bench.training import schedules as scheds

    p, m = 2, 4
    order = pl.torch_order(schedule, p, m)
    sch = scheds.get(schedule)
    assert sorted(order) == list(range(p))
    for r, acts in order.items():
        for s in sch.stage_ids(r, p):
            for kind in ("F",):
                assert sorted(i for st, k, i in acts if st == s and k == kind) == list(range(m))
            backs = sorted(i for st, k, i in acts if st == s and k in ("B", "W"))
            assert backs == list(range(m))  # every micro-batch's backward ends with B or W
    assert replay(order, {(s, k): 1.0 for s in range(p * sch.per_rank) for k in "FBIW"}).step_s > 0


def test_torch_order_refuses_what_the_schedule_cannot_run():
    with pytest.raises(BenchError, match="dualpipev needs chunks >= pipeline stages"):
        pl.torch_order("dualpipev", 2, 2)


def test_each_data_parallel_layout_is_calibrated_from_its_own_cases_and_predicted_exactly():
    cals = pf.fit_layouts(CAL + [observe_dp("gpipe", m) for m in (2, 4, 8)] + [observe_dp("1f1b", 4)], order_of)
    assert sorted(cals) == [1, 2] and cals[2].dp == 2 and cals[2].cases == 4
    assert cals[2].step_overhead[2] == pytest.approx(ALLREDUCE, rel=1e-4)
    assert cals[1].step_overhead[2] == pytest.approx(0.0, abs=1e-9)
    held = observe_dp("1f1b", 8)
    cand = pl.Candidate(stages=2, dp=2, schedule="1f1b", chunks=8, micro_batch=64)
    assert (cand.label, cand.batch, cand.world) == ("pp2 dp2 1f1b m=8 b=64", 1024, 4)
    p = pl.predict(pl.layout_for(cals, 2), cand, order_of)
    assert p.step_s == pytest.approx(held.step_s, rel=1e-5) and p.samples_per_s == pytest.approx(1024 / held.step_s)
    assert p.peak_bytes == pytest.approx(max(held.peak_bytes.values()), rel=1e-9) and p.extrapolated == ""


def test_an_uncalibrated_data_parallel_degree_is_predicted_from_the_nearest_and_marked():
    cals = pf.fit_layouts(CAL, order_of)
    cand = pl.Candidate(stages=2, dp=2, schedule="1f1b", chunks=4, micro_batch=128)
    p = pl.predict(pl.layout_for(cals, 2), cand, order_of)
    assert p.extrapolated.startswith("dp 2 not calibrated (dp 1's pipeline per replica")
    assert p.step_s == pytest.approx(pl.predict(cals[1], pl.Candidate(stages=2, schedule="1f1b", chunks=4,
                                                                      micro_batch=128), order_of).step_s)
    with pytest.raises(BenchError, match="mix data-parallel degrees 1, 2"):
        pf.fit(CAL + [observe_dp("gpipe", 4)], order_of)
