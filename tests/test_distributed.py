"""bench.distributed: the launch environment (Slurm, torchrun, MPI mapped onto torchrun's names,
ranks per node, the backend), and the multi-node path (two torchrun agents as two nodes)."""

import os
import socket
import subprocess
import sys

import pytest

from bench.distributed.env import first_host, resolve_backend, slurm_to_torch_env, under_slurm, under_torchrun
from bench.errors import BenchError
from bench.results.store import load_run
from conftest import ROOT, fake_eight_gpus, torchrun_2x8


@pytest.mark.parametrize("nodelist,host", [("node01", "node01"), ("gpu[03-05,9]", "gpu03"),
                                           ("gpu[7,9-10],cpu1", "gpu7"), ("a-b[001-004]", "a-b001"),
                                           ("n1,n2", "n1")])
def test_first_host_of_slurm_nodelist(nodelist, host):
    assert first_host(nodelist) == host


def test_slurm_env_maps_to_torchrun_names():
    env = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
           "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "gpu[10-11]"}
    assert under_slurm(env) and not under_torchrun(env)
    got = slurm_to_torch_env(env)
    assert got == {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                   "GROUP_RANK": "1", "MASTER_ADDR": "gpu10", "MASTER_PORT": "29500"}


def test_single_task_slurm_shell_is_not_a_rank():
    assert not under_slurm({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"})


def test_backend_choice():
    assert resolve_backend("auto", env_has_cuda=False) == "gloo"
    assert resolve_backend("auto", env_has_cuda=True) == "nccl"
    with pytest.raises(BenchError, match="needs CUDA"):
        resolve_backend("nccl", env_has_cuda=False)


# ---- ranks per node, launcher world, MPI (issue 12) -------------------------------------------

from bench.distributed.env import (check_world, expand_tasks_per_node, global_rank, launcher,  # noqa: E402
                                   launcher_world, mpi_to_torch_env, ranks_per_node, resolve_worlds,
                                   torch_env, under_mpi)
from bench.distributed.launch import launched_externally  # noqa: E402


@pytest.fixture
def eight_gpus(monkeypatch):
    fake_eight_gpus(monkeypatch)


@pytest.mark.parametrize("rank", [0, 7, 8, 15])
def test_two_nodes_of_eight_gpus_pass_under_torchrun(eight_gpus, rank):
    env = torchrun_2x8(rank)
    assert resolve_worlds(None, (2,), env) == (16,)  # the launcher's world, not the suite's
    check_world(16, resolve_backend("auto"), env)  # was: "needs 16 GPUs per node ... this node has 8"
    check_world(16, "nccl", env, nnodes=1)  # old callers' nnodes is ignored


def test_local_rank_beyond_the_gpus_fails_naming_the_numbers(eight_gpus):
    env = {**torchrun_2x8(8), "LOCAL_RANK": "8", "LOCAL_WORLD_SIZE": "9"}
    with pytest.raises(BenchError, match=r"LOCAL_RANK 8 .*cuda:8.*this node has 8 GPU\(s\).*at most 8 ranks per node"):
        check_world(16, "nccl", env)


def test_too_many_ranks_per_node_fails(eight_gpus):
    env = {**torchrun_2x8(0), "LOCAL_WORLD_SIZE": "12"}
    with pytest.raises(BenchError, match="12 ranks per node .*has 8 GPU"):
        check_world(16, "nccl", env)


def test_self_launch_keeps_world_within_this_nodes_gpus(eight_gpus):
    check_world(8, "nccl", {})
    with pytest.raises(BenchError, match="world size 16 with nccl needs 16 GPUs on this node.*has 8"):
        check_world(16, "nccl", {})
    check_world(16, "gloo", {})  # CPU ranks: no GPU limit


@pytest.mark.parametrize("spec,counts", [("8", [8]), ("8(x2)", [8, 8]), ("4,2", [4, 2]), ("2(x3),1", [2, 2, 2, 1])])
def test_slurm_tasks_per_node_formats(spec, counts):
    assert expand_tasks_per_node(spec) == counts


def test_slurm_two_nodes_of_eight(eight_gpus):
    for node, procid in ((0, 7), (1, 15)):
        env = {"SLURM_STEP_ID": "0", "SLURM_PROCID": str(procid), "SLURM_NTASKS": "16", "SLURM_LOCALID": str(procid % 8),
               "SLURM_NODEID": str(node), "SLURM_TASKS_PER_NODE": "8(x2)", "SLURM_JOB_NODELIST": "gpu[01-02]"}
        assert launcher(env) == "slurm" and launcher_world(env) == 16 and ranks_per_node(env) == 8
        assert resolve_worlds(None, (2,), env) == (16,)
        check_world(16, "nccl", env)


def test_slurm_uneven_tasks_per_node_takes_this_nodes_count():
    env = {"SLURM_STEP_ID": "3", "SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
           "SLURM_TASKS_PER_NODE": "4,2", "SLURM_JOB_NODELIST": "n[1-2]"}
    assert ranks_per_node(env) == 2
    check_world(6, "nccl", env, gpus=2)
    first = {**env, "SLURM_PROCID": "3", "SLURM_LOCALID": "3", "SLURM_NODEID": "0"}
    assert ranks_per_node(first) == 4
    with pytest.raises(BenchError, match="LOCAL_RANK 3 .*has 2 GPU"):
        check_world(6, "nccl", first, gpus=2)


def test_launcher_world_refuses_a_different_nproc():
    env = torchrun_2x8(3)
    assert resolve_worlds("16", (2,), env) == (16,)
    with pytest.raises(BenchError, match="--nproc 4 does not match the launcher's world size 16"):
        resolve_worlds("4", (2,), env)
    assert resolve_worlds(None, (2, 4), {}) == (2, 4)  # self-launch: the suite's list
    assert resolve_worlds("3", (2, 4), {}) == (3,)
    assert launcher_world({}) is None and not launched_externally({})


OMPI = {"OMPI_COMM_WORLD_RANK": "11", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "MASTER_ADDR": "node0", "MASTER_PORT": "29600"}


def test_open_mpi_maps_to_torchrun_names(eight_gpus):
    assert under_mpi(OMPI) and launcher(OMPI) == "mpi" and launched_externally(OMPI)
    assert mpi_to_torch_env(OMPI) == {"RANK": "11", "WORLD_SIZE": "16", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8",
                                      "GROUP_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29600"}
    assert resolve_worlds(None, (2,), OMPI) == (16,) and global_rank(OMPI) == 11
    check_world(16, "nccl", OMPI)


def test_mpich_and_intel_mpi_map_to_torchrun_names():
    env = {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2", "MASTER_ADDR": "h0"}
    got = mpi_to_torch_env(env)
    assert got == {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                   "MASTER_ADDR": "h0", "MASTER_PORT": "29500"}
    assert torch_env(env) == got


def test_mpi_master_addr_derived_or_required():
    one_node = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    assert mpi_to_torch_env(one_node)["MASTER_ADDR"] == "127.0.0.1"
    in_slurm = {"PMI_RANK": "9", "PMI_SIZE": "16", "SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1",
                "SLURM_NODEID": "1", "SLURM_TASKS_PER_NODE": "8(x2)", "SLURM_JOB_NODELIST": "gpu[07-08]"}
    got = mpi_to_torch_env(in_slurm)  # srun --mpi=pmi2: local rank and size from Slurm
    assert (got["LOCAL_RANK"], got["LOCAL_WORLD_SIZE"], got["MASTER_ADDR"]) == ("1", "8", "gpu07")
    assert launcher(in_slurm) == "mpi"
    across = {k: v for k, v in OMPI.items() if not k.startswith("MASTER")}
    with pytest.raises(BenchError, match="MPI launch across nodes .*set MASTER_ADDR .*MASTER_PORT"):
        mpi_to_torch_env(across)
    with pytest.raises(BenchError, match="local rank .*MPI_LOCALRANKID"):
        mpi_to_torch_env({"PMI_RANK": "0", "PMI_SIZE": "2", "MASTER_ADDR": "h"})


def test_mpirun_inside_an_allocation_is_mpi_not_slurm():
    # every mpirun-started process inherits the allocation's SLURM_PROCID=0: MPI's rank wins
    env = {**OMPI, "SLURM_PROCID": "0", "SLURM_NTASKS": "16"}
    assert launcher(env) == "mpi" and torch_env(env)["RANK"] == "11"


def test_single_process_mpi_is_self_launch():
    assert launcher({"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}) is None


def test_init_rank_adopts_mpi_variables(monkeypatch):
    from bench.distributed import env as envmod

    fake = dict(OMPI)
    envmod.adopt_launcher_env(fake)
    assert fake["RANK"] == "11" and fake["LOCAL_RANK"] == "3" and launcher(fake) == "mpi"  # not torchrun: who started it


# ---- two torchrun agents as two nodes ------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_torchrun_agents_as_two_nodes(tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = lambda node: [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                        "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                        "--rdzv-id", "distbench-test", "-m", "bench", "collectives", "-c", "all_reduce",
                        "--sizes", "4K", "--budget-s", "0.001", "--out", str(tmp_path / "res")]
    procs = [subprocess.Popen(cmd(n), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in (0, 1)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    (run_dir,) = (tmp_path / "res" / "collectives").iterdir()
    run = load_run(run_dir)
    launch = run.meta["launches"]["2"]
    assert launch["world"] == 2 * 1 and launch["node_ranks"] == [0, 1] and launch["nodes"] == 2
    assert run.meta["launcher"] == "torchrun"
    df = run["results"]
    assert (df["world"] == 2).all() and (df["nodes"] == 2).all() and (df["wrong"] == 0).all()
