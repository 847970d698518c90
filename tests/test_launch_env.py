import pytest

from bench.distributed.env import first_host, resolve_backend, slurm_to_torch_env, under_slurm, under_torchrun
from bench.errors import BenchError


@pytest.mark.parametrize("nodelist,host", [("node01", "node01"), ("gpu[03-05,9]", "gpu03"),
                                           ("gpu[7,9-10],cpu1", "gpu7"), ("a-b[001-004]", "a-b001"),
                                           ("n1,n2", "n1")])
def test_first_host_of_slurm_nodelist(nodelist, host):
    assert first_host(nodelist) == host


def test_slurm_env_maps_to_torchrun_names():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
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
