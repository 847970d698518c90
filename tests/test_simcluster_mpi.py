"""bench.simcluster.mpi: Open MPI's mpirun on the simulated cluster (a launch agent that enters a
node's namespace in place of ssh).

The pure parts (the agent's text, the hostfile, mpirun's command line, the mpirun check) run
everywhere, without root: the agent is even run, with `ip`, `unshare`, `mount` and `hostname`
faked on PATH, to show that it hands Open MPI's quoted orted command line to a shell as ssh does.
The end-to-end run (mpirun in node0's namespace, orted through the agent in node1's) is
slow-marked and skips, saying why, without root, ip / tc / unshare, or Open MPI 4.x."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from bench.errors import BenchError
from bench.results.rundir import RESULTS_LINE
from bench.simcluster import mpi, net
from conftest import ROOT

NAMESPACES = {"node0": "dbsc-1x2-n0", "node1": "dbsc-1x2-n1"}
INTERFACES = {"node0": "n0-1x2", "node1": "n1-1x2"}


def _fake_tools(bin_dir: Path, log: Path):
    """`ip netns exec NS CMD...`, `unshare --uts CMD...`: log, then run CMD; `mount`, `hostname`:
    log only. Enough to run the agent as a user, in this namespace."""
    bin_dir.mkdir(exist_ok=True)
    tools = {
        "ip": f'echo "ip $*" >> {log}; [ "$1 $2" = "netns exec" ] || exit 9; shift 3; exec "$@"',
        "unshare": f'echo "unshare $*" >> {log}; [ "$1" = "--uts" ] || exit 9; shift; exec "$@"',
        "mount": f'echo "mount $*" >> {log}',
        "hostname": f'echo "hostname $*" >> {log}',
    }
    for name, body in tools.items():
        p = bin_dir / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(0o755)


def _run_agent(tmp_path: Path, *args) -> tuple[subprocess.CompletedProcess, str]:
    agent = tmp_path / "agent"
    agent.write_text(mpi.agent_script(NAMESPACES, "/tmp/dbsc-1x2-x/hosts", INTERFACES))
    agent.chmod(0o755)
    log = tmp_path / "log"
    log.unlink(missing_ok=True)
    _fake_tools(tmp_path / "bin", log)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "GLOO_SOCKET_IFNAME": "n0-1x2", "KEEP": "inherited"}
    r = subprocess.run(["sh", str(agent), *args], capture_output=True, text=True, env=env, timeout=30)
    return r, log.read_text() if log.exists() else ""


# ---- the agent ----

def test_agent_runs_the_command_line_in_the_nodes_namespace_as_ssh_would(tmp_path):
    # what Open MPI 4.1's rsh launcher passes: the host, then orted's line with quoted arguments
    cmd = ('printf "%s|" -mca ess "env" -mca orte_hnp_uri "1.0;tcp://10.213.0.1:4567"; echo; '
           'echo "$GLOO_SOCKET_IFNAME $NCCL_SOCKET_IFNAME $KEEP"')
    r, log = _run_agent(tmp_path, "node1", cmd)
    assert r.returncode == 0, r.stderr
    # the quotes are the shell's (one argument per value, ';' inside the URI kept): as sshd's shell
    assert r.stdout.splitlines() == ["-mca|ess|env|-mca|orte_hnp_uri|1.0;tcp://10.213.0.1:4567|",
                                     "n1-1x2 n1-1x2 inherited"]
    lines = log.splitlines()
    assert lines[0].startswith("ip netns exec dbsc-1x2-n1 unshare --uts sh -c ")
    assert lines[1].startswith("unshare --uts sh -c ")
    assert lines[2:] == ["mount --bind /tmp/dbsc-1x2-x/hosts /etc/hosts", "hostname node1"]


def test_agent_runs_a_line_of_several_commands(tmp_path):
    # mpirun called by an absolute path (= --prefix) sends `PATH=... ; export PATH ; ... orted ...`
    r, _ = _run_agent(tmp_path, "node1", "KEEP=changed ; export KEEP ; sh -c 'echo $KEEP'")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "changed\n"


def test_agent_passes_words_as_ssh_joins_them(tmp_path):
    # ssh joins its arguments with spaces into one line for the remote shell: so does the agent
    r, _ = _run_agent(tmp_path, "node0", "echo", "a", '"b c"', "$KEEP")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "a b c inherited\n"


def test_agent_refuses_an_unknown_host_like_a_failed_ssh(tmp_path):
    r, log = _run_agent(tmp_path, "node7", "orted")
    assert r.returncode == 255
    assert "unknown host 'node7'" in r.stderr and "node0 node1" in r.stderr
    assert log == ""  # no namespace was entered
    r, _ = _run_agent(tmp_path, "node1")
    assert r.returncode == 255 and "usage" in r.stderr


def test_agent_without_interfaces_leaves_the_variables_alone(tmp_path):
    text = mpi.agent_script(NAMESPACES, "/h")
    assert "node1) ns=dbsc-1x2-n1; ifname='' ;;" in text
    assert text.startswith("#!/bin/sh\n")


@pytest.mark.parametrize("namespaces, interfaces, message", [
    ({}, None, "at least one node"),
    ({"node0; rm -rf /": "ns"}, None, "bad host name"),
    ({"node0": "ns$(x)"}, None, "bad namespace"),
    ({"node0": "ns"}, {"node1": "eth0"}, "not a node"),
    ({"node0": "ns"}, {"node0": "eth 0"}, "bad interface"),
])
def test_agent_refuses_names_a_shell_would_read(namespaces, interfaces, message):
    with pytest.raises(BenchError, match=message):
        mpi.agent_script(namespaces, "/h", interfaces)


def test_agent_quotes_the_hosts_file():
    text = mpi.agent_script(NAMESPACES, "/tmp/a b/hosts")
    assert "sh '/tmp/a b/hosts' \"$host\"" in text


# ---- hostfile and mpirun's command line ----

def test_hostfile_gives_every_node_its_slots_in_rank_order():
    assert mpi.hostfile(["node0", "node1", "node2"], 2) == "node0 slots=2\nnode1 slots=2\nnode2 slots=2\n"
    for nodes, rpn, message in ((["node0"], 0, ">= 1"), ([], 1, "at least one"), (["a", "a"], 1, "twice"),
                                (["a b"], 1, "bad host name")):
        with pytest.raises(BenchError, match=message):
            mpi.hostfile(nodes, rpn)


def _mca(argv: list[str]) -> dict:
    return {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "--mca"}


def _exported(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]


def test_mpirun_argv():
    argv = mpi.mpirun_argv("/venv/bin/python", ["-m", "bench", "collectives", "--sizes", "1M"], ["node0", "node1"], 2,
                           "/tmp/d/agent", "/tmp/d/hostfile")
    assert argv[0] == "mpirun" and "--allow-run-as-root" in argv
    assert argv[argv.index("-np") + 1] == "4" and argv[argv.index("--hostfile") + 1] == "/tmp/d/hostfile"
    assert argv[argv.index("--map-by") + 1] == "slot" and argv[argv.index("--bind-to") + 1] == "none"
    assert "--leave-session-attached" in argv
    assert _mca(argv) == {
        "plm": "rsh", "ras": "^slurm,gridengine,tm,lsf,alps", "plm_rsh_disable_qrsh": "1",
        "plm_rsh_agent": "/tmp/d/agent", "plm_rsh_no_tree_spawn": "1",
        "oob_tcp_if_include": "10.213.0.0/24", "btl_tcp_if_include": "10.213.0.0/24"}
    # per-node variables are the agent's: only what is the same on every node is exported
    assert _exported(argv) == ["MASTER_ADDR=10.213.0.1", "MASTER_PORT=29500"]
    assert argv[-6:] == ["/venv/bin/python", "-m", "bench", "collectives", "--sizes", "1M"]
    assert mpi.SUBNET_CIDR == f"{net.SUBNET}.0/24" and net.address_of(0) == "10.213.0.1"


def test_mpirun_argv_options_and_refusals():
    argv = mpi.mpirun_argv("py", ["x.py"], ["a", "b", "c"], 1, "ag", "hf", subnet="10.9.0.0/16", master_addr="a",
                           master_port=1234, mpirun="/opt/ompi/bin/mpirun")
    assert argv[0] == "/opt/ompi/bin/mpirun" and argv[argv.index("-np") + 1] == "3"
    assert _mca(argv)["oob_tcp_if_include"] == "10.9.0.0/16"
    assert _exported(argv) == ["MASTER_ADDR=a", "MASTER_PORT=1234"] and argv[-2:] == ["py", "x.py"]
    for nodes, rpn, cmd, message in ((["a"], 0, ["x"], ">= 1"), ([], 1, ["x"], "at least one"),
                                     (["a"], 1, [], "no command")):
        with pytest.raises(BenchError, match=message):
            mpi.mpirun_argv("py", cmd, nodes, rpn, "ag", "hf")


def test_in_node_wraps_a_command_as_a_torchrun_node_is():
    argv = mpi.in_node("dbsc-1x2-n0", "node0", "/tmp/x/hosts", ["mpirun", "-np", "2"])
    assert argv[:7] == ["ip", "netns", "exec", "dbsc-1x2-n0", "unshare", "--uts", "sh"]
    assert argv[8] == 'mount --bind /tmp/x/hosts /etc/hosts 2>/dev/null; hostname node0 && exec "$@"'
    assert argv[9:] == ["sh", "mpirun", "-np", "2"]


# ---- the mpirun check ----

def test_parse_version():
    assert mpi.parse_version("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/") == (4, 1, 4)
    assert mpi.parse_version("mpirun (Open MPI) 5.0.3") == (5, 0, 3)
    assert mpi.parse_version("HYDRA build details:\n    Version: 4.1.2") is None
    assert mpi.parse_version("") is None


def _fake_mpi(tmp_path: Path, version_text: str | None, orted: bool = True) -> str:
    d = tmp_path / "bin"
    d.mkdir()
    if version_text is not None:
        (d / "mpirun").write_text(f"#!/bin/sh\nprintf '%s\\n' '{version_text}'\n")
        (d / "mpirun").chmod(0o755)
    if orted:
        (d / "orted").write_text("#!/bin/sh\n")
        (d / "orted").chmod(0o755)
    return str(d)


@pytest.mark.parametrize("version_text, orted, message", [
    (None, True, "needs Open MPI's mpirun on PATH (Debian: apt-get install -y openmpi-bin); not found"),
    ("mpirun (Open MPI) 4.1.4", False, "needs Open MPI's orted on PATH (Debian: apt-get install -y openmpi-bin)"),
    ("HYDRA build details:", True, "is another MPI's ('HYDRA build details:')"),
    ("mpirun (Open MPI) 5.0.3", True, "is Open MPI 5.0.3; allowed: 4.x"),
])
def test_check_mpirun_refuses_in_one_line(tmp_path, version_text, orted, message):
    path = _fake_mpi(tmp_path, version_text, orted)
    with pytest.raises(BenchError) as e:
        mpi.check_mpirun(path)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_check_mpirun_accepts_open_mpi_4(tmp_path):
    path = _fake_mpi(tmp_path, "mpirun (Open MPI) 4.1.4")
    assert mpi.check_mpirun(path) == f"{path}/mpirun"


# ---- the real thing: mpirun across two namespaces ----

def _why_not() -> str | None:
    if os.geteuid() != 0:
        return f"mpirun across simcluster nodes needs root (CAP_NET_ADMIN); this test runs as uid {os.geteuid()}"
    missing = net.missing_tools()
    if missing:
        return f"simcluster needs {', '.join(missing)} on PATH (apt-get install -y iproute2 util-linux)"
    try:
        mpi.check_mpirun()
    except BenchError as e:
        return str(e)
    probe = f"{net.PREFIX}probe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if r.returncode != 0:
        return f"network namespaces cannot be made here: {' '.join(r.stderr.split())}"
    return None


@pytest.mark.slow
def test_mpirun_runs_distbench_across_two_namespaces(tmp_path):
    why = _why_not()
    if why:
        pytest.skip(why)
    network = net.Network([10**9, 10**9])
    tmp = Path(tempfile.mkdtemp(prefix=f"{net.PREFIX}{network.id}-"))  # net.remove_stale knows the name
    out = tmp_path / "results"
    proc = None
    try:
        hosts = tmp / "hosts"
        hosts.write_text("127.0.0.1 localhost\n::1 localhost\n" + "".join(
            f"{n.address} {n.name}\n::ffff:{n.address} {n.name}\n" for n in network.nodes))
        agent = tmp / "agent"
        agent.write_text(mpi.agent_script({n.name: n.netns for n in network.nodes}, str(hosts),
                                          {n.name: n.ifname for n in network.nodes}))
        agent.chmod(0o755)
        names = [n.name for n in network.nodes]
        (tmp / "hostfile").write_text(mpi.hostfile(names, 1))
        network.build()
        node0 = network.nodes[0]
        argv = mpi.mpirun_argv(sys.executable, ["-m", "bench", "collectives", "-c", "all_reduce", "--sizes", "1M",
                                                "--out", str(out)], names, 1, str(agent), str(tmp / "hostfile"),
                               master_addr=node0.address)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GLOO_SOCKET_IFNAME": node0.ifname,
               "NCCL_SOCKET_IFNAME": node0.ifname, "DISTBENCH_SIMCLUSTER": network.id, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(mpi.in_node(node0.netns, node0.name, str(hosts), argv), env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        stdout, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 0, f"mpirun exit {proc.returncode}\n{stdout[-3000:]}\n{stderr[-3000:]}"
        run_dir = next(ln[len(RESULTS_LINE):].strip() for ln in stdout.splitlines() if ln.startswith(RESULTS_LINE))
        meta = json.loads((Path(run_dir) / "meta.json").read_text())
        launch = meta["launches"]["2"]
        assert launch["hosts"] == ["node0", "node1"] and launch["wrong"] == 0
        assert "Wrong elements: 0 OK" in stdout
        ranks = pd.read_parquet(Path(run_dir) / "ranks.parquet")
        assert sorted(set(zip(ranks["rank"], ranks["host"]))) == [(0, "node0"), (1, "node1")]
        assert (pd.read_parquet(Path(run_dir) / "results.parquet")["wrong"] == 0).all()
        assert meta["cluster"]["network"]["GLOO_SOCKET_IFNAME"] == node0.ifname
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for _ in range(50):  # whatever still runs in a namespace (orted, ranks): never left behind
            pids = network.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        problems = network.teardown()
        shutil.rmtree(tmp, ignore_errors=True)
    assert problems == [] and net.leftover_namespaces(network.id) == []
