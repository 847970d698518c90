"""Run one command on the simulated cluster: torchrun in every node's namespace (c10d rendezvous at
node 0), each node's output passed through (lines of node i > 0 prefixed `nodeI| `), then the
stored run marked as a simulated-cluster run in its meta.json (`simcluster` block).

Every node's process is `ip netns exec <ns> unshare --uts sh -c 'hostname nodeI; exec torchrun ...'`:
its own network stack (bench.simcluster.net) and its own hostname, the host's filesystem (so rank 0
writes the run under the same results root as a local run), the host's cores and memory.

Whatever ends the command (its end, a failure, Ctrl-C, SIGTERM), `SimCluster.close` stops every
process in the namespaces (SIGTERM to each node's process group, so the torchrun agents stop their
workers; then SIGKILL to anything left, found by `ip netns pids`, since torchrun starts workers in
sessions of their own), removes the CPU-quota cgroups (bench.simcluster.cpu) and deletes the namespaces.
"""

import functools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.errors import BenchError
from bench.results.metadata import utc_now
from bench.results.rundir import RESULTS_LINE, RunDir
from bench.simcluster import cpu, faults, mpi, proc, slurm
from bench.simcluster import kept
from bench.simcluster.command import inner_argv
from bench.simcluster.net import KEPT, RENDEZVOUS_PORT, Network, format_rate, leftover_namespaces, remove_stale

KEPT_LINE = re.compile(r"finished cases are kept in (\S+?);")  # a failed or interrupted run
WORKER_EXIT = re.compile(r"rank \d+ \(local \d+\) exited (-?\d+)$")  # bench.simcluster.agent on a failed worker
STOP_GRACE_S = 10.0  # after SIGTERM, how long the agents get to stop their workers
PEER_GRACE_S = 20.0  # after one node failed, how long the others get to fail on their own
NOTE = ("simulated cluster: every node is a network namespace on this one host, with its own hostname and "
        "network stack; links are rate-limited with tc tbf, with no added delay (netem is not available: "
        "latency is a veth's, microseconds); all nodes share this host's CPU cores, memory and filesystem")


