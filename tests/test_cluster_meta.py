"""meta.json cluster facts (issue 12) from a fake pynvml and a fake nvidia-smi."""

import json
import subprocess
import types
from types import SimpleNamespace

from bench.results.metadata import cluster_facts, network_env, nvml_topology, package_versions


def fake_pynvml(nvlinks_01=4):
    """2 GPUs joined by `nvlinks_01` NVLinks, a third on another socket (SYS)."""
    m = types.ModuleType("fake_pynvml")
    buses = ["00000000:1A:00.0", "00000000:3B:00.0", "00000000:DB:00.0"]
    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040
    m.nvmlDeviceGetCount = lambda: 3
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: "NVIDIA H100 80GB HBM3"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h:08d}"
    m.nvmlDeviceGetPciInfo = lambda h: SimpleNamespace(busId=buses[h].encode())

    def state(h, link):
        if h in (0, 1) and link < nvlinks_01:
            return 1
        raise RuntimeError("NVMLError_InvalidArgument")

    m.nvmlDeviceGetNvLinkState = state
    m.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: SimpleNamespace(busId=buses[1 - h].lower()[4:])
    m.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 50 if 2 in (a, b) else 30
    m.nvmlDeviceGetP2PStatus = lambda a, b, idx: 0 if {a, b} == {0, 1} else 5
    return m


def test_nvml_topology_pairs_and_versions():
    t = nvml_topology(fake_pynvml())
    assert t["driver_version"] == "550.54.15" and t["cuda_driver_version"] == "12.4"
    pairs = {(p["a"], p["b"]): p for p in t["pairs"]}
    assert pairs[(0, 1)]["path"] == "NV4" and pairs[(0, 1)]["nvlinks"] == 4 and pairs[(0, 1)]["nvlink_p2p"] is True
    assert pairs[(0, 1)]["pcie_path"] == "PHB"
    assert pairs[(0, 2)]["path"] == "SYS" and pairs[(1, 2)]["nvlink_p2p"] is False
    assert [g["pci_bus_id"] for g in t["gpus"]][0] == "00000000:1a:00.0"


def test_cluster_facts_with_fake_nvml_and_nvidia_smi(monkeypatch):
    def run(cmd, **kw):
        assert cmd[1:] == ["topo", "-m"]
        return subprocess.CompletedProcess(cmd, 0, stdout="\tGPU0\tGPU1\nGPU0\t X \tNV4\n", stderr="")

    env = {"NCCL_SOCKET_IFNAME": "ib0,eth0", "NCCL_IB_HCA": "mlx5_0:1", "PATH": "/x"}
    f = cluster_facts(env, nvml_module=fake_pynvml(), run=run, which=lambda n: "/usr/bin/nvidia-smi")
    assert f["driver_version"] == "550.54.15" and f["cuda_driver_version"] == "12.4"
    assert f["network"] == {"NCCL_SOCKET_IFNAME": "ib0,eth0", "NCCL_IB_HCA": "mlx5_0:1"}
    assert f["topology_matrix"].startswith("GPU0") or "NV4" in f["topology_matrix"]
    assert len(f["gpu_topology"]["pairs"]) == 3 and f["gpu_facts_missing"] == ""
    assert f["packages"]["torch"] and f["packages"]["numpy"] and "nvidia-ml-py" in f["packages"]
    json.dumps(f)  # meta.json-ready


def test_cluster_facts_without_nvml_or_nvidia_smi():
    bad = types.ModuleType("fake_pynvml")

    class NVMLError_LibraryNotFound(Exception):
        pass

    def init():
        raise NVMLError_LibraryNotFound()

    bad.nvmlInit = init
    f = cluster_facts({}, nvml_module=bad, which=lambda n: None)
    assert f["driver_version"] is None and f["gpu_topology"] is None and f["topology_matrix"] is None
    assert f["gpu_facts_missing"] == "NVML: library not found" and f["network"] == {}


def test_package_versions_and_network_env():
    v = package_versions(("torch", "surely-not-installed-pkg"))
    assert v["torch"] and v["surely-not-installed-pkg"] is None
    assert network_env({"NCCL_SOCKET_IFNAME": "", "NCCL_IB_HCA": "mlx5"}) == {"NCCL_IB_HCA": "mlx5"}
