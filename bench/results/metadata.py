"""Run metadata: what ran, where, with which software; stored as meta.json beside the tables."""

import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys
import uuid
from datetime import datetime, timezone

from bench.telemetry import nvml


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def git_info(cwd=None) -> dict:
    def git(*args):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)

    try:
        sha = git("rev-parse", "HEAD")
        if sha.returncode != 0:
            return {"git_sha": None, "git_dirty": None}
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return {"git_sha": sha.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"git_sha": None, "git_dirty": None}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nccl_env(env=os.environ) -> dict:
    return {k: v for k, v in sorted(env.items()) if k.startswith(("NCCL_", "TORCH_NCCL_"))}


def host_facts() -> dict:
    """This rank's host: gathered from every rank by the runner."""
    import torch  # lazy: the run facts need torch; readers of runs do not

    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "uuid": str(getattr(p, "uuid", "")),
                         "total_memory_bytes": int(p.total_memory)})
    return {"host": socket.gethostname(), "cpu_model": cpu_model(), "cores": os.cpu_count(), "gpus": gpus}


def software() -> dict:
    import torch  # lazy: the run facts need torch; readers of runs do not

    nccl = None
    if torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - a torch built without NCCL
            nccl = None
    return {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": nccl, "platform": platform.platform()}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---- cluster facts (issue 12): what a cluster user needs to compare two runs ------------------

PACKAGES = ("torch", "numpy", "nvidia-ml-py", "pandas", "pyarrow", "scipy", "psutil")
NETWORK_VARS = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_NET", "NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL",
                "NCCL_CROSS_NIC", "GLOO_SOCKET_IFNAME")
