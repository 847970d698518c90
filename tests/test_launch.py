"""The launch path on a GPU cluster, faked (issue 17): every rank of the README's cluster command
under torchrun 2 x 8 GPUs of 80 GiB reaches process-group init, having touched no GPU but its own
and none before set_device; the memory budget is the rank's own GPU; Slurm with one visible GPU
per task is accepted and the batch script's shell is not a rank; every kind starts under
torchrun, Slurm and MPI; an error only one rank sees is printed by that rank, with its rank.

torch.cuda is conftest.FakeCuda (per-device memory, a record of the device of every call) and
init_process_group a stub that stops the rank (conftest.stop_at_init), so each rank runs in
this process, one after the other, exactly as far as the group's creation."""

import pytest
import torch

from bench.cli import main
from bench.distributed.env import launcher
from bench.harness import KINDS
from conftest import GiB, FakeCuda, ReachedInit, ompi_2x8, slurm_2x8, stop_at_init, torchrun_2x8

pytestmark = pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # @record under capsys

CLUSTER = ["collectives", "--suite", "suites/collectives-full.toml"]  # the README's cluster command
EXTRA = {"pipeline": ["--stages", "16", "--chunks", "16", "--model", "mlp-large"]}  # fills world 16


def _start(monkeypatch, launcher_env, env: dict, argv, tmp_path, cuda: FakeCuda):
    """One rank of the command: (ReachedInit or None, exit code or None)."""
    launcher_env(env)
    cuda.install(monkeypatch)
    stop_at_init(monkeypatch)
    try:
        rc = main([*argv, "--out", str(tmp_path / "results")])
    except ReachedInit as e:
        return e, None
    return None, rc


def _assert_own_device_only(cuda: FakeCuda, index: int, rank: int):
    assert cuda.touched_before_set_device() == [], f"rank {rank}: CUDA calls before set_device"
    assert ("set_device", index) in cuda.calls, f"rank {rank} never set its device"
    assert cuda.devices_touched() == {index}, f"rank {rank} touched GPUs {sorted(cuda.devices_touched())}"


@pytest.mark.parametrize("node", [0, 1])
def test_cluster_command_reaches_init_on_every_local_rank(node, monkeypatch, launcher_env, tmp_path):
    """Issue 17 items 1 and 2: each of the 8 local ranks of node `node` passes preflight with its own
    GPU's 79 GiB free (was: 48.50 GiB x 8 ranks > 79 GiB, refused) and reaches init_process_group
    with device_id cuda:LOCAL_RANK, having made no CUDA call on any other GPU (was: mem_get_info(0)
    in every rank before set_device)."""
    for local in range(8):
        rank = 8 * node + local
        cuda = FakeCuda(n=8, total_bytes=80 * GiB, free_bytes=79 * GiB)
        reached, rc = _start(monkeypatch, launcher_env, torchrun_2x8(rank), CLUSTER, tmp_path, cuda)
        assert reached is not None, f"rank {rank} stopped with exit code {rc} before process-group init"
        assert reached.kwargs["backend"] == "nccl" and reached.kwargs["device_id"] == torch.device("cuda", local)
        _assert_own_device_only(cuda, local, rank)


def test_a_rank_whose_own_gpu_is_full_says_why_with_its_rank(monkeypatch, launcher_env, tmp_path, capsys):
    """Issue 17 item 13: rank 9 (node 1, cuda:1) has 10 GiB free, the others 79 GiB. Rank 9 refuses
    with one line that names its rank and its GPU, exit 2 (was: silent, only rank 0 printed);
    rank 8 on the same node goes on to init."""
    free = [79 * GiB] * 8
    free[1] = 10 * GiB
    reached, rc = _start(monkeypatch, launcher_env, torchrun_2x8(9), CLUSTER, tmp_path, FakeCuda(free_bytes=free))
    assert reached is None and rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("distbench: error: rank 9 (node 1, local rank 1): "), err[0]
    assert "cuda:1" in err[0] and "10.00 GiB is free" in err[0], err[0]
    reached, rc = _start(monkeypatch, launcher_env, torchrun_2x8(8), CLUSTER, tmp_path, FakeCuda(free_bytes=free))
    assert reached is not None, rc


def test_bad_input_is_reported_by_every_rank_with_its_rank(monkeypatch, launcher_env, tmp_path, capsys):
    """Item 13: a refusal every rank sees is printed by every rank (each its own line, once)."""
    for rank in (0, 13):
        reached, rc = _start(monkeypatch, launcher_env, torchrun_2x8(rank), ["collectives", "-c", "nope"], tmp_path,
                             FakeCuda())
        assert rc == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"distbench: error: rank {rank} (node {rank // 8}, local rank {rank % 8}): unknown "
                               "collective 'nope'"), line


@pytest.mark.parametrize("via", ["slurm", "mpi"])
def test_a_task_with_one_visible_gpu_uses_it(via, monkeypatch, launcher_env, tmp_path):
    """Issue 17 item 11: `srun --gpus-per-task=1` (or an MPI wrapper that sets CUDA_VISIBLE_DEVICES
    per local rank): each task sees one GPU, as cuda:0, and uses it (was: refused, '8 ranks per
    node with nccl ... this node has 1 GPU(s)')."""
    for rank in (0, 5, 13):
        env = {**(slurm_2x8(rank, SLURM_GPUS_PER_TASK="1") if via == "slurm" else ompi_2x8(rank)),
               "CUDA_VISIBLE_DEVICES": str(rank % 8)}
        cuda = FakeCuda(n=1)
        reached, rc = _start(monkeypatch, launcher_env, env, CLUSTER, tmp_path, cuda)
        assert reached is not None, f"task {rank} stopped with exit code {rc}"
        assert reached.kwargs["device_id"] == torch.device("cuda", 0)
        _assert_own_device_only(cuda, 0, rank)


