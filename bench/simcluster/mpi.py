"""Open MPI's `mpirun` on the simulated cluster: a launch agent that enters a node's namespace
instead of ssh, and the mpirun command line that uses it (Open MPI 4.x, whose daemon is `orted`).
`distbench simcluster --launcher mpirun -- COMMAND` runs COMMAND this way (bench.simcluster.run:
the agent and the hostfile in the invocation's temporary directory, mpirun in node0).

How it works
------------
mpirun runs inside node0's namespace (`ip netns exec <node0 ns> unshare --uts sh -c 'mount --bind
HOSTS /etc/hosts; hostname node0; exec mpirun ...'`, the same wrapper as a torchrun node:
`in_node`). It is the only process on node0's link that can reach the other nodes (the host's own
namespace has no route to 10.213.0.0/24). From the hostfile (`node0 slots=R`, `node1 slots=R`, ...,
`hostfile`) it sees that node0 is itself (its hostname) and starts node0's ranks itself; for every
other node its rsh launcher runs `AGENT nodeI <orted command line>`, as it would run `ssh nodeI ...`.
The agent (`agent_script`) maps nodeI to its namespace and runs the command there, in a UTS
namespace of its own with hostname nodeI and the cluster's /etc/hosts bound over the host's, with
GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME set to that node's interface. orted connects back to mpirun
(at 10.213.0.1) over its node's link, and starts that node's ranks. Every rank gets
OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE, which distbench maps onto torch's
variables (bench.distributed.env.mpi_to_torch_env); the ranks do not call MPI_Init: gloo does the
communication, MPI only starts the processes.

What Open MPI does with the agent (orte/mca/plm/rsh/plm_rsh_module.c, v4.1.x: `setup_launch`,
`ssh_child`): the agent is exec'd with mpirun's own environment (`orte_launch_environ`) and stdin
on /dev/null; its arguments are the host, then the orted command line, with arguments wrapped in
double quotes (`mca_base_cmd_line_wrap_args`, e.g. `-mca orte_hnp_uri "123.0;tcp://10.213.0.1:4567"`)
for the remote shell that ssh would hand them to. Hence the agent `eval`s them as one shell line,
as sshd's shell would; passing them on as separate words would keep the literal quotes and cut the
URI at its `;`. The line may hold several commands: where mpirun is called by an absolute path
(which mpirun(1) says equals --prefix) or with --prefix, it is `PATH=/usr/bin:$PATH ; export PATH ;
LD_LIBRARY_PATH=... ; /usr/bin/orted ...`, so the agent runs it whole (`eval "$*"`), never
`exec`-ing its first word (measured: `exec: PATH=/usr/bin:...: not found`, then "ORTE was unable to
reliably start one or more daemons"). Because the agent inherits mpirun's environment, orted and
the ranks it starts get that environment as well, with the node's own interface set by the agent
(and DISTBENCH_SIMCLUSTER, by which bench.simcluster.cpu.rank_of finds a rank for its CPU quota).
With CPU quotas, the agent first moves itself into the node's cgroup (or out of node0's, into
simcluster's own, where node0 has a quota and the node has none): mpirun and all it starts are in
node0's.

Every option of `mpirun_argv`, and why (Open MPI 4.1 mpirun(1), `man mpirun.openmpi`, also
https://www.open-mpi.org/doc/v4.1/man1/mpirun.1.php; the MCA parameters as `ompi_info --param
plm rsh --level 9` lists them):

- `--allow-run-as-root`: simcluster runs as root, and mpirun aborts as root without it (mpirun(1),
  "Running as root"; the same as OMPI_ALLOW_RUN_AS_ROOT=1 with OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1).
- `-np N*R --hostfile FILE --map-by slot`: R slots per node; by slot fills node0's slots first, so
  ranks 0..R-1 run on node0, R..2R-1 on node1, ...: the block mapping that mpi_to_torch_env's
  GROUP_RANK (rank // local size) assumes (mpirun(1), "Mapping, Ranking, and Binding: Oh My!").
- `--bind-to none`: by default mpirun binds each rank to a core (<= 2 ranks) or a socket (> 2)
  (mpirun(1), QUICK SUMMARY); each node's orted sees the whole host and binds on its own, so node0's
  first rank and node1's first rank both land on core 0 (measured here: Cpus_allowed_list 0 on
  both). Unbound, the ranks share the host's cores as torchrun's do.
- `--leave-session-attached`: orted stays attached to the agent instead of daemonizing (rsh adds
  `--daemonize` unless this or a debug flag is set, plm_rsh_module.c), so its own errors (a daemon
  that cannot start or connect) reach mpirun's stderr (mpirun(1), "--leave-session-attached").
- `--mca plm rsh`, `--mca ras ^slurm,gridengine,tm,lsf,alps`, `--mca plm_rsh_disable_qrsh 1`: the
  launcher is this agent and the nodes are the hostfile's, even where mpirun runs inside a Slurm
  (or Grid Engine, PBS, LSF) allocation; there it would otherwise take the allocation's nodes and
  refuse the hostfile ("A hostfile was provided that contains at least one node not present in the
  allocation", measured with SLURM_JOB_ID set).
- `--mca plm_rsh_agent AGENT`: the launch agent in place of "ssh : rsh" (plm rsh parameter
  plm_rsh_agent; OMPI_MCA_plm_rsh_agent in the environment is the same, mpirun(1) "Setting MCA
  Parameters").
- `--mca plm_rsh_no_tree_spawn 1`: mpirun starts every orted itself (no orted starts others), so
  every agent is a child of mpirun in node0's namespace (plm rsh parameter; Open MPI's ssh docs:
  "Open MPI uses a tree-based pattern to launch processes on remote nodes").
- `--mca oob_tcp_if_include SUBNET`, `--mca btl_tcp_if_include SUBNET`: the daemons' out-of-band
  channel (and MPI's TCP transport, for an MPI program) use the cluster's subnet. A subnet in CIDR
  notation and not an interface name, because every node's interface has another name
  (`nI-<id>`); Open MPI accepts both (https://www.open-mpi.org/faq/?category=tcp, "How do I tell
  Open MPI which IP interfaces / networks to use?").
- `-x MASTER_ADDR=... -x MASTER_PORT=...`: exported to every rank (mpirun(1), `-x <env>`); across
  nodes mpi_to_torch_env needs MASTER_ADDR (rank 0's host: node0's address) and MASTER_PORT (the
  TCPStore's port on it). GLOO_SOCKET_IFNAME is *not* exported with -x: it differs per node; the
  agent sets it for nodes 1.., mpirun's own environment for node0.

Exit status: mpirun's, i.e. the exit status of the lowest rank that exited non-zero, 0 when all
exited 0 (mpirun(1), "Exit status"); by default the whole job is aborted as soon as one rank exits
non-zero (orte_abort_on_non_zero_status). All ranks' output arrives on mpirun's stdout / stderr.
"""

