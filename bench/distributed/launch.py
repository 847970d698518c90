"""Start ranks with torch's elastic launcher (the same agent torchrun uses), or run in place
when torchrun, mpirun or Slurm already started us."""

import os
import uuid

from bench.distributed.env import init_rank, launcher


def launched_externally(env=os.environ) -> bool:
    """torchrun, an MPI launcher (mpirun / mpiexec / srun --mpi) or srun started this process."""
    return launcher(env) is not None


def launch(fn, args: tuple, nproc: int) -> dict:
    """Run fn(*args) on nproc local ranks; returns {rank: return value}.

    rdzv c10d at localhost:0 picks a free port; max_restarts=0 because a benchmark that
    silently restarts measures the wrong thing.
    """
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch  # lazy: a launch only (launched_externally serves every command)

    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"distbench-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1,
        start_method="spawn",
    )
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    return elastic_launch(config, fn)(*args)


def run_in_group(fn, backend: str, timeout_s: float, *args):
    """Rank entry for tests and tools: init the group from the launcher's env, run fn(info, *args)."""
    import torch.distributed as dist  # lazy: only in the spawned rank processes (run_in_group is their entry)

    info = init_rank(backend, timeout_s)
    try:
        return fn(info, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
