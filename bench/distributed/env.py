"""Where a rank runs: launcher detection (elastic_launch / torchrun / MPI / Slurm), ranks per
node, backend and device choice, and process-group set-up with a finite timeout.

Under torchrun (or our own elastic_launch) RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK, MASTER_ADDR and MASTER_PORT are set. Under an MPI launcher (`mpirun`, `mpiexec`,
`srun --mpi=pmi2`) we map OMPI_COMM_WORLD_* (Open MPI) or PMI_RANK / PMI_SIZE / MPI_LOCALRANKID /
MPI_LOCALNRANKS (MPICH, Intel MPI) onto the same variables; under Slurm (`srun python -m bench
...`) SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_NODEID, the tasks per node and the first
host of SLURM_JOB_NODELIST. Everything downstream sees one convention (`torch_env`).

Precedence: torchrun's own variables, then MPI's (they are per process; a Slurm variable seen by
an mpirun-started process may be the allocation's or the daemon's), then Slurm's.
"""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.errors import BenchError, unknown
from bench.suite import int_list

if TYPE_CHECKING:
    import torch

BACKENDS = ("auto", "gloo", "nccl")
DEFAULT_MASTER_PORT = 29500


def under_torchrun(env=os.environ) -> bool:
    return "RANK" in env and "WORLD_SIZE" in env


def _mpi_size(env) -> int:
    for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        v = str(env.get(k, "")).strip()
        if v.isdigit():
            return int(v)
    return 0


def under_mpi(env=os.environ) -> bool:
    """Started by an MPI launcher (Open MPI, MPICH/Hydra, Intel MPI, srun --mpi=pmi2) with more
    than one process, and not (yet) mapped onto torchrun's variables."""
    return "RANK" not in env and _mpi_size(env) > 1


# Slurm's job step ids above this one are its special steps (batch script, extern, interactive):
# slurm/slurm.h SLURM_MAX_NORMAL_STEP_ID (0xfffffff0), SLURM_BATCH_SCRIPT (0xfffffffb) ...
SLURM_MAX_NORMAL_STEP_ID = 0xFFFFFFF0


def slurm_step_id(env=os.environ) -> int | None:
    """The job step this process is a task of, or None outside a step. srun sets SLURM_STEP_ID
    (and the old SLURM_STEPID) in every task of the step it starts (Slurm src/common/env.c,
    env_array_for_step); the batch script's shell has SLURM_PROCID=0 and the job's SLURM_NTASKS
    but is no task of a step (env_array_for_batch_job sets no step id)."""
    for k in ("SLURM_STEP_ID", "SLURM_STEPID"):
        v = str(env.get(k, "")).strip()
        if v.isdigit() and int(v) <= SLURM_MAX_NORMAL_STEP_ID:
            return int(v)
    return None


def slurm_step_tasks(env) -> int:
    """Tasks of this step: SLURM_STEP_NUM_TASKS (srun always sets it), else SLURM_NTASKS (which
    srun --preserve-env leaves at the job's value)."""
    return int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or 1)


def under_slurm(env=os.environ) -> bool:
    """A task of an srun job step with more than one task. The batch script's own shell (no job
    step) is not a rank: run there, distbench launches its ranks itself on that node."""
    return ("SLURM_PROCID" in env and slurm_step_id(env) is not None and slurm_step_tasks(env) > 1
            and "RANK" not in env and not under_mpi(env))


ADOPTED = "DISTBENCH_LAUNCHER"  # set by adopt_launcher_env: who started this rank, once RANK is written


def launcher(env=os.environ) -> str | None:
    """'torchrun' | 'mpi' | 'slurm' for a process started by an external launcher, None for
    self-launch (distbench starts its ranks itself with elastic_launch). A rank started by our
    own elastic_launch reads 'torchrun' (same agent, same variables). Once adopt_launcher_env
    has written torchrun's variables for an MPI or Slurm rank, the launcher it adopted is still
    the answer (DISTBENCH_LAUNCHER), not 'torchrun'."""
    adopted = env.get(ADOPTED)
    if adopted in ("mpi", "slurm") and "RANK" in env:
        return adopted
    if under_torchrun(env):
        return "torchrun"
    if under_mpi(env):
        return "mpi"
    if under_slurm(env):
        return "slurm"
    return None


