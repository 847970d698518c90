"""A slow link is not a fault: the sample count and the case's wall-clock limit follow the op time
the warm-up measured (bench.timing.loop, bench.timing.deadline, bench.harness.rank.Watchdog), and a
failed worker on a simulated node is one line, not torchrun's traceback (bench.simcluster.agent).

Was: `distbench simcluster --nodes 2 --link 200mbit -- distbench collectives -c all_reduce --sizes 64M`
(about 2.7 s per op) asked for 20 timed ops per placement and ended with `exceeded its wall-clock
limit of 60 s`, then torchrun's ChildFailedError traceback on both nodes."""

import time

import pytest
import torch

from bench.harness.rank import Watchdog
from bench.timing import deadline
from bench.timing.loop import MIN_SAMPLES, LoopSpec, iterations, measure


@pytest.mark.parametrize("op_s,want", [
    (0.001, 200),  # budget / op
    (0.05, 20),  # the iters floor: 20 x 0.05 s = 1 s, within 10 budgets
    (0.1, 20),  # 20 x 0.1 s = 2 s = 10 budgets
    (0.2, 10),  # the floor yields: 10 budgets / 0.2 s
    (0.4, 5),
    (2.7, MIN_SAMPLES),  # never under 5 samples
    (60.0, MIN_SAMPLES),
])
def test_the_sample_count_follows_the_op_time(op_s, want):
    assert iterations(LoopSpec(iters=20, budget_s=0.2, max_iters=10_000), op_s) == want


def test_explicit_small_floors_and_caps_are_kept():
    assert iterations(LoopSpec(iters=3, budget_s=0.2), 2.7) == 3  # a floor under MIN_SAMPLES is the user's
    assert iterations(LoopSpec(iters=20, budget_s=10.0, max_iters=50), 0.001) == 50
    assert iterations(LoopSpec(iters=20, budget_s=0.2, max_iters=50), 0.0) == 50


class _Clock:
    """perf_counter / perf_counter_ns that only move when the fake op runs."""

    def __init__(self, monkeypatch, op_s: float):
        self.t, self.op_s, self.calls = 1000.0, op_s, 0
        monkeypatch.setattr(time, "perf_counter", lambda: self.t)
        monkeypatch.setattr(time, "perf_counter_ns", lambda: int(self.t * 1e9))

    def op(self, async_op):
        self.calls += 1
        self.t += self.op_s
        return None


def test_the_loop_tells_the_limit_what_it_needs(monkeypatch):
    clock = _Clock(monkeypatch, 2.7)
    needs = []
    unwatch = deadline.watch(needs.append)
    try:
        res = measure(clock.op, spec=LoopSpec(warmup=5, iters=20, budget_s=0.2), device=torch.device("cpu"),
                      barrier=lambda: None, agree_max=lambda x: x)
    finally:
        unwatch()
    assert res.ops == MIN_SAMPLES and len(res.samples_s) == MIN_SAMPLES and clock.calls == 5 + MIN_SAMPLES
    assert res.samples_s == pytest.approx([2.7] * MIN_SAMPLES) and res.warmup_s == pytest.approx(2.7)
    # after the first warm-up op: 2.7 s x (5 warm-up + 5 samples); after the count: 2.7 s x (5 + 1);
    # after 4 samples timed in full (the latency count sized again): 2.7 s x the 1 sample left
    assert needs == pytest.approx([2.7 * 10, 2.7 * 6, 2.7 * 1])


def test_a_derived_limit_grows_to_a_multiple_of_what_is_needed():
    dog = Watchdog(0)
    try:
        dog.arm("all_reduce@64M", 60.0, extendable=True)
        deadline.need(27.0)
        assert dog.limit_s == pytest.approx(deadline.NEED_MARGIN * 27.0, abs=1.0)
        before = dog.deadline
        deadline.need(1.0)  # never shortened
        assert dog.deadline == before
        dog.arm("next", 60.0, extendable=True)  # the next case starts from its own limit
        assert dog.limit_s == 60.0
    finally:
        dog.stop()
    deadline.need(1000.0)  # a stopped watchdog no longer listens
    assert dog.deadline is None


def test_a_limit_the_user_set_is_not_moved():
    dog = Watchdog(0)
    try:
        dog.arm("case", 5.0, extendable=False)
        deadline.need(100.0)
        assert dog.limit_s == 5.0
    finally:
        dog.stop()


def test_a_failed_worker_is_one_line_per_rank():
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from bench.simcluster.agent import failure_lines
    from bench.simcluster.run import WORKER_EXIT

    failures = {3: ProcessFailure(local_rank=1, pid=11, exitcode=124, error_file="/nonexistent"),
                2: ProcessFailure(local_rank=0, pid=10, exitcode=2, error_file="/nonexistent")}
    lines = failure_lines("node1", failures)
    assert lines == ["distbench: simcluster: node1: rank 2 (local 0) exited 2",
                     "distbench: simcluster: node1: rank 3 (local 1) exited 124"]
    assert [int(WORKER_EXIT.search(ln + "\n").group(1)) for ln in lines] == [2, 124]


def test_the_agent_ends_a_failed_worker_in_one_line(tmp_path, capfd):
    """torchrun's own agent, a worker that exits 124: one line, exit 1, no traceback."""
    from bench.simcluster.agent import main

    script = tmp_path / "w.py"
    script.write_text("import os\nos._exit(124)\n")
    code = main(["--standalone", "--nproc-per-node", "1", "--max-restarts", "0", str(script)])
    err = capfd.readouterr().err
    assert code == 1
    assert "exited 124" in err and "Traceback" not in err and "ChildFailedError" not in err, err


def test_a_tiny_budget_keeps_the_floor_for_fast_ops():
    """budget_s ~ 0 means 'the floor': gpu-smoke asks 20 samples of a 0.4 ms all_reduce that way."""
    assert iterations(LoopSpec(iters=20, budget_s=1e-9), 0.0004) == 20
    assert iterations(LoopSpec(iters=20, budget_s=1e-9), 0.2) == 10  # 2 s reach the floor at most
