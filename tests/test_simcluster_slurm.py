"""A real Slurm on the simulated cluster (issue 44, docs/simcluster.md): Debian's slurmctld, slurmd
and munged on the namespaces `distbench simcluster` builds, the command run as a batch job.

The pure parts (slurm.conf, the job script, the parsers, the refusals) run everywhere. The real
ones need root, iproute2 and Debian's slurm-wlm and munge (`make install-slurm`; `.ci/run`
installs them): elsewhere they skip, saying why. One short real run is in `make test`; the
longer ones (the doctor's exclude list, scancel and resume, a node that dies) are slow-marked."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from bench.cli import main
from bench.simcluster import cpu, slurm
from bench.simcluster.net import Node
from conftest import ROOT
from test_simcluster import WHY_NOT as NET_WHY_NOT
from test_simcluster import _cli, _id, _left


def _why_not() -> str | None:
    if NET_WHY_NOT:
        return NET_WHY_NOT
    missing = slurm.missing_tools()
    if missing:
        return f"the simulated Slurm needs {', '.join(missing)} (apt-get install -y slurm-wlm munge)"
    return None


WHY_NOT = _why_not()
needs_slurm = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")
DISTBENCH = [sys.executable, "-m", "bench"]


# ---- pure: files, parsers, refusals ----------------------------------------------------------------

def _nodes(n):
    return [Node(index=i, rate_bits_s=10**9, id="abcx0001") for i in range(n)]


def test_slurm_conf_names_every_node_one_partition_and_the_settings_that_matter(tmp_path):
    text = slurm.slurm_conf(tmp_path, _nodes(3), 2, "10.213.0.254")
    lines = text.splitlines()
    assert "SlurmctldHost=head(10.213.0.254)" in lines
    assert [ln for ln in lines if ln.startswith("NodeName=")] == [
        f"NodeName=node{i} NodeAddr=10.213.0.{i + 1} CPUs=2 State=UNKNOWN" for i in range(3)]
    assert "PartitionName=sim Nodes=ALL Default=YES MaxTime=INFINITE State=UP" in lines
    for setting in ("ProctrackType=proctrack/pgid", "TaskPlugin=task/none", "SlurmdParameters=config_overrides",
                    "JobRequeue=0", "SlurmdTimeout=10", "AuthType=auth/munge",
                    f"AuthInfo=socket={tmp_path / 'munge-socket' / 'munge.socket.2'}",
                    f"SlurmdSpoolDir={tmp_path / 'spool' / '%n'}"):
        assert setting in lines, setting


def test_cgroup_version_is_read_from_the_mount(tmp_path):
    assert slurm.cgroup_plugin(tmp_path) == "cgroup/v1"  # a v1 or hybrid mount: no cgroup.controllers at the root
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert slurm.cgroup_plugin(tmp_path) == "cgroup/v2"


def test_the_job_script(tmp_path):
    text = slurm.job_script(["/venv/bin/python", "-m", "bench", "collectives", "--sizes", "4K,1M"], 2, 3,
                            tmp_path / "o", tmp_path / "e", "/work")
    assert text.splitlines() == [
        "#!/bin/bash", "#SBATCH --job-name=distbench", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=3",
        "#SBATCH --partition=sim", f"#SBATCH --output={tmp_path / 'o'}", f"#SBATCH --error={tmp_path / 'e'}",
        "#SBATCH --chdir=/work", "#SBATCH --no-requeue", "set -u",
        "# --kill-on-bad-exit: one failed rank ends the step (the others would wait for it in a collective)",
        "exec srun --kill-on-bad-exit=1 /venv/bin/python -m bench collectives --sizes 4K,1M"]


def test_job_facts_from_scontrol():
    text = ("JobId=7 JobName=distbench UserId=root(0) JobState=NODE_FAIL Reason=NodeDown Dependency=(null) "
            "ExitCode=0:0 Partition=sim NodeList=node[0-1] BatchHost=node0 NumNodes=2 NumCPUs=2 NumTasks=2")
    assert slurm.job_facts(text) == {"JobId": "7", "JobName": "distbench", "JobState": "NODE_FAIL",
                                     "Reason": "NodeDown", "ExitCode": "0:0", "Partition": "sim",
                                     "NodeList": "node[0-1]", "NumNodes": "2", "NumTasks": "2", "BatchHost": "node0"}


def test_follow_reads_a_growing_file_to_its_end(tmp_path):
    path, done = tmp_path / "out", threading.Event()

    def write():
        time.sleep(0.2)
        with open(path, "w") as f:
            f.write("one\ntw")
            f.flush()
            time.sleep(0.3)
            f.write("o\nthree")
        done.set()

    t = threading.Thread(target=write)
    t.start()
    assert list(slurm.follow(path, done.is_set, poll_s=0.05)) == ["one\n", "two\n", "three"]
    t.join()


def test_a_slurm_task_is_found_by_its_procid():
    env = b"\0".join([b"DISTBENCH_SIMCLUSTER=abcx0001", b"SLURM_STEP_ID=0", b"SLURM_PROCID=3"])
    assert cpu.rank_of(env, "simcluster-abcx0001", "abcx0001") == 3
    assert cpu.rank_of(env, "simcluster-abcx0001", "other") is None  # another cluster's task
    assert cpu.rank_of(env.replace(b"SLURM_STEP_ID=0", b"X=1"), "simcluster-abcx0001", "abcx0001") is None  # the batch shell


@pytest.mark.parametrize("args,message", [
    (["--nodes", "2", "--link", "1gbit", "--keep-up", "--", "distbench", "collectives"],
     "simcluster --keep-up: only with --scheduler slurm"),
    (["--down", "all", "--nodes", "2"], "give no --nodes and no command with --down"),
    (["--link", "1gbit", "--scheduler", "slurm", "--", "distbench", "collectives"], "--nodes is required"),
    (["--nodes", "2", "--link", "1gbit", "--scheduler", "pbs", "--", "distbench", "collectives"],
     "argument --scheduler: invalid choice: 'pbs'"),
])
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    assert main(["simcluster", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


def test_refused_without_slurm_naming_the_debian_packages(monkeypatch, capsys):
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda t: None if t in ("slurmctld", "munged") else real(t))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert main(["simcluster", "--nodes", "2", "--link", "1gbit", "--scheduler", "slurm", "--",
                 "distbench", "collectives"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "needs slurmctld, munged on PATH" in err and "apt-get install -y slurm-wlm munge" in err


def test_down_of_an_unknown_id_names_the_kept_ones(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr("bench.simcluster.net.missing_tools", lambda: [])
    monkeypatch.setattr("bench.simcluster.net.kept", lambda: {})
    assert main(["simcluster", "--down", "ffffx0000"]) == 2
    assert "no kept cluster of that id; kept: none" in capsys.readouterr().err


# ---- real: a Slurm on namespaces -------------------------------------------------------------------

def _no_daemons(id_: str) -> list[str]:
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "stat,args"], capture_output=True, text=True).stdout.splitlines()
    return [ln for ln in ps if f"dbsc-{id_}" in ln and not ln.startswith("Z")]


@needs_slurm
def test_a_two_node_job_stores_a_slurm_run(tmp_path):
    r = _cli("--nodes", "2", "--link", "1gbit", "--scheduler", "slurm", "--", "distbench", "collectives", "-c",
             "all_reduce", "--sizes", "4K", "--budget-s", "0.001", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    id_ = _id(r.stderr)
    assert re.search(r"Slurm \S+ up in \d+\.\d s: slurmctld on head", r.stderr)
    assert re.search(r"job \d+ COMPLETED on node\[0-1\] \(partition sim, 2 task\(s\), exit code 0:0\)", r.stderr)
    (run_dir,) = (tmp_path / "collectives").iterdir()
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["launcher"] == "slurm" and meta["launches"]["2"]["hosts"] == ["node0", "node1"]
    facts, job = meta["launcher_facts"], meta["simcluster"]["scheduler"]["job"]
    assert facts["job_id"] == job["JobId"] and facts["partition"] == "sim" and facts["tasks_per_node"] == "1(x2)"
    assert facts["slurm_version"] == meta["simcluster"]["scheduler"]["version"]
    assert job["JobState"] == "COMPLETED" and job["NodeList"] == "node[0-1]"
    assert (pd.read_parquet(run_dir / "results.parquet")["wrong"] == 0).all()
    assert _left(id_) == [] and _no_daemons(id_) == []


def _keep_up(*args) -> tuple[str, Path]:
    """A kept cluster: (its id, the directory of its Slurm client wrappers)."""
    r = _cli(*args, "--scheduler", "slurm", "--keep-up", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    bin_ = re.search(r"export PATH=(\S+):\$PATH", r.stderr).group(1)
    return _id(r.stderr), Path(bin_)


def _down(id_: str):
    r = _cli("--down", id_)
    assert r.returncode == 0, r.stderr
    assert _left(id_) == [] and _no_daemons(id_) == []


def _jobspec(tmp_path, name, *args) -> Path:
    path = tmp_path / f"{name}.sbatch"
    rc = main(["jobspec", "slurm", "--gpus-per-node", "0", "--tasks-per-node", "1", "--partition", "sim",
               "--results", str(tmp_path / "res"), "--output", str(path), *args])
    assert rc == 0
    (tmp_path / "res").mkdir(exist_ok=True)
    return path


def _sbatch(bin_: Path, *args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_ / "sbatch"), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@needs_slurm
@pytest.mark.slow
def test_doctor_names_the_slow_node_and_the_next_job_leaves_it_out(tmp_path):
    """The sbatch files `distbench jobspec slurm` writes, checked (--test-only) and run on the
    simulated Slurm: the doctor's job exits 1 naming node2, the next job excludes it."""
    id_, bin_ = _keep_up("--nodes", "3", "--link", "1gbit", "--link-of", "node2=100mbit")
    try:
        doctor = _jobspec(tmp_path, "doctor", "--nodes", "3", "--", *DISTBENCH, "doctor")
        r = _sbatch(bin_, "--test-only", str(doctor))
        assert r.returncode == 0 and "to start at" in r.stderr, r.stderr
        r = _sbatch(bin_, "--wait", str(doctor))
        log = "".join(p.read_text() for p in (tmp_path / "res").glob("slurm-*.out"))
        assert r.returncode == 1, log[-3000:]
        assert "node node2:" in log and "# exclude from the next job: --exclude=node2" in log
        (run_dir,) = (tmp_path / "res" / "doctor").iterdir()
        assert json.loads((run_dir / "meta.json").read_text())["launcher"] == "slurm"
        nxt = _jobspec(tmp_path, "next", "--nodes", "2", "--exclude-from", str(run_dir), "--", *DISTBENCH,
                       "collectives", "-c", "all_reduce", "--sizes", "4K", "--budget-s", "0.001")
        assert "#SBATCH --exclude=node2" in nxt.read_text()
        r = _sbatch(bin_, "--wait", str(nxt))
        assert r.returncode == 0, r.stderr
        (run_dir,) = (tmp_path / "res" / "collectives").iterdir()
        meta = json.loads((run_dir / "meta.json").read_text())
        assert meta["launches"]["2"]["hosts"] == ["node0", "node1"] and meta["launcher_facts"]["nodelist"] == "node[0-1]"
        assert (pd.read_parquet(run_dir / "results.parquet")["wrong"] == 0).all()
        # a job asking more nodes than the partition has is refused at once, with Slurm's reason
        big = _jobspec(tmp_path, "big", "--nodes", "4", "--", *DISTBENCH, "collectives")
        r = _sbatch(bin_, "--wait", str(big), timeout=60)
        assert r.returncode == 1 and "Batch job submission failed" in r.stderr, r.stderr  # Slurm's reason follows
    finally:
        _down(id_)


