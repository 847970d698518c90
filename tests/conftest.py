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


@pytest.fixture(autouse=True)
def _lone_rank_verdict(monkeypatch):
    """A rank faked inside this process (launcher variables set, no other rank running): the
    preflight verdict is its own. The real exchange (bench.distributed.verdict) waits on the
    launch's store for every rank; tests/test_preflight_verdict.py runs it on real processes."""
    from bench.distributed import verdict  # lazy: conftest loads before the tests' own imports

    monkeypatch.setattr(verdict, "connect", lambda: (None, None))  # no store, no heartbeat
    monkeypatch.setattr(verdict, "exchange", lambda message, timeout_s, store=None: [(int(os.environ.get("RANK", "0")), message)])


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


def one_line_error(capsys, rc, *needles) -> str:
    """An in-process command's bad input: exit code 2 and one line `distbench: error: ...` on stderr
    holding every needle; returns the line."""
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert len(err) == 1 and err[0].startswith("distbench: error: "), err
    for n in needles:
        assert n in err[0], err[0]
    return err[0]


GiB = 1024**3

# What torch.cuda calls that concern no device (they create no CUDA context): allowed anywhere.
DEVICELESS = ("is_available", "device_count")


class FakeCuda:
    """torch.cuda as far as distbench goes, on a node of `n` devices, and a record of every call:
    `calls` is [(function, device index or None)], None only for DEVICELESS queries. A call with no
    device argument touches the current device, which is cuda:0 until set_device (CUDA's rule), so
    `mem_get_info()` before `set_device` is recorded on device 0.

    Memory per device: `total_bytes` and `free_bytes` (free before anything of ours: one number, or
    a list per device) and the caching allocator's accounting: allocated / reserved bytes with
    peaks (freeing keeps bytes reserved until empty_cache; reset_peak_memory_stats lowers the peaks
    to the current values; mem_get_info = free - reserved). Events record on the device of the
    stream they are given (the current device's without one) and take the next scripted time of
    that device (`script[device]`, seconds). `install(monkeypatch)` puts it in place of torch.cuda's
    functions."""

    def __init__(self, n: int = 8, total_bytes=80 * GiB, free_bytes=None):
        per = lambda x: list(x) if isinstance(x, (list, tuple)) else [x] * n  # noqa: E731
        self.n, self.total = n, per(total_bytes)
        self.base_free = per(free_bytes) if free_bytes is not None else list(self.total)
        self.alloc, self.reserved = [0] * n, [0] * n
        self.peak_alloc, self.peak_reserved = [0] * n, [0] * n
        self.current: int | None = None  # no set_device yet: calls land on device 0
        self.script: dict[int, list[float]] = {i: [] for i in range(n)}
        self.queries: list[bool] = []  # what Event.query() answers in turn (False when empty)
        self.calls: list[tuple[str, int | None]] = []

    @property
    def device(self) -> int:
        return 0 if self.current is None else self.current

    def _index(self, device) -> int:
        if device is None:
            return self.device
        if isinstance(device, str):
            device = __import__("torch").device(device)
        idx = device if isinstance(device, int) else (device.index if device.index is not None else self.device)
        if not 0 <= idx < self.n:
            raise RuntimeError(f"CUDA error: invalid device ordinal {idx} (fake node of {self.n})")
        return idx

    _dev = _index

    def _record(self, name, device=None, deviceless=False) -> int | None:
        idx = None if deviceless else self._index(device)
        self.calls.append((name, idx))
        return idx

    def malloc(self, device: int, nbytes: int):
        self.alloc[device] += nbytes
        self.reserved[device] = max(self.reserved[device], self.alloc[device])
        self.peak_alloc[device] = max(self.peak_alloc[device], self.alloc[device])
        self.peak_reserved[device] = max(self.peak_reserved[device], self.reserved[device])

    def free(self, device: int, nbytes: int):
        self.alloc[device] -= nbytes

    # torch.cuda's functions
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
        return self.base_free[i] - self.reserved[i], self.total[i]

    def get_device_properties(self, device=None):
        i = self._record("get_device_properties", device)
        return type("Props", (), {"name": "Fake H100", "total_memory": self.total[i], "uuid": f"GPU-fake-{i}"})()

    def synchronize(self, device=None):
        self._record("synchronize", device)

    def memory_stats(self, device=None):
        d = self._record("memory_stats", device)
        return {"allocated_bytes.all.current": self.alloc[d], "allocated_bytes.all.peak": self.peak_alloc[d],
                "active_bytes.all.peak": self.peak_alloc[d], "reserved_bytes.all.current": self.reserved[d],
                "reserved_bytes.all.peak": self.peak_reserved[d]}

    def reset_peak_memory_stats(self, device=None):
        d = self._record("reset_peak_memory_stats", device)
        self.peak_alloc[d], self.peak_reserved[d] = self.alloc[d], self.reserved[d]

    def empty_cache(self):
        self.calls.append(("empty_cache", None))
        self.reserved = list(self.alloc)

    def install(self, monkeypatch):
        import torch

        fc = self

        class Stream:
            def __init__(self, device):
                self.device = torch.device("cuda", device)

        class Event:
            def __init__(self, enable_timing=False):
                self.t = self.device = None

            def record(self, stream=None):
                self.device = stream.device.index if stream is not None else fc.device
                fc.calls.append(("Event.record", self.device))
                self.t = fc.script[self.device].pop(0)

            def elapsed_time(self, other) -> float:
                assert self.device == other.device, "CUDA events of two devices have no elapsed time"
                return (other.t - self.t) * 1e3

            def synchronize(self):
                pass

            def query(self) -> bool:
                fc.calls.append(("Event.query", self.device))
                return fc.queries.pop(0) if fc.queries else False

        for name in ("is_available", "device_count", "set_device", "current_device", "mem_get_info",
                     "get_device_properties", "synchronize", "memory_stats", "reset_peak_memory_stats", "empty_cache"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        for name, fn in {"is_initialized": lambda: True,
                         "current_stream": lambda device=None: Stream(fc._record("current_stream", device)),
                         "_sleep": lambda cycles: fc.calls.append(("_sleep", cycles)),
                         "Event": Event}.items():
            monkeypatch.setattr(torch.cuda, name, fn)
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
