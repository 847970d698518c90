"""Energy over the timed span (bench.telemetry.energy, bench.sweep.energy): the NVML energy
counter read by each rank at the span's edges, from a faked NVML whose counter the test moves and
a clock the test sets. Exact J/op, J/GB, J/step and J/sample; the warm-up outside the span; a span
too short for the counter, a counter that did not move or went back, no NVML, no counter, a CPU
rank: no figure and the reason; GPUs shared by ranks counted once; the training hook's place."""

from types import SimpleNamespace

import pytest
import torch

from bench.sweep.energy import TimedSpan
from bench.telemetry import Telemetry, energy
from bench.timing import loop
from telemetry_fakes import (CUDA0, LIBRARY_NOT_FOUND, fake_nvml, one_rank_on, three_gpus, times)

SIZE = 1 << 20
CPU = torch.device("cpu")


def _loop_case(tel, gpu, mj_per_op: int, bus_bytes_per_op: float, warmup: int = 3, iters: int = 10):
    """One case: the real measured loop (throughput mode, on the host) whose every op adds
    mj_per_op to the GPU's counter, warm-up included; the span marked as the sweep kinds mark it."""
    def op(async_op):
        gpu.energy_mj += mj_per_op

    spec = loop.LoopSpec(mode="throughput", warmup=warmup, iters=iters, max_iters=iters, budget_s=1.0)
    with tel.case("all_reduce.x", size_bytes=SIZE, placement="out-of-place") as tc:
        span = TimedSpan(tc.energy, op, lambda x: x, [CUDA0])
        res = loop.measure(span.op, spec=spec, device=CPU, barrier=lambda: None, agree_max=span.agree_max)
        span.stop(bus_bytes_per_op=bus_bytes_per_op)
    tel.close()
    return tc.summary, res, span


def test_exact_joules_per_op_and_per_gb_over_the_timed_ops_only(monkeypatch):
    gpus = three_gpus()
    tel = one_rank_on(monkeypatch, gpus, energy_clock=times(100.0, 102.5))
    bus = SIZE * 1.0 * 2  # size x bus factor x ranks
    s, res, span = _loop_case(tel, gpus[0], 250, bus)
    assert span.ops == res.ops == 10  # the ops issued after the count agreement: the timed ones
    assert s["energy_j"] == 2.5  # 10 timed ops x 250 mJ; the 3 warm-up ops are outside the span
    assert s["gpu_energy_j"] == 3.25  # the case window (the sampler) holds the warm-up too
    assert s["energy_per_op_j"] == 0.25
    assert s["energy_per_gb_j"] == pytest.approx(0.25 / (bus / 1e9), rel=1e-12)
    assert s["energy_span_s"] == 2.5 and s["energy_note"] == ""
    assert s["energy_per_sample_j"] is None and s["energy_per_step_j"] is None


def test_a_span_shorter_than_ten_counter_periods_has_no_figure_and_says_why(monkeypatch):
    gpus = three_gpus()
    tel = one_rank_on(monkeypatch, gpus, energy_clock=times(100.0, 100.25))
    s, _, _ = _loop_case(tel, gpus[0], 250, SIZE * 2.0)
    assert s["energy_note"] == "span 0.25 s < 1 s (10 x the counter's 100 ms update period): counter too coarse"
    assert s["energy_span_s"] == 0.25
    assert all(s[c] is None for c in ("energy_j", "energy_per_op_j", "energy_per_gb_j"))


def test_a_counter_that_did_not_move_has_no_figure(monkeypatch):
    gpus = three_gpus()
    tel = one_rank_on(monkeypatch, gpus, energy_clock=times(100.0, 103.0))
    s, _, _ = _loop_case(tel, gpus[0], 0, SIZE * 2.0)
    assert s["energy_note"] == f"counter did not move on {gpus[0].uuid} over 3 s" and s["energy_j"] is None


def test_without_nvml_no_figure_and_the_reason(monkeypatch):
    gpus = three_gpus()
    tel = one_rank_on(monkeypatch, gpus, energy_clock=times(), nvml_module=fake_nvml(gpus, init_error=LIBRARY_NOT_FOUND))
    s, _, _ = _loop_case(tel, gpus[0], 250, SIZE * 2.0)
    assert s["energy_note"] == "NVML: library not found" and s["energy_j"] is None and s["energy_span_s"] is None


def test_a_gpu_without_the_counter_has_no_figure_and_the_reason(monkeypatch):
    gpus = three_gpus()
    gpus[0].unsupported.add("nvmlDeviceGetTotalEnergyConsumption")  # before Volta
    tel = one_rank_on(monkeypatch, gpus, energy_clock=times(100.0, 102.0))
    s, _, _ = _loop_case(tel, gpus[0], 250, SIZE * 2.0)
    assert s["energy_note"] == f"energy counter: not supported ({gpus[0].uuid})" and s["energy_j"] is None


def test_a_cpu_rank_has_no_figure(monkeypatch):
    tel = one_rank_on(monkeypatch, three_gpus(), energy_clock=times())
    with tel.case("c") as tc:
        tc.energy.start([CPU])
        tc.energy.stop(ops=3)
    tel.close()
    assert tc.summary["energy_note"] == "no GPU: the rank runs on cpu" and tc.summary["energy_j"] is None


