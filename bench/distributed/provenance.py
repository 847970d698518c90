"""Who started the ranks, for meta.json: `launcher` (slurm | mpi | torchrun | self) and, under
Slurm and MPI, the facts a cluster user needs to find the job again (`launcher_facts`).

- slurm: the job id and step, the job's and the step's nodelist, tasks per node (Slurm's
  compressed form, e.g. `2(x2)`), tasks and nodes, partition, cluster, and Slurm's version
  (`scontrol --version`, else `srun --version`: `slurm 22.05.8`; None when neither answers).
  Variables from Slurm's src/common/env.c (env_array_for_job / env_array_for_step).
- mpi: which MPI (Open MPI from its OMPI_COMM_WORLD_* variables, MPICH / Intel MPI from PMI_*
  with Hydra's or Intel's own variables) and its version from the launcher program on PATH
  (`mpirun --version`: `mpirun (Open MPI) 4.1.4`; Hydra: `Version: 4.1`), None when not found.
- torchrun: torchrun's rendezvous run id and restart count (TORCHELASTIC_RUN_ID,
  TORCHELASTIC_RESTART_COUNT).
- self: distbench started its ranks itself (torch's elastic_launch on this node).
"""

import os
import re
import shutil
import subprocess

from bench.distributed.env import launcher

VERSION_TIMEOUT_S = 5.0
SLURM_VARS = {  # meta key -> Slurm's variables, first set one wins
    "job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
    "step_id": ("SLURM_STEP_ID", "SLURM_STEPID"),
    "job_name": ("SLURM_JOB_NAME",),
    "nodelist": ("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
    "step_nodelist": ("SLURM_STEP_NODELIST",),
    "tasks_per_node": ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
    "ntasks": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
    "nnodes": ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
    "partition": ("SLURM_JOB_PARTITION",),
    "cluster": ("SLURM_CLUSTER_NAME",),
    "account": ("SLURM_JOB_ACCOUNT",),
    "submit_host": ("SLURM_SUBMIT_HOST",),
}


def launcher_name(env=os.environ) -> str:
    """meta.json's `launcher`: slurm | mpi | torchrun, or self (distbench's own elastic_launch)."""
    return launcher(env) or "self"


def _first(env, keys) -> str | None:
    return next((str(env[k]) for k in keys if env.get(k) not in (None, "")), None)


def _run_version(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=VERSION_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return (r.stdout or "") + (r.stderr or "")


def slurm_version(run=_run_version) -> str | None:
    """'22.05.8' from `scontrol --version` ('slurm 22.05.8'), else `srun --version`."""
    for argv in (["scontrol", "--version"], ["srun", "--version"]):
        m = re.search(r"^slurm(?:-wlm)? (\d[\w.\-]*)", run(argv) or "", re.MULTILINE)
        if m:
            return m.group(1)
    return None


def mpi_name(env) -> str:
    if "OMPI_COMM_WORLD_SIZE" in env:
        return "Open MPI"
    if any(k.startswith("I_MPI_") for k in env):
        return "Intel MPI"
    if any(k.startswith(("HYDRA_", "HYDI_")) for k in env) or "PMI_SIZE" in env:
        return "MPICH"
    return "unknown"


def mpi_version(run=_run_version) -> str | None:
    """The version the MPI launcher on PATH reports: Open MPI's `mpirun (Open MPI) 4.1.4`, Hydra's
    `Version: 4.1`, Intel's `Intel(R) MPI Library for Linux* OS, Version 2021.10`."""
    for argv in (["mpirun", "--version"], ["mpiexec", "--version"]):
        text = run(argv) or ""
        m = re.search(r"\(Open MPI\) (\S+)|Version:?\s+(\d[\w.]*)", text)
        if m:
            return m.group(1) or m.group(2)
    return None


def launcher_facts(env=os.environ, run=_run_version) -> dict:
    """meta.json's `launcher_facts` for the launcher that started this process ({} for self)."""
    kind = launcher(env)
    if kind == "slurm":
        facts = {k: _first(env, keys) for k, keys in SLURM_VARS.items()}
        return {**facts, "slurm_version": slurm_version(run)}
    if kind == "mpi":
        return {"mpi": mpi_name(env), "mpi_version": mpi_version(run),
                "world": _first(env, ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")),
                "local_size": _first(env, ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"))}
    if kind == "torchrun":
        return {"run_id": env.get("TORCHELASTIC_RUN_ID"), "restart_count": env.get("TORCHELASTIC_RESTART_COUNT")}
    return {}
