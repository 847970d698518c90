"""NVML side of the sampler (nvidia-ml-py, import name `pynvml`, imported lazily).

GPUs are found by identity, never by index: each rank reports its CUDA device's UUID and PCI
bus id (as torch sees it, after CUDA_VISIBLE_DEVICES has renumbered the devices), and the node's
sampler looks that device up among NVML's devices (NVML ignores CUDA_VISIBLE_DEVICES and
numbers GPUs in its own order). Every NVML call may fail (not supported, no permission, library
missing, GPU lost): the metric it feeds is then recorded as missing with the reason, and is not
asked for again during the launch.
"""

import os
import re

# Clock-event ("throttle") reason bits, nvml.h nvmlClocksEventReason*.
REASON_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting", 0x200: "board_limit",
    0x400: "reliability",
}
IDLE_BIT = 0x1
# The reasons that mean the clocks were cut (`throttled`), nvml.h: HW slowdown (0x8) and its
# thermal (0x40) and power-brake (0x80) forms, SW thermal slowdown (0x20). SW power cap (0x4) is
# set whenever the board sits at its power limit, also when the clocks are still at the
# application clock; it counts only when the SM clock of the same sample is below the
# application clock (nvmlDeviceGetApplicationsClock). Not: idle, applications-clocks setting,
# sync boost, display clocks, board limit, reliability (settings or states, not cuts).
CUT_BITS = 0x8 | 0x20 | 0x40 | 0x80
SW_POWER_CAP_BIT = 0x4


def throttled(mask: int, sm_clock_mhz: float | None = None, app_clock_mhz: float | None = None) -> bool:
    """Does one sample say the clocks were cut? `mask`: its clock-event reasons; the clocks: the
    same sample's SM clock and application SM clock (None: not read, and SW power cap then
    proves nothing)."""
    mask = int(mask)
    if mask & CUT_BITS:
        return True
    return bool(mask & SW_POWER_CAP_BIT and sm_clock_mhz is not None and app_clock_mhz
                and sm_clock_mhz < app_clock_mhz)


def reading_label(samples: int) -> str:
    """How a per-case value was read: 'single end reading' (one sample: the case was shorter
    than the interval) or 'peak of N samples'; say which next to a peak or max."""
    return "single end reading" if samples <= 1 else f"peak of {samples} samples"

# nvml.h field ids (nvmlDeviceGetFieldValues): cheap counter reads, unlike
# nvmlDeviceGetPcieThroughput, which blocks ~20 ms per call to measure a rate.
FI_NVLINK_LINK_COUNT = 91
FI_PCIE_COUNT_TX_BYTES = 197
FI_PCIE_COUNT_RX_BYTES = 198
FI_NVLINK_COUNT_XMIT_BYTES = 202
FI_NVLINK_COUNT_RCV_BYTES = 204
# Older drivers / GPUs (before the byte counters): per-link data throughput counters, in KiB.
FI_NVLINK_THROUGHPUT_DATA_TX = 138
FI_NVLINK_THROUGHPUT_DATA_RX = 139
NVLINK_FIELDS = (  # (tx field, rx field, bytes per unit, name), newest first
    (FI_NVLINK_COUNT_XMIT_BYTES, FI_NVLINK_COUNT_RCV_BYTES, 1, "NVLink byte counters"),
    (FI_NVLINK_THROUGHPUT_DATA_TX, FI_NVLINK_THROUGHPUT_DATA_RX, 1024, "NVLink throughput counters (KiB)"),
)
_VALUE_FIELD = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
CLOCK_SM, CLOCK_MEM, TEMPERATURE_GPU = 1, 2, 0  # NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU


def reason(e: BaseException) -> str:
    """A short reason for a failed call: NVMLError_NotSupported -> 'not supported'."""
    name = type(e).__name__
    if name.startswith("NVMLError_"):
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name[len("NVMLError_"):]).lower()
    text = str(e).strip()
    return f"{name}: {text}" if text else name


def load(module=None):
    """(initialised nvml module, "") or (None, why): why is what run metadata shows."""
    if module is None:
        try:
            import pynvml as module  # lazy: optional dependency (nvidia-ml-py); NVML may be absent
        except ImportError:
            return None, "NVML: nvidia-ml-py (pynvml) not installed"
    try:
        module.nvmlInit()
    except Exception as e:  # noqa: BLE001 - LibraryNotFound, DriverNotLoaded, NoPermission ...
        return None, f"NVML: {reason(e)}"
    return module, ""


