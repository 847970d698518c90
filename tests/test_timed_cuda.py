"""Issue 31 item 3: the timed workload on CUDA occupies the device for its known times (a spin
kernel, torch.cuda._sleep, of the cycles that many seconds take, calibrated once per device with
CUDA events) instead of sleeping on the host, where CUDA-event spans would start when a receive
lands and end when the host wakes. torch.cuda is faked (conftest.FakeCuda: _sleep and Event
recorded); the tensors stay on the CPU and the blocks are told their device is cuda:0."""

import pytest
import torch

from bench.workloads import build_model, get_spec, models, spin
from conftest import FakeCuda

CAL = 100_000_000  # cycles the calibration times (models.SPIN_CALIBRATION_CYCLES)


@pytest.fixture
def on_fake_cuda(monkeypatch):
    cuda = FakeCuda(n=1).install(monkeypatch)
    # raising=False: before the fix the module had neither (the test then fails on the host sleep)
    monkeypatch.setattr(models, "_device_of", lambda t: torch.device("cuda", 0), raising=False)
    monkeypatch.setattr(spin, "_CAL", {})  # no calibration from another test
    monkeypatch.setattr(spin, "sm_clock_mhz", lambda index: None)  # no NVML

    def host_sleep(s):
        raise AssertionError(f"host sleep of {s} s on the CUDA path")

    monkeypatch.setattr(models.time, "sleep", host_sleep)
    return cuda


def spins(cuda) -> list[int]:
    return [c for name, c in cuda.calls if name == "_sleep"]


def test_cuda_actions_spin_the_calibrated_cycles_and_never_sleep_on_the_host(on_fake_cuda):
    """Calibration: a warm-up spin, then CAL cycles between two CUDA events that the fake says are
    50 ms apart: 2e9 cycles/s on cuda:0. Then block 2 of timed-slow (2 x 20 ms) and block 3
    (20 ms): forwards of 80 and 40 M cycles, and backwards of the same, input and weight apart."""
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

    cuda = on_fake_cuda
    cal = CAL
    cuda.script[0] += [1.0, 1.0 + cal / 2e9] * 2  # two calibration measurements that agree: cal cycles take cal / 2e9 s
    spec = get_spec("timed-slow")
    model = build_model(spec, 0)[2:4]
    x = torch.randn(4, spec.width, requires_grad=True)
    out = model(x)
    assert spins(cuda) == [cal // 10, cal, cal, 80_000_000, 40_000_000]
    assert [n for n, _ in cuda.calls if n in ("Event.record", "synchronize")] == ["Event.record"] * 4
    cuda.calls.clear()
    _, groups = stage_backward_input([out], [torch.ones_like(out)], [x], model.parameters())
    assert sorted(spins(cuda)) == [40_000_000, 80_000_000]  # I of both blocks; calibrated once only
    cuda.calls.clear()
    stage_backward_weight(model.parameters(), groups)
    assert sorted(spins(cuda)) == [40_000_000, 80_000_000]  # W of both blocks
    assert spin._CAL[0].cycles_per_s == pytest.approx(2e9) and spin.SPIN_CALIBRATION_CYCLES == CAL


def test_calibration_is_per_device_and_once(on_fake_cuda):
    cuda = on_fake_cuda
    cal = CAL
    cuda.script[0] += [0.0, cal / 1e9] * 2  # 1 GHz, twice
    assert spin.cycles_per_s(0) == pytest.approx(1e9)
    assert spin.cycles_per_s(0) == pytest.approx(1e9)  # cached: no events left to record
    models.occupy(0.02, torch.zeros(1))
    assert spins(cuda) == [cal // 10, cal, cal, 20_000_000]


def test_cpu_actions_still_sleep_on_the_host(monkeypatch):
    slept = []
    monkeypatch.setattr(models.time, "sleep", slept.append)
    models.occupy(0.02, torch.zeros(1))
    assert slept == [0.02]