def first_host(nodelist: str) -> str:
    """First hostname of a Slurm nodelist: 'gpu[03-05,9],cpu1' -> 'gpu03'."""
    m = re.match(r"^([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise BenchError(f"cannot parse SLURM_JOB_NODELIST '{nodelist}'")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def expand_tasks_per_node(spec: str) -> list[int]:
    """Slurm's compressed tasks-per-node list: '8(x2)' -> [8, 8]; '4,2' -> [4, 2];
    '2(x3),1' -> [2, 2, 2, 1]."""
    out = []
    for part in str(spec).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if not m:
            raise BenchError(f"cannot parse Slurm tasks per node '{spec}' (expected e.g. 8(x2) or 4,2)")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def slurm_tasks_on_node(env) -> int:
    """Tasks of this step on this node: SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE
    (indexed by SLURM_NODEID), SLURM_NTASKS_PER_NODE, else SLURM_NTASKS / nodes."""
    node = int(env.get("SLURM_NODEID", "0") or 0)
    for k in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"):
        v = str(env.get(k, "")).strip()
        if v:
            counts = expand_tasks_per_node(v)
            return counts[node] if node < len(counts) else counts[-1]
    ntasks = slurm_step_tasks(env)
    nnodes = int(env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_JOB_NUM_NODES", env.get("SLURM_NNODES", "1"))))
    return max(1, -(-ntasks // max(nnodes, 1)))


def slurm_to_torch_env(env) -> dict:
    """The torchrun-style variables for this Slurm task."""
    ntasks = slurm_step_tasks(env)
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") \
        or "localhost"
    return {
        "RANK": env["SLURM_PROCID"],
        "WORLD_SIZE": str(ntasks),
        "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
        "LOCAL_WORLD_SIZE": str(slurm_tasks_on_node(env)),
        "GROUP_RANK": env.get("SLURM_NODEID", "0"),
        "MASTER_ADDR": env.get("MASTER_ADDR") or first_host(nodelist),
        "MASTER_PORT": env.get("MASTER_PORT") or str(DEFAULT_MASTER_PORT),
    }


def mpi_to_torch_env(env) -> dict:
    """The torchrun-style variables for this MPI process.

    rank / size: OMPI_COMM_WORLD_RANK / _SIZE (Open MPI) or PMI_RANK / PMI_SIZE (MPICH, Intel
    MPI, srun --mpi=pmi2); local rank / size: OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE or
    MPI_LOCALRANKID / MPI_LOCALNRANKS (else Slurm's SLURM_LOCALID and tasks per node). GROUP_RANK
    (node index) is rank // local size: MPI's default block mapping (--map-by slot / core).
    MASTER_ADDR: the variable, else the first host of a Slurm allocation's nodelist, else
    127.0.0.1 when every rank is on this node; across nodes without either it is an error.
    MASTER_PORT: the variable, else 29500.
    """
    if "OMPI_COMM_WORLD_SIZE" in env:
        rank, size = env.get("OMPI_COMM_WORLD_RANK"), env["OMPI_COMM_WORLD_SIZE"]
        local_rank, local_size = env.get("OMPI_COMM_WORLD_LOCAL_RANK"), env.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    else:
        rank, size = env.get("PMI_RANK"), env.get("PMI_SIZE")
        local_rank, local_size = env.get("MPI_LOCALRANKID"), env.get("MPI_LOCALNRANKS")
    if rank is None or size is None:
        raise BenchError("MPI launch: cannot tell this process's rank (expected OMPI_COMM_WORLD_RANK or PMI_RANK)")
    size_i = int(size)
    if local_rank is None and "SLURM_LOCALID" in env:
        local_rank = env["SLURM_LOCALID"]
    if local_size is None and any(k in env for k in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
                                                        "SLURM_NTASKS_PER_NODE")):
        local_size = str(slurm_tasks_on_node(env))
    if local_rank is None:
        raise BenchError("MPI launch: cannot tell this process's local rank (which GPU it uses): "
                         "set MPI_LOCALRANKID or LOCAL_RANK (Open MPI sets OMPI_COMM_WORLD_LOCAL_RANK)")
    if local_size is None:
        local_size = str(size_i)  # the most it can be; only the GPU check reads it
    local_size_i = max(1, int(local_size))
    addr = env.get("MASTER_ADDR")
    if not addr:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if nodelist:
            addr = first_host(nodelist)
        elif local_size_i >= size_i:
            addr = "127.0.0.1"
        else:
            raise BenchError(f"MPI launch across nodes ({size_i} ranks, {local_size_i} on this node): set MASTER_ADDR "
                             "to rank 0's host and MASTER_PORT to a free port on it, e.g. "
                             "mpirun -x MASTER_ADDR=node0 -x MASTER_PORT=29500 ...")
    return {
        "RANK": str(int(rank)),
        "WORLD_SIZE": str(size_i),
        "LOCAL_RANK": str(int(local_rank)),
        "LOCAL_WORLD_SIZE": str(local_size_i),
        "GROUP_RANK": str(int(rank) // local_size_i),
        "MASTER_ADDR": addr,
        "MASTER_PORT": env.get("MASTER_PORT") or str(DEFAULT_MASTER_PORT),
    }


def torch_env(env=os.environ) -> dict | None:
    """torchrun's variables for this process under any external launcher; None for self-launch."""
    kind = launcher(env)
    if kind == "torchrun" or env.get(ADOPTED) == kind and "RANK" in env:
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
        return {k: env[k] for k in keys if k in env}
    if kind == "mpi":
        return mpi_to_torch_env(env)
    if kind == "slurm":
        return slurm_to_torch_env(env)
    return None


def global_rank(env=os.environ) -> int:
    """This process's rank under any launcher (0 for the self-launching parent)."""
    for k in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        v = str(env.get(k, "")).strip()
        if v.isdigit():
            return int(v)
    return 0


def launcher_world(env=os.environ) -> int | None:
    """The world size the external launcher decided, or None under self-launch."""
    t = torch_env(env)
    return int(t["WORLD_SIZE"]) if t else None


def ranks_per_node(env=os.environ) -> int | None:
    """Ranks on this node under an external launcher: LOCAL_WORLD_SIZE (torchrun), the MPI
    local size, or Slurm's tasks on this node; None under self-launch."""
    t = torch_env(env)
    if not t:
        return None
    if "LOCAL_WORLD_SIZE" in t:
        return int(t["LOCAL_WORLD_SIZE"])
    return None


def resolve_worlds(args_world, cfg_world, env=os.environ) -> tuple[int, ...]:
    """The world sizes to run. Under torchrun / srun / mpirun: the launcher's world, only (a
    suite's world list is for self-launch); a --nproc that differs from it is refused. Under
    self-launch: --nproc (comma list) or else the config's worlds."""
    asked = int_list(args_world, "world size") if isinstance(args_world, (str, type(None))) \
        else tuple(int(w) for w in (args_world if isinstance(args_world, (list, tuple)) else (args_world,)))
    world = launcher_world(env)
    if world is not None:
        if asked and asked != (world,):
            raise BenchError(f"--nproc {','.join(map(str, asked))} does not match the launcher's world size {world} "
                             f"({launcher(env)}); under torchrun/srun/mpirun leave --nproc out")
        return (world,)
    if asked:
        return asked
    return tuple(cfg_world) if isinstance(cfg_world, (list, tuple)) else (int(cfg_world),)


def resolve_backend(requested: str, env_has_cuda: bool | None = None) -> str:
    """'auto' -> nccl when CUDA is present, else gloo. nccl without CUDA is an error."""
    import torch  # lazy: only for a launch (the launcher readers here serve every command)

    has_cuda = torch.cuda.is_available() if env_has_cuda is None else env_has_cuda
    if requested not in BACKENDS:
        raise unknown("backend", requested, BACKENDS)
    if requested == "auto":
        return "nccl" if has_cuda else "gloo"
    if requested == "nccl" and not has_cuda:
        raise BenchError("backend 'nccl' needs CUDA, and no CUDA device is visible; use --backend gloo")
    return requested


def multi_rank_gpu(env=os.environ) -> bool:
    """NCCL_MULTI_RANK_GPU_ENABLE=1: NCCL lets several ranks of a node share one GPU; by default
    it refuses them at communicator init ("Multiple Ranks are using the same GPU/Partition": NCCL
    src/init.cc:1055, the peerInfo gpuUuid check; NCCL_PARAM(MultiRankGpuEnable, ..., 0) at
    src/init.cc:68; NVIDIA/nccl commit 5067397)."""
    return str(env.get("NCCL_MULTI_RANK_GPU_ENABLE", "0")).strip() == "1"


def gpu_layout(env=os.environ, gpus: int | None = None, world: int | None = None) -> tuple[int, int]:
    """(CUDA device index of this rank, ranks of this node on that device), for nccl.

    - a Slurm task or MPI process that sees exactly one GPU uses it (`srun --gpus-per-task=1`,
      or a wrapper that sets CUDA_VISIBLE_DEVICES per local rank): cuda:0, its own;
    - otherwise cuda:LOCAL_RANK: every local rank sees the same GPUs (torchrun, elastic_launch);
    - with NCCL_MULTI_RANK_GPU_ENABLE=1 the local ranks go round the visible GPUs
      (cuda:LOCAL_RANK % GPUs), ceil(local ranks / GPUs) of them on one: the only case in which
      ranks really share a GPU (check_world refuses it otherwise).
    Device-less CUDA queries only (device_count): no context is created on any GPU."""
    import torch  # lazy: only for a launch (the launcher readers here serve every command)

    gpus = torch.cuda.device_count() if gpus is None else gpus
    t = torch_env(env) or {}
    local_rank = int(t.get("LOCAL_RANK", env.get("LOCAL_RANK", 0)))
    local_world = int(t.get("LOCAL_WORLD_SIZE", env.get("LOCAL_WORLD_SIZE", world or 1)))
    if gpus == 1:  # whatever the launcher: the one GPU this process sees (check_world refused the rest)
        own = launcher(env) in ("slurm", "mpi") or not multi_rank_gpu(env)
        return 0, 1 if own else local_world
    if multi_rank_gpu(env) and gpus > 1:
        return local_rank % gpus, -(-local_world // gpus)
    return local_rank, 1


def check_world(world: int, backend: str, env=os.environ, nnodes=None, gpus: int | None = None):
    """Can `world` ranks run here with `backend`? One GPU per rank with nccl.

    Self-launch starts every rank on this node: world <= GPUs. Under torchrun / srun / mpirun
    the GPUs per node are what matters: this node's ranks (LOCAL_WORLD_SIZE, the MPI local size
    or Slurm's tasks per node) must fit, and this rank's LOCAL_RANK must name one of them; a
    Slurm task or MPI process that sees exactly one GPU uses that one (gpu_layout).
    `nnodes` is accepted for old callers and ignored (nothing sets NNODES).
    """
    import torch  # lazy: only for a launch (the launcher readers here serve every command)

    if world < 1:
        raise BenchError(f"world size {world} must be >= 1")
    if backend != "nccl":
        return
    gpus = torch.cuda.device_count() if gpus is None else gpus
    t = torch_env(env)
    if t is None:
        if world > gpus:
            raise BenchError(f"world size {world} with nccl needs {world} GPUs on this node (self-launch starts every "
                             f"rank here), and this node has {gpus}; allowed: 1..{gpus}, or start ranks on several "
                             "nodes with torchrun, srun or mpirun")
        return
    if gpus < 1:
        raise BenchError(f"rank {t.get('RANK', '?')} sees no GPU, and nccl needs one per rank; check "
                         "CUDA_VISIBLE_DEVICES and the launcher's GPU binding (e.g. srun --gpus-per-task=1)")
    if gpus == 1 and launcher(env) in ("slurm", "mpi"):
        return  # the launcher bound one GPU to this task (gpu_layout)
    if multi_rank_gpu(env):
        return  # the local ranks share the GPUs, as NCCL was told to allow
    local_world = int(t.get("LOCAL_WORLD_SIZE", world))
    local_rank = int(t.get("LOCAL_RANK", 0))
    node = t.get("GROUP_RANK", "?")
    share = " (or set NCCL_MULTI_RANK_GPU_ENABLE=1 to let ranks share a GPU)"
    if local_rank >= gpus:
        raise BenchError(f"LOCAL_RANK {local_rank} (rank {t.get('RANK', '?')} of {world}, node {node}) needs GPU "
                         f"cuda:{local_rank} with nccl, and this node has {gpus} GPU(s) (cuda:0..{gpus - 1}); "
                         f"start at most {gpus} ranks per node (this node runs {local_world}){share}")
    if local_world > gpus:
        raise BenchError(f"{local_world} ranks per node with nccl (LOCAL_WORLD_SIZE, world {world}), and this node "
                         f"has {gpus} GPU(s); start at most {gpus} ranks per node{share}")


def select_device(backend: str, env=os.environ) -> torch.device:
    """This rank's device, made current: with nccl torch.cuda.set_device(cuda:N) (gpu_layout) is
    the first call that touches a GPU, so NCCL, the caching allocator and mem_get_info() all
    work on this rank's own device and no context is created on another; cpu for gloo."""
    import torch  # lazy: only for a launch (the launcher readers here serve every command)

    if backend != "nccl":
        return torch.device("cpu")
    device = torch.device("cuda", gpu_layout(env)[0])
    torch.cuda.set_device(device)
    return device


@dataclass(frozen=True, kw_only=True)
class RankInfo:
    rank: int
    world: int
    local_rank: int
    local_world: int
    node_rank: int
    backend: str
    device: torch.device
    threads: int
    cores: int

    @property
    def oversubscribed(self) -> bool:
        """More busy threads on this node than CPU cores: timings then measure time-sharing."""
        per_rank = self.threads if self.device.type == "cpu" else 1
        return self.local_world * per_rank > self.cores


def adopt_launcher_env(env=os.environ) -> str | None:
    """Write torchrun's variables into `env` when MPI or Slurm started us (init_process_group's
    env:// reads them); returns the launcher's name (None: self-launch)."""
    kind = launcher(env)
    if kind in ("mpi", "slurm") and "RANK" not in env:
        env.update({**torch_env(env), ADOPTED: kind})
    return kind


def init_rank(backend: str, timeout_s: float) -> RankInfo:
    """Set device and threads from the environment, then init the default process group."""
    import torch  # lazy: only for a launch (the launcher readers here serve every command)
    import torch.distributed as dist  # lazy: only for a launch (the launcher readers here serve every command)

    adopt_launcher_env(os.environ)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    node_rank = int(os.environ.get("GROUP_RANK", os.environ.get("SLURM_NODEID", "0")))
    device = select_device(backend)  # before init, so NCCL binds the right GPU
    if backend != "nccl":
        # elastic_launch does not set OMP_NUM_THREADS (torchrun does): one thread per rank,
        # so that ranks do not fight over the cores.
        threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
        torch.set_num_threads(threads)
    if not dist.is_initialized():
        kwargs = {"backend": backend, "timeout": datetime.timedelta(seconds=timeout_s)}
        if backend == "nccl":
            kwargs["device_id"] = device  # eager communicator init on torch >= 2.3
        dist.init_process_group(**kwargs)
    return RankInfo(rank=rank, world=world, local_rank=local_rank, local_world=local_world,
                    node_rank=node_rank, backend=backend, device=device,
                    threads=torch.get_num_threads(), cores=os.cpu_count() or 1)
