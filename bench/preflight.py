"""Resources checked before a sweep starts (issue 11): memory for the largest case, ranks for the
host's cores and open-file limit, and a writable results root with free space.

Everything here is pure or takes the machine's numbers as arguments (defaults read from the
machine), so tests fake them. A check that fails raises BenchError with a one-line message: what
needs how much, what is there, and what would fit. A soft problem returns a warning string.

The memory a launch needs is the kind's answer (Kind.memory: bench/<kind>/memory.py), built from
what each unit says of itself: a collective its buffers (Collective.buff_numel, nccl-tests'
getBuffSize), an algorithm its scratch (Algorithm.scratch_bytes), a strategy its parameters,
gradients, optimizer state and activations (Strategy.memory; per stage and per rank where ranks
differ, Strategy.ranks: the answer is the most loaded rank's, named in the label, with the
reference check charged to rank 0 that runs it). Preflight only compares it with what is free;
it knows no kind and no unit by name. A CUDA rank (or the GPU with the least free memory) is
compared with that one rank's need; ranks sharing a host are charged ranks x it, an over-count
where ranks differ. The estimates are meant to refuse a sweep that cannot fit, not to predict RSS.
Each rank also pays a fixed cost (the torch runtime, the CUDA context): RANK_OVERHEAD_BYTES.
"""

import os
import resource
import shutil
import tempfile
from pathlib import Path

import psutil
import torch

from bench.errors import BenchError

GiB = 1024**3
MiB = 1024**2

# Fixed per-rank cost on top of the buffers: torch + gloo in a CPU process (~250 MiB RSS measured
# on torch 2.x), a CUDA context on a GPU (~500 MiB).
RANK_OVERHEAD_BYTES = {"cpu": 256 * MiB, "cuda": 512 * MiB}

# ---- the machine ---------------------------------------------------------------------------------