def _wait_for(path: Path, text: str, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


@needs_slurm
@pytest.mark.slow
def test_scancel_keeps_the_finished_cases_and_resume_completes_them(tmp_path):
    id_, bin_ = _keep_up("--nodes", "2", "--link", "1gbit")
    try:
        cmd = [*DISTBENCH, "collectives", "-c", "all_reduce,all_gather", "--sizes", "4K,1M,4M", "--budget-s", "1"]
        job = _jobspec(tmp_path, "job", "--nodes", "2", "--", *cmd)
        r = _sbatch(bin_, "--parsable", str(job))
        job_id = r.stdout.strip().split(";")[0]
        log = tmp_path / "res" / f"slurm-{job_id}.out"
        assert _wait_for(log, "[2/6]", 120), log.read_text() if log.exists() else r.stderr
        subprocess.run([str(bin_ / "scancel"), job_id], check=True, timeout=30)
        subprocess.run([str(bin_ / "squeue")], timeout=30)
        end = time.monotonic() + 60
        while time.monotonic() < end and job_id in subprocess.run([str(bin_ / "squeue"), "-h", "-o", "%i"],
                                                                   capture_output=True, text=True).stdout:
            time.sleep(0.5)
        (run_dir,) = (tmp_path / "res" / "collectives").iterdir()
        meta = json.loads((run_dir / "meta.json").read_text())
        done = meta["launches"]["2"]["done"]
        assert meta["state"] == "interrupted" and 2 <= len(done) < 6
        again = _jobspec(tmp_path, "again", "--nodes", "2", "--", *cmd, "--resume", run_dir.name)
        r = _sbatch(bin_, "--wait", str(again))
        assert r.returncode == 0, r.stderr
        meta = json.loads((run_dir / "meta.json").read_text())
        assert meta["state"] == "complete" and len(meta["launches"]["2"]["done"]) == 6
        assert meta["resumed"][0]["done_before"] == len(done) and meta["resumed"][0]["launcher"] == "slurm"
        df = pd.read_parquet(run_dir / "results.parquet")
        assert len(df) == 6 and (df["wrong"] == 0).all()
    finally:
        _down(id_)


@needs_slurm
@pytest.mark.slow
def test_a_node_that_dies_mid_job_ends_it_in_bounded_time_naming_the_node(tmp_path):
    """Every process of node1 killed and its link down (no reset reaches node0: a node that
    vanished): Slurm marks node1 down after SlurmdTimeout, ends the job (NODE_FAIL, not requeued),
    and simcluster names the node and exits non-zero (sbatch --wait itself exits 0 for such a job);
    the finished cases are kept."""
    p = subprocess.Popen([*DISTBENCH, "simcluster", "--nodes", "2", "--link", "1gbit", "--scheduler", "slurm", "--",
                          "distbench", "collectives", "-c", "all_reduce,all_gather", "--sizes", "4K,1M,4M",
                          "--budget-s", "2", "--out", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    guard = threading.Timer(240, p.send_signal, (signal.SIGTERM,))
    guard.start()
    try:
        err_lines = []
        for line in p.stderr:
            err_lines.append(line)
            if "[2/6]" in line:
                break
        id_ = _id("".join(err_lines))
        ns = f"dbsc-{id_}-n1"
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "-n", ns, "link", "set", f"n1-{id_}", "down"], check=True)
        killed = time.monotonic()
        out, err = p.communicate(timeout=200)
        took = time.monotonic() - killed
    finally:
        guard.cancel()
        if p.poll() is None:
            p.kill()
    err = "".join(err_lines) + err
    assert p.returncode != 0
    # the job's state is NODE_FAIL, or still COMPLETING with reason NodeDown while node1 cannot confirm
    assert re.search(r"job \d+ (NODE_FAIL|COMPLETING) on .*reason NodeDown|job \d+ NODE_FAIL", err), err[-3000:]
    assert "srun: error: Node failure on node1" in err and "node node1 is down" in err, err[-3000:]
    print(f"the job ended {took:.0f} s after node1 died")  # docs/simcluster.md: SlurmdTimeout, not the collective's
    (run_dir,) = (tmp_path / "collectives").iterdir()
    assert len(json.loads((run_dir / "meta.json").read_text())["launches"]["2"]["done"]) >= 1
    assert _left(id_) == [] and _no_daemons(id_) == []


@needs_slurm
@pytest.mark.slow
@pytest.mark.parametrize("kind", [["pipeline", "--chunks", "2"], ["strategies"], ["allreduce", "--sizes", "4K"]])
def test_every_kind_runs_from_srun_s_own_variables(kind, tmp_path):
    """No wrapper: each task of the job's srun step is a rank (collectives and doctor: above)."""
    r = _cli("--nodes", "2", "--link", "1gbit", "--scheduler", "slurm", "--", "distbench", *kind, "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    (run_dir,) = (tmp_path / kind[0]).iterdir()
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["launcher"] == "slurm" and meta["launcher_facts"]["ntasks"] == "2"
    assert sorted({h for launch in meta["launches"].values() for h in launch["hosts"]}) == ["node0", "node1"]
