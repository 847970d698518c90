"""bench.telemetry.summary: the per-case summary columns from samples (energy, power, utilisation,
memory, host CPU, RSS), a counter reset, and the throttled flag."""

import pytest

from bench.telemetry.summary import summarize


def _node(samples, host="h", gpus=("GPU-a",), status="", missing=None):
    return {"host": host, "node_rank": 0, "gpus": list(gpus), "gpu_status": status, "ticks": 3,
            "samples": samples, "missing": missing or {}}


def test_summary_numbers_over_two_gpus():
    s = []
    for t, e in ((0.0, 100.0), (0.5, 150.0), (1.0, 300.0)):
        s += [(t, "GPU-a", None, None, "energy_j", e), (t, "GPU-b", None, None, "energy_j", e * 2),
              (t, "GPU-a", None, None, "power_w", 100.0 + t * 100), (t, "GPU-b", None, None, "power_w", 50.0),
              (t, "GPU-a", None, None, "gpu_util_pct", 10.0 * (t * 2 + 1)), (t, "GPU-b", None, None, "gpu_util_pct", 0.0),
              (t, "GPU-a", None, None, "mem_used_bytes", 1e9 + t), (t, "GPU-a", None, None, "temperature_c", 40 + t),
              (t, None, None, 0, "cpu_util_pct", 20.0), (t, None, None, 1, "cpu_util_pct", 60.0),
              (t, None, 0, None, "rss_bytes", 5e8), (t, None, 1, None, "rss_bytes", 6e8)]
    out = summarize([_node(s, gpus=("GPU-a", "GPU-b"))], 10.0, 11.0, 0.1)
    assert out["gpu_energy_j"] == pytest.approx((300 - 100) + (600 - 200))
    assert out["gpu_power_mean_w"] == pytest.approx(150.0 + 50.0)  # sum of per-GPU means
    assert out["gpu_util_mean_pct"] == pytest.approx((10 + 20 + 30 + 0 * 3) / 6)
    assert out["gpu_util_max_pct"] == 30.0
    assert out["gpu_mem_used_peak_bytes"] == 1_000_000_001 and out["gpu_temp_max_c"] == 41.0
    assert out["host_cpu_util_mean_pct"] == 40.0 and out["host_cpu_util_max_pct"] == 60.0
    assert out["rank_rss_peak_bytes"] == 600_000_000 and out["gpus_sampled"] == 2
    assert out["case_start_unix_s"] == 10.0 and out["case_end_unix_s"] == 11.0
    assert out["throttled"] is None  # no clock-event reasons read


def test_counter_reset_or_single_reading_gives_null_energy():
    s = [(0.0, "GPU-a", None, None, "energy_j", 50.0), (1.0, "GPU-a", None, None, "energy_j", 10.0)]
    assert summarize([_node(s)], 0, 1, 0.1)["gpu_energy_j"] is None
    assert summarize([_node(s[:1])], 0, 1, 0.1)["gpu_energy_j"] is None


@pytest.mark.parametrize("masks,throttled,names", [
    ((0x1, 0x0), False, "gpu_idle"),
    ((0x1, 0x4, 0x40), True, "gpu_idle,sw_power_cap,hw_thermal_slowdown"),
    ((0x1, 0x4), False, "gpu_idle,sw_power_cap"),  # no clocks read: the power cap alone cut nothing known
])
def test_throttled_flag_ignores_idle(masks, throttled, names):
    s = [(float(i), "GPU-a", None, None, "clock_event_reasons", float(m)) for i, m in enumerate(masks)]
    out = summarize([_node(s)], 0, 1, 0.1)
    assert out["throttled"] is throttled and out["throttle_reasons"] == names
