"""Pipeline waits on CUDA: CUDA events on the stream around each p2p wait (Clock.wait), resolved
after the step's synchronize like the compute spans, peers kept; the pipeline rows say the CUDA
bubble is not yet verified on a GPU. torch.cuda.Event is faked with scripted device times."""

import types

import torch

from bench.training import base
from bench.training.base import Clock
from bench.training.measure import CUDA_WAITS_UNVERIFIED, with_note
from conftest import FakeCuda


def _cuda_clock(monkeypatch, script, devices=None):
    """A Clock on CUDA under conftest's FakeCuda: `script` the device times (seconds) events
    recorded on cuda:0 take in turn; `devices` {index: script} for several devices."""
    cuda = FakeCuda(n=2).install(monkeypatch)
    cuda.script.update(devices or {0: list(script)})
    monkeypatch.setattr(base.time, "perf_counter", lambda: 100.0)  # host time of the reference event
    devs = [torch.device("cuda", i) for i in sorted(devices or {0: None})]
    return Clock(devs[0], devs)


def test_clock_times_waits_with_cuda_events(monkeypatch):
    # device times: ref 0.0; fwd 0.001..0.004; wait 0.004..0.010 (stream stalled 6 ms on the recv);
    # bwd 0.010..0.012; wait 0.012..0.0125
    clock = _cuda_clock(monkeypatch, [0.0, 0.001, 0.004, 0.004, 0.010, 0.010, 0.012, 0.012, 0.0125, 0.02])
    with clock.span("fwd", 1, 0):
        pass
    with clock.wait((0,)):
        pass  # under NCCL work.wait() returns at once: the host saw nothing of the stall
    with clock.span("bwd", 1, -1):
        pass
    with clock.wait(None):
        pass
    assert clock.waits == []  # nothing until the step is synchronized and resolved
    spans = clock.resolve()
    assert [(k, round(a, 9), round(b, 9)) for k, _, _, a, b in spans] == [("fwd", 100.001, 100.004),
                                                                          ("bwd", 100.010, 100.012)]
    assert [(round(a, 9), round(b, 9), p) for a, b, p in clock.waits] == [(100.004, 100.010, (0,)),
                                                                          (100.012, 100.0125, None)]
    clock.resolve()  # resolving twice adds nothing
    assert len(clock.waits) == 2
    clock.reset()
    assert clock.waits == [] and clock._pending_waits == []


def test_patched_p2p_wait_uses_the_clock_on_cuda(monkeypatch):
    from torch.distributed.pipelining import schedules

    from bench.training import pp

    pp._patch_waits()
    clock = _cuda_clock(monkeypatch, [0.0, 0.002, 0.007])

    class Work:
        waited = 0

        def wait(self):
            Work.waited += 1

    class Works(list):
        peers = (2,)

    pp._WAIT_CLOCK[0] = clock
    try:
        schedules._wait_batch_p2p(Works([Work(), Work()]))
    finally:
        pp._WAIT_CLOCK[0] = None
    assert Work.waited == 2
    clock.resolve()
    assert [(round(a, 9), round(b, 9), p) for a, b, p in clock.waits] == [(100.002, 100.007, (2,))]


def test_cpu_waits_stay_host_time(monkeypatch):
    times = iter([5.0, 5.25])
    monkeypatch.setattr(base.time, "perf_counter", lambda: next(times))
    clock = Clock(torch.device("cpu"))
    with clock.wait((1,)):
        pass
    assert clock.waits == [(5.0, 5.25, (1,))]


def test_degraded_note_on_cuda():
    assert with_note("", CUDA_WAITS_UNVERIFIED) == CUDA_WAITS_UNVERIFIED
    assert with_note("oversubscribed", CUDA_WAITS_UNVERIFIED) == f"oversubscribed; {CUDA_WAITS_UNVERIFIED}"
    assert CUDA_WAITS_UNVERIFIED == "bubble on CUDA: waits timed with CUDA events, not yet verified on a GPU"


def test_pipeline_rows_say_degraded_on_cuda():
    """build_tables on two ranks' facts (stage 0 then stage 1, one micro-batch): the pp row on
    CUDA carries the note after the launch's own reason; on CPU it does not."""
    from bench.training.replay import gpipe_order
    from bench.training.case import CaseSpec
    from bench.training.measure import build_tables

    mem = {"memory_kind": "cuda", "peak_allocated_bytes": 1, "peak_active_bytes": 1, "peak_reserved_bytes": 1,
           "device_used_bytes": 1, "device_total_bytes": 2, "host_peak_rss_bytes": 1, "host_peak_is_lifetime": False}

    def rec(r):
        f0, b0 = (0.0, 1.0), (3.0, 4.0)
        f1, b1 = (1.0, 2.0), (2.0, 3.0)
        spans = [("fwd", 0, 0, *f0), ("bwd", 0, -1, *b0)] if r == 0 else [("fwd", 1, 0, *f1), ("bwd", 1, -1, *b1)]
        waits = [(1.0, 3.0, (1,))] if r == 0 else [(0.0, 1.0, (0,))]
        return {"span": (0.0, 4.0), "spans": spans, "waits": waits}

    facts = [{"recs": [rec(r)] * 5, "mem": mem, "solo_s": float("nan"), "role": f"stages {r}", "degraded": "",
              "devices": 1, "comm_in_compute": False, "order": gpipe_order(2, 1) if r == 0 else None,
              "params": 10} for r in range(2)]
    case = CaseSpec(strategy="pp", model="mlp-pipe", world=2, chunks=1, schedule="gpipe", batch=8)
    res = {"facts": facts, "check": None, "loss": 1.0}
    for device, before, want in (("cuda", "oversubscribed", f"oversubscribed; {CUDA_WAITS_UNVERIFIED}"),
                                 ("cuda", "", CUDA_WAITS_UNVERIFIED), ("cpu", "", "")):
        base_row = {"run_id": "r", "suite": "s", "kind": "pipeline", "world": 2, "nodes": 1, "backend": "nccl",
                    "device_type": device, "threads_per_rank": 1, "oversubscribed": bool(before), "degraded": before}
        row = build_tables(case, res, base_row, ["h", "h"], 1)["results"][0]
        assert row["degraded"] == want
        assert row["bubble_measured"] > 0


