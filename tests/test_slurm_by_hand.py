"""The sbatch file `distbench jobspec slurm` writes, run on a Slurm distbench did not set up
(tools/slurm_by_hand.sh, docs/cluster.md): the script builds its own namespaces, munge and Slurm by hand,
submits the job and checks the stored run. It imports nothing from bench/simcluster, and neither does
this test. Needs root, iproute2, munge and slurm-wlm; elsewhere it skips, saying why."""

import os
import re
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "slurm_by_hand.sh"
TOOLS = ("ip", "unshare", "munged", "mungekey", "slurmctld", "slurmd", "sinfo", "sbatch")
TIMEOUT_S = 300
TEARDOWN_S = 60  # after a timeout: SIGTERM, the script's trap tears down, then SIGKILL


def _why_not() -> str | None:
    if os.name != "posix" or os.geteuid() != 0:
        return "tools/slurm_by_hand.sh needs root (network namespaces, bind mounts)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"tools/slurm_by_hand.sh needs {', '.join(missing)} (apt-get install -y iproute2 slurm-wlm munge)"
    return None


WHY_NOT = _why_not()


def _namespaces(prefix: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(prefix)]


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT_S + TEARDOWN_S + 30)  # past pytest's 300 s: this test stops the script itself
@pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")
def test_jobspec_sbatch_runs_on_a_slurm_set_up_by_hand():
    prefix = f"sbht{uuid.uuid4().hex[:6]}"
    proc = subprocess.Popen([str(SCRIPT)], cwd=ROOT, env={**os.environ, "NS_PREFIX": prefix},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the script's trap tears down; SIGKILL would leave it all behind
        try:
            out, _ = proc.communicate(timeout=TEARDOWN_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"tools/slurm_by_hand.sh ran past {TIMEOUT_S} s:\n{out[-6000:]}")
    assert proc.returncode == 0, f"tools/slurm_by_hand.sh exited {proc.returncode}:\n{out[-6000:]}"
    assert "slurm_by_hand: ok: run " in out
    assert _namespaces(prefix) == [], f"namespaces left behind: {_namespaces(prefix)}"
    tmp = re.search(r"^slurm_by_hand: torn down \(.*, (\S+)\); exit 0$", out, re.M)
    assert tmp and not Path(tmp.group(1)).exists(), f"temp dir left behind: {tmp and tmp.group(1)}"