# nvmlGpuTopologyLevel_t -> nvidia-smi topo -m's names
TOPOLOGY_LEVELS = {0: "SAME_BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
P2P_CAPS_INDEX_NVLINK, P2P_STATUS_OK = 2, 0  # nvml.h NVML_P2P_CAPS_INDEX_NVLINK, NVML_P2P_STATUS_OK
NVLINK_MAX_LINKS = 18  # per GPU (H100: 18; NVML_NVLINK_MAX_LINKS is larger, the state call fails past the last)


def package_versions(names=PACKAGES) -> dict:
    """{distribution: version or None when not installed}."""
    out = {}
    for n in names:
        try:
            out[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            out[n] = None
    return out


def network_env(env=os.environ) -> dict:
    """The interfaces / HCAs NCCL and gloo are told to use, where set."""
    return {k: env[k] for k in NETWORK_VARS if env.get(k)}


def _txt(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def nvml_topology(nv) -> dict:
    """Driver, CUDA driver API version, GPUs and the link between every GPU pair from NVML:
    {"driver_version", "cuda_driver_version", "gpus": [{index, name, uuid, pci_bus_id}],
     "pairs": [{"a", "b", "path", "nvlinks", "nvlink_p2p"}]}; path is nvidia-smi topo -m's
    name for the closest common ancestor (NV# when NVLink connects them). Calls that fail leave
    their field None."""
    def tryit(fn, *a):
        try:
            return fn(*a)
        except Exception:  # noqa: BLE001 - not supported, no permission, old driver
            return None

    out = {"driver_version": None, "cuda_driver_version": None, "gpus": [], "pairs": []}
    v = tryit(nv.nvmlSystemGetDriverVersion)
    out["driver_version"] = _txt(v) if v is not None else None
    fn = getattr(nv, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(nv, "nvmlSystemGetCudaDriverVersion", None)
    cv = tryit(fn) if fn else None
    if isinstance(cv, int) and cv > 0:
        out["cuda_driver_version"] = f"{cv // 1000}.{cv % 1000 // 10}"
    n = tryit(nv.nvmlDeviceGetCount) or 0
    handles = []
    for i in range(n):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        pci = tryit(nv.nvmlDeviceGetPciInfo, h)
        bus = _txt(getattr(pci, "busId", "") or "").lower() if pci is not None else ""
        handles.append((h, bus))
        name, uuid = tryit(nv.nvmlDeviceGetName, h), tryit(nv.nvmlDeviceGetUUID, h)
        out["gpus"].append({"index": i, "name": _txt(name) if name is not None else None,
                            "uuid": _txt(uuid) if uuid is not None else None, "pci_bus_id": bus or None})
    links = {}  # (i, j) -> NVLinks from i to j
    for i, (h, _bus) in enumerate(handles):
        for link in range(NVLINK_MAX_LINKS):
            state = tryit(nv.nvmlDeviceGetNvLinkState, h, link) if hasattr(nv, "nvmlDeviceGetNvLinkState") else None
            if not state:
                continue
            remote = tryit(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
            rbus = _txt(getattr(remote, "busId", "") or "").lower() if remote is not None else ""
            for j, (_h2, bus2) in enumerate(handles):
                if j != i and bus2 and rbus and _norm_bus(rbus) == _norm_bus(bus2):
                    links[(i, j)] = links.get((i, j), 0) + 1
    for i in range(n):
        for j in range(i + 1, n):
            level = tryit(nv.nvmlDeviceGetTopologyCommonAncestor, handles[i][0], handles[j][0])
            p2p = tryit(nv.nvmlDeviceGetP2PStatus, handles[i][0], handles[j][0], P2P_CAPS_INDEX_NVLINK) \
                if hasattr(nv, "nvmlDeviceGetP2PStatus") else None
            k = max(links.get((i, j), 0), links.get((j, i), 0))
            path = f"NV{k}" if k else TOPOLOGY_LEVELS.get(level, None if level is None else str(level))
            out["pairs"].append({"a": i, "b": j, "path": path, "nvlinks": k,
                                 "pcie_path": TOPOLOGY_LEVELS.get(level) if level is not None else None,
                                 "nvlink_p2p": None if p2p is None else p2p == P2P_STATUS_OK})
    return out


def _norm_bus(bus: str) -> str:
    """'00000000:1A:00.0' and '0000:1a:00.0' name the same device."""
    bus = bus.strip().lower()
    dom, _, rest = bus.partition(":")
    return f"{int(dom, 16):04x}:{rest}" if rest and all(c in "0123456789abcdef" for c in dom) else bus


def nvidia_smi_topology(run=subprocess.run, which=None) -> str | None:
    """`nvidia-smi topo -m` as text when nvidia-smi is on PATH (None otherwise or on failure)."""
    exe = (which or shutil.which)("nvidia-smi")
    if not exe:
        return None
    try:
        p = run([exe, "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else None


def nccl_version() -> str | None:
    import torch  # lazy: the run facts need torch; readers of runs do not

    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a torch built without NCCL
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def cluster_facts(env=os.environ, nvml_module=None, run=subprocess.run, which=None) -> dict:
    """This node's facts for meta.json: {"driver_version", "cuda_driver_version", "cuda_runtime",
    "nccl_version", "gpu_topology" (NVML, see nvml_topology), "topology_matrix" (nvidia-smi topo
    -m text), "network" (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ... where set), "packages",
    "gpu_facts_missing" (why NVML gave nothing)}. Never raises: what cannot be read is None."""
    import torch  # lazy: the run facts need torch; readers of runs do not

    facts = {"driver_version": None, "cuda_driver_version": None, "cuda_runtime": torch.version.cuda,
             "nccl_version": nccl_version() if torch.cuda.is_available() else None, "gpu_topology": None,
             "topology_matrix": None, "network": network_env(env), "packages": package_versions(),
             "gpu_facts_missing": ""}
    nv, why = nvml.load(nvml_module)
    if nv is None:
        facts["gpu_facts_missing"] = why
    else:
        try:
            topo = nvml_topology(nv)
            facts["driver_version"] = topo.pop("driver_version")
            facts["cuda_driver_version"] = topo.pop("cuda_driver_version")
            facts["gpu_topology"] = topo
        except Exception as e:  # noqa: BLE001 - metadata must not fail a run
            facts["gpu_facts_missing"] = f"NVML topology: {type(e).__name__}: {e}"
        finally:
            nvml.shutdown(nv)
    facts["topology_matrix"] = nvidia_smi_topology(run, which)
    return facts
