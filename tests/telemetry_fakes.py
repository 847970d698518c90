"""A fake pynvml (the calls the telemetry uses, errors mapped like pynvml's NVMLError), a fake
psutil, and what torch reports for CUDA devices under CUDA_VISIBLE_DEVICES: shared by the
test_telemetry_*.py modules."""

import types
from types import SimpleNamespace

from bench.telemetry import nvml

NOT_SUPPORTED, NO_PERMISSION, LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND = 3, 4, 12, 13


class FakeGpu:
    def __init__(self, uuid, pci, name="Fake GPU", links=0):
        self.uuid, self.pci, self.name, self.links = uuid, pci, name, links
        self.energy_mj = 1_000_000
        self.power_mw = 100_000
        self.used, self.total = 2 << 30, 80 << 30
        self.reasons = 0x1
        self.sm_mhz, self.app_sm_mhz = 1980, 1980  # current and applications SM clock
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
    api("nvmlDeviceGetClockInfo", lambda g, kind: g.sm_mhz if kind == nvml.CLOCK_SM else 3201)
    api("nvmlDeviceGetApplicationsClock", lambda g, kind: g.app_sm_mhz if kind == nvml.CLOCK_SM else 3201)
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


CUDA0 = SimpleNamespace(type="cuda", index=0)  # what a rank's torch.device("cuda", 0) answers to .type / .index


def times(*ts):
    """A clock for the energy span (bench.telemetry.energy.Meter): returns ts in turn, one per
    counter reading, so the span's length is the test's to choose."""
    it = iter(ts)
    return lambda: next(it)


def one_rank_on(monkeypatch, gpus, *, energy_clock, interval_s=60.0, **kw):
    """Telemetry of one rank on cuda:0 = gpus[0] (CUDA_VISIBLE_DEVICES unset), the fake NVML and
    psutil; the sampler's interval long enough that it reads only at case start and end."""
    from bench.telemetry import Telemetry

    view = torch_view(gpus, ",".join(str(i) for i in range(len(gpus))))
    monkeypatch.setattr(nvml, "cuda_identity", lambda device: view[device.index])
    info = SimpleNamespace(rank=0, local_rank=0, node_rank=0, world=1, device=CUDA0)
    job = SimpleNamespace(config=SimpleNamespace(telemetry=True, telemetry_interval_s=interval_s))
    kw.setdefault("nvml_module", fake_nvml(gpus))
    return Telemetry(job, info, None, psutil_module=FakePsutil, energy_clock=energy_clock, **kw)