def shutdown(nv):
    try:
        nv.nvmlShutdown()
    except Exception:  # noqa: BLE001 - nothing to do about it
        pass


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def norm_uuid(u) -> str:
    """NVML says 'GPU-6b5d...', torch says '6b5d...': compare without prefix and case."""
    u = _text(u or "").strip().lower()
    return u[4:] if u.startswith("gpu-") else u


def cuda_identity(device) -> dict | None:
    """This rank's CUDA device as torch sees it: uuid and PCI (domain, bus, device)."""
    import torch  # lazy: a rank's CUDA device only (readers import this module through metadata)

    if getattr(device, "type", None) != "cuda":
        return None
    p = torch.cuda.get_device_properties(device)
    pci = None
    if all(hasattr(p, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):  # torch >= 2.5
        pci = (int(p.pci_domain_id), int(p.pci_bus_id), int(p.pci_device_id))
    return {"cuda_index": device.index if device.index is not None else torch.cuda.current_device(),
            "uuid": str(getattr(p, "uuid", "") or ""), "pci": pci, "name": p.name,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


def nvml_devices(nv) -> list[dict]:
    """NVML's view of this node: [{handle, uuid, pci, name}] (in NVML's order, not CUDA's)."""
    out = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        d = {"handle": h, "uuid": _text(nv.nvmlDeviceGetUUID(h)), "pci": None, "name": ""}
        try:
            p = nv.nvmlDeviceGetPciInfo(h)
            d["pci"] = (int(p.domain), int(p.bus), int(p.device))
        except Exception:  # noqa: BLE001 - then only the uuid can match
            pass
        try:
            d["name"] = _text(nv.nvmlDeviceGetName(h))
        except Exception:  # noqa: BLE001
            pass
        out.append(d)
    return out


def resolve(ident: dict, devices: list[dict]) -> tuple[dict | None, str]:
    """The NVML device of a CUDA device, and how it was matched (or why it was not).

    Order: torch's uuid, then PCI bus id (also finds the parent GPU of a MIG instance), then a
    uuid written in CUDA_VISIBLE_DEVICES at that CUDA index. Never the index itself.
    """
    u = norm_uuid(ident.get("uuid"))
    if u:
        for d in devices:
            if norm_uuid(d["uuid"]) == u:
                return d, "uuid"
    pci = tuple(ident["pci"]) if ident.get("pci") else None
    if pci:
        for d in devices:
            if d["pci"] == pci:
                return d, "pci_bus_id"
    visible = [s.strip() for s in (ident.get("visible") or "").split(",") if s.strip()]
    idx = ident.get("cuda_index")
    if idx is not None and idx < len(visible) and visible[idx].lower().startswith("gpu-"):
        want = norm_uuid(visible[idx])
        hits = [d for d in devices if norm_uuid(d["uuid"]).startswith(want)]  # CUDA accepts prefixes
        if len(hits) == 1:
            return hits[0], "CUDA_VISIBLE_DEVICES uuid"
    return None, (f"no NVML device matches CUDA device {idx} (uuid {ident.get('uuid') or '?'}, "
                  f"pci {pci or '?'})")


class GpuProbe:
    """Reads one GPU's metrics; a metric whose call fails once is recorded missing and dropped."""

    def __init__(self, nv, handle, uuid: str, pids: set[int]):
        self.nv, self.h, self.uuid, self.pids = nv, handle, uuid, set(pids)
        self.missing: dict[str, str] = {}
        nv_ = nv
        self.static = [(("mem_total_bytes",), lambda: (nv_.nvmlDeviceGetMemoryInfo(handle).total,))]
        self.readers = [
            (("gpu_util_pct", "mem_util_pct"), self._util),
            (("mem_used_bytes",), lambda: (nv_.nvmlDeviceGetMemoryInfo(handle).used,)),
            (("power_w",), lambda: (nv_.nvmlDeviceGetPowerUsage(handle) / 1000.0,)),  # mW -> W
            (("energy_j",), lambda: (nv_.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0,)),  # mJ -> J
            (("sm_clock_mhz",), lambda: (nv_.nvmlDeviceGetClockInfo(handle, CLOCK_SM),)),
            (("mem_clock_mhz",), lambda: (nv_.nvmlDeviceGetClockInfo(handle, CLOCK_MEM),)),
            (("app_sm_clock_mhz",), lambda: (nv_.nvmlDeviceGetApplicationsClock(handle, CLOCK_SM),)),
            (("temperature_c",), lambda: (nv_.nvmlDeviceGetTemperature(handle, TEMPERATURE_GPU),)),
            (("clock_event_reasons",), self._reasons),
            (("pcie_tx_bytes", "pcie_rx_bytes"), self._pcie),
            (("proc_mem_used_bytes",), self._proc_mem),
        ]
        links = self._nvlink_links()
        if links:
            self.readers.append((("nvlink_tx_bytes", "nvlink_rx_bytes"), lambda: self._nvlink(links)))

    def _util(self):
        u = self.nv.nvmlDeviceGetUtilizationRates(self.h)
        return u.gpu, u.memory

    def _reasons(self):
        fn = getattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is not None:
            try:
                return (fn(self.h),)
            except Exception as e:  # noqa: BLE001 - older driver: the throttle-named call
                if "FunctionNotFound" not in type(e).__name__:
                    raise
        return (self.nv.nvmlDeviceGetCurrentClocksThrottleReasons(self.h),)

    def _fields(self, ids):
        vals = self.nv.nvmlDeviceGetFieldValues(self.h, ids)
        out = []
        for v in vals:
            if v.nvmlReturn != 0:
                raise self._error(v.nvmlReturn)
            out.append(getattr(v.value, _VALUE_FIELD.get(v.valueType, "ullVal")))
        return out

    def _error(self, code):
        try:
            return self.nv.NVMLError(code)
        except Exception:  # noqa: BLE001
            return RuntimeError(f"NVML return code {code}")

    def _pcie(self):
        return tuple(self._fields([FI_PCIE_COUNT_TX_BYTES, FI_PCIE_COUNT_RX_BYTES]))

    def _nvlink_links(self) -> int:
        try:
            n = int(self._fields([FI_NVLINK_LINK_COUNT])[0])
        except Exception as e:  # noqa: BLE001
            self.missing["nvlink_tx_bytes"] = self.missing["nvlink_rx_bytes"] = reason(e)
            return 0
        if n <= 0:
            self.missing["nvlink_tx_bytes"] = self.missing["nvlink_rx_bytes"] = "no NVLink links"
        return n

    def _nvlink(self, links: int):
        """(tx, rx) bytes summed over links, from the newest counters that answer; the source
        chosen at the first read is kept (`nvlink_source`), so counters never mix in a case."""
        choices = NVLINK_FIELDS if getattr(self, "nvlink_source", None) is None else [self.nvlink_source]
        first = None
        for tx, rx, unit, name in choices:
            ids = [(f, link) for link in range(links) for f in (tx, rx)]
            try:
                v = self._fields(ids)
            except Exception as e:  # noqa: BLE001 - try the older fields
                first = first or e
                continue
            self.nvlink_source = (tx, rx, unit, name)
            return sum(v[0::2]) * unit, sum(v[1::2]) * unit
        raise first

    def _proc_mem(self):
        procs = self.nv.nvmlDeviceGetComputeRunningProcesses(self.h)
        mine = [p for p in procs if p.pid in self.pids]
        if not mine:
            # In a container NVML reports host pids; ours are not among them then.
            raise LookupError("benchmark pids not among NVML's processes (another pid namespace?)")
        return (sum(int(p.usedGpuMemory or 0) for p in mine),)

    def read(self, t: float, out: list, static: bool = False):
        """Append (t, uuid, rank, core, metric, value) tuples for every metric that answers."""
        for names, fn in (self.static if static else []) + self.readers:
            if names[0] in self.missing:
                continue
            try:
                vals = fn()
            except Exception as e:  # noqa: BLE001 - any NVML failure: record, drop, go on
                for n in names:
                    self.missing[n] = reason(e)
                continue
            for n, v in zip(names, vals):
                out.append((t, self.uuid, None, None, n, float(v)))
