"""Telemetry: sampler against a fake NVML module, error tolerance, energy from the counter,
UUID mapping under a shuffled CUDA_VISIBLE_DEVICES, the CPU-only path, summaries in rows."""

import json
import threading
import time
import types
from types import SimpleNamespace

import pytest

from bench.telemetry import Telemetry, nvml
from bench.telemetry.host import HostProbe
from bench.telemetry.sampler import Sampler
from bench.telemetry.summary import summarize

NOT_SUPPORTED, NO_PERMISSION, LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND = 3, 4, 12, 13


class FakeGpu:
    def __init__(self, uuid, pci, name="Fake GPU", links=0):
        self.uuid, self.pci, self.name, self.links = uuid, pci, name, links
        self.energy_mj = 1_000_000
        self.power_mw = 100_000
        self.used, self.total = 2 << 30, 80 << 30
        self.reasons = 0x1
        self.unsupported: set[str] = set()  # function names that raise NotSupported
        self.denied: set[str] = set()  # ... that raise NoPermission
        self.calls: dict[str, int] = {}
        self.procs = []


def fake_nvml(gpus, init_error=None):
    """A module with the pynvml calls the sampler uses; errors mapped like pynvml's NVMLError."""
    m = types.ModuleType("fake_pynvml")

    class NVMLError(Exception):
        _map: dict = {}

        def __new__(cls, value=0):
            if cls is NVMLError:
                cls = NVMLError._map.get(value, cls)
            obj = Exception.__new__(cls)
            obj.value = value
            return obj

        def __init__(self, value=0):
            super().__init__(value)

    for name, code in (("NotSupported", NOT_SUPPORTED), ("NoPermission", NO_PERMISSION),
                       ("LibraryNotFound", LIBRARY_NOT_FOUND), ("FunctionNotFound", FUNCTION_NOT_FOUND)):
        cls = type(f"NVMLError_{name}", (NVMLError,), {})
        NVMLError._map[code] = cls
        setattr(m, cls.__name__, cls)
    m.NVMLError = NVMLError

    def call(g, fn):
        g.calls[fn] = g.calls.get(fn, 0) + 1
        if fn in g.unsupported:
            raise NVMLError(NOT_SUPPORTED)
        if fn in g.denied:
            raise NVMLError(NO_PERMISSION)

    def api(fn, body):
        def f(h, *a):
            call(h, fn)
            return body(h, *a)
        f.__name__ = fn
        setattr(m, fn, f)

    def init():
        if init_error is not None:
            raise NVMLError(init_error)

    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    api("nvmlDeviceGetUUID", lambda g: g.uuid.encode())  # pynvml may hand back bytes
    api("nvmlDeviceGetName", lambda g: g.name)
    api("nvmlDeviceGetPciInfo", lambda g: SimpleNamespace(domain=g.pci[0], bus=g.pci[1], device=g.pci[2],
                                                          busId=f"{g.pci[0]:08x}:{g.pci[1]:02x}:{g.pci[2]:02x}.0"))
    api("nvmlDeviceGetUtilizationRates", lambda g: SimpleNamespace(gpu=75, memory=30))
    api("nvmlDeviceGetMemoryInfo", lambda g: SimpleNamespace(used=g.used, total=g.total, free=g.total - g.used))
    api("nvmlDeviceGetPowerUsage", lambda g: g.power_mw)
    api("nvmlDeviceGetTotalEnergyConsumption", lambda g: g.energy_mj)
    api("nvmlDeviceGetClockInfo", lambda g, kind: 1980 if kind == nvml.CLOCK_SM else 3201)
    api("nvmlDeviceGetTemperature", lambda g, kind: 41)
    api("nvmlDeviceGetCurrentClocksEventReasons", lambda g: g.reasons)
    api("nvmlDeviceGetComputeRunningProcesses", lambda g: g.procs)

    def fields(g, ids):
        out = []
        for fid in ids:
            fid, scope = fid if isinstance(fid, tuple) else (fid, 0)
            val = {nvml.FI_NVLINK_LINK_COUNT: g.links, nvml.FI_PCIE_COUNT_TX_BYTES: 1000,
                   nvml.FI_PCIE_COUNT_RX_BYTES: 2000, nvml.FI_NVLINK_COUNT_XMIT_BYTES: 10 + scope,
                   nvml.FI_NVLINK_COUNT_RCV_BYTES: 20 + scope}.get(fid)
            ret = NOT_SUPPORTED if val is None or "fields" in g.unsupported else 0
            out.append(SimpleNamespace(nvmlReturn=ret, valueType=3, value=SimpleNamespace(ullVal=val or 0)))
        return out

    api("nvmlDeviceGetFieldValues", fields)
    return m


