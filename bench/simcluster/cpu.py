"""A slower rank or node for real: a CPU quota in a cgroup of this invocation (`--cpu-quota-of`).

`rankR=PCT` caps torchrun's worker of global rank R (and whatever it starts) at PCT % of one CPU;
`nodeI=PCT` caps every process of node I (its torchrun agent and all it starts). Each target gets
one cgroup, `dbsc-<id>-<target>`, directly under the cpu controller's root:

    cgroup v2 (/sys/fs/cgroup/cgroup.controllers lists cpu):  cpu.max = "<quota> <period>"
    cgroup v1 (/sys/fs/cgroup/cpu):                            cpu.cfs_period_us, cpu.cfs_quota_us

with the period 100 ms and the quota PCT % of it. A node's processes join at their start (the node's
first process joins before it execs, so all it starts inherits the cgroup); a rank's worker is
found by `QuotaWatcher`, which polls the processes of the rank's node namespace for RANK=R in their
environment (torchrun's workers carry it, with this invocation's rendezvous id) and writes each pid
to cgroup.procs, which moves the process with all its threads. The cgroups are removed at teardown,
once their processes ended; a killed invocation's are removed by the next (`remove_stale`).
"""

import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchError, unknown

SYS_CGROUP = "/sys/fs/cgroup"
PERIOD_US = 100_000  # the CFS period: the quota is PCT % of it, per period
PREFIX = "dbsc-"  # as the namespaces' (bench.simcluster.net.PREFIX)
_PCT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%?\s*$")
POLL_S, SETTLED_POLL_S = 0.1, 1.0  # the watcher's polls: until every rank is placed, then


@dataclass(frozen=True, kw_only=True)
class Quota:
    target: str  # "rank3" or "node1"
    node: int  # the node it runs on
    rank: int | None  # the global rank, for a rank's quota
    percent: float  # of one CPU

    @property
    def quota_us(self) -> int:
        return round(self.percent * PERIOD_US / 100)


def parse_quotas(specs: list[str], nodes: int, ranks_per_node: int, ncpus: int | None = None) -> list[Quota]:
    """`rankR=PCT` / `nodeI=PCT` items (repeat, or comma lists); PCT of one CPU, 1 .. 100 x cores."""
    ncpus = ncpus or os.cpu_count() or 1
    world = nodes * ranks_per_node
    targets = [f"rank{r}" for r in range(world)] + [f"node{i}" for i in range(nodes)]
    out: dict[str, Quota] = {}
    for item in (x.strip() for spec in specs for x in spec.split(",") if x.strip()):
        name, sep, pct = (part.strip() for part in item.partition("="))
        if not sep:
            raise BenchError(f"bad --cpu-quota-of '{item}': expected rankR=PCT or nodeI=PCT, e.g. rank3=25%")
        if name not in targets:
            raise unknown("rank or node in --cpu-quota-of", name, targets if len(targets) <= 24 else
                          [f"rank0 .. rank{world - 1}", f"node0 .. node{nodes - 1}"])
        m = _PCT_RE.match(pct)
        if not m or not 1 <= float(m.group(1)) <= 100 * ncpus:
            raise BenchError(f"bad --cpu-quota-of '{item}': the percent of one CPU must be a number 1 .. "
                             f"{100 * ncpus} (this host has {ncpus} cores), e.g. rank3=25%")
        rank = int(name[4:]) if name.startswith("rank") else None
        node = rank // ranks_per_node if rank is not None else int(name[4:])
        out[name] = Quota(target=name, node=node, rank=rank, percent=float(m.group(1)))
    quotas = list(out.values())
    for q in quotas:
        if q.rank is not None and f"node{q.node}" in out:
            raise BenchError(f"--cpu-quota-of {q.target} and node{q.node}: {q.target} runs on node{q.node}, "
                             "which has a quota of its own; give one of the two")
    return quotas


@dataclass(frozen=True)
class Controller:
    root: Path  # where `dbsc-*` cgroups are made
    version: int  # 1 or 2