def test_training_counts_give_joules_per_step_and_per_sample(monkeypatch):
    gpus = three_gpus()
    tel = one_rank_on(monkeypatch, gpus, energy_clock=times(10.0, 16.0))
    with tel.case("ddp.mlp") as tc:
        tc.energy.start([CUDA0])
        gpus[0].energy_mj += 6_000  # 6 J over the 5 timed steps
        tc.energy.stop(steps=5, samples=5 * 8)
    tel.close()
    s = tc.summary
    assert (s["energy_j"], s["energy_per_step_j"], s["energy_per_sample_j"]) == (6.0, 1.2, 0.15)
    assert s["energy_per_op_j"] is None and s["energy_per_gb_j"] is None and s["energy_span_s"] == 6.0


def test_a_case_without_a_span_and_telemetry_off_leave_the_columns_empty(monkeypatch):
    tel = one_rank_on(monkeypatch, three_gpus(), energy_clock=times())
    with tel.case("doctor.probe") as tc:
        pass
    tel.close()
    assert all(tc.summary[c] is None for c in ("energy_j", "energy_note", "energy_span_s"))
    with Telemetry().case("x") as tc:  # off: the kind's calls are no-ops
        tc.energy.start([CUDA0])
        tc.energy.stop(ops=1)
    assert tc.summary == {}


def _rec(rank, gpus, span_s=2.0, why="", **counts):
    return {"rank": rank, "why": why, "span_s": span_s, "gpus": gpus, "counts": counts}


def test_gpus_are_summed_and_a_gpu_shared_by_ranks_counted_once():
    recs = [_rec(1, {"GPU-a": (1000, 3000)}, 2.1, ops=4, bus_bytes_per_op=4e9),  # rank 1 shares GPU-a with rank 0
            _rec(0, {"GPU-a": (1000, 2000)}, 2.0, ops=4, bus_bytes_per_op=4e9),
            _rec(2, {"GPU-b": (500, 3500)}, 2.2, ops=4, bus_bytes_per_op=4e9), None]
    s = energy.summarize(recs)
    assert s["energy_j"] == 4.0  # GPU-a from rank 0 (1 J) + GPU-b (3 J)
    assert s["energy_per_op_j"] == 1.0 and s["energy_per_gb_j"] == 0.25  # 4 J / (4 ops x 4 GB)
    assert s["energy_span_s"] == 2.2 and s["energy_note"] == ""


def test_one_rank_without_the_counter_leaves_the_case_without_a_figure():
    recs = [_rec(0, {"GPU-a": (0, 5000)}), _rec(1, {}, None, why="energy counter: no permission (GPU-b)")]
    s = energy.summarize(recs)
    assert s["energy_note"] == "rank 1: energy counter: no permission (GPU-b)" and s["energy_j"] is None


def test_a_counter_that_went_back_has_no_figure():
    s = energy.summarize([_rec(0, {"GPU-a": (5000, 10)}, 5.0)])
    assert s["energy_note"] == "counter went backwards on GPU-a (driver reloaded?)" and s["energy_j"] is None


def test_a_zero_byte_op_has_joules_per_op_but_none_per_gb():
    s = energy.summarize([_rec(0, {"GPU-a": (0, 3000)}, 1.5, ops=3, bus_bytes_per_op=0)])
    assert s["energy_per_op_j"] == 1.0 and s["energy_per_gb_j"] is None


def test_the_training_span_holds_the_timed_steps_only(monkeypatch):
    """bench.training.measure.measure_case starts the span after the warm-up and stops it after
    the timed steps, with their count and samples (steps x the global batch)."""
    from bench.training import measure
    from bench.training.base import Clock
    from bench.training.case import CaseSpec

    log = []

    class Trainer:
        role, degraded, devices, comm_in_compute = "r0", "", 1, False

        def __init__(self, ctx):
            self.ctx, self.clock = ctx, Clock(CPU)
            self.opt = SimpleNamespace(zero_grad=lambda set_to_none=True: None)

        def step(self, check=False):
            log.append("step")

        def prefetch(self):
            pass

        def sync(self):
            pass

        def device_list(self):
            return [CPU]

        def loss(self):
            return 1.0

        def solo(self):
            return None

    class Span:
        def start(self, devices):
            log.append(("start", tuple(devices)))

        def stop(self, **counts):
            log.append(("stop", counts))

    monkeypatch.setattr(measure, "REGISTRY", SimpleNamespace(get=lambda name: SimpleNamespace(setup=Trainer)))
    info = SimpleNamespace(rank=0, world=1, device=CPU)
    comm = SimpleNamespace(info=info, barrier=lambda: None, gather_object=lambda x: [x])
    cfg = SimpleNamespace(check=0, warmup=2, steps=5, seed=0, profile=0)
    measure.measure_case(CaseSpec(strategy="ddp", model="mlp-tiny", world=1, batch=8), cfg, comm, energy=Span())
    assert log == ["step"] * 2 + [("start", (CPU,))] + ["step"] * 5 + [("stop", {"steps": 5, "samples": 40})]
