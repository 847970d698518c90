"""A real Slurm on the simulated cluster: munge, slurmctld and one slurmd per node, on the same
namespaces, links and faults as `distbench simcluster` (bench.simcluster.net).

    namespace dbsc-<id>-sw  (the switch; hostname `head`, 10.213.0.254 on the bridge)
        munged (its own socket), slurmctld -D      <- sbatch / srun / squeue ... run here
    namespace dbsc-<id>-nI  (hostname nodeI, 10.213.0.I+1)
        munged (its own socket), slurmd -D -N nodeI  -> slurmstepd -> the job's tasks

Every daemon is Debian's stock build (slurm-wlm, munge), started as root in the foreground (-D /
-F) by this module, which keeps its pid. Each host runs in a mount namespace of its own (the one
`ip netns exec` makes), where two bind mounts give it:
- `/etc/hosts` naming head and every node (the host's file is not changed);
- its own munge socket directory at one path (`AuthInfo=socket=...` in slurm.conf): one munged per
  host with one key. Debian's slurmd is not built with --enable-multiple-slurmd, and several
  slurmd on one munged fail: munge refuses a credential decoded twice (EMUNGE_CRED_REPLAYED, its
  replay cache), and srun's job credential is decoded by every node's slurmd.
Nothing is written outside the invocation's temporary directory (`/tmp/dbsc-<id>-*/slurm`):
slurm.conf, cgroup.conf, the munge key (1 KiB from os.urandom, mode 0400), state, spool and log
directories, the job script and its output.

slurm.conf: one partition `sim` of all nodes, CPUs per node = the ranks per node
(`SlurmdParameters=config_overrides`, so slurmd takes the configured CPUs on a host with fewer
cores), `ProctrackType=proctrack/pgid`, `TaskPlugin=task/none`, no accounting; cgroup.conf names
the host's cgroup version (`CgroupPlugin=cgroup/v2` where /sys/fs/cgroup/cgroup.controllers
exists, else cgroup/v1: a v1 or hybrid mount). Failure detection is short, so a dead node ends its
job in bounded time: `SlurmdTimeout` 10 s, `KillWait` 5 s, `srun --kill-on-bad-exit=1`.
"""

import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from bench.errors import BenchError
from bench.simcluster import proc

HEAD = "head"  # the controller's (and submit host's) name
HEAD_ADDRESS_SUFFIX = 254  # 10.213.0.254 on the switch's bridge
PARTITION = "sim"
CLUSTER = "dbsc"
TOOLS = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scancel", "scontrol", "salloc", "sacct")
DEBIAN_PACKAGES = "slurm-wlm munge"
READY_TIMEOUT_S = 60.0
SLURMD_TIMEOUT_S = 10  # a node silent this long is DOWN, and its job ends (slurm.conf SlurmdTimeout)
KILL_WAIT_S = 5  # SIGTERM -> SIGKILL of a job's tasks (slurm.conf KillWait)


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def check_can_run():
    """One line where Slurm cannot be brought up: a missing daemon or client (root and iproute2
    are checked by bench.simcluster.net.check_can_run)."""
    missing = missing_tools()
    if missing:
        raise BenchError(f"simcluster --scheduler slurm needs {', '.join(missing)} on PATH; not found (Debian: "
                         f"apt-get install -y {DEBIAN_PACKAGES}, or `make install-slurm`)")


def cgroup_plugin(root: Path = Path("/sys/fs/cgroup")) -> str:
    """cgroup/v2 on a unified mount (cgroup.controllers at its root), else cgroup/v1 (v1 or hybrid)."""
    return "cgroup/v2" if (root / "cgroup.controllers").exists() else "cgroup/v1"


def version() -> str | None:
    r = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True)
    m = re.search(r"(\d+\.\d+[\w.\-]*)", r.stdout + r.stderr)
    return m.group(1) if m else None