import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.errors import BenchError

DEBIAN_PACKAGE = "openmpi-bin"
SUBNET_CIDR = "10.213.0.0/24"  # bench.simcluster.net.SUBNET
MASTER_PORT = 29500  # bench.distributed.env.DEFAULT_MASTER_PORT: the TCPStore of rank 0
# resource managers whose allocation mpirun would otherwise take in place of the hostfile
RAS_EXCLUDED = "^slurm,gridengine,tm,lsf,alps"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VERSION_RE = re.compile(r"\(Open MPI\)\s+(\d+)\.(\d+)(?:\.(\d+))?")


def _check_name(what: str, name: str):
    if not _NAME_RE.match(str(name)):
        raise BenchError(f"simcluster mpi: bad {what} '{name}': letters, digits, '.', '_' and '-' only")


def agent_script(namespaces: Mapping[str, str], hosts_file: str,
                 interfaces: Mapping[str, str] | None = None, cgroup_procs: Mapping[str, str] | None = None) -> str:
    """The launch agent's text (POSIX sh): `AGENT HOST COMMAND...` runs the shell command line
    COMMAND in HOST's network namespace (`namespaces[HOST]`), in a UTS namespace of its own with
    hostname HOST and `hosts_file` bound over /etc/hosts (ignored where the bind fails, as for a
    torchrun node), with GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME set to `interfaces[HOST]`
    where given. Where `cgroup_procs[HOST]` is given (a cgroup's cgroup.procs file), the agent
    first writes its pid there, so that orted and the ranks it starts are born in HOST's cgroup
    and not in mpirun's (a CPU quota of node0 would otherwise reach every node). The agent runs in
    mpirun's mount namespace, where `ip netns exec` mounted a sysfs of node0's own over /sys, which
    hides /sys/fs/cgroup: give the path through /proc/PID/root of a process that sees the cgroups
    (simcluster: /proc/<its pid>/root/sys/fs/cgroup/...). A failed write is a warning on stderr.
    An unknown host exits 255 (ssh's code for a failed connection) naming the known ones."""
    if not namespaces:
        raise BenchError("simcluster mpi: the agent needs at least one node")
    interfaces = dict(interfaces or {})
    cgroup_procs = dict(cgroup_procs or {})
    for host, procs in cgroup_procs.items():
        if host not in namespaces:
            raise BenchError(f"simcluster mpi: cgroup given for '{host}', which is not a node "
                             f"({', '.join(namespaces)})")
        if not str(procs).startswith("/"):
            raise BenchError(f"simcluster mpi: cgroup.procs path '{procs}' for '{host}' is not absolute")
    for host, ns in namespaces.items():
        _check_name("host name", host)
        _check_name("namespace", ns)
    for host, ifname in interfaces.items():
        if host not in namespaces:
            raise BenchError(f"simcluster mpi: interface given for '{host}', which is not a node "
                             f"({', '.join(namespaces)})")
        _check_name("interface", ifname)
    q = shlex.quote
    cases = "".join(f"  {q(h)}) ns={q(ns)}; ifname={q(interfaces.get(h, ''))}; cgroup={q(cgroup_procs.get(h, ''))} ;;\n"
                    for h, ns in namespaces.items())
    inner = ('mount --bind "$1" /etc/hosts 2>/dev/null; '
             'hostname "$2" || exit 255; '
             'if [ -n "$3" ]; then GLOO_SOCKET_IFNAME=$3; NCCL_SOCKET_IFNAME=$3; '
             'export GLOO_SOCKET_IFNAME NCCL_SOCKET_IFNAME; fi; '
             'shift 3; eval "$*"')
    return (
        "#!/bin/sh\n"
        "# distbench simcluster: Open MPI's launch agent (plm_rsh_agent) for a simulated cluster.\n"
        "# Called as ssh would be: AGENT HOST COMMAND...; COMMAND is one shell command line (orted and\n"
        "# its quoted arguments), run in HOST's network namespace with HOST's hostname (bench/simcluster/mpi.py).\n"
        'if [ $# -lt 2 ]; then echo "distbench simcluster agent: usage: $0 HOST COMMAND..." >&2; exit 255; fi\n'
        'host=$1\n'
        'shift\n'
        'case "$host" in\n'
        f"{cases}"
        f'  *) echo "distbench simcluster agent: unknown host \'$host\'; the nodes are: '
        f'{" ".join(namespaces)}" >&2; exit 255 ;;\n'
        'esac\n'
        'if [ -n "$cgroup" ] && ! echo $$ 2>/dev/null > "$cgroup"; then\n'
        '  echo "distbench simcluster agent: warning: $host could not join the cgroup of $cgroup" >&2\n'
        'fi\n'
        f'exec ip netns exec "$ns" unshare --uts sh -c {q(inner)} sh {q(str(hosts_file))} "$host" "$ifname" "$@"\n'
    )


