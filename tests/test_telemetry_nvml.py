"""bench.telemetry.nvml: loading and error tolerance (missing metrics are recorded, not
retried), own-process memory, NVLink counters and their fallback to the older throughput fields,
the older drivers' throttle-reason call, CUDA -> NVML device mapping under a shuffled
CUDA_VISIBLE_DEVICES, which clock-event reasons count as throttled. Against a fake pynvml."""

from types import SimpleNamespace

import pytest

from bench.telemetry import nvml
from bench.telemetry.summary import summarize
from telemetry_fakes import (FUNCTION_NOT_FOUND, LIBRARY_NOT_FOUND, NO_PERMISSION, NOT_SUPPORTED, FakeGpu, fake_nvml,
                             three_gpus, torch_view)

def test_load_reports_library_not_found():
    nv, why = nvml.load(fake_nvml([], init_error=LIBRARY_NOT_FOUND))
    assert nv is None and why == "NVML: library not found"


def test_reason_names():
    m = fake_nvml([])
    assert nvml.reason(m.NVMLError(NOT_SUPPORTED)) == "not supported"
    assert nvml.reason(m.NVMLError(NO_PERMISSION)) == "no permission"
    assert nvml.reason(LookupError("x")) == "LookupError: x"


def test_probe_records_missing_metrics_and_goes_on():
    g = three_gpus()[0]
    g.unsupported |= {"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"}
    g.denied.add("nvmlDeviceGetComputeRunningProcesses")
    nv = fake_nvml([g])
    p = nvml.GpuProbe(nv, g, g.uuid, pids={123})
    out = []
    p.read(1.0, out, static=True)
    p.read(2.0, out)
    got = {m for _t, _u, _r, _c, m, _v in out}
    assert {"gpu_util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes", "sm_clock_mhz", "mem_clock_mhz",
            "temperature_c", "clock_event_reasons", "pcie_tx_bytes", "pcie_rx_bytes"} <= got
    assert not got & {"power_w", "energy_j", "proc_mem_used_bytes"}
    assert p.missing["power_w"] == "not supported" and p.missing["energy_j"] == "not supported"
    assert p.missing["proc_mem_used_bytes"] == "no permission"
    assert p.missing["nvlink_tx_bytes"] == "no NVLink links"
    assert g.calls["nvmlDeviceGetPowerUsage"] == 1  # a failed metric is not asked for again
    assert all(u == g.uuid for _t, u, *_ in out)


def test_probe_own_process_memory_and_nvlink_counters():
    g = three_gpus()[1]
    g.procs = [SimpleNamespace(pid=11, usedGpuMemory=5 << 20), SimpleNamespace(pid=99, usedGpuMemory=7 << 20)]
    p = nvml.GpuProbe(fake_nvml([g]), g, g.uuid, pids={11})
    out = []
    p.read(0.0, out)
    vals = {m: v for _t, _u, _r, _c, m, v in out}
    assert vals["proc_mem_used_bytes"] == 5 << 20  # only the benchmark's own pid
    assert vals["nvlink_tx_bytes"] == 10 + 11 and vals["nvlink_rx_bytes"] == 20 + 21  # summed over 2 links


def test_field_values_not_supported_is_tolerated():
    g = three_gpus()[0]
    g.unsupported.add("fields")
    p = nvml.GpuProbe(fake_nvml([g]), g, g.uuid, pids=set())
    out = []
    p.read(0.0, out)
    assert p.missing["pcie_tx_bytes"] == "not supported" and p.missing["nvlink_rx_bytes"] == "not supported"
    assert any(m == "power_w" for *_x, m, _v in out)


def test_older_driver_throttle_reasons_fallback():
    g = three_gpus()[0]
    g.reasons = 0x4
    m = fake_nvml([g])
    g.calls.clear()

    def gone(h):
        raise m.NVMLError(FUNCTION_NOT_FOUND)

    m.nvmlDeviceGetCurrentClocksEventReasons = gone
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: h.reasons
    out = []
    nvml.GpuProbe(m, g, g.uuid, set()).read(0.0, out)
    assert [v for *_x, metric, v in out if metric == "clock_event_reasons"] == [4.0]


