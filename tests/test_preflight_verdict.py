"""Issue 31 item 8: under torchrun / srun every process runs preflight itself; a rank that refuses
used to exit before process-group init and leave the others waiting there until the group's
timeout. Two real gloo ranks (processes started as srun would, RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT) run `distbench collectives` with a process-group timeout of 120 s; rank 1's preflight
refuses (faked: its results root is not writable). Both exit 2: rank 1 with its own message,
rank 0 with rank 1's. The ranks are given 90 s in all, less than the group's timeout: a rank
left waiting in process-group init fails the test."""

import socket
import subprocess
import sys

import pytest

from bench.distributed import verdict
from conftest import ROOT

TIMEOUT_S = 120  # the process-group timeout of the launch: long
GIVEN_S = 90  # what the test gives the ranks: less than TIMEOUT_S

RANK = """
import os, sys
from bench import preflight
from bench.cli import main
from bench.errors import BenchError

from bench.distributed import verdict
verdict.STALE_S = 3.0  # the heartbeat's limit, short for the test
refuse = os.environ["RANK"] in os.environ["REFUSING_RANKS"].split(",")
if os.environ["RANK"] in os.environ.get("DYING_RANKS", "").split(","):
    def check_writable(out):
        os._exit(9)  # killed in preflight: no verdict posted
    preflight.check_writable = check_writable
elif refuse:
    def check_writable(out):
        raise BenchError(f"results root {out} is not writable (faked on rank {os.environ['RANK']})")
    preflight.check_writable = check_writable
sys.exit(main(sys.argv[1:]))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path, refusing: str, dying: str = "") -> list[subprocess.CompletedProcess]:
    port, procs = _free_port(), []
    for rank in range(2):
        env = {k: v for k, v in __import__("os").environ.items()
               if not k.startswith(("SLURM_", "OMPI_", "PMI_", "TORCHELASTIC_"))}
        env.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2", GROUP_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), REFUSING_RANKS=refusing, DYING_RANKS=dying, OMP_NUM_THREADS="1",
                   PYTHONPATH=str(ROOT))
        procs.append(subprocess.Popen(
            [sys.executable, "-c", RANK, "collectives", "-c", "all_reduce", "--sizes", "1K", "--timeout-s",
             str(TIMEOUT_S), "--out", str(tmp_path / "results")],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    try:
        for p in procs:
            so, se = p.communicate(timeout=GIVEN_S)
            out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def test_a_rank_refusing_in_preflight_stops_every_rank_with_its_message(tmp_path):
    assert GIVEN_S < TIMEOUT_S
    r0, r1 = _launch(tmp_path, refusing="1")
    msg = f"results root {tmp_path / 'results'} is not writable (faked on rank 1)"
    assert r1.returncode == 2, r1.stderr
    assert r1.stderr.strip().splitlines() == [f"distbench: error: rank 1 (node 0, local rank 1): {msg}"]
    assert r0.returncode == 2, r0.stderr
    assert r0.stderr.strip().splitlines() == [
        f"distbench: error: rank 0 (node 0, local rank 0): rank 1 refused before the launch: {msg}"]


def test_the_lowest_refusing_rank_is_named_and_each_refusing_rank_says_its_own():
    outcomes = [(0, ""), (1, "b"), (2, "c")]
    assert verdict.first_refusal(outcomes) == "rank 1 refused before the launch: b"
    assert verdict.first_refusal([(0, ""), (1, "")]) == ""


@pytest.mark.parametrize("refusing", ["0"])
def test_rank_0_refusing_keeps_the_store_until_the_other_rank_has_read_it(tmp_path, refusing):
    """Rank 0 hosts the store (no torchrun agent): it refuses, and rank 1 still reads why."""
    r0, r1 = _launch(tmp_path, refusing=refusing)
    msg = f"results root {tmp_path / 'results'} is not writable (faked on rank 0)"
    assert (r0.returncode, r1.returncode) == (2, 2), (r0.stderr, r1.stderr)
    assert r0.stderr.strip().splitlines() == [f"distbench: error: rank 0 (node 0, local rank 0): {msg}"]
    assert r1.stderr.strip().splitlines() == [
        f"distbench: error: rank 1 (node 0, local rank 1): rank 0 refused before the launch: {msg}"]


def test_when_no_rank_refuses_the_launch_goes_on_on_the_same_store(tmp_path):
    """The verdict's store is the one process-group init then uses (rank 0 hosts it: the group's
    env:// init reuses it, multi-tenant); the launch runs and writes its run."""
    r0, r1 = _launch(tmp_path, refusing="")
    assert (r0.returncode, r1.returncode) == (0, 0), (r0.stderr[-2000:], r1.stderr[-2000:])
    assert len(list((tmp_path / "results").glob("*/*/results.parquet"))) == 1


def test_a_rank_that_dies_before_its_verdict_is_named_by_the_others(tmp_path):
    """Was: rank 0 waited in store.wait for the whole timeout (120 s here), then a raw store error.
    Now its heartbeat stops, and rank 0 ends in one line naming rank 1, long before the timeout."""
    r0, r1 = _launch(tmp_path, refusing="", dying="1")
    assert r1.returncode == 9
    assert r0.returncode == 1, r0.stderr
    assert r0.stderr.strip().splitlines() == [
        "distbench: error: rank 0 (node 0, local rank 0): rank(s) 1 stopped answering before posting a preflight "
        "verdict (no heartbeat for 3 s): died or hung before the launch; its own output says why"]


def test_the_store_host_dying_before_its_verdict_is_one_line_on_the_others(tmp_path):
    """Rank 0 hosts the store (no torchrun agent) and dies in preflight: rank 1 cannot even post.
    c10d's C++ logger prints its own warning of the broken socket first (TORCH_CPP_LOG_LEVEL, read
    when torch loads, decides that); distbench's line is the last, and no Python traceback."""
    r0, r1 = _launch(tmp_path, refusing="", dying="0")
    assert r0.returncode == 9
    assert r1.returncode == 1, r1.stderr
    line = r1.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r1.stderr
    assert line.startswith("distbench: error: rank 1 (node 0, local rank 1): the launch's store at 127.0.0.1:"), line
    assert "stopped answering during preflight" in line
