"""bench.telemetry.sampler and host: the sampler thread (start, stop, interval, restart), energy
as the counter difference, the host probe without psutil."""

import time

import pytest

from bench.telemetry import nvml
from bench.telemetry.host import HostProbe
from bench.telemetry.sampler import Sampler
from bench.telemetry.summary import summarize
from telemetry_fakes import fake_nvml, three_gpus

def _wait_for(cond, timeout_s=20.0):
    end = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < end:
        time.sleep(0.005)
    return cond()


def test_sampler_start_stop_and_interval():
    g = three_gpus()[0]
    interval = 0.02
    s = Sampler([nvml.GpuProbe(fake_nvml([g]), g, g.uuid, set())], None, interval, clock=time.monotonic)
    s.start()
    assert s.running and s.ticks == 1  # the first sample is taken at once
    with pytest.raises(RuntimeError):
        s.start()
    assert _wait_for(lambda: s.ticks >= 6)
    samples = s.stop()
    assert not s.running
    n = len(samples)
    time.sleep(3 * interval)
    assert len(s.samples) == n  # nothing after stop
    times = sorted({t for t, *_ in samples})
    assert len(times) == s.ticks >= 7  # start + thread ticks + the stop sample
    gaps = [b - a for a, b in zip(times[:-1], times[1:-1])]  # thread-scheduled gaps (not the stop one)
    assert min(gaps) >= 0.5 * interval  # never faster than the interval (a slow host may be slower)
    assert [t for t, *_ in samples] == sorted(t for t, *_ in samples)
    s.start()  # restartable for the next case, with fresh samples
    assert s.ticks == 1 and len({t for t, *_ in s.samples}) == 1
    s.stop()


def test_sampler_rejects_bad_interval():
    with pytest.raises(ValueError):
        Sampler([], None, 0.0)


def test_energy_is_the_counter_difference():
    g = three_gpus()[0]
    s = Sampler([nvml.GpuProbe(fake_nvml([g]), g, g.uuid, set())], None, 0.01)
    g.energy_mj = 5_000_000
    s.start()
    time.sleep(0.03)
    g.energy_mj = 5_012_500  # +12.5 J over the case, whatever the power samples say
    samples = s.stop()
    node = {"host": "h", "node_rank": 0, "gpus": [g.uuid], "gpu_status": "", "ticks": s.ticks,
            "samples": samples, "missing": {}}
    summary = summarize([node], 0.0, 1.0, 0.01)
    assert summary["gpu_energy_j"] == pytest.approx(12.5)
    assert summary["gpu_power_mean_w"] == pytest.approx(100.0)
    assert summary["gpu_pcie_tx_bytes"] == 0.0  # counter did not move


def test_host_probe_without_psutil():
    probe = HostProbe({0: 1}, use_psutil=False)
    out = []
    probe.read(0.0, out)
    assert probe.missing["cpu_util_pct"] == "psutil disabled"
    assert [m for *_x, m, _v in out] == ["load1"]
