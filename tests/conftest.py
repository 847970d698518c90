"""Shared test helpers, reached one way: `from conftest import spawn, run_cli, ...`.

`spawn(fn, world, *args)` runs fn(info, *args) on `world` gloo ranks started by torch's elastic
launcher (the product's own launcher) and returns {rank: result}. fn must be a module-level
function (ranks are started with the spawn method)."""

import os
import subprocess
import sys
from pathlib import Path

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


class FakeCuda:
    """torch.cuda as far as memory accounting and event timing go, on `n` devices: per-device
    allocated / reserved bytes with peaks (the caching allocator's rules: freeing keeps the bytes
    reserved until empty_cache; reset_peak_memory_stats lowers the peaks to the current values),
    events that record on the device of the stream they are given (the current device's without
    one) and take the next scripted time of that device (seconds), and `calls`: (function, device
    index) of every call, so a test can say which device a piece of code touched.
    `install(monkeypatch)` puts it in place of torch.cuda's functions."""

    def __init__(self, n: int = 8, total_bytes: int = 80 << 30):
        self.n, self.total = n, total_bytes
        self.alloc, self.reserved = [0] * n, [0] * n
        self.peak_alloc, self.peak_reserved = [0] * n, [0] * n
        self.current = 0
        self.script: dict[int, list[float]] = {i: [] for i in range(n)}
        self.queries: list[bool] = []  # what Event.query() answers in turn (False when empty)
        self.calls: list[tuple[str, int | None]] = []

    def _dev(self, device) -> int:
        if device is None:
            return self.current
        return device if isinstance(device, int) else (device.index if device.index is not None else self.current)

    def malloc(self, device: int, nbytes: int):
        self.alloc[device] += nbytes
        self.reserved[device] = max(self.reserved[device], self.alloc[device])
        self.peak_alloc[device] = max(self.peak_alloc[device], self.alloc[device])
        self.peak_reserved[device] = max(self.peak_reserved[device], self.reserved[device])

    def free(self, device: int, nbytes: int):
        self.alloc[device] -= nbytes

    def install(self, monkeypatch):
        import torch

        fc = self

        def rec(name, device=None):
            d = fc._dev(device)
            fc.calls.append((name, d))
            return d

        class Stream:
            def __init__(self, device):
                self.device = torch.device("cuda", device)

        class Event:
            def __init__(self, enable_timing=False):
                self.t = self.device = None

            def record(self, stream=None):
                self.device = stream.device.index if stream is not None else fc.current
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

        def memory_stats(device=None):
            d = rec("memory_stats", device)
            return {"allocated_bytes.all.current": fc.alloc[d], "allocated_bytes.all.peak": fc.peak_alloc[d],
                    "active_bytes.all.peak": fc.peak_alloc[d], "reserved_bytes.all.current": fc.reserved[d],
                    "reserved_bytes.all.peak": fc.peak_reserved[d]}

        def reset_peak_memory_stats(device=None):
            d = rec("reset_peak_memory_stats", device)
            fc.peak_alloc[d], fc.peak_reserved[d] = fc.alloc[d], fc.reserved[d]

        def empty_cache():
            fc.calls.append(("empty_cache", None))
            fc.reserved = list(fc.alloc)

        def mem_get_info(device=None):
            d = rec("mem_get_info", device)
            return fc.total - fc.reserved[d], fc.total

        def set_device(device):
            fc.current = rec("set_device", device)

        for name, fn in {"device_count": lambda: fc.n, "is_available": lambda: True, "is_initialized": lambda: True,
                         "current_device": lambda: fc.current, "set_device": set_device,
                         "memory_stats": memory_stats, "reset_peak_memory_stats": reset_peak_memory_stats,
                         "empty_cache": empty_cache, "mem_get_info": mem_get_info,
                         "synchronize": lambda device=None: rec("synchronize", device),
                         "current_stream": lambda device=None: Stream(rec("current_stream", device)),
                         "_sleep": lambda cycles: fc.calls.append(("_sleep", cycles)),
                         "Event": Event}.items():
            monkeypatch.setattr(torch.cuda, name, fn)
        return self