def test_clock_spans_every_device_it_computes_on(monkeypatch):
    """Issue 17 item 9: layer runs group 0 on cuda:0, then group 1 on cuda:1. Events on cuda:0
    alone would end the forward when cuda:0's part ends (3 ms); the span ends when cuda:1's does."""
    # device times per device: reference, fwd start, fwd end, bwd start, bwd end
    clock = _cuda_clock(monkeypatch, None, devices={0: [0.0, 0.001, 0.003, 0.009, 0.012],
                                                    1: [0.0, 0.001, 0.008, 0.008, 0.010]})
    with clock.span("fwd"):
        pass
    with clock.span("bwd"):
        pass
    got = [(k, round(a - 100, 9), round(b - 100, 9)) for k, _, _, a, b in clock.resolve()]
    assert got == [("fwd", 0.001, 0.008), ("bwd", 0.008, 0.012)]


def test_layer_trainer_times_all_its_devices(monkeypatch):
    """The layer trainer's clock records on both GPUs of its two groups (FakeCuda's call record)."""
    from bench.training.base import Ctx
    from bench.training.layer import LayerTrainer
    from bench.workloads import get_spec

    cuda = FakeCuda(n=2).install(monkeypatch)
    cuda.script = {0: [0.0] * 3, 1: [0.0] * 3}
    devs = [torch.device("cuda", 0), torch.device("cuda", 1)]
    ctx = Ctx(spec=get_spec("mlp-tiny"), rank=0, world=1, device=devs[0], batch=8, seed=0, steps=1)
    t = LayerTrainer(ctx, types.SimpleNamespace(devices=devs), None, None)
    with t.clock.span("fwd"):
        pass
    assert sorted({d for f, d in cuda.calls if f == "Event.record"}) == [0, 1]


def test_multi_node_pipeline_bubble_is_measured(monkeypatch):
    """Issue 17 item 8: stage 1 on another node, whose host clock reads 1000 s ahead. Each rank's
    timeline starts at its own exit from the step barrier, so the bubble is the one the same
    timelines give on one node (it read 0 before: the waits were dropped), and the row says how it
    was aligned."""
    from bench.training.replay import gpipe_order
    from bench.training.case import CaseSpec
    from bench.training.measure import MULTI_NODE_ALIGNED, build_tables

    mem = {"memory_kind": "host", "peak_allocated_bytes": None, "peak_active_bytes": None,
           "peak_reserved_bytes": None, "device_used_bytes": None, "device_total_bytes": None,
           "host_peak_rss_bytes": 1, "host_peak_is_lifetime": False}

    def rec(r, off):
        if r == 0:
            spans, waits = [("fwd", 0, 0, 0.0, 1.0), ("bwd", 0, -1, 3.0, 4.0)], [(1.0, 3.0, (1,))]
        else:
            spans, waits = [("fwd", 1, 0, 1.0, 2.0), ("bwd", 1, -1, 2.0, 3.0)], [(0.0, 1.0, (0,))]
        return {"span": (off, 4.0 + off), "spans": [(k, s, m, a + off, b + off) for k, s, m, a, b in spans],
                "waits": [(a + off, b + off, p) for a, b, p in waits]}

    def facts(offsets):
        return [{"recs": [rec(r, offsets[r])] * 5, "mem": mem, "solo_s": float("nan"), "role": f"stages {r}",
                 "degraded": "", "devices": 1, "comm_in_compute": False,
                 "order": gpipe_order(2, 1) if r == 0 else None, "params": 10} for r in range(2)]

    case = CaseSpec(strategy="pp", model="mlp-pipe", world=2, chunks=1, schedule="gpipe", batch=8)
    base_row = {"run_id": "r", "suite": "s", "kind": "pipeline", "world": 2, "nodes": 1, "backend": "gloo",
                "device_type": "cpu", "threads_per_rank": 1, "oversubscribed": False, "degraded": ""}
    one = build_tables(case, {"facts": facts([0.0, 0.0]), "check": None, "loss": 1.0}, base_row, ["h", "h"], 1)
    two = build_tables(case, {"facts": facts([0.0, 1000.0]), "check": None, "loss": 1.0},
                       {**base_row, "nodes": 2}, ["h0", "h1"], 2)
    r1, r2 = one["results"][0], two["results"][0]
    assert r1["bubble_measured"] == 0.375  # stage 0 waits 2 s of 4 on a computing stage 1, stage 1 1 s of 4
    assert r2["bubble_measured"] == r1["bubble_measured"]
    assert [x["idle_s"] for x in two["strategy_ranks"]] == [x["idle_s"] for x in one["strategy_ranks"]]
    assert r1["degraded"] == "" and r2["degraded"] == MULTI_NODE_ALIGNED
