"""The CUDA latency loop keeps within its budget, on a simulated stream whose every cost is known
(tests/cuda_stream_fake.py): host dispatch 20 us, kernel 10 us, barrier 30 us, agreement 20 us,
SM clock 2 GHz.

Found by a read (no GPU had run it): waiting on NCCL's barrier blocks the host until the stream is
done, so every held sample looked early (its start event had fired by the time the dispatch
returned), the hold doubled to its cap (~26 ms) on the first sample and stayed there, and the
sample count, sized from a warm-up of tens of microseconds, asked for thousands of samples: minutes
of spin against the case's 60 s limit. Also, the count ignored each sample's own cost (barrier,
hold, agreement), so small sizes ran several times over their budget, and the hold never came back
down after one slow dispatch."""

import pytest
import torch

from bench.timing import loop
from bench.timing.loop import LoopSpec, measure
from cuda_stream_fake import CLOCK_HZ, Costs, Stream

SPEC = LoopSpec(mode="latency")  # the defaults: warm-up 5, iters 20, budget 0.2 s, max 10000


def run(monkeypatch, costs: Costs, spec: LoopSpec = SPEC, **kw):
    s = Stream(costs).install(monkeypatch, loop)
    warm_end = []

    def op(async_op):
        return s.op(async_op)

    res = measure(op, spec=spec, device=torch.device("cuda", 0), barrier=s.barrier, agree_max=s.agree_max, **kw)
    return s, res, warm_end


def timed_span(s: Stream, spec: LoopSpec = SPEC) -> float:
    """Simulated seconds the whole case took (warm-up included): the host's clock at the end."""
    return s.now


def test_a_barrier_whose_wait_blocks_the_host_keeps_within_twice_its_budget(monkeypatch):
    s, res, _ = run(monkeypatch, Costs(blocking_wait=True))
    assert timed_span(s) <= 2 * SPEC.budget_s, f"{res.ops} samples took {timed_span(s):.1f} s"
    assert res.hold == "none"  # timed without the hold: the op's wait blocks the host
    assert res.dispatch_in == res.ops  # every sample holds its dispatch, and the row says so
    assert max(s.spins, default=0) < loop.MAX_HOLD_CYCLES  # never spun to the cap


def test_the_unit_may_declare_a_blocking_wait(monkeypatch):
    s, res, _ = run(monkeypatch, Costs(blocking_wait=True), blocks_host=True)
    assert res.hold == "none" and res.dispatch_in == res.ops
    assert timed_span(s) <= 2 * SPEC.budget_s


def test_a_small_collective_keeps_within_twice_its_budget_counting_each_samples_cost(monkeypatch):
    s, res, _ = run(monkeypatch, Costs())
    assert res.hold == "spin" and res.dispatch_in == 0
    assert timed_span(s) <= 2 * SPEC.budget_s, f"{res.ops} samples took {timed_span(s):.2f} s"
    assert res.ops >= SPEC.iters
    # each sample is the op's device time behind the hold: the 10 us kernel, not its dispatch
    assert sorted(res.samples_s)[len(res.samples_s) // 2] == pytest.approx(10e-6, abs=1e-9)


def test_the_hold_comes_back_down_after_a_slow_dispatch(monkeypatch):
    # the first timed dispatch takes 1 ms (more than the 0.1 ms hold): the hold grows to cover it
    warm = [20e-6] * (SPEC.warmup + 1)  # warm-up and the probe: ordinary
    s, res, _ = run(monkeypatch, Costs(slow_dispatches=warm + [1e-3, 1e-3, 1e-3, 1e-3]))
    grown = max(s.spins)
    assert grown >= 1e-3 * CLOCK_HZ  # it grew to cover the slow dispatches
    assert s.spins[-1] == loop.HOLD_CYCLES  # and came back down once dispatches were fast again
    assert res.dispatch_in == 0


def test_a_sample_at_the_capped_hold_is_counted_as_holding_its_dispatch(monkeypatch):
    warm = [20e-6] * (SPEC.warmup + 1)
    spec = LoopSpec(mode="latency", warmup=5, iters=5, max_iters=5, budget_s=1e-9)
    s, res, _ = run(monkeypatch, Costs(slow_dispatches=warm + [0.05] * 40), spec=spec)
    assert res.dispatch_in >= 1 and res.hold == "spin"


def test_a_slow_dispatch_is_not_taken_for_a_blocking_wait(monkeypatch):
    """A non-blocking op (NCCL's all_reduce) whose host dispatch takes 2 ms, as long as the probe's
    hold: the hold has ended when the dispatch returns, so the probe proves nothing and is taken
    again with twice the hold. The samples are held, and read the kernel, not the dispatch."""
    s, res, _ = run(monkeypatch, Costs(dispatch_s=2e-3))
    assert res.hold == "spin"
    assert s.spins[:2] == [loop.HOLD_PROBE_CYCLES, 2 * loop.HOLD_PROBE_CYCLES]  # probed again, longer
    assert sorted(res.samples_s)[len(res.samples_s) // 2] == pytest.approx(10e-6, abs=1e-9)


@pytest.mark.parametrize("kernel_s", [20e-3, 50e-3, 150e-3])
def test_slow_ops_take_the_iters_floor_sized_at_their_full_cost(monkeypatch, kernel_s):
    """A slow op: the budget's count is under the `iters` floor, which is kept as far as
    max(10 budgets, 2 s) of full samples allow (the floor is a floor: the user's least count),
    never under 5 samples."""
    s, res, _ = run(monkeypatch, Costs(kernel_s=kernel_s))
    per = kernel_s + 30e-6 + 20e-6 + 25e-6  # the kernel, the barrier, the agreement, the launches and records
    want = min(SPEC.iters, max(loop.MIN_SAMPLES, int(max(10 * SPEC.budget_s, 2.0) / per)))
    assert res.ops == want
