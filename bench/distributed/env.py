"""Where a rank runs: launcher detection (elastic_launch / torchrun / Slurm), backend and
device choice, and process-group set-up with a finite timeout.

Under torchrun (or our own elastic_launch) RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK, MASTER_ADDR and MASTER_PORT are set. Under Slurm (`srun python -m bench ...`) we map
SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_NODEID and the first host of
SLURM_JOB_NODELIST onto the same variables, so everything downstream sees one convention.
"""

import datetime
import os
import re
from dataclasses import dataclass

import torch

from bench.errors import BenchError

BACKENDS = ("auto", "gloo", "nccl")
DEFAULT_MASTER_PORT = 29500


def under_torchrun(env=os.environ) -> bool:
    return "RANK" in env and "WORLD_SIZE" in env


def under_slurm(env=os.environ) -> bool:
    """Inside an srun step with more than one task (a plain sbatch shell is not a rank)."""
    return "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1 and "RANK" not in env


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


def slurm_to_torch_env(env) -> dict:
    """The torchrun-style variables for this Slurm task."""
    ntasks = int(env["SLURM_NTASKS"])
    nnodes = int(env.get("SLURM_JOB_NUM_NODES", env.get("SLURM_NNODES", "1")))
    per_node = env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0]
    local_world = int(per_node) if per_node.isdigit() else max(1, ntasks // max(nnodes, 1))
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "localhost"
    return {
        "RANK": env["SLURM_PROCID"],
        "WORLD_SIZE": str(ntasks),
        "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
        "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_RANK": env.get("SLURM_NODEID", "0"),
        "MASTER_ADDR": env.get("MASTER_ADDR") or first_host(nodelist),
        "MASTER_PORT": env.get("MASTER_PORT") or str(DEFAULT_MASTER_PORT),
    }


def resolve_backend(requested: str, env_has_cuda: bool | None = None) -> str:
    """'auto' -> nccl when CUDA is present, else gloo. nccl without CUDA is an error."""
    has_cuda = torch.cuda.is_available() if env_has_cuda is None else env_has_cuda
    if requested not in BACKENDS:
        from bench.errors import unknown

        raise unknown("backend", requested, BACKENDS)
    if requested == "auto":
        return "nccl" if has_cuda else "gloo"
    if requested == "nccl" and not has_cuda:
        raise BenchError("backend 'nccl' needs CUDA, and no CUDA device is visible; use --backend gloo")
    return requested


def check_world(world: int, backend: str, nnodes: int = 1):
    if world < 1:
        raise BenchError(f"world size {world} must be >= 1")
    if backend == "nccl":
        gpus = torch.cuda.device_count()
        per_node = -(-world // max(nnodes, 1))
        if per_node > gpus:
            raise BenchError(
                f"world size {world} needs {per_node} GPUs per node with nccl, and this node has {gpus}; "
                f"allowed: 1..{gpus} per node"
            )


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


def init_rank(backend: str, timeout_s: float) -> RankInfo:
    """Set device and threads from the environment, then init the default process group."""
    if under_slurm():
        os.environ.update(slurm_to_torch_env(os.environ))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    node_rank = int(os.environ.get("GROUP_RANK", os.environ.get("SLURM_NODEID", "0")))
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before init, so NCCL binds the right GPU
    else:
        device = torch.device("cpu")
        # elastic_launch does not set OMP_NUM_THREADS (torchrun does): one thread per rank,
        # so that ranks do not fight over the cores.
        threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
        torch.set_num_threads(threads)
    import torch.distributed as dist

    if not dist.is_initialized():
        kwargs = {"backend": backend, "timeout": datetime.timedelta(seconds=timeout_s)}
        if backend == "nccl":
            kwargs["device_id"] = device  # eager communicator init on torch >= 2.3
        dist.init_process_group(**kwargs)
    return RankInfo(rank=rank, world=world, local_rank=local_rank, local_world=local_world,
                    node_rank=node_rank, backend=backend, device=device,
                    threads=torch.get_num_threads(), cores=os.cpu_count() or 1)
