"""tools/gpu_smoke.py part C (issue 31: items 1-4 with several ranks on one device) without a GPU:
the pure verdicts and the transport choice, the host-staged point-to-point shim on two gloo ranks,
and the checks' CPU form through the script (`--cpu`; the long ones are marked slow). The run
without CUDA is tests/test_telemetry_end_to_end.py::test_gpu_smoke_without_cuda_says_so_and_passes."""

import math
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import ROOT, spawn

sys.path.insert(0, str(ROOT / "tools"))
import gpu_smoke  # noqa: E402 - tools/ is not a package
import gpu_smoke_ranks as R  # noqa: E402

MiB = 1 << 20


def smoke(*argv, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_smoke.py"), *argv], capture_output=True,
                          text=True, timeout=timeout)


def lines(stdout: str) -> dict:
    """{check: (status, line)} of the '# gpu-smoke: status check: line' lines."""
    return {c: (s, x) for s, c, x in re.findall(r"^# gpu-smoke: (ok|FAILED|skipped) ([^:]+): (.*)$", stdout, flags=re.M)}


# ---- which transport -------------------------------------------------------------------------

def test_one_gpu_with_nccl_2_28_uses_gloo_with_cuda_tensors_and_says_why():
    t = R.choose_transports(cuda=True, gpus=1, nccl_version=(2, 28, 3), shared_ok=None)
    assert t["collectives"].name == t["p2p"].name == t["many"].name == "gloo-cuda"
    assert t["p2p"].p2p == "staged" and not t["p2p"].cli and t["p2p"].device == "cuda"
    assert "NCCL 2.28.3 cannot host two ranks on one GPU" in t["p2p"].why


def test_one_gpu_with_nccl_2_30_shares_it_when_the_probe_passed():
    t = R.choose_transports(cuda=True, gpus=1, nccl_version=(2, 30, 1), shared_ok=True)["p2p"]
    assert (t.name, t.backend, t.cli, t.env) == ("nccl-shared", "nccl", True, {"NCCL_MULTI_RANK_GPU_ENABLE": "1"})
    t = R.choose_transports(cuda=True, gpus=1, nccl_version=(2, 30, 1), shared_ok=False)["p2p"]
    assert t.name == "gloo-cuda" and "failed the probe" in t.why


def test_two_gpus_one_per_rank_and_world_4_on_gloo():
    t = R.choose_transports(cuda=True, gpus=2, nccl_version=(2, 28, 3), shared_ok=None)
    assert t["p2p"].name == "nccl" and t["p2p"].cli and t["many"].name == "gloo-cuda"
    assert R.choose_transports(cuda=True, gpus=4, nccl_version=None, shared_ok=None)["many"].name == "nccl"
    assert R.choose_transports(cuda=False, gpus=0, nccl_version=None, shared_ok=None)["p2p"].name == "gloo-cpu"


def test_a_child_gets_its_transport_by_name():
    for name in ("nccl", "nccl-shared", "gloo-cuda", "gloo-cpu", "gloo-cpu-staged"):
        assert R.transport_by_name(name).name == name
    with pytest.raises(ValueError, match="unknown transport 'mpi'"):
        R.transport_by_name("mpi")


@pytest.mark.parametrize("raw, want", [((2, 28, 3), (2, 28, 3)), (22803, (2, 28, 3)), (23001, (2, 30, 1))])
def test_nccl_version_as_a_tuple(raw, want):
    fake = SimpleNamespace(cuda=SimpleNamespace(nccl=SimpleNamespace(version=lambda: raw)))
    assert gpu_smoke.nccl_version(fake) == want


# ---- verdicts --------------------------------------------------------------------------------

def _row(s, m, x):
    return {"schedule": s, "stages": 2, "bubble_measured": m, "bubble_exact": x}


def test_bubble_within_two_points_per_schedule():
    status, line, per = R.bubble_verdict([_row("gpipe", 0.1416, 0.1402), _row("zbv", 0.0636, 0.0612)], "here")
    assert status == "ok" and line.startswith("2/2 schedules within 2 points")
    assert "gpipe" in per[0] and "diff +0.14 points  within 2" in per[0]


def test_bubble_outside_two_points_or_missing_fails_and_names_it():
    status, line, per = R.bubble_verdict([_row("gpipe", 0.17, 0.1402), _row("1f1b", math.nan, 0.14)], "here")
    assert status == "FAILED" and "0/2 schedules" in line
    assert "gpipe +2.98 points" in line and "1f1b: no measured or exact bubble" in line and "OUTSIDE" in per[0]
    assert R.bubble_verdict([], "here")[0] == "FAILED"


def _lat(samples, holds, med=1e-4):
    return {"samples": samples, "holds": holds, "median_s": med, "device": "cuda:0"}


