"""bench.timing: summary statistics of known samples, completion time over ranks, algbw/busbw."""

import math

import numpy as np
import pytest
import torch

from bench.collectives import REGISTRY
from bench.timing.loop import LoopSpec, measure
from bench.timing.stats import algbw_gbps, busbw_gbps, completion_times, summarize


def test_summary_of_known_samples():
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    assert s.n == 10 and s.median_s == 5.5 and s.min_s == 1.0 and s.max_s == 10.0
    assert s.p25_s == pytest.approx(3.25) and s.p75_s == pytest.approx(7.75)
    assert s.p5_s == pytest.approx(1.45) and s.p95_s == pytest.approx(9.55)
    assert s.mean_s == 5.5 and s.stdev_s == pytest.approx(math.sqrt(55 / 6))
    assert s.cv == pytest.approx(math.sqrt(55 / 6) / 5.5)
    assert s.iqr_s == pytest.approx(4.5) and s.noisy  # 4.5 / 5.5 > 0.1


def test_quiet_samples_are_not_noisy():
    s = summarize([1.0] * 9 + [1.05])
    assert not s.noisy and s.median_s == 1.0 and s.iqr_s == 0.0


def test_single_sample():
    s = summarize([2.0])
    assert s.stdev_s == 0.0 and s.median_s == 2.0


def test_completion_time_is_max_over_ranks():
    per_rank = np.array([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]])
    assert completion_times(per_rank).tolist() == [3.0, 5.0, 2.5]


@pytest.mark.parametrize("n,factor", [(1, 0.0), (2, 1.0), (3, 4 / 3), (4, 1.5), (8, 1.75)])
def test_algbw_busbw_all_reduce(n, factor):
    # 64 MiB in 10 ms: algbw = 67108864 / 0.01 / 1e9 = 6.7108864 GB/s
    assert algbw_gbps(64 << 20, 0.01) == pytest.approx(6.7108864)
    assert busbw_gbps(64 << 20, 0.01, REGISTRY.get("all_reduce").bus_factor(n)) == pytest.approx(6.7108864 * factor)


def test_bandwidth_of_zero_time_or_size_is_nan():
    assert math.isnan(algbw_gbps(0, 1.0)) and math.isnan(algbw_gbps(10, 0.0))


class _Work:
    def __init__(self, log):
        self.log = log

    def wait(self):
        self.log.append("wait")


@pytest.mark.parametrize("blocking", [True, False])
def test_throughput_blocking_issues_in_order_or_keeps_ops_in_flight(blocking):
    """--blocking 1: op(False) back to back; --blocking 0 (PARAM's --z 0): a block's ops are all
    issued async and waited at the end."""
    log = []

    def op(async_op):
        log.append("issue-async" if async_op else "issue")
        return _Work(log) if async_op else None

    spec = LoopSpec(mode="throughput", warmup=1, iters=4, max_iters=4, budget_s=0.0, blocks=2, blocking=blocking)
    r = measure(op, spec=spec, device=torch.device("cpu"), barrier=lambda: None, agree_max=lambda x: x)
    timed = log[2:]  # after the warm-up's issue + wait
    assert r.ops == 4 and len(r.samples_s) == 2
    if blocking:
        assert timed == ["issue"] * 4
    else:
        assert timed == ["issue-async", "issue-async", "wait", "wait"] * 2