def slurm_conf(root: Path, nodes, ranks_per_node: int, head_address: str) -> str:
    """The cluster's slurm.conf (nodes: bench.simcluster.net.Node)."""
    lines = [
        "# distbench simcluster: a real Slurm on simulated nodes (bench/simcluster/slurm.py)",
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost={HEAD}({head_address})",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge-socket' / 'munge.socket.2'}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool' / '%n'}",
        f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'run' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        "SlurmctldPort=6817", "SlurmdPort=6818",
        "ProctrackType=proctrack/pgid", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/builtin", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides", "MpiDefault=none", "ReturnToService=2",
        "EnforcePartLimits=ALL",  # a job beyond the partition (more nodes than it has) is refused at submission
        "JobRequeue=0",  # a job on a failed node ends (NODE_FAIL), as `sbatch --wait` needs; Slurm's default requeues it
        f"SlurmdTimeout={SLURMD_TIMEOUT_S}", f"KillWait={KILL_WAIT_S}", "InactiveLimit=0", "MinJobAge=300",
        "MessageTimeout=10", "SlurmctldTimeout=30", "HealthCheckInterval=0",
    ]
    for n in nodes:
        lines.append(f"NodeName={n.name} NodeAddr={n.address} CPUs={ranks_per_node} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


class Slurm:
    """The daemons of one simulated cluster. `start()` then `stop()` (always); `client(...)` runs
    sbatch / srun / squeue ... on the head host."""

    def __init__(self, net, ranks_per_node: int, tmp: Path, hosts_file: Path, python_env: dict, keep: bool = False):
        self.net = net
        self.keep = keep  # daemons outlive simcluster (no parent-death signal)
        self.jobs = 0
        self.ranks_per_node = ranks_per_node
        self.root = Path(tmp) / "slurm"
        self.hosts_file = Path(hosts_file)
        self.env = {**python_env, "SLURM_CONF": str(self.root / "slurm.conf")}
        self.head_address = f"{net.nodes[0].address.rsplit('.', 1)[0]}.{HEAD_ADDRESS_SUFFIX}"
        self.procs: dict[str, subprocess.Popen] = {}  # host -> its daemon's process (slurmctld / slurmd)
        self.started_s: float | None = None  # bring-up time: namespaces exist -> every node idle
        self.version = None

    # ---- files ------------------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def hosts_lines(self) -> str:
        return f"{self.head_address} {HEAD}\n::ffff:{self.head_address} {HEAD}\n"

    def write(self):
        r = self.root
        for d in ("state", "spool", "run", "log", "munge-socket", "jobs", "bin"):
            (r / d).mkdir(parents=True, exist_ok=True)
        for host in self.hosts():
            (r / "spool" / host).mkdir(exist_ok=True)
            (r / "munge" / host).mkdir(parents=True, exist_ok=True)
            os.chmod(r / "munge" / host, 0o755)
        key = r / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.conf.write_text(slurm_conf(r, self.net.nodes, self.ranks_per_node, self.head_address))
        (r / "cgroup.conf").write_text(f"CgroupPlugin={cgroup_plugin()}\nCgroupMountpoint=/sys/fs/cgroup\n")
        for name in CLIENTS:  # wrappers for a person's shell (--keep-up): the command runs on the head host
            w = r / "bin" / name
            w.write_text("#!/bin/sh\n# distbench simcluster: run Slurm's " + name + " on the simulated cluster's head\n"
                         + f"export SLURM_CONF={shlex.quote(str(self.conf))}\n"
                         + "exec " + " ".join(shlex.quote(a) for a in self.on_head([name])) + ' "$@"\n')
            os.chmod(w, 0o755)

    def hosts(self) -> list[str]:
        return [HEAD, *(n.name for n in self.net.nodes)]

    # ---- processes --------------------------------------------------------------------------------
    def _inside(self, netns: str, host: str, argv: list[str], munged: bool = False) -> list[str]:
        """argv run as `host` in `netns`: its hostname, /etc/hosts, its own munge socket directory;
        with munged=True, start that host's munged first (foreground daemon, pid in its directory)."""
        r = self.root
        sock = r / "munge-socket"
        mine = r / "munge" / host
        pdeath = "setpriv --pdeathsig KILL " if shutil.which("setpriv") else ""
        script = (f"mount --bind {shlex.quote(str(self.hosts_file))} /etc/hosts && "
                  f"mount --bind {shlex.quote(str(mine))} {shlex.quote(str(sock))} && hostname {host} && ")
        if munged:
            # munged dies with the daemon exec'd below (its parent): setpriv's parent-death signal
            script += (f"{{ {pdeath}munged -F -f --key-file={shlex.quote(str(r / 'munge.key'))} "
                       f"--socket={shlex.quote(str(sock / 'munge.socket.2'))} "
                       f"--pid-file={shlex.quote(str(sock / 'munged.pid'))} "
                       f"--seed-file={shlex.quote(str(sock / 'munged.seed'))} "
                       f"--log-file={shlex.quote(str(r / 'log' / f'munged-{host}.log'))} & }} && "
                       f"i=0; while [ ! -S {shlex.quote(str(sock / 'munge.socket.2'))} ] && [ $i -lt 100 ]; do "
                       "sleep 0.05; i=$((i+1)); done && ")
        script += 'exec "$@"'
        return ["ip", "netns", "exec", netns, "unshare", "--uts", "sh", "-c", script, "sh", *argv]

    def on_head(self, argv: list[str]) -> list[str]:
        return self._inside(self.net.switch, HEAD, argv)

    def _daemon(self, host: str, netns: str, argv: list[str], cgroup=None):
        log = open(self.root / "log" / f"{host}.stdio", "ab")
        procs = str(cgroup.path / "cgroup.procs") if cgroup else None
        self.procs[host] = subprocess.Popen(self._inside(netns, host, argv, munged=True), env=self.env,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            preexec_fn=functools.partial(proc.in_child, not self.keep, procs))
        log.close()
        if cgroup and self.procs[host].pid in cgroup.members():  # a node's quota: its slurmd and all it starts
            cgroup.pids.append(self.procs[host].pid)
            cgroup.applied_s = 0.0

    def start(self, t0: float | None = None, cgroups: dict | None = None):
        """munged + slurmctld on head, munged + slurmd on every node; returns when every node is
        idle in the partition (or raises, naming the log to read)."""
        t0 = time.monotonic() if t0 is None else t0
        self.version = version()
        self.write()
        _ip_addr = ["ip", "-n", self.net.switch, "addr", "add", f"{self.head_address}/24", "dev", self.net.bridge]
        r = subprocess.run(_ip_addr, capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"simcluster: `{' '.join(_ip_addr)}` failed: {' '.join(r.stderr.split())}")
        self._daemon(HEAD, self.net.switch, ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for n in self.net.nodes:
            self._daemon(n.name, n.netns, ["slurmd", "-D", "-N", n.name, "-f", str(self.conf)],
                         (cgroups or {}).get(n.index))
        self.wait_ready()
        self.started_s = time.monotonic() - t0

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S):
        names = [n.name for n in self.net.nodes]
        end = time.monotonic() + timeout_s
        states: dict[str, str] = {}
        while time.monotonic() < end:
            for host, p in self.procs.items():
                if p.poll() is not None:
                    raise BenchError(f"simcluster: Slurm's daemon on {host} exited with code {p.returncode} at start; "
                                     f"its log: {self.log_of(host)}")
            r = self.client(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10)
            states = dict(line.split()[:2] for line in r.stdout.splitlines() if len(line.split()) >= 2)
            if all(states.get(n, "").rstrip("*") in ("idle", "alloc", "mix") for n in names):
                return
            time.sleep(0.1)
        raise BenchError(f"simcluster: Slurm's nodes did not come up within {timeout_s:g} s (states: "
                         f"{states or 'none reported'}); logs under {self.root / 'log'}")

    def log_of(self, host: str) -> Path:
        return self.root / "log" / ("slurmctld.log" if host == HEAD else f"slurmd-{host}.log")

    def client(self, argv: list[str], timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
        """Run a Slurm client on the head host and wait for it."""
        return subprocess.run(self.on_head(argv), env=self.env, capture_output=True, text=True, timeout=timeout, **kw)

    def submit(self, argv: list[str], nodes: int, cwd: str) -> tuple[subprocess.Popen, Path, Path]:
        """`sbatch --wait --parsable` of the command as a job of `nodes` x ranks per node; returns
        (sbatch's process, the job's stdout and stderr files). sbatch exits with the job's code."""
        self.jobs += 1
        d = self.root / "jobs"
        out, err, script = (d / f"job{self.jobs}.{x}" for x in ("out", "err", "sh"))
        script.write_text(job_script(argv, nodes, self.ranks_per_node, out, err, cwd))
        self.test_only(script)
        p = subprocess.Popen(self.on_head(["sbatch", "--wait", "--parsable", str(script)]), env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                             preexec_fn=functools.partial(proc.in_child, True, None))
        return p, out, err

    def test_only(self, script: Path):
        """`sbatch --test-only`: a job Slurm cannot place is refused before it is submitted, in one
        line with Slurm's own reason (e.g. more nodes than the partition has)."""
        r = self.client(["sbatch", "--test-only", str(script)], timeout=30)
        if r.returncode != 0:
            why = " ".join((r.stderr or r.stdout).split()).replace("sbatch: error: ", "")
            raise BenchError(f"simcluster: Slurm refused the job before submission: {why}")

    def cancel_all(self, wait_s: float = KILL_WAIT_S + 2):
        """scancel every job (its tasks get SIGTERM, then SIGKILL after KillWait), and wait a while
        for them to leave the queue."""
        self.client(["scancel", "--full", "--partition", PARTITION], timeout=10)
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            r = self.client(["squeue", "-h", "-o", "%i"], timeout=10)
            if r.returncode != 0 or not r.stdout.strip():
                return
            time.sleep(0.2)

    def stop(self):
        """Cancel the jobs, then SIGTERM every daemon this module started (by its pid's process
        group), SIGKILL what is left after KILL_WAIT_S (the namespaces' last processes are then
        killed by simcluster)."""
        if any(p.poll() is None for p in self.procs.values()):
            try:
                self.cancel_all()
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs.values():
            if p.poll() is None:
                proc.signal_group(p.pid, signal.SIGTERM)
        end = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < end and any(p.poll() is None for p in self.procs.values()):
            time.sleep(0.05)
        for p in self.procs.values():
            if p.poll() is None:
                proc.signal_group(p.pid, signal.SIGKILL)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def summary(self) -> str:
        nodes = ",".join(n.name for n in self.net.nodes)
        return (f"Slurm {self.version or '?'} up in {self.started_s:.1f} s: slurmctld on {HEAD} ({self.head_address}), "
                f"slurmd on {nodes}, partition {PARTITION} ({len(self.net.nodes)} node(s) x {self.ranks_per_node} "
                f"CPU(s)), one munged per host, {cgroup_plugin()}")

    def exit_code(self, job_id: str | None, sbatch_code: int) -> int:
        """The job's exit code as `sbatch --wait` gives it, except that a job that did not complete
        is never 0: sbatch exits 0 for a job ended by a node failure (NODE_FAIL, ExitCode 0:0)."""
        state = self.job(job_id).get("JobState", "")
        return 1 if sbatch_code == 0 and state and state != "COMPLETED" else sbatch_code

    def job_line(self, job_id: str | None, code: int) -> str:
        j = self.job(job_id)
        if not j:
            return f"the batch job was not submitted (sbatch exited {code}); Slurm's logs: {self.root / 'log'}"
        down = self.unhealthy()
        return (f"job {j.get('JobId', job_id)} {j.get('JobState', '?')} on {j.get('NodeList', '?')} "
                f"(partition {j.get('Partition', '?')}, {j.get('NumTasks', '?')} task(s), exit code "
                f"{j.get('ExitCode', '?')}{', reason ' + j['Reason'] if j.get('Reason') not in (None, 'None') else ''})"
                + "".join(f"; node {n} is {state} ({why})" for n, state, why in down))

    def unhealthy(self) -> list[tuple[str, str, str]]:
        """(node, state, Slurm's reason) of every node that is not up: down, drained, failing."""
        try:
            r = self.client(["sinfo", "-h", "-N", "-o", "%N|%t|%E"], timeout=10)
        except subprocess.TimeoutExpired:
            return []
        out = []
        for line in r.stdout.splitlines():
            node, state, why = (line.split("|") + ["", ""])[:3]
            if state.rstrip("*~#!%$@^-") not in ("idle", "alloc", "mix", "comp"):
                out.append((node, state, why))
        return out

    def job(self, job_id: str | None) -> dict:
        if not job_id:
            return {}
        try:
            r = self.client(["scontrol", "show", "job", "-o", job_id], timeout=10)
        except subprocess.TimeoutExpired:
            return {"JobId": job_id}
        return job_facts(r.stdout) or {"JobId": job_id}

    def facts(self, job_id: str | None = None) -> dict:
        return {"name": "slurm", "version": self.version, "job": self.job(job_id), "partition": PARTITION, "cluster": CLUSTER,
                "controller": {"host": HEAD, "address": self.head_address, "namespace": self.net.switch},
                "nodes": [{"name": n.name, "address": n.address, "cpus": self.ranks_per_node} for n in self.net.nodes],
                "munge": "one munged per host (its own socket directory, one key)",
                "cgroup_plugin": cgroup_plugin(), "slurm_conf": self.conf.read_text() if self.conf.exists() else "",
                "started_s": self.started_s}


# ---- one batch job ---------------------------------------------------------------------------------

def job_script(argv: list[str], nodes: int, ranks_per_node: int, out: Path, err: Path, cwd: str,
               name: str = "distbench") -> str:
    """The batch script simcluster submits: one task per rank, srun's own variables (no wrapper:
    distbench reads SLURM_PROCID / SLURM_LOCALID / SLURM_NTASKS / SLURM_JOB_NODELIST itself)."""
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={ranks_per_node}",
        f"#SBATCH --partition={PARTITION}",
        f"#SBATCH --output={out}",
        f"#SBATCH --error={err}",
        f"#SBATCH --chdir={cwd}",
        "#SBATCH --no-requeue",
        "set -u",
        "# --kill-on-bad-exit: one failed rank ends the step (the others would wait for it in a collective)",
        "exec srun --kill-on-bad-exit=1 " + " ".join(shlex.quote(a) for a in argv),
        ""])


def follow(path: Path, finished, poll_s: float = 0.1):
    """The lines of a file another process writes, as they come, until `finished()` and the end."""
    pos, buf = 0, ""
    while True:
        done = finished()
        try:
            with open(path, errors="replace") as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
        except FileNotFoundError:
            chunk = ""
        buf += chunk
        *lines, buf = buf.split("\n")
        for line in lines:
            yield line + "\n"
        if done and not chunk:
            if buf:
                yield buf
            return
        if not chunk:
            time.sleep(poll_s)


def job_facts(text: str) -> dict:
    """`scontrol show job -o ID`'s fields that meta.json records."""
    fields = dict(kv.split("=", 1) for kv in text.split() if "=" in kv)
    keep = ("JobId", "JobName", "JobState", "Reason", "ExitCode", "Partition", "NodeList", "NumNodes", "NumTasks",
            "ExcNodeList", "BatchHost", "RunTime", "SubmitTime", "StartTime", "EndTime")
    return {k: fields[k] for k in keep if k in fields}