def test_latency_every_rank_same_samples_and_agreed_holds():
    h = [1000, 2000, 2000, 2000]  # 3 samples, the first taken twice
    status, line = R.latency_verdict({0: _lat(3, h), 1: _lat(3, h, 2e-4)}, 2, "gloo-cuda")
    assert status == "ok" and "3 samples each" in line and "1 retried sample(s), equal on every rank" in line
    assert "0.200 ms" in line  # the max over ranks
    assert R.latency_verdict({0: _lat(3, h), 1: _lat(2, h[:3])}, 2, "x")[0] == "FAILED"
    assert R.latency_verdict({0: _lat(3, h), 1: _lat(3, [1000] * 3)}, 2, "x")[0] == "FAILED"
    status, line = R.latency_verdict({0: _lat(3, h)}, 2, "x")
    assert status == "FAILED" and "ranks [1] returned nothing" in line
    assert "host timers" in R.latency_verdict({0: _lat(3, []), 1: _lat(3, [])}, 2, "gloo-cpu")[1]


def _mem(alloc, reserved):
    return {"memory_kind": "cuda", "peak_allocated_bytes": alloc, "peak_reserved_bytes": reserved,
            "host_peak_rss_bytes": 1 << 30}


LABELS = ["check", "no check", "check"]


def test_memory_the_check_is_not_in_the_peak():
    mems = {r: [_mem(2500 * MiB, 2600 * MiB), _mem(2500 * MiB, 2580 * MiB), _mem(2501 * MiB, 2600 * MiB)]
            for r in range(4)}
    status, line = R.memory_verdict(mems, 2100 * MiB, LABELS)
    assert status == "ok" and "allocated with check 2500 / 2501 MiB, without 2500 MiB" in line
    assert "reserved with check 2600 / 2600 MiB, without 2580 MiB" in line
    mems[0][0] = _mem(4600 * MiB, 4700 * MiB)  # the reference model and gathered gradients counted
    status, line = R.memory_verdict(mems, 2100 * MiB, LABELS)
    assert status == "FAILED" and "rank 0 peaks 2100 MiB higher allocated with the check" in line
    mems[0][0] = _mem(2500 * MiB, 4700 * MiB)  # freed before the reset, but the allocator kept the blocks
    status, line = R.memory_verdict(mems, 2100 * MiB, LABELS)
    assert status == "FAILED" and "rank 0 peaks 2120 MiB higher reserved with the check" in line


def test_memory_allocated_above_reserved_fails_and_host_ranks_skip():
    mems = {0: [_mem(10 * MiB, 20 * MiB)] * 3, 1: [_mem(30 * MiB, 20 * MiB)] * 3}
    status, line = R.memory_verdict(mems, 100 * MiB, LABELS)
    assert status == "FAILED" and "rank 1 check: allocated 30 MiB > reserved 20 MiB" in line
    host = {"memory_kind": "host", "peak_allocated_bytes": None, "peak_reserved_bytes": None,
            "host_peak_rss_bytes": 300 * MiB}
    assert R.memory_verdict({0: [host] * 3}, 1, LABELS)[0] == "skipped"


def test_groups_must_not_grow():
    assert R.groups_verdict({0: [1, 1, 1], 1: [1, 1, 1]}, ["a", "b"])[0] == "ok"
    status, line = R.groups_verdict({0: [1, 3, 5], 1: [1, 3, 5]}, ["a", "b"])
    assert status == "FAILED" and "[1, 3, 5]" in line and "groups leak" in line


def test_plan_verdict_reads_the_held_out_error():
    text = ("validation: model predictions vs measured, 7 held-out case(s)\n"  # plan's lines, as printed
            "step time MAPE 1.2%  peak memory MAPE 0.9%  bubble |predicted - measured| mean 0.1 pp, max 0.1 pp\n"
            "launch 2026: step time MAPE 1.3%; launch factor 0.988x, MAPE with it taken out 0.6%\n")
    status, line = R.plan_verdict(text)
    assert status == "ok" and line.startswith("held-out step MAPE 1.2%, peak memory MAPE 0.9%")
    assert R.plan_verdict("no numbers")[0] == "FAILED"


def test_plan_layouts_verdict_reads_the_held_out_tp_error_and_its_source():
    text = ("step time MAPE 1.9%  peak memory MAPE 2.0%\n"
            "per layout: pp2 tp2 step MAPE 1.9%, peak 2.3% (3 cases; comm from collectives run 2026-x (throughput mode))\n")
    status, line = R.plan_layouts_verdict(text)
    assert status == "ok" and line.startswith("held-out pp2 x tp2 step MAPE 1.9%, comm from collectives run 2026-x "
                                              "(throughput mode) (a prediction")
    two = text.replace(")\n", "); pp4 step MAPE 0.9%, peak 1.7% (3 cases; comm from measured in the pp4 calibration)\n")
    assert R.plan_layouts_verdict(two)[1] == line
    assert R.plan_layouts_verdict("step time MAPE 1.9%")[0] == "FAILED"
    host = text.replace("(throughput mode))", "(throughput mode); tp2 host cost from pp1 tp2 (4 case(s)): compute "
                        "x1.53, collectives x0.94)")
    assert R.plan_layouts_verdict(host)[1].startswith(
        "held-out pp2 x tp2 step MAPE 1.9%, comm from collectives run 2026-x (throughput mode); tp2 host cost from "
        "pp1 tp2 (4 case(s)): compute x1.53, collectives x0.94 (a prediction")
    assert R.plan_layouts_verdict(host.replace(")\n", "); pp4 step MAPE 0.9%, peak 1.7% (3 cases; comm from x)\n"))[1] \
        == R.plan_layouts_verdict(host)[1]


