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


# ---- issue 17 item 4: nccl-tests' definition, rank reductions, CUDA latency without dispatch ----

def test_rank_reductions_are_nccl_tests_choices():
    from bench.timing.stats import RANK_REDUCTIONS, rank_reduce_for, reduce_ranks

    per_rank = np.array([[1.0, 4.0], [3.0, 2.0], [5.0, 6.0]])  # [ranks, iterations]
    assert RANK_REDUCTIONS == ("max", "avg", "min", "rank0")  # nccl-tests -a 3 / 1 / 2 / 0
    assert reduce_ranks(per_rank, "max").tolist() == [5.0, 6.0]
    assert reduce_ranks(per_rank, "avg").tolist() == [3.0, 4.0]
    assert reduce_ranks(per_rank, "min").tolist() == [1.0, 2.0]
    assert reduce_ranks(per_rank, "rank0").tolist() == [1.0, 4.0]
    assert rank_reduce_for("auto", "nccl-tests") == "avg" and rank_reduce_for("auto", "latency") == "max"
    assert rank_reduce_for("min", "nccl-tests") == "min"


def test_rows_name_their_rank_reduction():
    from bench.harness.rows import timed_tables

    per_rank = np.array([[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]])
    key = {"run_id": "r", "case_id": "c", "size_bytes": 8, "placement": "in-place"}
    avg, _, _ = timed_tables(key, per_rank, 8, 1.0, ["h", "h"], [0, 0], "avg")
    mx, _, _ = timed_tables(key, per_rank, 8, 1.0, ["h", "h"], [0, 0])
    assert (avg["rank_reduce"], avg["time_median_s"]) == ("avg", 2.0)
    assert (mx["rank_reduce"], mx["time_median_s"]) == ("max", 3.0)


def test_bad_rank_reduction_is_one_line():
    from bench.collectives.config import CollectivesConfig
    from bench.errors import BenchError

    with pytest.raises(BenchError, match="rank reduction 'mean'"):
        CollectivesConfig(rank_reduce="mean")
    assert CollectivesConfig(modes=("nccl-tests",), rank_reduce="min").rank_reduce == "min"


def test_nccl_tests_mode_is_back_to_back_with_one_sync(monkeypatch):
    """Each block: a barrier, the ops issued back to back without waiting (op(False)), ONE device
    synchronisation, host seconds / ops (nccl-tests src/common.cu BenchTime)."""
    from bench.timing import loop

    events = []
    monkeypatch.setattr(loop, "sync", lambda device: events.append("sync"))
    spec = LoopSpec(mode="nccl-tests", warmup=1, iters=8, max_iters=8, budget_s=1e-9, blocks=2)

    def op(async_op):
        events.append(("op", async_op))

    res = measure(op, spec=spec, device=torch.device("cpu"), barrier=lambda: events.append("barrier"),
                  agree_max=lambda x: x)
    timed = events[events.index("sync") + 1:]  # after the warm-up's sync
    assert timed == (["barrier"] + [("op", False)] * 4 + ["sync"]) * 2
    assert res.ops == 8 and len(res.samples_s) == 2


def test_cuda_latency_sample_excludes_host_dispatch(monkeypatch):
    """On CUDA the stream is held by a spin kernel while the host dispatches the op; the start
    event is recorded behind the hold. When the start event has already fired by the time the
    dispatch returns (query() True), the hold was too short: the sample is taken again with twice
    the hold, and only the held sample is kept."""
    from conftest import FakeCuda

    from bench.timing import loop

    cuda = FakeCuda(n=1).install(monkeypatch)
    # device times of the events: warm-up start/stop, the blocking-wait probe's hold (2 ms: the
    # host's dispatch, microseconds, is well inside it), then two tries of the one timed sample
    cuda.script[0] = [0.0, 0.010, 0.5, 0.502, 1.0, 1.5, 2.0, 2.002]
    # the probe: its hold had not ended after the dispatch nor after the wait (not blocking); then
    # the first try: the hold ran out before the dispatch ended
    cuda.queries = [False, False, True, False]
    dispatched = []

    def op(async_op):
        dispatched.append(len(cuda.calls))
        return None

    spec = LoopSpec(mode="latency", warmup=1, iters=1, max_iters=1, budget_s=1e-9)
    res = measure(op, spec=spec, device=torch.device("cuda", 0), barrier=lambda: None, agree_max=lambda x: x)
    assert res.samples_s == [pytest.approx(0.002)]
    sleeps = [c for f, c in cuda.calls if f == "_sleep"]
    assert sleeps == [loop.HOLD_PROBE_CYCLES, loop.HOLD_CYCLES, 2 * loop.HOLD_CYCLES]
    assert res.hold == "spin" and res.dispatch_in == 0
    names = [f for f, _ in cuda.calls if f in ("_sleep", "Event.record", "Event.query")]
    # the probe: start, hold, end mark; the op; ended? after the dispatch and after the wait
    assert names[2:7] == ["Event.record", "_sleep", "Event.record", "Event.query", "Event.query"]
    assert names[7:] == ["_sleep", "Event.record", "Event.query", "Event.record"] * 2  # hold, start, op, check, stop


def test_model_rows_state_the_figure():
    from bench.allreduce.analysis import analyse

    rows = [{"run_id": "r", "suite": "s", "dtype": "float32", "op": "sum", "mode": "nccl-tests", "rank_reduce": "avg",
             "algorithm": "ring", "variant": "", "world": 2, "size_bytes": s, "time_median_s": 1e-5 + s * 1e-9,
             "oversubscribed": False, "chunk_bytes": 0, "messages": 2, "busbw_gbps": 1.0, "count": s // 4}
            for s in (4096, 65536, 1 << 20)]
    out = analyse(rows, [2], [4096])
    want = ("median over samples of nccl-tests mode (ops back to back in one stream, one sync, host time / ops), "
            "average over ranks")
    assert out["model"] and {m["figure"] for m in out["model"]} == {want}
    assert {p["figure"] for p in out["predictions"]} == {want}
