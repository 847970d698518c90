"""distbench plan: the calibrated pipeline model recovers known costs exactly, predicts what its
own replay says, ranks under a memory limit, and reads stored runs."""

import pytest

from bench.errors import BenchError
from bench.pipeline import plan as pl
from bench.strategies.replay import gpipe_order, one_f_one_b_order, replay

# Known costs: per stage and action a + c * b seconds; 50 us of schedule overhead per action;
# memory: 100 MiB base per rank + 4 KiB per in-flight sample.
TRUE = {(0, "F"): pl.Line(a=1e-3, c=2e-6), (0, "B"): pl.Line(a=2e-3, c=4e-6),
        (1, "F"): pl.Line(a=1.5e-3, c=3e-6), (1, "B"): pl.Line(a=2.5e-3, c=5e-6)}
OVERHEAD = 50e-6
BASE, PER_SAMPLE = {0: 100 * 2**20, 1: 120 * 2**20}, 4096


def order_of(schedule, p, m):
    return gpipe_order(p, m) if schedule == "gpipe" else one_f_one_b_order(p, m)


def observe(schedule, m, batch=1024):
    b = batch // m
    order = order_of(schedule, 2, m)
    dur = {k: ln.at(b) + OVERHEAD for k, ln in TRUE.items()}
    held = pl.inflight(order)
    return pl.Observation(model="mlp-pipe", stages=2, schedule=schedule, chunks=m, micro_batch=b,
                          step_s=replay(order, dur).step_s, stage_s={k: ln.at(b) for k, ln in TRUE.items()},
                          peak_bytes={r: BASE[r] + PER_SAMPLE * held[r] * b for r in held},
                          case_id=f"{schedule}.m{m}", run_id="cal")


CAL = [observe("gpipe", m) for m in (1, 2, 4, 8)] + [observe("1f1b", m) for m in (2, 8)]


def test_calibration_recovers_the_known_costs_overhead_and_memory():
    cal = pl.fit(CAL, order_of)
    for k, ln in TRUE.items():
        assert cal.costs[2][k].a == pytest.approx(ln.a, rel=1e-9)
        assert cal.costs[2][k].c == pytest.approx(ln.c, rel=1e-9)
    assert cal.overhead_s == pytest.approx(OVERHEAD, rel=1e-6)
    assert cal.base_bytes[2] == pytest.approx(BASE, rel=1e-9)
    assert cal.bytes_per_inflight_sample == pytest.approx(PER_SAMPLE, rel=1e-9)
    assert cal.micro_batches == (128, 1024) and cal.cases == 6


def test_a_held_out_case_is_predicted_exactly_when_the_model_holds():
    cal = pl.fit(CAL, order_of)
    held = observe("1f1b", 4)
    p = pl.predict(cal, pl.Candidate(stages=2, schedule="1f1b", chunks=4, micro_batch=256), order_of)
    assert p.step_s == pytest.approx(held.step_s, rel=1e-6)
    assert p.peak_bytes == pytest.approx(max(held.peak_bytes.values()), rel=1e-9)
    assert p.extrapolated == ""
    assert pl.mape([(p.step_s, held.step_s)]) == pytest.approx(0.0, abs=1e-4)


def test_inflight_counts_what_each_rank_holds_at_once():
    # GPipe holds every micro-batch; 1F1B at most p - r on rank r (Narayanan 2021, sec. 2.2)
    assert pl.inflight(gpipe_order(2, 8)) == {0: 8, 1: 8}
    assert pl.inflight(one_f_one_b_order(4, 8)) == {0: 4, 1: 3, 2: 2, 3: 1}
    assert pl.inflight({0: [(0, "F", 0), (0, "I", 0), (0, "W", 0)]}) == {0: 1}


def test_extrapolation_is_marked_with_the_reason():
    cal = pl.fit(CAL, order_of)
    p = pl.predict(cal, pl.Candidate(stages=4, schedule="1f1b", chunks=16, micro_batch=64), order_of)
    assert "4 stages not calibrated (have 2)" in p.extrapolated
    assert "micro-batch 64 outside the calibrated 128..1024" in p.extrapolated


def test_recommend_ranks_by_throughput_and_drops_what_does_not_fit():
    cal = pl.fit(CAL, order_of)
    preds = [pl.predict(cal, pl.Candidate(stages=2, schedule=s, chunks=m, micro_batch=1024 // m), order_of)
             for s, m in (("gpipe", 1), ("gpipe", 8), ("1f1b", 8))]
    # GPipe holds the whole mini-batch (1 x 1024 or 8 x 128 samples); 1F1B at most 2 x 128 on rank 0
    best, over = pl.recommend(preds, memory_limit=120 * 2**20 + PER_SAMPLE * 512)
    assert [p.candidate.label for p in over] == ["pp2 gpipe m=1 b=1024", "pp2 gpipe m=8 b=128"]
    assert [p.candidate.label for p in best] == ["pp2 1f1b m=8 b=128"]
    assert [p.samples_per_s for p in best] == sorted((p.samples_per_s for p in best), reverse=True)


def test_mixed_models_and_no_cases_are_refused():
    with pytest.raises(BenchError, match="no pipeline cases"):
        pl.fit([], order_of)
    other = pl.Observation(**{**CAL[0].__dict__, "model": "gpt-tiny"})
    with pytest.raises(BenchError, match="mix models gpt-tiny, mlp-pipe"):
        pl.fit([CAL[0], other], order_of)