class FakePsutil:
    """psutil's calls used by HostProbe."""

    class Process:
        def __init__(self, pid):
            self.pid = pid

        def memory_info(self):
            return SimpleNamespace(rss=100 << 20)

    @staticmethod
    def cpu_percent(percpu=False):
        return [10.0, 30.0]


def three_gpus():
    return [FakeGpu("GPU-aaaa1111-0000-0000-0000-000000000000", (0, 0x1A, 0)),
            FakeGpu("GPU-bbbb2222-0000-0000-0000-000000000000", (0, 0x3B, 0), links=2),
            FakeGpu("GPU-cccc3333-0000-0000-0000-000000000000", (0, 0x5E, 0))]


def torch_view(physical, visible: str, with_uuid=True, with_pci=True):
    """What torch reports for each CUDA index under CUDA_VISIBLE_DEVICES=visible (indices)."""
    out = []
    for i, phys in enumerate(int(s) for s in visible.split(",")):
        g = physical[phys]
        out.append({"cuda_index": i, "uuid": g.uuid[4:] if with_uuid else "", "pci": g.pci if with_pci else None,
                    "name": g.name, "visible": visible})
    return out


# --- NVML loading and error tolerance ------------------------------------------------------------

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


# --- mapping CUDA devices to NVML devices ----------------------------------------------------------

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


def test_telemetry_samples_the_mapped_gpu_not_the_index(monkeypatch):
    physical = three_gpus()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0,1")
    view = torch_view(physical, "2,0,1")
    monkeypatch.setattr(nvml, "cuda_identity", lambda device: view[device.index])
    info = SimpleNamespace(rank=0, local_rank=0, node_rank=0, world=1, device=SimpleNamespace(type="cuda", index=1))
    job = SimpleNamespace(config=SimpleNamespace(telemetry=True, telemetry_interval_s=0.05))
    tel = Telemetry(job, info, None, nvml_module=fake_nvml(physical), psutil_module=FakePsutil)
    try:
        with tel.case("c", size_bytes=4) as tc:
            pass
    finally:
        tel.close()
    assert tel.node["gpus"] == [physical[0].uuid]  # CUDA 1 under "2,0,1" is physical GPU 0
    assert tel.node["mapping"][0]["matched_by"] == "uuid"
    assert {r["device_uuid"] for r in tc.rows if r["device_uuid"]} == {physical[0].uuid}
    assert tc.summary["gpus_sampled"] == 1 and tc.summary["gpu_util_max_pct"] == 75


# --- sampler thread ------------------------------------------------------------------------------

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


# --- summaries -----------------------------------------------------------------------------------

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
])
def test_throttled_flag_ignores_idle(masks, throttled, names):
    s = [(float(i), "GPU-a", None, None, "clock_event_reasons", float(m)) for i, m in enumerate(masks)]
    out = summarize([_node(s)], 0, 1, 0.1)
    assert out["throttled"] is throttled and out["throttle_reasons"] == names


# --- the CPU-only path and rows ------------------------------------------------------------------

def test_cpu_only_host_metrics_present_gpu_null_and_meta_says_why(tmp_path):
    from bench.results.store import RunWriter, load_run

    writer = RunWriter(tmp_path, "suite", "run1")
    info = SimpleNamespace(rank=0, local_rank=0, node_rank=0, world=1, device=SimpleNamespace(type="cpu", index=None))
    job = SimpleNamespace(config=SimpleNamespace(telemetry=True, telemetry_interval_s=0.01))
    tel = Telemetry(job, info, writer, nvml_module=fake_nvml([], init_error=LIBRARY_NOT_FOUND),
                    psutil_module=FakePsutil)
    with tel.case("case.a", size_bytes=4096, placement="in-place") as tc:
        time.sleep(0.03)
    tel.close()
    s = tc.summary
    assert s["gpus_sampled"] == 0 and s["telemetry_missing"] == "NVML: library not found"
    assert all(s[k] is None for k in ("gpu_energy_j", "gpu_util_mean_pct", "gpu_mem_used_peak_bytes", "throttled"))
    assert s["host_cpu_util_mean_pct"] == 20.0 and s["rank_rss_peak_bytes"] == 100 << 20
    assert s["host_load1_max"] is not None
    run = load_run(writer.dir)
    assert run.meta["telemetry"]["gpu_metrics"] == "NVML: library not found"
    t = run["telemetry"]
    assert set(t["metric"]) >= {"cpu_util_pct", "rss_bytes", "load1", "gpu_metrics"}
    assert (t["run_id"] == "run1").all() and (t["size_bytes"] == 4096).all()
    assert t.loc[t.metric == "gpu_metrics", "reason"].tolist() == ["NVML: library not found"]
    assert t["device_uuid"].isna().all()


