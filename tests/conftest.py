"""Shared test helpers, reached one way: `from conftest import spawn, run_cli, ...`.

`spawn(fn, world, *args)` runs fn(info, *args) on `world` gloo ranks started by torch's elastic
launcher (the product's own launcher) and returns {rank: result}. fn must be a module-level
function (ranks are started with the spawn method)."""

import os
import subprocess
import sys
from pathlib import Path

import bench.kinds  # noqa: E402,F401  (fills the kind registry, as every entry point does)

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")


def spawn(fn, world: int, *args, timeout_s: float = 120.0) -> dict:
    from bench.distributed.launch import launch, run_in_group

    return launch(run_in_group, (fn, "gloo", timeout_s, *args), nproc=world)


def run_cli(*argv, cwd=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    """`python -m bench ARGV` in a subprocess (exit code and stderr as a user sees them)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def torchrun_2x8(rank: int) -> dict:
    """What `torchrun --nnodes 2 --nproc-per-node 8` sets for global `rank`."""
    return {"RANK": str(rank), "WORLD_SIZE": "16", "LOCAL_RANK": str(rank % 8), "LOCAL_WORLD_SIZE": "8",
            "GROUP_RANK": str(rank // 8), "MASTER_ADDR": "node0", "MASTER_PORT": "29400"}


def fake_eight_gpus(monkeypatch):
    """A node of 8 CUDA devices, as far as torch.cuda's queries go."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def assert_usage_error(rc: int, err: str, message: str, out: Path):
    """Bad input as the product promises it: exit code 2, one line `distbench: error: ...` that
    contains `message`, and nothing written under `out`."""
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("distbench: error: "), err
    assert message in lines[0], lines[0]
    assert not out.exists(), "nothing may be written on bad input"