class Stopped(Exception):
    """SIGTERM / SIGHUP reached simcluster: tear down, exit 143 / 129."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


LAUNCHERS = ("torchrun", "mpirun")


class SimCluster:
    """The network and one torchrun per node (or one mpirun in node0, which reaches the other nodes
    through bench.simcluster.mpi's launch agent). `with SimCluster(...) as c: c.start(argv); c.wait()`."""

    def __init__(self, rates: list[int], ranks_per_node: int, python: str = sys.executable, out=None, err=None,
                 pairs: dict | None = None, quotas: list | None = None, controller: cpu.Controller | None = None,
                 scheduler: str | None = None, keep: bool = False, launcher: str = "torchrun",
                 timed_faults: list | None = None):
        if launcher not in LAUNCHERS:
            raise BenchError(f"simcluster: unknown launcher '{launcher}'; allowed: {', '.join(LAUNCHERS)}")
        if launcher == "mpirun" and scheduler:
            raise BenchError(f"simcluster --launcher mpirun: not with --scheduler {scheduler} (the job's srun "
                             "starts the ranks there); leave --scheduler out, or use --launcher torchrun")
        self.net = Network(rates, pairs=pairs)
        self.launcher = launcher  # without a scheduler: torchrun in every node, or mpirun in node0
        self.scheduler = scheduler  # None: torchrun in every node; "slurm": a real Slurm runs the command as a job
        self.keep = keep  # leave the cluster up at the end (with its Slurm)
        self.slurm: slurm.Slurm | None = None
        self.job_id: str | None = None
        self.up = False  # built (and Slurm's nodes idle): what --keep-up leaves
        self.groups = cpu.make_groups(controller, self.net.id, quotas) if quotas else []
        self.made_groups: list[cpu.Group] = []  # cgroups created so far (close removes exactly these)
        self.watcher: cpu.QuotaWatcher | None = None
        self.ranks_per_node = ranks_per_node
        self.python = python
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.procs: list[subprocess.Popen] = []
        self.threads: list[threading.Thread] = []
        self.run_dir: str | None = None
        self.torchrun: list[list[str]] = []
        self.mpirun: list[str] = []  # mpirun's command line (--launcher mpirun)
        self._lock = threading.Lock()
        self.stopping = False  # set when simcluster stops the nodes itself
        self.worker_exits: list[int] = []  # exit codes of failed workers, as the agents report them
        self.tmp: str | None = None
        self.injector = faults.Injector(list(timed_faults or []), self.net.set_link, self._kill_node,
                                        lambda line: self._say(f"distbench: simcluster: {line}\n"))

    def _say(self, line: str):
        with self._lock:
            self.err.write(line)
            self.err.flush()

    def _kill_node(self, index: int) -> int:
        return faults.kill_all(self.net.pids([self.net.nodes[index].netns]))

    def __enter__(self):
        try:
            self.tmp = tempfile.mkdtemp(prefix=f"dbsc-{self.net.id}-")
            self.hosts_file = Path(self.tmp) / "hosts"
            t0 = time.monotonic()
            if self.scheduler == "slurm":
                self.slurm = slurm.Slurm(self.net, self.ranks_per_node, Path(self.tmp), self.hosts_file,
                                         self.env(None), keep=self.keep)
            # c10d's store listens on IPv6 and sees its peers as v4-mapped addresses: name those too
            self.hosts_file.write_text("127.0.0.1 localhost\n::1 localhost\n" + "".join(
                f"{n.address} {n.name}\n::ffff:{n.address} {n.name}\n" for n in self.net.nodes)
                + (self.slurm.hosts_lines() if self.slurm else ""))
            self.net.build()
            for g in self.groups:
                self.made_groups.append(g)  # before: a signal inside create() still removes it (a missing one is fine)
                try:
                    g.create()
                except OSError as e:
                    raise BenchError(f"simcluster: cannot make cgroup {g.path} for --cpu-quota-of {g.describe()}: "
                                     f"{e.strerror}") from None
            if self.slurm:
                self.slurm.start(t0, cgroups={g.quota.node: g for g in self.groups if g.quota.rank is None})
            self.up = True
        except BaseException:  # a failed step or a signal halfway: delete what was made
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def node_argv(self, node, argv: list[str]) -> list[str]:
        n = self.net.nodes
        master = n[0]
        # no --node-rank: c10d ignores it and orders the nodes by --local-addr (node i is group rank i)
        # torchrun's agent (torch.distributed.run), ending in one line per failed worker, not a traceback
        torchrun = [self.python, "-m", "bench.simcluster.agent", "--nnodes", str(len(n)),
                    "--nproc-per-node", str(self.ranks_per_node), "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"{master.address}:{RENDEZVOUS_PORT}", "--rdzv-id", f"simcluster-{self.net.id}",
                    # node 0 hosts the rendezvous store: said outright, not guessed from host names
                    "--rdzv-conf", f"is_host={int(node.index == 0)}",
                    # c10d names each node by this address (MASTER_ADDR of the workers is node 0's)
                    "--local-addr", node.address, "--max-restarts", "0", *argv]
        self.torchrun.append(torchrun)
        # /etc/hosts names every node: bound over the host's in the mount namespace `ip netns exec` made
        script = (f"mount --bind {shlex.quote(str(self.hosts_file))} /etc/hosts 2>/dev/null; "
                  f"hostname {node.name} && exec \"$@\"")
        return ["ip", "netns", "exec", node.netns, "unshare", "--uts", "sh", "-c", script, "sh", *torchrun]

    def env(self, node) -> dict:
        """The host's environment, gloo (and NCCL) bound to the node's interface, and the cluster's
        id in DISTBENCH_SIMCLUSTER (for a script that wants to know). Under Slurm (node None) no
        interface is named: a job's environment is the submitter's on every node, and gloo finds
        each node's own address from its hostname (/etc/hosts)."""
        bind = {"GLOO_SOCKET_IFNAME": node.ifname, "NCCL_SOCKET_IFNAME": node.ifname} if node else {}
        return {**os.environ, **bind, "DISTBENCH_SIMCLUSTER": self.net.id, "PYTHONUNBUFFERED": "1"}

    def start(self, argv: list[str]):
        if self.slurm:
            self.submit(argv)
            return self.injector.start()
        mpirun = self.launcher == "mpirun"
        # under mpirun, node0's processes all descend from mpirun, which joins node0's cgroup before it
        # execs (as a torchrun node's agent does); the other nodes' orted join theirs through the agent
        watched = [g for g in self.groups if not (mpirun and g.quota.rank is None and g.quota.node == 0)]
        if watched:  # an Open MPI rank is known by OMPI_COMM_WORLD_RANK with this cluster's id (cpu.rank_of)
            self.watcher = cpu.QuotaWatcher(watched, lambda i: self.net.nodes[i].netns, f"simcluster-{self.net.id}",
                                            cluster_id=self.net.id if mpirun else None)
        if mpirun:
            self._launch(self.net.nodes[0], self.mpirun_node_argv(argv))
        else:
            for node in self.net.nodes:
                self._launch(node, self.node_argv(node, argv))
        if self.watcher:
            self.watcher.start()
        self.injector.start()

    def _launch(self, node, argv: list[str]):
        """One node's process (torchrun, or mpirun in node0), in the node's cgroup where it has a
        quota, its output pumped (node i > 0 prefixed `nodeI| `)."""
        group = next((g for g in self.groups if g.quota.rank is None and g.quota.node == node.index), None)
        procs = str(group.path / "cgroup.procs") if group else None
        p = subprocess.Popen(argv, env=self.env(node), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
                             preexec_fn=functools.partial(proc.in_child, True, procs))
        self.procs.append(p)
        if group and p.pid in group.members():  # joined before exec: all it starts inherits the cgroup
            group.pids.append(p.pid)
            group.applied_s = 0.0
        prefix = "" if node.index == 0 else f"{node.name}| "
        for stream, sink in ((p.stdout, self.out), (p.stderr, self.err)):
            t = threading.Thread(target=self._pump, args=(stream, sink, prefix), daemon=True)
            t.start()
            self.threads.append(t)

    def mpirun_node_argv(self, argv: list[str]) -> list[str]:
        """mpirun in node0 (bench.simcluster.mpi), with its launch agent and hostfile written to this
        invocation's temporary directory: `python argv...` as nodes x ranks per node ranks, node0's
        started by mpirun, every other node's by the orted the agent starts in that node."""
        nodes, tmp = self.net.nodes, Path(self.tmp)
        names = [n.name for n in nodes]
        agent, hosts = tmp / "agent", tmp / "hostfile"
        agent.write_text(mpi.agent_script({n.name: n.netns for n in nodes}, str(self.hosts_file),
                                          {n.name: n.ifname for n in nodes}, self.agent_cgroups()))
        agent.chmod(0o755)
        hosts.write_text(mpi.hostfile(names, self.ranks_per_node))
        self.mpirun = mpi.mpirun_argv(self.python, argv, names, self.ranks_per_node, str(agent), str(hosts),
                                      master_addr=nodes[0].address)
        return mpi.in_node(nodes[0].netns, nodes[0].name, str(self.hosts_file), self.mpirun)

    def agent_cgroups(self) -> dict[str, str]:
        """Node name -> the cgroup.procs the agent joins in that node: the node's quota cgroup, or,
        where node0 has a quota (mpirun and all it starts are in node0's cgroup), the cgroup
        simcluster itself runs in, so that node0's quota stays node0's. Each path goes through
        /proc/<simcluster's pid>/root: the agent runs in node0's mount namespace, whose /sys is the
        sysfs `ip netns exec` mounted, without /sys/fs/cgroup (mpi.agent_script)."""
        node_groups = {g.quota.node: g for g in self.groups if g.quota.rank is None}
        home = None
        if 0 in node_groups:
            g0 = node_groups[0]
            home = mpi.own_cgroup_procs(str(g0.path.parent), g0.version, Path("/proc/self/cgroup").read_text())
        out = {}
        for n in self.net.nodes[1:]:
            g = node_groups.get(n.index)
            if g or home:
                out[n.name] = f"/proc/{os.getpid()}/root" + (str(g.path / "cgroup.procs") if g else home)
        return out

    def submit(self, argv: list[str]):
        """The command as one batch job (`sbatch --wait`): its output files followed as they grow."""
        if self.groups:
            self.watcher = cpu.QuotaWatcher(self.groups, lambda i: self.net.nodes[i].netns, f"simcluster-{self.net.id}",
                                            cluster_id=self.net.id)
            self.watcher.start()
        p, out, err = self.slurm.submit([self.python, *argv], len(self.net.nodes), os.getcwd())
        self.procs.append(p)
        t = threading.Thread(target=self._job_id_of, args=(p.stdout,), daemon=True)
        t.start()
        self.threads.append(t)
        for path, sink in ((out, self.out), (err, self.err)):
            t = threading.Thread(target=self._pump, args=(slurm.follow(path, lambda: p.poll() is not None), sink, ""),
                                 daemon=True)
            t.start()
            self.threads.append(t)

    def _job_id_of(self, stream):
        for line in stream:  # sbatch --parsable: "ID" (or "ID;cluster"); anything else is passed on
            if self.job_id is None and line.strip().split(";")[0].isdigit():
                self.job_id = line.strip().split(";")[0]
                continue
            with self._lock:
                self.err.write(line)

    def _pump(self, stream, sink, prefix: str):
        for line in stream:
            if line.startswith(RESULTS_LINE):  # bench.harness.run.close_run prints it on rank 0
                self.run_dir = line[len(RESULTS_LINE):].strip()
            elif m := KEPT_LINE.search(line):
                self.run_dir = m.group(1).strip()
            w = WORKER_EXIT.search(line)
            if w:
                self.worker_exits.append(int(w.group(1)))
            if self.stopping and not line.startswith("distbench"):  # the agents' tracebacks of our SIGTERM
                continue
            with self._lock:
                sink.write(prefix + line)
                sink.flush()

    def wait(self) -> int:
        """Every node's exit; after one node fails, the others get PEER_GRACE_S to end on their own.
        The exit code: 2 when every failed rank exited 2 (a one-line refusal of its input), else
        node 0's when it failed, else the first failing node's, else 0."""
        failed_at = None
        while any(p.poll() is None for p in self.procs):
            codes = [p.poll() for p in self.procs]
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > PEER_GRACE_S:
                self.err.write("distbench: simcluster: a node failed; stopping the others\n")
                self.stop_processes()
                break
            time.sleep(0.2)
        for t in self.threads:
            t.join(timeout=5)
        codes = [p.wait() for p in self.procs]
        code = codes[0] if codes[0] else next((c for c in codes if c), 0)
        if code and self.worker_exits and set(self.worker_exits) == {2}:
            return 2  # every failed rank refused its input (exit 2); torchrun itself exits 1
        return code

    def stop_processes(self):
        live = [p for p in self.procs if p.poll() is None]
        self.stopping = self.stopping or bool(live)
        for p in live:
            proc.signal_group(p.pid, signal.SIGTERM)
        end = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < end and (any(p.poll() is None for p in live) or self.net.pids()):
            time.sleep(0.1)
        for p in live:
            proc.signal_group(p.pid, signal.SIGKILL)
        for _ in range(50):  # workers run in sessions of their own: whatever is still in a namespace
            pids = self.net.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def close(self):
        """Stop every process, delete every namespace (their links and qdiscs go with them). A kept
        cluster (--keep-up, once up) is left as it is, marked so that no later invocation removes it."""
        if self.keep and self.up:
            Path(self.tmp, KEPT).write_text(json.dumps({"id": self.net.id, "namespaces": self.net.made,
                                                        "groups": [str(g.path) for g in self.made_groups]}) + "\n")
            return
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)} \
            if threading.current_thread() is threading.main_thread() else {}
        try:
            self.injector.stop()
            if self.watcher:
                self.watcher.stop()
            if self.slurm:  # the job first (its ranks get SIGTERM and keep what finished), then the daemons
                self.slurm.stop()
            self.stop_processes()
            problems = [msg for g in reversed(self.made_groups) if (msg := g.remove())]
            self.made_groups = []
            problems += self.net.teardown()
            if self.tmp:
                shutil.rmtree(self.tmp, ignore_errors=True)
            left = leftover_namespaces(self.net.id)
            for p in problems + [f"namespace {ns} is left; remove it with: ip netns del {ns}" for ns in left]:
                self.err.write(f"distbench: simcluster: warning: {p}\n")
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def facts(self, command: list[str]) -> dict:
        """meta.json's `simcluster` block."""
        def _line(argv: list[str]) -> str:
            return " ".join(shlex.quote(a) for a in argv)

        launch = self.mpirun if self.launcher == "mpirun" else self.torchrun[0] if self.torchrun else []
        nodes = [{"name": n.name, "hostname": n.name, "namespace": n.netns, "interface": n.ifname,
                  "address": n.address, "ranks": self.ranks_per_node, "link_rate_bits_s": n.rate_bits_s,
                  "link_rate": format_rate(n.rate_bits_s)} for n in self.net.nodes]
        return {"simulated": True, "note": NOTE, "host": socket.gethostname(), "host_cores": os.cpu_count(),
                "nodes": nodes, "node_count": len(nodes), "ranks_per_node": self.ranks_per_node,
                "world": len(nodes) * self.ranks_per_node, "added_delay_s": 0.0,
                "delay": "none: netem is not available, only the rate is shaped",
                "command_line": " ".join(shlex.quote(a) for a in command),
                # how the ranks were started: node0's torchrun line, or mpirun's (under Slurm None: see `scheduler`)
                "launch": None if self.slurm else {"launcher": self.launcher, "command_line": _line(launch)},
                **({} if self.launcher == "mpirun" else {"torchrun": _line(self.torchrun[0] if self.torchrun else [])}),
                "recorded_utc": utc_now(), **self.net.facts(), "cpu_quotas": [g.facts() for g in self.groups],
                "scheduler": self.slurm.facts(self.job_id) if self.slurm else None,
                **({"faults": self.injector.facts()} if self.injector.faults else {})}

    def quota_lines(self) -> list[str]:
        return cpu.quota_lines(self.groups, self.watcher)