@pytest.mark.slow
def test_cpu_plan_layouts_through_the_cli(tmp_path):
    p = smoke("--cpu", "--checks", "plan-layouts", "--out", str(tmp_path), timeout=600)
    got = lines(p.stdout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    status, line = got["plan-layouts"]
    assert status == "ok" and "held-out pp2 x tp2 step MAPE" in line and "(throughput mode)" in line, line
    assert "tp2 host cost from pp1 tp2" in line, line


def test_one_line_of_a_rank_failure():
    e = RuntimeError("\n====\n_entry FAILED\n  traceback : Traceback\n    File x\n  RuntimeError: the rank's own error\n")
    assert gpu_smoke.one_line(e) == "RuntimeError: RuntimeError: the rank's own error"
    assert gpu_smoke.one_line(ValueError("first\nsecond")) == "ValueError: first"


def test_budget_refuses_a_check_with_little_time_left():
    b = gpu_smoke.Budget(100)
    assert b.limit(240) <= 100 and b.limit(50) == 50
    assert gpu_smoke.Budget(10).limit(50) is None  # under MIN_START_S left: skipped, said so


# ---- the staged point-to-point shim (gloo-cuda's pipelines) on host ranks -----------------------

def _staged_send_recv(info):
    import torch  # lazy: in the spawned rank
    import torch.distributed as dist  # lazy: in the spawned rank

    undo = R.staged_p2p(force=True)  # host tensors staged too: the path a CUDA tensor takes
    try:
        if info.rank == 0:
            ops = [dist.P2POp(dist.isend, torch.arange(4.0), 1)]
        else:
            buf = torch.zeros(4, requires_grad=True)  # a stage's input buffer is a leaf that requires grad
            ops = [dist.P2POp(dist.irecv, buf, 0)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        objs = [{"rank": 0}] if info.rank == 0 else [None]
        if info.rank == 0:  # send_object_list / recv_object_list: blocking send / recv, staged too
            dist.send_object_list(objs, dst=1)
            return None
        dist.recv_object_list(objs, src=0)
        return buf.detach().tolist(), objs
    finally:
        undo()


def test_staged_p2p_delivers_into_the_asked_tensor():
    out = spawn(_staged_send_recv, 2, timeout_s=60.0)
    assert out[1] == ([0.0, 1.0, 2.0, 3.0], [{"rank": 0}])


# ---- the checks' CPU form, through the script ---------------------------------------------------

def test_cpu_latency_ranks_check_runs_and_summarises():
    p = smoke("--cpu", "--checks", "latency-ranks", "--out", "/nonexistent-not-written", timeout=180)
    got = lines(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert got["transport"][0] == "ok" and got["transport"][1].startswith("gloo-cpu")
    status, line = got["item 1 latency ranks"]
    assert status == "ok" and "2 ranks on gloo-cpu" in line and "20 samples each" in line
    assert "# gpu-smoke summary" in p.stdout and p.stdout.rstrip().endswith("all checks ok or skipped")


@pytest.mark.slow
def test_cpu_composed_cases_memory_and_groups(tmp_path):
    p = smoke("--cpu", "--checks", "composed-cases", "--out", str(tmp_path), timeout=300)
    got = lines(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert got["item 2 per-case memory"][0] == "skipped"  # host ranks: no allocator peaks
    status, line = got["item 4 process groups"]
    assert status == "ok" and "[1, 1, 1, 1, 1]" in line and "pp+tp (check)" in line


@pytest.mark.slow
def test_schedules_and_plan_through_the_patched_cli(tmp_path):
    """The gloo-cuda path on host ranks: the CLI through tools/gpu_smoke_ranks.py (select_device
    and host-staged p2p patched in the launcher and, by spawn's re-import, in every rank)."""
    p = smoke("--cpu", "--transport", "gloo-cpu-staged", "--checks", "schedules,plan", "--out", str(tmp_path),
              timeout=600)
    got = lines(p.stdout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    status, line = got["item 3 schedules bubble"]
    assert status == "ok" and line.startswith("7/7 schedules within 2 points"), line
    assert re.search(r"\b[1-9]\d* patched rank processes \(cpu staged\)", line), line  # the patch reached the ranks
    assert "no GPU evidence" in line
    assert got["plan"][0] == "ok" and "held-out step MAPE" in got["plan"][1]


@pytest.mark.slow
def test_cpu_schedules_and_plan_through_the_cli(tmp_path):
    p = smoke("--cpu", "--checks", "schedules,plan", "--out", str(tmp_path), timeout=600)
    got = lines(p.stdout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert got["item 3 schedules bubble"][1].startswith("7/7 schedules within 2 points")
    assert got["plan"][0] == "ok" and "held-out step MAPE" in got["plan"][1]
