"""The CLI end to end on a tiny suite, and the multi-node path (two torchrun agents as two nodes)."""

import os
import socket
import subprocess
import sys

import pandas as pd
import torch

from bench.collectives import REGISTRY, Ctx
from bench.collectives.all_reduce import AllReduce
from bench.collectives.runner import check
from bench.results.store import load_run
from conftest import ROOT, run_cli, spawn

TINY = """
kind = "collectives"
name = "tiny"
collectives = ["all_reduce", "all_gather_single", "broadcast", "sendrecv", "barrier"]
world = [2]
sizes = ["1K", "4K"]
modes = ["latency", "throughput"]
budget_s = 0.001
iters = 20
"""


def test_cli_run_on_a_tiny_suite(tmp_path):
    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY)
    p = run_cli("collectives", "--suite", str(suite), "--out", str(tmp_path / "res"))
    assert p.returncode == 0, p.stderr
    assert "out-of-place" in p.stdout and "Wrong elements: 0 OK" in p.stdout
    (run_dir,) = (tmp_path / "res" / "tiny").iterdir()
    run = load_run(run_dir)
    df = run["results"]
    # 4 sized collectives x 2 sizes x placements (all_gather_single has 2) x 2 modes + barrier x 2 modes
    assert len(df) == (2 + 2 * 2 + 2 + 2) * 2 + 2
    assert set(df["mode"]) == {"latency", "throughput"}
    assert (df["wrong"] == 0).all() and (df["world"] == 2).all()
    assert (df.loc[df.collective != "barrier", "iters"] >= 20).all()
    ar = df[(df.collective == "all_reduce") & (df["mode"] == "latency")]
    assert (ar["bus_factor"] == 1.0).all()
    assert (ar["busbw_gbps"] - ar["size_bytes"] / ar["time_median_s"] / 1e9).abs().max() < 1e-9
    s = run["samples"]
    one = s[(s.case_id == ar.case_id.iloc[0]) & (s.size_bytes == 1024)]
    assert sorted(one["rank"].unique()) == [0, 1]
    # the row's median is the median of the per-iteration max over ranks
    worst = one.pivot(index="iteration", columns="rank", values="seconds").max(axis=1)
    assert abs(worst.median() - ar[ar.size_bytes == 1024]["time_median_s"].iloc[0]) < 1e-12
    meta = run.meta
    assert meta["launches"]["2"]["world"] == 2 and meta["software"]["torch"] == torch.__version__
    assert meta["launches"]["2"]["threads_per_rank"] == 1 and "first_collective_s" in meta["launches"]["2"]
    assert "git_sha" in meta and meta["command_line"].startswith("__main__.py collectives") or meta["command_line"]


class _Broken(AllReduce):
    name = "broken"

    def call(self, c, b, async_op=False):
        b.inputs.add_(1)  # a wrong result: the check must count every element


def _check_broken(info):
    c = Ctx(rank=info.rank, world=info.world, count=10, dtype=torch.float32, device=info.device, op="sum")
    return check(_Broken(), c, 2)


def test_check_counts_wrong_elements():
    assert spawn(_check_broken, 1) == {0: 20}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_torchrun_agents_as_two_nodes(tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = lambda node: [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                        "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                        "--rdzv-id", "distbench-test", "-m", "bench", "collectives", "-c", "all_reduce",
                        "--sizes", "4K", "--budget-s", "0.001", "--out", str(tmp_path / "res")]
    procs = [subprocess.Popen(cmd(n), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in (0, 1)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    (run_dir,) = (tmp_path / "res" / "collectives").iterdir()
    run = load_run(run_dir)
    launch = run.meta["launches"]["2"]
    assert launch["world"] == 2 * 1 and launch["node_ranks"] == [0, 1] and launch["nodes"] == 2
    assert run.meta["launcher"] == "torchrun"
    df = run["results"]
    assert (df["world"] == 2).all() and (df["nodes"] == 2).all() and (df["wrong"] == 0).all()