def own_cgroup_procs(root: str, version: int, self_cgroup: str) -> str:
    """The cgroup.procs file of the cgroup a process is in, from its /proc/PID/cgroup text, in the
    cpu hierarchy mounted at `root` (cgroup v2: the `0::PATH` line; v1: the line whose controllers
    include cpu). Where that directory is not under `root` (a container that sees its own cgroup
    as the mount's root, without a cgroup namespace), `root`'s own: where the agent sends a node
    without a quota of its own, out of node0's."""
    for line in self_cgroup.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (version == 2 and hier == "0" and controllers == "") or \
                (version == 1 and "cpu" in controllers.split(",")):
            d = Path(root) / path.strip().lstrip("/")
            if (d / "cgroup.procs").exists():
                return str(d / "cgroup.procs")
            break
    return str(Path(root) / "cgroup.procs")


def hostfile(nodes: Sequence[str], ranks_per_node: int) -> str:
    """Open MPI's hostfile: one line `NODE slots=R` per node, in rank order."""
    if not nodes:
        raise BenchError("simcluster mpi: the hostfile needs at least one node")
    if int(ranks_per_node) < 1:
        raise BenchError(f"simcluster mpi: ranks per node {ranks_per_node} must be >= 1")
    for n in nodes:
        _check_name("host name", n)
    if len(set(nodes)) != len(nodes):
        raise BenchError(f"simcluster mpi: a node is named twice in {', '.join(nodes)}")
    return "".join(f"{n} slots={int(ranks_per_node)}\n" for n in nodes)