@pytest.mark.parametrize("how", ["uuid", "pci_bus_id"])
def test_uuid_mapping_with_shuffled_visible_devices(how):
    physical = three_gpus()
    devices = nvml.nvml_devices(fake_nvml(physical))
    view = torch_view(physical, "2,0,1", with_uuid=how == "uuid")
    got = [nvml.resolve(ident, devices) for ident in view]
    assert [d["uuid"] for d, _ in got] == [physical[2].uuid, physical[0].uuid, physical[1].uuid]
    assert {m for _, m in got} == {how}


def test_mapping_from_visible_devices_uuids_and_no_match():
    physical = three_gpus()
    devices = nvml.nvml_devices(fake_nvml(physical))
    visible = "GPU-cccc3333,GPU-aaaa1111"  # CUDA accepts uuid prefixes
    idents = [{"cuda_index": i, "uuid": "", "pci": None, "visible": visible} for i in range(2)]
    got = [nvml.resolve(i, devices) for i in idents]
    assert [d["uuid"] for d, _ in got] == [physical[2].uuid, physical[0].uuid]
    d, why = nvml.resolve({"cuda_index": 0, "uuid": "ffff", "pci": (0, 0x99, 0), "visible": "0"}, devices)
    assert d is None and "no NVML device matches CUDA device 0" in why


def test_real_pynvml_on_this_host_is_tolerated():
    """Whatever this machine has (no library, no GPU, a GPU), loading never raises."""
    nv, why = nvml.load()
    if nv is not None:
        nvml.shutdown(nv)
    else:
        assert why.startswith("NVML: ")


def _node(samples):
    return {"host": "h", "node_rank": 0, "gpus": ["GPU-a"], "gpu_status": "", "ticks": len(samples),
            "samples": samples, "missing": {}}


@pytest.mark.parametrize("mask,want", [
    (0x1, False),  # idle
    (0x2, False),  # applications clocks setting
    (0x10, False),  # sync boost
    (0x100, False),  # display clock setting
    (0x1 | 0x2 | 0x10 | 0x100, False),
    (0x4, False),  # sw power cap alone: not without the clocks below the application clock
    (0x200, False),  # board limit
    (0x400, False),  # reliability
    (0x8, True),  # hw slowdown
    (0x20, True),  # sw thermal
    (0x40, True),  # hw thermal
    (0x80, True),  # hw power brake
])
def test_throttled_only_for_limits(mask, want):
    assert nvml.throttled(mask) is want
    s = [(0.0, "GPU-a", None, None, "clock_event_reasons", float(mask))]
    assert summarize([_node(s)], 0, 1, 0.1)["throttled"] is want  # before: True for 0x2, 0x10, 0x100


@pytest.mark.parametrize("sm_mhz,want", [(1980, False), (2100, False), (1500, True)])
def test_sw_power_cap_counts_only_below_the_application_clock(sm_mhz, want):
    """Read through the fake pynvml: SW power cap with the SM clock at (or above) the application
    clock is a cap that cost nothing; below it, the clocks were cut."""
    g = three_gpus()[0]
    g.reasons, g.sm_mhz, g.app_sm_mhz = 0x4, sm_mhz, 1980
    p = nvml.GpuProbe(fake_nvml([g]), g, g.uuid, pids=set())
    out = []
    p.read(1.0, out)
    assert [v for *_x, m, v in out if m == "app_sm_clock_mhz"] == [1980.0]
    node = {"host": "h", "node_rank": 0, "gpus": [g.uuid], "gpu_status": "", "ticks": 1, "samples": out,
            "missing": {}}
    got = summarize([node], 0, 1, 0.1)
    assert got["throttled"] is want and got["throttle_reasons"] == "sw_power_cap"


def test_sw_power_cap_without_an_application_clock_is_not_throttled():
    g = three_gpus()[0]
    g.reasons, g.sm_mhz = 0x4, 1500
    g.unsupported.add("nvmlDeviceGetApplicationsClock")
    p = nvml.GpuProbe(fake_nvml([g]), g, g.uuid, pids=set())
    out = []
    p.read(1.0, out)
    assert p.missing["app_sm_clock_mhz"] == "not supported"
    node = {"host": "h", "node_rank": 0, "gpus": [g.uuid], "gpu_status": "", "ticks": 1, "samples": out,
            "missing": {}}
    assert summarize([node], 0, 1, 0.1)["throttled"] is False


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
