"""Resources checked before a sweep starts (issue 11): memory for the largest case, ranks for the
host's cores and open-file limit, and a writable results root with free space.

Everything here is pure or takes the machine's numbers as arguments (defaults read from the
machine), so tests fake them. A check that fails raises BenchError with a one-line message: what
needs how much, what is there, and what would fit. A soft problem returns a warning string.

The memory estimates are what one rank allocates at its peak: for a collective, its own answer
(Collective.buff_numel, nccl-tests' getBuffSize) summed like nccl-tests' buffers; upper bounds
from the buffers the code allocates for bench/allreduce/kind.py and bench/strategies/*. They are
meant to refuse a sweep that cannot fit, not to predict RSS.
Each rank also pays a fixed cost (the torch runtime, the CUDA context): RANK_OVERHEAD_BYTES.
"""

import dataclasses
import math
import os
import resource
import shutil
import tempfile
from pathlib import Path

import psutil
import torch

from bench.collectives import REGISTRY as COLLECTIVES
from bench.collectives.base import CHECK_SCRATCH_BYTES, case_numel
from bench.errors import BenchError
from bench.pipeline.config import expand_pipeline
from bench.strategies.config import expand_strategies
from bench.units import format_size, parse_dtype
from bench.workloads.models import get_spec

GiB = 1024**3
MiB = 1024**2

# Fixed per-rank cost on top of the buffers: torch + gloo in a CPU process (~250 MiB RSS measured
# on torch 2.x), a CUDA context on a GPU (~500 MiB).
RANK_OVERHEAD_BYTES = {"cpu": 256 * MiB, "cuda": 512 * MiB}

# ---- collectives --------------------------------------------------------------------------------

# A collective case's memory is the collective's own answer (Collective.buff_numel, like nccl-tests'
# getBuffSize) summed by bench.collectives.base.case_numel: send + recv buffers (one in-place),
# and while checked a fresh set of them plus the expected result; the chunked compare adds at
# most CHECK_SCRATCH_BYTES. Rooted collectives are counted at the root (the rank that holds most).


def _elem_bytes(dtype: str) -> int:
    return torch.empty((), dtype=parse_dtype(dtype)).element_size()


def collective_case_bytes(collective: str, size_bytes: int, elem_bytes: int, world: int, check: int = 1,
                          placement: str | None = None) -> int:
    """Per-rank peak bytes of one collective case at total-array size S = size_bytes, in
    `placement` (default: the larger of the collective's placements): case_numel x element size,
    plus CHECK_SCRATCH_BYTES when checked."""
    coll = COLLECTIVES.get(collective)
    count = size_bytes // max(elem_bytes, 1)
    places = [placement] if placement else list(coll.placements)
    numel = max(case_numel(coll, count, max(world, 1), p == "in-place", bool(check)) for p in places)
    return numel * elem_bytes + (CHECK_SCRATCH_BYTES if check and coll.sized else 0)


def collectives_bytes_per_rank(cfg, world: int, sizes=None) -> tuple[int, str]:
    """(bytes, label) of the case that needs the most memory per rank, over the config's
    collectives, dtypes and sizes (or `sizes`, bytes) at this world. Sizes are the requested
    total-array bytes (rounding to whole elements and shards only shrinks them)."""

    sizes = list(cfg.size_list()) if sizes is None else list(sizes)
    best, label = 0, "nothing"
    for name in cfg.collective_names():
        for dtype in cfg.dtypes:
            e = _elem_bytes(dtype)
            for s in sizes:
                b = collective_case_bytes(name, s, e, world, cfg.check)
                if b > best:
                    best, label = b, f"{name} {dtype} at {format_size(s)}B, world {world}"
    return best, label


# ---- allreduce algorithms -----------------------------------------------------------------------

# The exact input pattern is built from an int64 index over the whole array with int64/float64
# temporaries (bench.collectives.base.reduce_values / reduce_expected, not tiled here): about
# 8 B (index) + 4 x 8 B (temporaries) per element at the peak of building inputs and expected.
PATTERN_BYTES_PER_ELEMENT = 40
RING_DEPTH = 4  # bench.allreduce.ring.DEPTH: chunk-sized receive buffers in flight


