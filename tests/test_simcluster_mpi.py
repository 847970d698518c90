"""bench.simcluster.mpi: Open MPI's mpirun on the simulated cluster (a launch agent that enters a
node's namespace in place of ssh).

The pure parts (the agent's text, the hostfile, mpirun's command line, the mpirun check) run
everywhere, without root: the agent is even run, with `ip`, `unshare`, `mount` and `hostname`
faked on PATH, to show that it hands Open MPI's quoted orted command line to a shell as ssh does.
`distbench simcluster --launcher mpirun` is refused in one line where it cannot run (with a
scheduler, a world of one, no Open MPI), and its meta.json block is checked without a network.
The end-to-end runs (`distbench simcluster --launcher mpirun`: mpirun in node0's namespace,
orted through the agent in the others') are slow-marked and skip, saying why, without root,
ip / tc / unshare, or Open MPI 4.x."""

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pandas as pd
import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.simcluster import cpu, mpi, net
from bench.simcluster.run import SimCluster
from conftest import ROOT
from test_simcluster import WHY_NOT as NET_WHY_NOT
from test_simcluster import _cli, _id, _left

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


def _run_agent(tmp_path: Path, *args, cgroup_procs=None) -> tuple[subprocess.CompletedProcess, str]:
    agent = tmp_path / "agent"
    agent.write_text(mpi.agent_script(NAMESPACES, "/tmp/dbsc-1x2-x/hosts", INTERFACES, cgroup_procs))
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
    assert "node1) ns=dbsc-1x2-n1; ifname=''; cgroup='' ;;" in text
    assert text.startswith("#!/bin/sh\n")


def test_agent_joins_the_node_s_cgroup_before_the_command(tmp_path):
    procs = tmp_path / "cg" / "cgroup.procs"  # a file stands in for cgroup.procs: the agent writes its pid
    procs.parent.mkdir()
    r, _ = _run_agent(tmp_path, "node1", "echo $$", cgroup_procs={"node1": str(procs)})
    assert r.returncode == 0 and r.stderr == "", r.stderr
    # the pid written is the agent's: it execs ip, unshare and the shell that runs the command
    assert procs.read_text() == r.stdout
    r, _ = _run_agent(tmp_path, "node0", "echo ran", cgroup_procs={"node0": str(tmp_path / "none" / "cgroup.procs")})
    assert r.returncode == 0 and r.stdout == "ran\n"  # a failed join is a warning, never silent
    assert r.stderr == f"distbench simcluster agent: warning: node0 could not join the cgroup of " \
        f"{tmp_path}/none/cgroup.procs\n"


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
    with pytest.raises(BenchError, match="cgroup given for 'node1', which is not a node"):
        mpi.agent_script({"node0": "ns"}, "/h", cgroup_procs={"node1": "/x"})
    with pytest.raises(BenchError, match="'cg/cgroup.procs' for 'node0' is not absolute"):
        mpi.agent_script({"node0": "ns"}, "/h", cgroup_procs={"node0": "cg/cgroup.procs"})


def test_own_cgroup_procs_reads_proc_self_cgroup(tmp_path):
    (tmp_path / "user.slice" / "s").mkdir(parents=True)
    (tmp_path / "user.slice" / "s" / "cgroup.procs").touch()
    v2 = "0::/user.slice/s\n"
    v1 = "4:memory:/x\n2:cpu,cpuacct:/user.slice/s\n0::/other\n"
    assert mpi.own_cgroup_procs(str(tmp_path), 2, v2) == f"{tmp_path}/user.slice/s/cgroup.procs"
    assert mpi.own_cgroup_procs(str(tmp_path), 1, v1) == f"{tmp_path}/user.slice/s/cgroup.procs"
    # a cgroup not under the mount (a container's own seen as its root): the mount's root
    assert mpi.own_cgroup_procs(str(tmp_path), 2, "0::/docker/abc\n") == f"{tmp_path}/cgroup.procs"
    assert mpi.own_cgroup_procs(str(tmp_path), 1, "1:memory:/user.slice/s\n") == f"{tmp_path}/cgroup.procs"


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


# ---- CPU quotas: an Open MPI rank is found by its rank and this cluster's id ----

def _environ(**env) -> bytes:
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


def test_rank_of_an_open_mpi_rank():
    rank = _environ(OMPI_COMM_WORLD_RANK="3", OMPI_COMM_WORLD_SIZE="4", DISTBENCH_SIMCLUSTER="1x2", PATH="/bin")
    assert cpu.rank_of(rank, "simcluster-1x2", cluster_id="1x2") == 3
    assert cpu.rank_of(rank, "simcluster-1x2", cluster_id="9x9") is None  # another cluster's rank
    assert cpu.rank_of(rank, "simcluster-1x2") is None  # no cluster id given: torchrun's workers only
    # mpirun and orted carry the cluster's id and no rank
    assert cpu.rank_of(_environ(DISTBENCH_SIMCLUSTER="1x2", OMPI_MCA_ess="env"), "simcluster-1x2", "1x2") is None
    assert cpu.rank_of(_environ(OMPI_COMM_WORLD_RANK="x", DISTBENCH_SIMCLUSTER="1x2"), "r", "1x2") is None
    # a torchrun worker and a Slurm task are read as before
    assert cpu.rank_of(_environ(TORCHELASTIC_RUN_ID="simcluster-1x2", LOCAL_RANK="0", RANK="2"), "simcluster-1x2") == 2
    assert cpu.rank_of(_environ(SLURM_STEP_ID="0", SLURM_PROCID="1", DISTBENCH_SIMCLUSTER="1x2"), "r", "1x2") == 1