def mark_run(run_dir: str, facts: dict) -> bool:
    """Add the `simcluster` block to the stored run's meta.json; False when there is no run there."""
    rd = RunDir.at(run_dir)
    if not rd.exists():
        return False
    rd.update_meta(lambda m: {**m, "simcluster": facts})
    return True


def simulate(rates: list[int], ranks_per_node: int, command: list[str], out=None, err=None, pairs: dict | None = None,
             quotas: list | None = None, controller: cpu.Controller | None = None, scheduler: str | None = None,
             keep: bool = False, launcher: str = "torchrun", timed_faults: list | None = None) -> int:
    """The whole command: build, run, record, tear down (on any exit; a kept cluster stays up once
    built). Exit code: the nodes' (under Slurm: the job's, as `sbatch --wait` gives it; under
    mpirun: mpirun's, the lowest failed rank's)."""
    argv = inner_argv(command) if command or not keep else []
    err = err or sys.stderr

    def stop(signum, frame):
        raise Stopped(signum)

    handlers = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    stale = remove_stale() + cpu.remove_stale(kept.owner_alive)
    if stale:
        err.write(f"distbench: simcluster: removed {len(stale)} namespace(s) left by an invocation that was killed: "
                  f"{', '.join(stale)}\n")
    cluster = SimCluster(rates, ranks_per_node, out=out, err=err, pairs=pairs, quotas=quotas, controller=controller,
                         scheduler=scheduler, keep=keep, launcher=launcher, timed_faults=timed_faults)
    try:
        with cluster:
            err.write(f"distbench: simcluster {cluster.net.id}: {len(rates)} node(s) x {ranks_per_node} rank(s), "
                      + ", ".join([f"{n.name}={format_rate(n.rate_bits_s)}" for n in cluster.net.nodes]
                                  + [f"node{a}-node{b}={format_rate(r)}" for (a, b), r in sorted(cluster.net.pairs.items())])
                      + (" (tbf, htb for the pairs" if cluster.net.pairs else " (tbf") + ", no added delay)"
                      + "".join(f"; cpu quota {g.describe()} (cgroup v{g.version})" for g in cluster.groups)
                      + "".join(f"; {f.describe()}" for f in cluster.injector.faults) + "\n")
            if cluster.slurm:
                err.write(f"distbench: simcluster: {cluster.slurm.summary()}\n")
            err.flush()
            if not argv:  # --keep-up with no command: the cluster is all there is to do
                for line in kept.lines(cluster):
                    err.write(line + "\n")
                return 0
            cluster.start(argv)
            code = cluster.wait()
            if cluster.slurm:
                code = cluster.slurm.exit_code(cluster.job_id, code)
                err.write(f"distbench: simcluster: {cluster.slurm.job_line(cluster.job_id, code)}\n")
            for line in cluster.quota_lines():
                err.write(f"distbench: simcluster: {line}\n")
            if cluster.run_dir:
                path = cluster.run_dir if os.path.isabs(cluster.run_dir) else os.path.join(os.getcwd(), cluster.run_dir)
                if mark_run(path, cluster.facts(command)):
                    err.write(f"distbench: simcluster: {cluster.run_dir}/meta.json records the simulated cluster\n")
            if keep:
                for line in kept.lines(cluster):
                    err.write(line + "\n")
            return code
    except KeyboardInterrupt:
        err.write("distbench: simcluster: interrupted; the simulated cluster is torn down\n")
        return 130
    except Stopped as e:
        err.write(f"distbench: simcluster: {e}; the simulated cluster is torn down\n")
        return 128 + e.signum
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
