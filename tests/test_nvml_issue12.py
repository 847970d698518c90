"""Telemetry (issue 12): which clock-event reasons count as throttled, NVLink counters' fallback
to the older throughput fields, and the single-reading label. Against a fake pynvml."""

from types import SimpleNamespace

import pytest

from bench.telemetry import nvml
from bench.telemetry.summary import summarize
from test_telemetry import NOT_SUPPORTED, FakeGpu, fake_nvml


def _node(samples):
    return {"host": "h", "node_rank": 0, "gpus": ["GPU-a"], "gpu_status": "", "ticks": len(samples),
            "samples": samples, "missing": {}}


@pytest.mark.parametrize("mask,want", [
    (0x1, False),  # idle
    (0x2, False),  # applications clocks setting
    (0x10, False),  # sync boost
    (0x100, False),  # display clock setting
    (0x1 | 0x2 | 0x10 | 0x100, False),
    (0x4, True),  # sw power cap
    (0x8, True),  # hw slowdown
    (0x20, True),  # sw thermal
    (0x40, True),  # hw thermal
    (0x80, True),  # hw power brake
])
def test_throttled_only_for_limits(mask, want):
    assert nvml.throttled(mask) is want
    s = [(0.0, "GPU-a", None, None, "clock_event_reasons", float(mask))]
    assert summarize([_node(s)], 0, 1, 0.1)["throttled"] is want  # before: True for 0x2, 0x10, 0x100


def nvlink_gpu(old_only: bool):
    g = FakeGpu("GPU-dddd", (0, 1, 0), links=2)
    nv = fake_nvml([g])
    new_fields = nv.nvmlDeviceGetFieldValues

    def fields(h, ids):
        out = []
        for fid in ids:
            f, link = fid if isinstance(fid, tuple) else (fid, 0)
            if f in (nvml.FI_NVLINK_THROUGHPUT_DATA_TX, nvml.FI_NVLINK_THROUGHPUT_DATA_RX):
                out.append(SimpleNamespace(nvmlReturn=0, valueType=3, value=SimpleNamespace(
                    ullVal=(5 if f == nvml.FI_NVLINK_THROUGHPUT_DATA_TX else 7) + link)))
            elif old_only and f in (nvml.FI_NVLINK_COUNT_XMIT_BYTES, nvml.FI_NVLINK_COUNT_RCV_BYTES):
                out.append(SimpleNamespace(nvmlReturn=NOT_SUPPORTED, valueType=3, value=SimpleNamespace(ullVal=0)))
            else:
                out.extend(new_fields(h, [fid]))
        return out

    nv.nvmlDeviceGetFieldValues = fields
    return nv, g


def test_nvlink_falls_back_to_the_older_throughput_fields():
    nv, g = nvlink_gpu(old_only=True)
    p = nvml.GpuProbe(nv, g, g.uuid, pids=set())
    out = []
    p.read(0.0, out)
    p.read(1.0, out)
    vals = {m: v for _t, _u, _r, _c, m, v in out}
    assert vals["nvlink_tx_bytes"] == (5 + 6) * 1024 and vals["nvlink_rx_bytes"] == (7 + 8) * 1024  # KiB -> B
    assert "nvlink_tx_bytes" not in p.missing  # before: 'not supported', no NVLink bytes at all
    assert p.nvlink_source[3].startswith("NVLink throughput")


def test_nvlink_prefers_the_byte_counters():
    nv, g = nvlink_gpu(old_only=False)
    p = nvml.GpuProbe(nv, g, g.uuid, pids=set())
    out = []
    p.read(0.0, out)
    vals = {m: v for _t, _u, _r, _c, m, v in out}
    assert vals["nvlink_tx_bytes"] == 10 + 11 and p.nvlink_source[3] == "NVLink byte counters"


def test_nvlink_missing_when_neither_answers():
    g = FakeGpu("GPU-eeee", (0, 2, 0), links=1)
    nv = fake_nvml([g])
    orig = nv.nvmlDeviceGetFieldValues
    nv.nvmlDeviceGetFieldValues = lambda h, ids: [
        SimpleNamespace(nvmlReturn=NOT_SUPPORTED, valueType=3, value=SimpleNamespace(ullVal=0))
        if isinstance(i, tuple) else orig(h, [i])[0] for i in ids]
    p = nvml.GpuProbe(nv, g, g.uuid, pids=set())
    p.read(0.0, [])
    assert p.missing["nvlink_tx_bytes"] == "not supported"


def test_reading_label():
    assert nvml.reading_label(1) == "single end reading"
    assert nvml.reading_label(0) == "single end reading"
    assert nvml.reading_label(12) == "peak of 12 samples"