# ---- `distbench simcluster --launcher mpirun`: refusals and the meta.json block ----

def _refusal(argv, capsys) -> str:
    assert main(["simcluster", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("distbench: error: "), err
    return err[0]


def test_mpirun_is_refused_with_a_scheduler_and_for_a_world_of_one(capsys):
    err = _refusal(["--nodes", "2", "--link", "1gbit", "--launcher", "mpirun", "--scheduler", "slurm", "--",
                    "distbench", "collectives"], capsys)
    assert "--launcher mpirun: not with --scheduler slurm" in err
    err = _refusal(["--nodes", "1", "--link", "1gbit", "--launcher", "mpirun", "--", "distbench", "collectives"],
                   capsys)
    assert "a world of 1 is no MPI launch" in err
    err = _refusal(["--nodes", "2", "--link", "1gbit", "--launcher", "srun", "--", "distbench", "collectives"], capsys)
    assert "--launcher: invalid choice: 'srun'" in err


def test_mpirun_missing_is_refused_before_anything_is_built(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    bin_dir = tmp_path / "bin"  # ip, tc and unshare that fail if run: nothing may be built
    bin_dir.mkdir()
    for tool in ("ip", "tc", "unshare"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 97\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    err = _refusal(["--nodes", "2", "--link", "1gbit", "--launcher", "mpirun", "--", "distbench", "collectives"],
                   capsys)
    assert "needs Open MPI's mpirun on PATH (Debian: apt-get install -y openmpi-bin); not found" in err


def test_meta_records_the_launch_line():
    c = SimCluster([10**9, 10**9], 1, launcher="mpirun")
    c.mpirun = ["mpirun", "-np", "2", "--mca", "ras", "^slurm", "py", "-m", "bench", "collectives"]
    facts = c.facts(["distbench", "collectives"])
    assert facts["launch"] == {"launcher": "mpirun",
                               "command_line": "mpirun -np 2 --mca ras '^slurm' py -m bench collectives"}
    assert "torchrun" not in facts
    t = SimCluster([10**9, 10**9], 1)
    t.torchrun = [["py", "-m", "torch.distributed.run", "--nnodes", "2", "-m", "bench"]]
    facts = t.facts(["distbench"])
    assert facts["launch"] == {"launcher": "torchrun",
                               "command_line": "py -m torch.distributed.run --nnodes 2 -m bench"}
    assert facts["torchrun"] == facts["launch"]["command_line"]  # the old key, kept for torchrun runs
    with pytest.raises(BenchError, match="not with --scheduler slurm"):
        SimCluster([10**9], 1, scheduler="slurm", launcher="mpirun")


# ---- the real thing: distbench simcluster --launcher mpirun ----

def _why_not() -> str | None:
    if NET_WHY_NOT:  # root, iproute2, namespaces: tests/test_simcluster.py says which is missing
        return NET_WHY_NOT
    try:
        mpi.check_mpirun()
    except BenchError as e:
        return str(e)
    return None


WHY_NOT = _why_not()
needs_mpirun = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


def _everything_left(id_: str) -> list[str]:
    """_left (namespaces, host links and qdiscs, temp dirs), plus any process that carries the
    cluster's id (mpirun, an agent, orted, a rank) and any of its cgroups."""
    found = _left(id_)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"DISTBENCH_SIMCLUSTER={id_}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(f"process {pid}: {Path(f'/proc/{pid}/cmdline').read_bytes()[:80]!r}")
        except OSError:
            pass
    ctrl = cpu.find_controller()
    found += [f"cgroup {d}" for d in (ctrl.root.glob(f"{cpu.PREFIX}{id_}-*") if ctrl else [])]
    return found


@needs_mpirun
@pytest.mark.slow
def test_simcluster_runs_distbench_under_mpirun(tmp_path):
    r = _cli("--nodes", "2", "--ranks-per-node", "1", "--link", "1gbit", "--launcher", "mpirun", "--",
             "distbench", "collectives", "-c", "all_reduce", "--sizes", "1M", "--out", str(tmp_path), "--no-telemetry",
             timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _everything_left(_id(r.stderr)) == []
    assert "Wrong elements: 0 OK" in r.stdout
    (run_dir,) = list((tmp_path / "collectives").iterdir())
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["launcher"] == "mpi" and meta["launcher_facts"]["mpi"] == "Open MPI"
    (launch,) = meta["launches"].values()
    assert launch["hosts"] == ["node0", "node1"] and launch["nodes"] == 2 and launch["wrong"] == 0
    placement = sorted((f["rank"], f["host"], f["node_rank"], f["local_rank"]) for f in launch["ranks"])
    assert placement == [(0, "node0", 0, 0), (1, "node1", 1, 0)]
    assert (pd.read_parquet(run_dir / "results.parquet")["wrong"] == 0).all()
    sim = meta["simcluster"]
    node0 = sim["nodes"][0]
    assert meta["cluster"]["network"]["GLOO_SOCKET_IFNAME"] == node0["interface"]  # rank 0's: node0's link
    assert sim["launch"]["launcher"] == "mpirun" and "torchrun" not in sim
    line = shlex.split(sim["launch"]["command_line"])
    assert line[0] == "mpirun" and line[line.index("-np") + 1] == "2"
    agent = line[line.index("plm_rsh_agent") + 1]  # in the invocation's temporary directory, removed at the end
    assert agent.startswith(os.path.join(tempfile.gettempdir(), f"dbsc-{_id(r.stderr)}-")) and agent.endswith("/agent")
    assert line[line.index(f"MASTER_ADDR={node0['address']}") + 3:] == [
        sys.executable, "-m", "bench", "collectives", "-c", "all_reduce", "--sizes", "1M", "--out", str(tmp_path),
        "--no-telemetry"]


def _cpu_cgroup(text: str) -> str:
    """The cpu controller's cgroup in /proc/PID/cgroup's text (v1: the line naming cpu; v2: `0::`)."""
    for line in text.splitlines():
        hier, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") or (hier == "0" and controllers == ""):
            return path
    return "?"


WHERE = """import os, socket, sys, time
def cpu_cgroup(pid):  # the cpu controller's cgroup of a process (v1: the cpu line; v2: the only one)
    for line in open(f"/proc/{pid}/cgroup"):
        hier, controllers, path = line.rstrip("\\n").split(":", 2)
        if "cpu" in controllers.split(",") or (hier == "0" and controllers == ""):
            return path
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
for _ in range(100):  # the watcher moves rank 1 into its cgroup a moment after it starts
    if rank != 1 or cpu_cgroup(os.getpid()).endswith("-rank1"):
        break
    time.sleep(0.1)
print("WHERE", rank, socket.gethostname(), os.environ.get("GLOO_SOCKET_IFNAME"), cpu_cgroup(os.getpid()),
      cpu_cgroup(os.getppid()), flush=True)
sys.exit(3 if rank == 1 else 0)
"""


@needs_mpirun
@pytest.mark.slow
def test_mpirun_places_ranks_and_quotas_and_passes_the_exit_code_through(tmp_path):
    if cpu.find_controller() is None:
        pytest.skip("no writable cgroup cpu controller here (--cpu-quota-of needs one)")
    script = tmp_path / "where.py"
    script.write_text(WHERE)
    # node0's quota holds mpirun and rank 0; node1's orted must leave it; rank 1 has its own; node2 its node's
    r = _cli("--nodes", "3", "--link", "1gbit", "--launcher", "mpirun",
             "--cpu-quota-of", "node0=150%,rank1=50%,node2=90%", "--", str(script), timeout=120)
    id_ = _id(r.stderr)
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]  # rank 1's code, through mpirun
    assert _everything_left(id_) == []
    where = sorted(ln.split()[1:] for ln in r.stdout.splitlines() if ln.startswith("WHERE "))
    root = f"/{cpu.PREFIX}{id_}"
    home = _cpu_cgroup(Path("/proc/self/cgroup").read_text())  # this test's cgroup: simcluster's too
    assert where == [
        ["0", "node0", f"n0-{id_}", f"{root}-node0", f"{root}-node0"],  # parent: mpirun, in node0's cgroup
        ["1", "node1", f"n1-{id_}", f"{root}-rank1", home],  # parent: orted, out of node0's cgroup
        ["2", "node2", f"n2-{id_}", f"{root}-node2", f"{root}-node2"],  # orted joined node2's through the agent
    ], r.stderr[-3000:]
    assert "warning" not in r.stderr, r.stderr[-3000:]


@needs_mpirun
@pytest.mark.slow
def test_sigterm_mid_mpirun_leaves_nothing(tmp_path):
    script = tmp_path / "hold.py"
    script.write_text("import os, time\nprint('holding', os.environ['OMPI_COMM_WORLD_RANK'], flush=True)\n"
                      "time.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-m", "bench", "simcluster", "--nodes", "2", "--link", "1gbit",
                          "--launcher", "mpirun", "--", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    guard = threading.Timer(120, p.send_signal, (signal.SIGTERM,))  # never hang: a SIGTERM still tears down
    guard.start()
    try:
        held = set()
        for line in p.stdout:  # both ranks (node1's through orted) are up and holding
            if line.startswith("holding "):
                held.add(line.split()[1])
            if len(held) == 2:
                break
        assert held == {"0", "1"}
        p.send_signal(signal.SIGTERM)
        code = p.wait(timeout=60)
        err = p.stderr.read()
    finally:
        guard.cancel()
        if p.poll() is None:
            p.kill()
    assert code == 128 + signal.SIGTERM, err[-2000:]
    assert "the simulated cluster is torn down" in err
    assert _everything_left(_id(err)) == []