def _cgroup_available() -> int | None:
    """memory.max - memory.current of this process's cgroup (v2), when limited; else None."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()), 0)
    except (OSError, ValueError):
        return None


def free_memory_bytes(device="cpu") -> int:
    """Free memory for the ranks: host memory available (psutil; the cgroup's headroom when that is
    smaller) for a CPU device; for a CUDA device, torch.cuda.mem_get_info of that device, which
    creates a CUDA context on it: call it only in the rank that owns the device, after
    set_device (bench.distributed.env.select_device), never in the launcher."""

    dev = torch.device(device)
    if dev.type == "cuda":
        if dev.index is None:
            raise ValueError("free_memory_bytes: name the CUDA device (cuda:N), the rank's own")
        return int(torch.cuda.mem_get_info(dev)[0])

    avail = int(psutil.virtual_memory().available)
    cg = _cgroup_available()
    return min(avail, cg) if cg is not None else avail


def nvml_free_bytes(indices) -> list[int] | None:
    """Free bytes of the CUDA devices `indices` as NVML reports them (nvmlDeviceGetMemoryInfo),
    for a launcher that owns no GPU: NVML creates no CUDA context. A CUDA index maps onto NVML's
    through CUDA_VISIBLE_DEVICES (torch.cuda._get_nvml_device_index, what torch.cuda.utilization
    uses). None when NVML cannot answer (no nvidia-ml-py, no driver, an older torch)."""
    try:
        import pynvml  # lazy: optional dependency (nvidia-ml-py), only on GPU hosts

        to_nvml = torch.cuda._get_nvml_device_index
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - any failure means: no answer from NVML
        return None
    try:
        return [int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(to_nvml(i))).free)
                for i in indices]
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def check_fits(need_per_rank: int, ranks_on_host: int, free: int, what: str, sizes_that_fit=(),
               overhead_per_rank: int = 0, where: str = ""):
    """BenchError (one line) when ranks_on_host x (need_per_rank + overhead_per_rank) > free:
    what needs how much, what is free (`where`: the memory, e.g. 'cuda:3, this rank's own GPU'),
    and the largest sizes that fit (`sizes_that_fit`, strings, smallest first; the last three)."""
    per = need_per_rank + overhead_per_rank
    ranks = max(ranks_on_host, 1)
    total = per * ranks
    if total <= free:
        return
    fit = list(sizes_that_fit)
    hint = f"largest that fit: {', '.join(fit[-3:])}" if fit else "nothing in this sweep fits"
    on = f" on {where}" if where else ""
    if where and ranks == 1:
        raise BenchError(f"{what} needs {gib(per)} per rank, but only {gib(free)} is free{on}; {hint}")
    sharing = f" sharing {where}" if where else ""
    raise BenchError(f"{what} needs {gib(per)} per rank x {ranks} rank(s){sharing} = {gib(total)}, but only "
                     f"{gib(free)} is free; {hint}")


def check_sweep(kind, cfg, world: int, device="cpu", free: int | None = None,
                ranks_on_host: int | None = None, overhead_per_rank: int | None = None, where: str = ""):
    """Refuse a launch whose largest case cannot fit in free memory, naming what of the sweep
    would fit (the kind's answer: sizes, a batch). `kind` is a bench.kind.Kind.

    The memory is the host's for CPU ranks, shared by the `ranks_on_host` ranks on it (default:
    the whole world, a self-launch). For a CUDA rank it is its own device's (`device` = cuda:N,
    already made current by the caller; free defaults to its mem_get_info) and `ranks_on_host` is
    the ranks on that one GPU: 1, unless the launcher really puts several on it
    (bench.distributed.env.gpu_layout). `overhead_per_rank` defaults to RANK_OVERHEAD_BYTES."""

    dtype = torch.device(device).type
    free = free_memory_bytes(device) if free is None else free
    ranks = (world if dtype == "cpu" else 1) if ranks_on_host is None else ranks_on_host
    over = RANK_OVERHEAD_BYTES.get(dtype, RANK_OVERHEAD_BYTES["cpu"]) if overhead_per_rank is None else overhead_per_rank
    budget = free / max(ranks, 1) - over
    need, label = kind.memory.need(cfg, world)
    if need <= 0:
        return  # no case at this world
    fit = kind.memory.fits(cfg, world, budget) if need > budget else []
    check_fits(need, ranks, free, f"the largest case ({label})", fit, over, where)


# ---- ranks, files, ports ------------------------------------------------------------------------

MAX_RANKS_PER_CORE = 8  # beyond this many ranks per core a launch is refused, beyond 1 warned
FD_BASE = 64  # per process: interpreter, torch libraries, pipes, the store, telemetry
FD_PER_PEER = 8  # per process and peer: gloo's pair socket(s), store connections, slack


def fds_needed(world: int) -> int:
    """Open files one process of a launch needs (the soft RLIMIT_NOFILE is per process):
    FD_BASE + FD_PER_PEER x world. Each gloo rank holds a socket per peer; the launcher's TCPStore
    holds a connection per rank and a pipe pair per child. Over the host that is about
    FD_PER_PEER x world^2 in all (world processes of FD_PER_PEER x world each)."""
    return FD_BASE + FD_PER_PEER * world


def _nofile() -> tuple[int, int]:

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard


def check_ranks(world: int, cores: int | None = None, fd_limit: int | tuple[int, int] | None = None) -> str | None:
    """Refuse (BenchError) a launch of `world` ranks on this host beyond MAX_RANKS_PER_CORE x cores,
    or needing more open files per process than the limit allows; warn (returns the line) beyond
    one rank per core. `fd_limit`: the soft limit, or (soft, hard); default resource.getrlimit."""
    cores = (os.cpu_count() or 1) if cores is None else cores
    if fd_limit is None:
        fd_limit = _nofile()
    soft, hard = fd_limit if isinstance(fd_limit, tuple) else (fd_limit, fd_limit)
    if world > MAX_RANKS_PER_CORE * cores:
        raise BenchError(f"world {world} is far beyond this host's {cores} core(s) (at most "
                         f"{MAX_RANKS_PER_CORE * cores} ranks, {MAX_RANKS_PER_CORE} per core); use fewer ranks or more nodes")
    need = fds_needed(world)
    if need > soft:
        raise_to = "" if need > hard else f"; raise it with `ulimit -n {min(hard, max(need * 2, 1024))}`"
        raise BenchError(f"world {world} needs about {need} open files per process, but the limit is {soft} "
                         f"(hard {hard}){raise_to or '; use fewer ranks per node'}")
    if world > cores:
        return (f"world {world} on {cores} core(s): ranks share cores (oversubscribed), "
                "times include scheduling noise")
    return None


# ---- the results root ---------------------------------------------------------------------------

MIN_FREE_DISK_BYTES = 50 * MiB


def check_writable(out_root, min_free: int = MIN_FREE_DISK_BYTES, disk_usage=shutil.disk_usage) -> Path:
    """The results root exists or can be created, a file can be written in it, and its file system
    has at least `min_free` bytes free; else BenchError naming the path. Returns the root."""
    root = Path(out_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as e:
        raise BenchError(f"results directory '{root}' cannot be created: {e.strerror or e}") from None
    if not root.is_dir():
        raise BenchError(f"results directory '{root}' is not a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=root, prefix=".distbench-write-test-") as f:
            f.write(b"ok")
            f.flush()
    except OSError as e:
        raise BenchError(f"results directory '{root}' is not writable: {e.strerror or e}") from None
    free = disk_usage(root).free
    if free < min_free:
        raise BenchError(f"results directory '{root}' has {free / MiB:.1f} MiB free; at least "
                         f"{min_free / MiB:.0f} MiB is needed")
    return root