def mpirun_argv(python: str, argv: Sequence[str], nodes: Sequence[str], ranks_per_node: int, agent_path: str,
                hostfile_path: str, subnet: str = SUBNET_CIDR, master_addr: str = "10.213.0.1",
                master_port: int = MASTER_PORT, mpirun: str = "mpirun") -> list[str]:
    """mpirun's command line: `python argv...` as len(nodes) x ranks_per_node ranks, nodes[0]
    first (block mapping), started through `agent_path` on every node but the one mpirun runs
    on; each option is explained in the module's docstring."""
    if not nodes:
        raise BenchError("simcluster mpi: mpirun needs at least one node")
    if int(ranks_per_node) < 1:
        raise BenchError(f"simcluster mpi: ranks per node {ranks_per_node} must be >= 1")
    if not argv:
        raise BenchError("simcluster mpi: no command for mpirun to run")
    return [
        mpirun, "--allow-run-as-root",
        "-np", str(len(nodes) * int(ranks_per_node)), "--hostfile", str(hostfile_path),
        "--map-by", "slot", "--bind-to", "none", "--leave-session-attached",
        "--mca", "plm", "rsh", "--mca", "ras", RAS_EXCLUDED, "--mca", "plm_rsh_disable_qrsh", "1",
        "--mca", "plm_rsh_agent", str(agent_path), "--mca", "plm_rsh_no_tree_spawn", "1",
        "--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet,
        "-x", f"MASTER_ADDR={master_addr}", "-x", f"MASTER_PORT={int(master_port)}",
        str(python), *argv,
    ]


def in_node(netns: str, hostname: str, hosts_file: str, argv: Sequence[str]) -> list[str]:
    """`argv` inside a node: its network namespace, a UTS namespace of its own with `hostname`,
    `hosts_file` bound over /etc/hosts (as bench.simcluster.run does for torchrun). mpirun runs
    this way in node0."""
    _check_name("namespace", netns)
    _check_name("host name", hostname)
    script = f"mount --bind {shlex.quote(str(hosts_file))} /etc/hosts 2>/dev/null; hostname {shlex.quote(hostname)} && exec \"$@\""
    return ["ip", "netns", "exec", netns, "unshare", "--uts", "sh", "-c", script, "sh", *argv]


def parse_version(text: str) -> tuple[int, ...] | None:
    """'mpirun (Open MPI) 4.1.4' -> (4, 1, 4); None for another MPI (MPICH's Hydra, Intel MPI)."""
    m = _VERSION_RE.search(text or "")
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def check_mpirun(path: str | None = None) -> str:
    """The path of Open MPI 4.x's mpirun (with orted beside it on PATH); one-line BenchError
    naming the Debian package when it is missing, another MPI's or another major version's."""
    found = shutil.which("mpirun", path=path)
    if found is None or shutil.which("orted", path=path) is None:
        missing = "mpirun" if found is None else "orted"
        raise BenchError(f"simcluster with mpirun needs Open MPI's {missing} on PATH (Debian: apt-get install -y "
                         f"{DEBIAN_PACKAGE}); not found")
    try:
        r = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30)
        text = r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"simcluster with mpirun: `{found} --version` failed: {e}") from None
    version = parse_version(text)
    if version is None:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no output")
        raise BenchError(f"simcluster with mpirun needs Open MPI's mpirun, and {found} is another MPI's ('{first}'); "
                         f"install Open MPI (Debian: apt-get install -y {DEBIAN_PACKAGE}) and put it first on PATH")
    if version[0] != 4:
        raise BenchError(f"simcluster with mpirun needs Open MPI 4.x (orted and its rsh launcher), and {found} is "
                         f"Open MPI {'.'.join(map(str, version))}; allowed: 4.x (Debian 12: {DEBIAN_PACKAGE} 4.1)")
    return found
