"""bench.telemetry end to end: Telemetry samples the mapped GPU (not the CUDA index), an unmapped
device leaves GPU columns null with the reason, the CPU-only path writes host metrics and says why
GPU ones are missing, disabled telemetry starts no thread, summaries joined into result rows
through the CLI, and `tools/gpu_smoke.py` on a host without CUDA."""

import json
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from bench.collectives.config import CollectivesConfig
from bench.errors import BenchError
from bench.results.schema import TELEMETRY_SUMMARY
from bench.results.store import RunWriter, latest_run, load_run
from bench.telemetry import Telemetry, nvml
from conftest import ROOT, run_cli
from telemetry_fakes import LIBRARY_NOT_FOUND, FakePsutil, fake_nvml, three_gpus, torch_view

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


def test_cpu_only_host_metrics_present_gpu_null_and_meta_says_why(tmp_path):

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


def test_disabled_telemetry_is_a_no_op(tmp_path):

    writer = RunWriter(tmp_path, "suite", "run1")
    info = SimpleNamespace(rank=0, local_rank=0, node_rank=0, world=1, device=SimpleNamespace(type="cpu"))
    before = set(threading.enumerate())
    tel = Telemetry(SimpleNamespace(config=SimpleNamespace(telemetry=False)), info, writer)
    with tel.case("x") as tc:
        assert set(threading.enumerate()) == before  # no sampler thread, not even during a case
    assert tc.summary == {} and tel.sampler is None
    assert json.loads((writer.dir / "meta.json").read_text())["telemetry"]["enabled"] is False
    with Telemetry().case("x") as tc:  # the runner's default
        pass
    assert tc.summary == {}


def test_interval_is_validated_in_the_suite():

    with pytest.raises(BenchError, match="telemetry_interval_s"):
        CollectivesConfig(telemetry_interval_s=0)


@pytest.mark.slow
def test_summary_joined_into_result_rows(tmp_path):


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


def test_gpu_smoke_without_cuda_says_so_and_passes():

    if torch.cuda.is_available():
        pytest.skip("CUDA present: `make gpu-smoke` runs the real check")
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_smoke.py")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "no CUDA device visible" in p.stdout