def find_controller(sys_root: str = SYS_CGROUP) -> Controller | None:
    """The cpu controller: v2 when the unified root lists cpu, else v1's `cpu` hierarchy; None without
    one this process may write to."""
    root = Path(sys_root)
    try:
        if "cpu" in (root / "cgroup.controllers").read_text().split():
            return Controller(root, 2) if os.access(root, os.W_OK) else None
    except OSError:
        pass
    for v1 in (root / "cpu", root / "cpu,cpuacct"):
        if (v1 / "cpu.cfs_quota_us").exists() and os.access(v1, os.W_OK):
            return Controller(v1, 1)
    return None


def check_controller(sys_root: str = SYS_CGROUP) -> Controller:
    ctrl = find_controller(sys_root)
    if ctrl is None:
        raise BenchError(f"--cpu-quota-of needs a writable cgroup cpu controller (cgroup v2 {sys_root} listing cpu "
                         f"in cgroup.controllers, or v1 {sys_root}/cpu with cpu.cfs_quota_us); none here (mount it "
                         "read-write, e.g. run the container with --cgroupns=host or privileged)")
    return ctrl


@dataclass
class Group:
    """One quota's cgroup, and what happened to it."""
    quota: Quota
    path: Path
    version: int
    pids: list = field(default_factory=list)  # the pids moved into it (a node's: its first process)
    applied_s: float | None = None  # seconds from the start to the first pid placed

    def limits(self) -> dict:
        """File -> value that sets the quota."""
        if self.version == 2:
            return {"cpu.max": f"{self.quota.quota_us} {PERIOD_US}"}
        return {"cpu.cfs_period_us": str(PERIOD_US), "cpu.cfs_quota_us": str(self.quota.quota_us)}

    def create(self):
        if self.version == 2:  # a v2 child has cpu.max only where its parent hands the controller down
            control = self.path.parent / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu")
        self.path.mkdir()
        for name, value in self.limits().items():
            (self.path / name).write_text(value)

    def join(self, pid: int):
        """Move `pid` (all its threads) into the cgroup."""
        with open(self.path / "cgroup.procs", "w") as f:
            f.write(str(pid))

    def members(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def stat(self) -> dict:
        """cpu.stat as numbers (nr_periods, nr_throttled, throttled_time ns (v1) / throttled_usec (v2))."""
        try:
            lines = (self.path / "cpu.stat").read_text().splitlines()
        except OSError:
            return {}
        return {k: int(v) for k, v in (ln.split()[:2] for ln in lines if len(ln.split()) >= 2) if v.isdigit()}

    def remove(self, wait_s: float = 5.0) -> str | None:
        """rmdir once its processes are gone (exited tasks leave it a moment later); a problem or None."""
        end = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                return None
            except FileNotFoundError:
                return None
            except OSError as e:
                if time.monotonic() > end:
                    return f"cgroup {self.path} could not be removed ({e.strerror}); remove it with: rmdir {self.path}"
                time.sleep(0.1)

    def facts(self) -> dict:
        q = self.quota
        return {"target": q.target, "rank": q.rank, "node": f"node{q.node}", "percent_of_one_cpu": q.percent,
                "cgroup": str(self.path), "cgroup_version": self.version,
                "limits": " ".join(f"{k}={v}" for k, v in self.limits().items()),
                "applied": bool(self.pids), "pids": list(self.pids), "applied_after_s": self.applied_s,
                "cpu_stat": self.stat()}

    def describe(self) -> str:
        return f"{self.quota.target}={self.quota.percent:g}% of one CPU"


def make_groups(ctrl: Controller, id_: str, quotas: list[Quota]) -> list[Group]:
    return [Group(quota=q, path=ctrl.root / f"{PREFIX}{id_}-{q.target}", version=ctrl.version) for q in quotas]


def rank_of(environ: bytes, run_id: str, cluster_id: str | None = None) -> int | None:
    """The global rank of a process, from /proc/PID/environ: RANK of a torchrun worker of
    rendezvous `run_id`; on simulated cluster `cluster_id` (DISTBENCH_SIMCLUSTER, which a Slurm
    job inherits from its submitter and Open MPI's ranks from mpirun), SLURM_PROCID of a task of a
    Slurm job step or OMPI_COMM_WORLD_RANK of an Open MPI rank (mpirun and orted carry no rank);
    else None."""
    env = dict(kv.split(b"=", 1) for kv in environ.split(b"\0") if b"=" in kv)
    ours = bool(cluster_id) and env.get(b"DISTBENCH_SIMCLUSTER") == cluster_id.encode()
    if env.get(b"TORCHELASTIC_RUN_ID") == run_id.encode() and b"LOCAL_RANK" in env:
        rank = env.get(b"RANK", b"")
    elif ours and b"SLURM_STEP_ID" in env:
        rank = env.get(b"SLURM_PROCID", b"")
    elif ours and b"OMPI_COMM_WORLD_RANK" in env:
        rank = env[b"OMPI_COMM_WORLD_RANK"]
    else:
        return None
    return int(rank) if rank.isdigit() else None


def netns_pids(netns: str, proc: str = "/proc") -> list[int]:
    """The processes in network namespace `netns` (what `ip netns pids` prints, without a fork)."""
    try:
        ino = os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return []
    out = []
    for d in os.listdir(proc):
        if d.isdigit():
            try:
                if os.stat(f"{proc}/{d}/ns/net").st_ino == ino:
                    out.append(int(d))
            except OSError:
                pass
    return out


def read_environ(pid: int, proc: str = "/proc") -> bytes:
    try:
        return Path(f"{proc}/{pid}/environ").read_bytes()
    except OSError:
        return b""


class QuotaWatcher(threading.Thread):
    """Polls each quota'd rank's node namespace and moves that rank's processes into its cgroup as
    soon as they appear (and any later one with the same RANK); a node's quota also sweeps up any
    process of its namespace that is not in its cgroup yet."""

    def __init__(self, groups: list[Group], netns_of, run_id: str, pids_of=netns_pids, environ_of=read_environ,
                 cluster_id: str | None = None):
        super().__init__(daemon=True, name="simcluster-quota")
        self.groups, self.netns_of, self.run_id, self.cluster_id = groups, netns_of, run_id, cluster_id
        self.pids_of, self.environ_of = pids_of, environ_of
        self.started = time.monotonic()
        self.done = threading.Event()
        self.errors: list[str] = []

    def poll(self):
        for g in self.groups:
            for pid in self.pids_of(self.netns_of(g.quota.node)):
                if pid in g.pids:
                    continue
                if g.quota.rank is not None and rank_of(self.environ_of(pid), self.run_id, self.cluster_id) != g.quota.rank:
                    continue
                try:
                    g.join(pid)
                except OSError as e:  # it ended meanwhile, or the cgroup refuses it
                    if os.path.exists(f"/proc/{pid}") and len(self.errors) < 5:
                        self.errors.append(f"pid {pid} could not join {g.path}: {e.strerror}")
                    continue
                g.pids.append(pid)
                if g.applied_s is None:
                    g.applied_s = round(time.monotonic() - self.started, 3)

    def run(self):
        while not self.done.is_set():
            self.poll()
            self.done.wait(SETTLED_POLL_S if all(g.pids for g in self.groups) else POLL_S)

    def stop(self):
        self.done.set()
        if self.is_alive():
            self.join(timeout=5)


def remove_stale(alive, sys_root: str = SYS_CGROUP) -> list[str]:
    """rmdir the `dbsc-*` cgroups of invocations that died without tearing down (`alive(name)` says
    whether the owner still runs), after killing what is left in them."""
    ctrl = find_controller(sys_root)
    removed = []
    for d in sorted(ctrl.root.glob(f"{PREFIX}*")) if ctrl else []:
        if not d.is_dir() or alive(d.name):
            continue
        g = Group(quota=Quota(target=d.name, node=0, rank=None, percent=100), path=d, version=ctrl.version)
        for pid in g.members():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        if g.remove(wait_s=2.0) is None:
            removed.append(str(d))
    return removed


def quota_lines(groups: list, watcher) -> list[str]:
    """What each quota did (from its cpu.stat), and a warning for one that never reached its
    process and for the watcher's failures: never silent."""
    out = []
    for g in groups:
        st = g.stat()
        if g.pids:
            out.append(f"{g.describe()}: pid {', '.join(map(str, g.pids))} in {g.path.name} after "
                       f"{g.applied_s:g} s; throttled in {st.get('nr_throttled', '?')} of "
                       f"{st.get('nr_periods', '?')} periods")
        else:
            out.append(f"warning: --cpu-quota-of {g.describe()} was never applied: no process of {g.quota.target} "
                       f"appeared in node{g.quota.node}'s namespace (or none could join {g.path})")
    return out + [f"warning: {e}" for e in (watcher.errors if watcher else [])]
