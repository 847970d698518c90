"""Launcher provenance (issue 44): meta.json says who started the ranks (slurm | mpi | torchrun |
self) and, under Slurm and MPI, the job's facts; a rank whose Slurm or MPI variables were mapped
onto torchrun's (adopt_launcher_env) still says slurm / mpi."""

import json
import os
import socket
import subprocess
import sys

from bench.distributed.env import adopt_launcher_env, launcher, torch_env
from bench.distributed.provenance import launcher_facts, launcher_name, mpi_version, slurm_version
from conftest import ROOT

SRUN_TASK = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
             "SLURM_NODEID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "2",
             "SLURM_JOB_NODELIST": "node[0-1]", "SLURM_STEP_NODELIST": "node[0-1]",
             "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_JOB_PARTITION": "sim",
             "SLURM_CLUSTER_NAME": "dbsc", "SLURM_JOB_NAME": "distbench"}


def _versions(argv):
    return {"scontrol": "slurm 22.05.8\n", "mpirun": "mpirun (Open MPI) 4.1.4\n\nReport bugs to ...\n"}.get(argv[0])


def test_a_slurm_rank_stays_slurm_after_its_variables_are_adopted():
    env = dict(SRUN_TASK)
    assert launcher(env) == "slurm"
    assert adopt_launcher_env(env) == "slurm"
    assert env["RANK"] == "1" and env["MASTER_ADDR"] == "node0"  # torchrun's names are written ...
    assert launcher(env) == "slurm" and launcher_name(env) == "slurm"  # ... and the launcher is still Slurm's
    assert torch_env(env)["RANK"] == "1" and adopt_launcher_env(env) == "slurm"


def test_slurm_facts():
    facts = launcher_facts(SRUN_TASK, run=_versions)
    assert facts == {"job_id": "4242", "step_id": "0", "job_name": "distbench", "nodelist": "node[0-1]",
                     "step_nodelist": "node[0-1]", "tasks_per_node": "1(x2)", "ntasks": "2", "nnodes": "2",
                     "partition": "sim", "cluster": "dbsc", "account": None, "submit_host": None,
                     "slurm_version": "22.05.8"}


def test_versions_from_the_programs_output_or_none():
    assert slurm_version(lambda a: {"srun": "slurm-wlm 23.11.4\n"}.get(a[0])) == "23.11.4"
    assert slurm_version(lambda a: None) is None
    assert mpi_version(_versions) == "4.1.4"
    assert mpi_version(lambda a: {"mpiexec": "HYDRA build details:\n    Version:  4.1.2\n"}.get(a[0])) == "4.1.2"
    assert mpi_version(lambda a: None) is None


def test_mpi_facts_and_names():
    ompi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "MASTER_ADDR": "node0"}
    adopt_launcher_env(ompi)
    assert launcher_name(ompi) == "mpi"
    assert launcher_facts(ompi, run=_versions) == {"mpi": "Open MPI", "mpi_version": "4.1.4", "world": "2",
                                                   "local_size": "1"}
    mpich = {"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "HYDRA_CONTROL_FD": "5"}
    assert launcher_facts(mpich, run=lambda a: None)["mpi"] == "MPICH"
    assert launcher_facts({**mpich, "I_MPI_ROOT": "/opt/intel"}, run=lambda a: None)["mpi"] == "Intel MPI"


def test_torchrun_and_self():
    tr = {"RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "0"}
    assert launcher_name(tr) == "torchrun" and launcher_facts(tr) == {"run_id": "abc", "restart_count": "0"}
    assert launcher_name({}) == "self" and launcher_facts({}) == {}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_srun_tasks_store_a_run_that_says_slurm(tmp_path):
    """Two processes with exactly the variables srun gives its tasks (no RANK, no wrapper) store
    one run whose meta says slurm, with the job's facts (the defect: it said torchrun)."""
    port = str(_free_port())
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))
            and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DISTBENCH_LAUNCHER")}
    procs = []
    for rank in (0, 1):
        env = {**base, **SRUN_TASK, "SLURM_PROCID": str(rank), "SLURM_NODEID": "0", "SLURM_LOCALID": str(rank),
               "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2", "SLURM_JOB_NODELIST": "localhost",
               "SLURM_STEP_NODELIST": "localhost", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
               "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, "-m", "bench", "collectives", "-c", "all_reduce", "--sizes",
                                       "4K", "--budget-s", "0.001", "--out", str(tmp_path)], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    (run_dir,) = (tmp_path / "collectives").iterdir()
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["launcher"] == "slurm"
    facts = meta["launcher_facts"]
    assert (facts["job_id"], facts["partition"], facts["tasks_per_node"], facts["ntasks"]) == ("4242", "sim", "2", "2")