def allreduce_scratch(algorithm: str, size_bytes: int, world: int, chunk_bytes: int) -> int:
    """Receive buffers an algorithm keeps (grow-only, across sizes: Algorithm.scratch):
    star's root (world - 1) x S, tree and halving_doubling S, ring RING_DEPTH chunks, native 0."""
    if algorithm == "star":
        return (world - 1) * size_bytes
    if algorithm in ("tree", "halving_doubling"):
        return size_bytes
    if algorithm == "ring":
        return min(size_bytes, RING_DEPTH * max(chunk_bytes, 1))
    if algorithm == "native":
        return 0
    return size_bytes  # an algorithm added later: one S


def allreduce_case_bytes(algorithms, size_bytes: int, elem_bytes: int, world: int, chunk_bytes: int,
                         check: int = 1) -> int:
    """Per-rank peak bytes of one allreduce block (every algorithm at one size), bench/allreduce/kind.py:
    inputs S + expected S (when checked) + working copy S (x = inputs.clone()) + the scratch every
    algorithm run so far keeps + the compare mask (1 B / element), or, while the pattern is built,
    inputs + expected + PATTERN_BYTES_PER_ELEMENT x count; the larger of the two."""
    count = max(size_bytes // max(elem_bytes, 1), 1)
    kept = size_bytes * (2 if check else 1)
    scratch = sum(allreduce_scratch(a, size_bytes, world, chunk_bytes) for a in algorithms)
    timed = kept + size_bytes + scratch + (count if check else 0)
    building = kept + PATTERN_BYTES_PER_ELEMENT * count
    return max(timed, building)


def allreduce_bytes_per_rank(cfg, world: int, sizes=None) -> tuple[int, str]:
    """(bytes, label) of the largest allreduce block of the config at this world."""

    sizes = list(cfg.size_list()) if sizes is None else list(sizes)
    algs = cfg.algorithm_names()
    best, label = 0, "nothing"
    for dtype in cfg.dtypes:
        e = _elem_bytes(dtype)
        for s in sizes:
            b = allreduce_case_bytes(algs, s, e, world, cfg.chunk(), cfg.check)
            if b > best:
                best, label = b, f"allreduce ({', '.join(algs)}) {dtype} at {format_size(s)}B, world {world}"
    return best, label


# ---- training strategies ------------------------------------------------------------------------

PARAM_BYTES = 4  # every reference model is float32
# Optimizer state per parameter, bytes: bench/strategies/base.py and pp.py use torch.optim.SGD
# without momentum (no state); momentum would keep one buffer, Adam two (exp_avg, exp_avg_sq).
OPTIMIZER = "sgd"
OPTIMIZER_STATE_BYTES = {"sgd": 0, "sgd-momentum": 4, "adam": 8}
# Saved activations per token and block, in units of width (GPT): ln1 in/out, q, k, v, attention
# out and its reshape, out-proj, residual, ln2 out, up (4), gelu (4), down, residual ~ 20.
GPT_ACTS_PER_BLOCK = 20
GPT_ACTS_PER_VOCAB = 3  # logits, log-softmax, their gradient
MLP_ACTS_PER_BLOCK = 2  # Linear out, GELU out


def model_params(spec) -> int:
    """Parameter count of a preset (bench.workloads.models.build_model), in closed form."""
    w, d = spec.width, spec.depth
    if spec.family == "mlp":
        return d * (w * w + w)
    block = 4 * (w * w + w) + 2 * 2 * w + (w * 4 * w + 4 * w) + (4 * w * w + w)  # attn, 2 LN, up, down
    return spec.vocab * w + spec.seq * w + d * block + 2 * w + w * spec.vocab


def activation_bytes(spec, batch: float) -> int:
    """Saved activations of one forward at `batch` samples (float32):
    MLP: batch x width x depth x MLP_ACTS_PER_BLOCK x 4 B;
    GPT: batch x seq x (width x depth x GPT_ACTS_PER_BLOCK + vocab x GPT_ACTS_PER_VOCAB) x 4 B.
    Attention scores (heads x seq^2) are not counted: SDPA's fused kernels do not keep them."""
    if spec.family == "mlp":
        per_sample = spec.width * (spec.depth * MLP_ACTS_PER_BLOCK + 1)
    else:
        per_sample = spec.seq * (spec.width * spec.depth * GPT_ACTS_PER_BLOCK + spec.vocab * GPT_ACTS_PER_VOCAB)
    return int(math.ceil(batch * per_sample * PARAM_BYTES))


def strategy_bytes_per_rank(spec, strategy: str, batch: int, world: int, check: bool = True,
                            optimizer: str = OPTIMIZER) -> int:
    """Rough per-rank peak bytes of one training case (rank 0, the most loaded):

        states(P) = P x (4 B params + 4 B grads + optimizer state: 0 B SGD, 8 B Adam)
        A(b)      = activation_bytes(spec, b)

        dp, layer (one process): states(P) + A(batch)
        ddp:  states(P) + 4 B x P (gradient buckets) + A(batch / world)
        fsdp: states(P) / world + 8 B x P / depth (one block gathered) + A(batch / world)
        tp:   states(P) / world + A(batch) / world  (sharded layers dominate the activations)
        pp:   states(P) / world + A(batch) / world  (GPipe keeps every micro-batch of its stage;
              1F1B fewer: an upper bound)
        other strategies: as dp

    plus, with check (the single-process reference on rank 0, base.reference_check): a full
    model and its gradients on the global batch, and the gathered gradients: 12 B x P + A(batch)."""
    p = model_params(spec)
    states = p * (2 * PARAM_BYTES + OPTIMIZER_STATE_BYTES[optimizer])
    w = max(world, 1)
    if strategy == "ddp":
        need = states + PARAM_BYTES * p + activation_bytes(spec, batch / w)
    elif strategy == "fsdp":
        need = states / w + 2 * PARAM_BYTES * p / max(spec.depth, 1) + activation_bytes(spec, batch / w)
    elif strategy in ("tp", "pp"):
        need = states / w + activation_bytes(spec, batch) / w
    else:
        need = states + activation_bytes(spec, batch)
    if check:
        need += 3 * PARAM_BYTES * p + activation_bytes(spec, batch)
    return int(math.ceil(need))


def training_bytes_per_rank(cases, check: bool = True) -> tuple[int, str]:
    """(bytes, label) of the case that needs the most, over strategies CaseSpecs (one world)."""

    best, label = 0, "nothing"
    for c in cases:
        b = strategy_bytes_per_rank(get_spec(c.model), c.strategy, c.batch, c.world, check)
        if b > best:
            best, label = b, f"{c.strategy} on {c.model}, batch {c.batch}, world {c.world}"
    return best, label


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


def check_sweep(kind: str, cfg, world: int, device="cpu", free: int | None = None,
                ranks_on_host: int | None = None, overhead_per_rank: int | None = None, where: str = ""):
    """Refuse a launch whose largest case cannot fit in free memory, naming the largest sizes
    (collectives, allreduce) or batches (strategies, pipeline) that fit.

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

    if kind in ("collectives", "allreduce"):
        est = collectives_bytes_per_rank if kind == "collectives" else allreduce_bytes_per_rank
        need, label = est(cfg, world)
        sizes = sorted(set(cfg.size_list()))
        fit = [f"{format_size(s)}B" for s in sizes if est(cfg, world, [s])[0] <= budget]
        check_fits(need, ranks, free, f"the largest case ({label})", fit, over, where)
    elif kind in ("strategies", "pipeline"):
        expand = expand_strategies if kind == "strategies" else expand_pipeline
        cases = [c for c in expand(cfg)[0] if c.world == world]
        if not cases:
            return
        need, label = training_bytes_per_rank(cases, bool(cfg.check))
        fit = []
        b = max(c.batch for c in cases)
        while b >= 1 and not fit:
            b //= 2
            if b and training_bytes_per_rank([_with_batch(c, b) for c in cases], bool(cfg.check))[0] <= budget:
                fit = [f"batch {b}"]
        check_fits(need, ranks, free, f"the largest case ({label})", fit, over, where)


def _with_batch(case, batch: int):

    return dataclasses.replace(case, batch=batch)


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