def test_real_pynvml_on_this_host_is_tolerated():
    """Whatever this machine has (no library, no GPU, a GPU), loading never raises."""
    nv, why = nvml.load()
    if nv is not None:
        nvml.shutdown(nv)
    else:
        assert why.startswith("NVML: ")


def test_host_probe_without_psutil():
    probe = HostProbe({0: 1}, use_psutil=False)
    out = []
    probe.read(0.0, out)
    assert probe.missing["cpu_util_pct"] == "psutil disabled"
    assert [m for *_x, m, _v in out] == ["load1"]


def test_disabled_telemetry_is_a_no_op(tmp_path):
    from bench.results.store import RunWriter

    writer = RunWriter(tmp_path, "suite", "run1")
    info = SimpleNamespace(rank=0, local_rank=0, node_rank=0, world=1, device=SimpleNamespace(type="cpu"))
    tel = Telemetry(SimpleNamespace(config=SimpleNamespace(telemetry=False)), info, writer)
    with tel.case("x") as tc:
        pass
    assert tc.summary == {} and tel.sampler is None and threading.active_count() >= 1
    assert json.loads((writer.dir / "meta.json").read_text())["telemetry"]["enabled"] is False
    with Telemetry().case("x") as tc:  # the runner's default
        pass
    assert tc.summary == {}


def test_interval_is_validated_in_the_suite():
    from bench.collectives.config import CollectivesConfig
    from bench.errors import BenchError

    with pytest.raises(BenchError, match="telemetry_interval_s"):
        CollectivesConfig(telemetry_interval_s=0)


def test_summary_joined_into_result_rows(tmp_path):
    from conftest import run_cli

    from bench.results.schema import TELEMETRY_SUMMARY
    from bench.results.store import latest_run, load_run

    common = ("collectives", "-c", "all_reduce", "--sizes", "4K", "--nproc", "2", "-n", "3", "-w", "1",
              "--budget-s", "0.01", "--telemetry-interval-s", "0.01")
    p = run_cli(*common, "--out", str(tmp_path / "on"), timeout=300)
    assert p.returncode == 0, p.stderr
    run = load_run(latest_run(tmp_path / "on", "collectives"))
    res = run["results"]
    assert set(TELEMETRY_SUMMARY) <= set(res.columns)
    assert res["telemetry_samples"].min() >= 2 and res["telemetry_interval_s"].eq(0.01).all()
    assert res["host_load1_max"].notna().all() and res["rank_rss_peak_bytes"].gt(0).all()
    assert (res["case_end_unix_s"] >= res["case_start_unix_s"]).all()
    t = run["telemetry"]
    assert set(t["case_id"]) == set(res["case_id"]) and (t["run_id"] == res["run_id"].iloc[0]).all()
    assert set(t.loc[t.metric == "rss_bytes", "rank"]) == {0, 1}  # the node sampler sees both ranks
    if res["gpus_sampled"].eq(0).all():
        assert res["gpu_util_mean_pct"].isna().all() and res["telemetry_missing"].str.len().gt(0).all()
        assert run.meta["telemetry"]["gpu_metrics"] != "ok"

    p = run_cli(*common, "--no-telemetry", "--out", str(tmp_path / "off"), timeout=300)
    assert p.returncode == 0, p.stderr
    run = load_run(latest_run(tmp_path / "off", "collectives"))
    assert run["results"]["telemetry_samples"].isna().all() and "telemetry" not in run.tables
    assert run.meta["telemetry"]["enabled"] is False


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


def test_unmapped_cuda_device_leaves_gpu_columns_null_with_reason(monkeypatch):
    physical = three_gpus()
    monkeypatch.setattr(nvml, "cuda_identity", lambda device: {"cuda_index": 0, "uuid": "deadbeef", "pci": None,
                                                                "name": "x", "visible": None})
    info = SimpleNamespace(rank=0, local_rank=0, node_rank=0, world=1, device=SimpleNamespace(type="cuda", index=0))
    job = SimpleNamespace(config=SimpleNamespace(telemetry=True, telemetry_interval_s=0.05))
    tel = Telemetry(job, info, None, nvml_module=fake_nvml(physical), psutil_module=FakePsutil)
    with tel.case("c") as tc:
        pass
    tel.close()
    assert tc.summary["gpus_sampled"] == 0 and tc.summary["gpu_util_mean_pct"] is None
    assert tc.summary["telemetry_missing"].startswith("NVML: no NVML device matches CUDA device 0")
    assert tc.summary["host_cpu_util_mean_pct"] == 20.0


def test_gpu_smoke_without_cuda_says_so_and_passes():
    import subprocess
    import sys

    import torch
    from conftest import ROOT

    if torch.cuda.is_available():
        pytest.skip("CUDA present: `make gpu-smoke` runs the real check")
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_smoke.py")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "no CUDA device visible" in p.stdout