def test_torchrun_ranks_sharing_one_visible_gpu_are_refused(monkeypatch, launcher_env, tmp_path, capsys):
    """torchrun gives every local rank the same CUDA_VISIBLE_DEVICES: 8 local ranks and one visible
    GPU would share it, which NCCL refuses; said before anything starts."""
    reached, rc = _start(monkeypatch, launcher_env, torchrun_2x8(3), CLUSTER, tmp_path, FakeCuda(n=1))
    assert reached is None and rc == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("distbench: error: rank 3 (node 0, local rank 3): ") and "start at most 1 ranks per node" in line


def test_the_batch_scripts_shell_is_not_a_rank():
    """Issue 17 item 11: sbatch's shell has SLURM_PROCID=0 and the job's SLURM_NTASKS but no job
    step (srun sets SLURM_STEP_ID in each task: Slurm src/common/env.c env_array_for_step); it
    self-launches instead of waiting as rank 0 of 16 for ranks that never come."""
    shell = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
             "SLURM_NTASKS": "16", "SLURM_TASKS_PER_NODE": "8(x2)", "SLURM_JOB_NODELIST": "gpu[01-02]"}
    assert launcher(shell) is None
    assert launcher({**shell, "SLURM_STEP_ID": "4294967291"}) is None  # the batch step's id (SLURM_BATCH_SCRIPT)
    assert launcher({**shell, "SLURM_STEP_ID": "0"}) == "slurm"


LAUNCHERS = {"torchrun": torchrun_2x8, "slurm": slurm_2x8, "mpi": ompi_2x8}


@pytest.mark.parametrize("via", sorted(LAUNCHERS))
@pytest.mark.parametrize("kind", KINDS.names())
def test_every_kind_starts_under_every_launcher(kind, via, monkeypatch, launcher_env, tmp_path):
    """Issue 17, done: every kind reaches process-group init at world 16 under torchrun, Slurm and
    MPI variables on 2 x 8 faked GPUs, rank 11 on cuda:3 and no other GPU."""
    env = LAUNCHERS[via](11)
    cuda = FakeCuda()
    reached, rc = _start(monkeypatch, launcher_env, env, [kind, *EXTRA.get(kind, [])], tmp_path, cuda)
    assert reached is not None, f"{kind} under {via} stopped with exit code {rc}"
    assert reached.kwargs["device_id"] == torch.device("cuda", 3)
    _assert_own_device_only(cuda, 3, 11)


class Launched(BaseException):
    """The stub of elastic_launch: the self-launching process got as far as starting its ranks."""


def test_self_launch_makes_no_cuda_call_and_reads_free_memory_from_nvml(monkeypatch, launcher_env, tmp_path, capsys):
    """Issue 17 item 2: `distbench collectives --nproc 8` with nccl: the launcher owns no GPU, so it
    makes no CUDA call on any device; its memory check reads NVML (no CUDA context), per GPU."""
    import bench.harness.run as run_mod
    from bench import preflight

    free = [79 * GiB] * 8
    monkeypatch.setattr(preflight, "nvml_free_bytes", lambda indices: [free[i] for i in indices])
    monkeypatch.setattr(run_mod, "launch", lambda *a, **k: (_ for _ in ()).throw(Launched()))
    argv = ["collectives", "--backend", "nccl", "--nproc", "8", "-c", "all_reduce", "--sizes", "1K,8G"]
    cuda = FakeCuda()
    with pytest.raises(Launched):
        _start(monkeypatch, launcher_env, {}, argv, tmp_path, cuda)
    assert cuda.devices_touched() == set(), cuda.calls
    free[5] = 10 * GiB  # 8 GiB all_reduce, checked: buffer + expected = 16 GiB > 10 GiB on cuda:5
    cuda = FakeCuda()
    reached, rc = _start(monkeypatch, launcher_env, {}, argv, tmp_path, cuda)
    assert rc == 2 and cuda.devices_touched() == set()
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "warning: world 8" not in ln]  # 8 ranks, 2 cores
    assert line.startswith("distbench: error: the largest case (all_reduce") and "on cuda:5" in line, line


def test_ranks_share_a_gpu_only_when_nccl_is_told_to_allow_it(monkeypatch, launcher_env, tmp_path, capsys):
    """8 local ranks on 4 GPUs with NCCL_MULTI_RANK_GPU_ENABLE=1: two ranks per GPU, and then (only
    then) the memory check divides the GPU's free memory between them and says so."""
    env = {**torchrun_2x8(5), "NCCL_MULTI_RANK_GPU_ENABLE": "1"}
    argv = ["collectives", "-c", "all_reduce", "--sizes", "1K,8G"]
    cuda = FakeCuda(n=4, free_bytes=40 * GiB)
    reached, rc = _start(monkeypatch, launcher_env, env, argv, tmp_path, cuda)
    assert reached is not None and reached.kwargs["device_id"] == torch.device("cuda", 1)
    _assert_own_device_only(cuda, 1, 5)
    cuda = FakeCuda(n=4, free_bytes=30 * GiB)  # 2 x (16 GiB + overhead) > 30 GiB
    reached, rc = _start(monkeypatch, launcher_env, env, argv, tmp_path, cuda)
    assert rc == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "x 2 rank(s) sharing cuda:1 (the launcher puts 2 ranks on this GPU" in line, line
