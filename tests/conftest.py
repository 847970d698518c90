"""Shared test helpers, reached one way: `from conftest import spawn, run_cli, ...`.

`spawn(fn, world, *args)` runs fn(info, *args) on `world` gloo ranks started by torch's elastic
launcher (the product's own launcher) and returns {rank: result}. fn must be a module-level
function (ranks are started with the spawn method)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import bench.kinds  # noqa: F401  (fills the kind registry, as every entry point does)

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


GiB = 1024**3

# What torch.cuda calls that concern no device (they create no CUDA context): allowed anywhere.
DEVICELESS = ("is_available", "device_count")


class FakeCuda:
    """A node of `n` CUDA devices as far as torch.cuda's calls in distbench go, with per-device
    memory (`total_bytes`, `free_bytes`: one number, or a list per device) and a record of every
    call: `calls` is [(name, device index or None)], None only for DEVICELESS queries. A call with
    no device argument touches the current device, which is cuda:0 until set_device (CUDA's rule),
    so `mem_get_info()` before `set_device` is recorded on device 0."""

    def __init__(self, n: int = 8, total_bytes=80 * GiB, free_bytes=79 * GiB):
        per = lambda x: list(x) if isinstance(x, (list, tuple)) else [x] * n
        self.n, self.total, self.free = n, per(total_bytes), per(free_bytes)
        self.current: int | None = None
        self.calls: list[tuple[str, int | None]] = []

    def _index(self, device) -> int:
        if device is None:
            return 0 if self.current is None else self.current
        if isinstance(device, str):
            device = __import__("torch").device(device)
        idx = device if isinstance(device, int) else (device.index if device.index is not None else self._index(None))
        if not 0 <= idx < self.n:
            raise RuntimeError(f"CUDA error: invalid device ordinal {idx} (fake node of {self.n})")
        return idx

    def _record(self, name, device=None, deviceless=False) -> int | None:
        idx = None if deviceless else self._index(device)
        self.calls.append((name, idx))
        return idx

    def is_available(self):
        self._record("is_available", deviceless=True)
        return self.n > 0

    def device_count(self):
        self._record("device_count", deviceless=True)
        return self.n

    def set_device(self, device):
        self.current = self._record("set_device", device)

    def current_device(self):
        return self._record("current_device")

    def mem_get_info(self, device=None):
        i = self._record("mem_get_info", device)
        return self.free[i], self.total[i]

    def get_device_properties(self, device=None):
        i = self._record("get_device_properties", device)
        return type("Props", (), {"name": "Fake H100", "total_memory": self.total[i], "uuid": f"GPU-fake-{i}"})()

    def synchronize(self, device=None):
        self._record("synchronize", device)

    def install(self, monkeypatch):
        import torch

        for name in ("is_available", "device_count", "set_device", "current_device", "mem_get_info",
                     "get_device_properties", "synchronize"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        return self

    def touched_before_set_device(self) -> list[tuple[str, int]]:
        """Calls on a device before the first set_device (each one would create a CUDA context on it)."""
        out = []
        for name, idx in self.calls:
            if name == "set_device":
                break
            if idx is not None:
                out.append((name, idx))
        return out

    def devices_touched(self) -> set[int]:
        return {idx for _, idx in self.calls if idx is not None}


class ReachedInit(BaseException):
    """Raised by the stub of init_process_group: the rank got that far (not an Exception, so no
    handler on the way swallows it)."""

    def __init__(self, kwargs):
        super().__init__("init_process_group")
        self.kwargs = kwargs


def stop_at_init(monkeypatch):
    """init_process_group raises ReachedInit with its arguments; the rank-side set-up that would
    touch the test process (parent-death signal, signal handlers) is left out."""
    import signal

    import torch.distributed as dist

    import bench.harness.rank as rank_mod

    def init(**kwargs):
        raise ReachedInit(kwargs)

    monkeypatch.setattr(dist, "init_process_group", init)
    monkeypatch.setattr(rank_mod, "_die_with_parent", lambda: None)
    monkeypatch.setattr(signal, "signal", lambda *a: None)


LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                 "CUDA_VISIBLE_DEVICES")
LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "MPI_LOCAL", "TORCHELASTIC_")


@pytest.fixture
def launcher_env():
    """set(env): exactly these launcher variables in os.environ (every other launcher's removed);
    os.environ is restored after the test, including what the code under test wrote into it
    (adopt_launcher_env adds RANK ... under Slurm and MPI)."""
    saved = dict(os.environ)

    def set_env(env: dict):
        for k in list(os.environ):
            if k.startswith(LAUNCHER_PREFIXES) or k in LAUNCHER_VARS:
                del os.environ[k]
        os.environ.update(env)

    yield set_env
    os.environ.clear()
    os.environ.update(saved)


def slurm_2x8(rank: int, **extra) -> dict:
    """What `srun` sets in task `rank` of a step of 2 nodes x 8 tasks (sbatch --nodes=2
    --ntasks-per-node=8): SLURM_STEP_ID marks a task of a job step (the batch shell has none)."""
    return {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": "16", "SLURM_LOCALID": str(rank % 8), "SLURM_NODEID": str(rank // 8),
            "SLURM_STEP_TASKS_PER_NODE": "8(x2)", "SLURM_TASKS_PER_NODE": "8(x2)", "SLURM_JOB_NUM_NODES": "2",
            "SLURM_STEP_NODELIST": "gpu[01-02]", "SLURM_JOB_NODELIST": "gpu[01-02]", **extra}


def ompi_2x8(rank: int) -> dict:
    """What Open MPI's `mpirun -np 16 --map-by ppr:8:node -x MASTER_ADDR -x MASTER_PORT` sets in process `rank`."""
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % 8),
            "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
