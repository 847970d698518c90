"""The simulated cluster's network: one Linux network namespace per node, a bridge in a namespace
of its own (the switch), one veth link from each node to it, each link shaped with tc tbf.

    node0 [n0-<id>] ==veth== [s0-<id>] ┐
    node1 [n1-<id>] ==veth== [s1-<id>] ┴ br-<id>   (namespace dbsc-<id>-sw)

Safety: every interface is created directly inside a namespace made here (`ip link add ... netns`),
so nothing ever appears in the host's namespace; addresses (10.213.0.0/24) exist only on the node
ends of those links; there is no default route, no NAT and no link to the host. All names carry
one id per invocation (`dbsc-<pid hex>x<random hex>-...`), so two runs never collide, and `teardown`
deletes the namespaces (their links and qdiscs go with them) whatever happened before.

Shaping: tbf on both ends of a node's link (node -> switch on the node's interface, switch ->
node on the switch port), so a node's rate bounds what it sends and what it receives. A slower
pair of nodes (`nodeA-nodeB=RATE`) is shaped at both nodes' egress: their interfaces get htb
instead of tbf (a parent class at the node's rate; one child per slowed peer, chosen by a u32
filter on the peer's address, capped at the pair's rate; a default child for all other traffic),
so A -> B is paced at A and B -> A at B. There is no added delay: netem is not available here, so
every link has the latency of a veth (microseconds).
"""

import os
import re
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError, unknown

PREFIX = "dbsc-"  # every namespace this module makes starts with it
SUBNET = "10.213.0"  # /24, private (RFC 1918), only inside the namespaces made here
MAX_NODES = 8  # c10d orders nodes by address text: 10.213.0.1 .. .8 keeps node i at group rank i
RENDEZVOUS_PORT = 29400
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit)\s*$", re.IGNORECASE)
_UNIT_BITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}  # tc's units: powers of 1000
MIN_RATE_BITS_S, MAX_RATE_BITS_S = 10**6, 100 * 10**9
TBF_LATENCY_MS = 50  # how long a packet may queue in tbf before it is dropped


def parse_rate(text: str) -> int:
    """'500mbit' -> 500_000_000 bits/s (tc's units: kbit, mbit, gbit are powers of 1000)."""
    m = _RATE_RE.match(str(text))
    if not m:
        raise BenchError(f"bad link rate '{text}': expected a number and a unit kbit, mbit or gbit "
                         "(powers of 1000, as tc reads them), e.g. 100mbit, 500mbit, 1gbit")
    bits = int(float(m.group(1)) * _UNIT_BITS[m.group(2).lower()])
    if not MIN_RATE_BITS_S <= bits <= MAX_RATE_BITS_S:
        raise BenchError(f"bad link rate '{text}': {bits} bit/s; allowed 1mbit .. 100gbit")
    return bits


def format_rate(bits_s: int) -> str:
    for unit in ("gbit", "mbit", "kbit"):
        if bits_s % _UNIT_BITS[unit] == 0:
            return f"{bits_s // _UNIT_BITS[unit]}{unit}"
    return f"{bits_s}bit"


@dataclass(frozen=True, kw_only=True)
class Links:
    node_bits_s: tuple[int, ...]  # each node's link rate
    pair_bits_s: dict  # (a, b) with a < b -> the rate between nodes a and b (both directions)


def parse_links(nodes: int, link: str, link_of: list[str]) -> Links:
    """`link` for every node; `nodeI=RATE` items set one node's link, `nodeA-nodeB=RATE` the rate
    between two nodes (both directions), which must be below both nodes' own rates."""
    rates = [parse_rate(link)] * nodes
    pairs: dict[tuple[int, int], int] = {}
    names = [f"node{i}" for i in range(nodes)]
    for item in (x.strip() for spec in link_of for x in spec.split(",") if x.strip()):
        name, sep, rate = (part.strip() for part in item.partition("="))
        if not sep:
            raise BenchError(f"bad --link-of '{item}': expected nodeI=RATE or nodeA-nodeB=RATE, "
                             "e.g. node1=200mbit or node0-node2=200mbit")
        ends = [e.strip() for e in name.split("-")]
        for end in ends:
            if end not in names:
                raise unknown("node in --link-of", end, names)
        if len(ends) == 1:
            rates[names.index(ends[0])] = parse_rate(rate)
            continue
        a, b = sorted(names.index(e) for e in ends) if len(ends) == 2 else (0, 0)
        if len(ends) != 2 or a == b:
            raise BenchError(f"bad --link-of '{item}': a pair names two different nodes, e.g. node0-node2=200mbit")
        pairs[(a, b)] = parse_rate(rate)
    for (a, b), bits in pairs.items():
        if bits >= min(rates[a], rates[b]):
            raise BenchError(f"--link-of node{a}-node{b}={format_rate(bits)} is not slower than the nodes' own links "
                             f"(node{a}={format_rate(rates[a])}, node{b}={format_rate(rates[b])}); a pair's rate "
                             "must be below both, or it changes nothing")
    return Links(node_bits_s=tuple(rates), pair_bits_s=pairs)


def node_rates(nodes: int, link: str, link_of: list[str]) -> list[int]:
    """Each node's link rate in bits/s: `link` for every node, `nodeI=RATE` items for some."""
    return list(parse_links(nodes, link, link_of).node_bits_s)


def tbf_burst_bytes(bits_s: int) -> int:
    """tbf's bucket: at least 4 ms of the rate (the kernel's timer granularity is 1-4 ms), and at
    least 64 KiB, so a full GSO segment passes without being split."""
    return max(bits_s // 8 * 4 // 1000, 64 * 1024)


def queue_limit_bytes(bits_s: int) -> int:
    """An htb leaf's bfifo: what tbf's `latency` allows to queue (TBF_LATENCY_MS of the rate, plus
    the bucket), so a slowed pair queues as long as a tbf link does."""
    return bits_s // 8 * TBF_LATENCY_MS // 1000 + tbf_burst_bytes(bits_s)


def missing_tools() -> list[str]:
    return [t for t in ("ip", "tc", "unshare") if shutil.which(t) is None]


def check_can_run():
    """One-line refusal where namespaces cannot be made: not root, or ip / tc / unshare missing."""
    uid = os.geteuid()
    if uid != 0:
        raise BenchError("simcluster needs root (CAP_NET_ADMIN) to create network namespaces and shape links; "
                         f"this process runs as uid {uid}; run it as root (e.g. sudo .venv/bin/distbench ...)")
    missing = missing_tools()
    if missing:
        raise BenchError(f"simcluster needs {', '.join(missing)} on PATH (Debian: apt-get install -y iproute2 "
                         "util-linux); not found")


HTB_QUANTUM_BYTES = 60_000  # DRR quantum of each htb class: >= an MTU; set so htb does not derive one from r2q
DEFAULT_CLASS = 0x10  # htb's class for traffic to every peer that is not slowed


def address_of(index: int) -> str:
    return f"{SUBNET}.{index + 1}"


@dataclass(frozen=True, kw_only=True)
class Node:
    index: int
    rate_bits_s: int
    id: str  # the invocation's id
    slow_peers: tuple = ()  # ((peer index, rate bits/s), ...): pairs slower than this node's link

    @property
    def name(self) -> str:  # also its hostname
        return f"node{self.index}"

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.id}-n{self.index}"

    @property
    def ifname(self) -> str:  # the node's end of its link (<= 15 characters)
        return f"n{self.index}-{self.id}"

    @property
    def port(self) -> str:  # the switch's end of the node's link
        return f"s{self.index}-{self.id}"

    @property
    def address(self) -> str:
        return address_of(self.index)

    def tbf(self) -> list[str]:
        return ["tbf", "rate", f"{self.rate_bits_s}bit", "burst", str(tbf_burst_bytes(self.rate_bits_s)),
                "latency", f"{TBF_LATENCY_MS}ms"]

    def egress(self) -> list[list[str]]:
        """The tc commands (after `tc -n <netns>`) that shape what this node sends: tbf at its rate,
        or, with slowed peers, htb: class 1:1 at the node's rate (rate = ceil, so the node's total
        stays within its link), a child per slowed peer capped (ceil) at the pair's rate and picked
        by a u32 match on the peer's address, a default child 1:10 capped at the node's rate. The
        children's assured rates split the node's rate in proportion to their caps (they add up to
        at most the parent's, so no child sends beyond the node's rate without borrowing); each
        child's queue is a bfifo as deep as tbf's latency allows."""
        dev = ["dev", self.ifname]
        if not self.slow_peers:
            return [["qdisc", "add", *dev, "root", *self.tbf()]]
        ceils = [(DEFAULT_CLASS, self.rate_bits_s, None)] + [(0x100 + j, bits, j) for j, bits in self.slow_peers]
        total = sum(c for _, c, _ in ceils)
        cmds = [["qdisc", "add", *dev, "root", "handle", "1:", "htb", "default", f"{DEFAULT_CLASS:x}"],
                ["class", "add", *dev, "parent", "1:", "classid", "1:1", *_htb(self.rate_bits_s, self.rate_bits_s)]]
        for minor, ceil, peer in ceils:
            cmds.append(["class", "add", *dev, "parent", "1:1", "classid", f"1:{minor:x}",
                         *_htb(ceil * self.rate_bits_s // total, ceil)])
            cmds.append(["qdisc", "add", *dev, "parent", f"1:{minor:x}", "handle", f"{minor:x}:", "bfifo",
                         "limit", str(queue_limit_bytes(ceil))])
            if peer is not None:
                cmds.append(["filter", "add", *dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                             "match", "ip", "dst", f"{address_of(peer)}/32", "flowid", f"1:{minor:x}"])
        return cmds


def _htb(rate_bits_s: int, ceil_bits_s: int) -> list[str]:
    burst = str(tbf_burst_bytes(ceil_bits_s))  # as tbf's bucket: a full GSO segment, >= 4 ms of the cap
    return ["htb", "rate", f"{rate_bits_s}bit", "ceil", f"{ceil_bits_s}bit", "burst", burst, "cburst", burst,
            "quantum", str(HTB_QUANTUM_BYTES)]


def new_id() -> str:
    """Unique per invocation: this process's pid in hex, 'x', 4 random hex digits (at most 11
    characters, so `n7-<id>` stays within an interface name's 15); the pid lets a later invocation
    tell a namespace whose owner died (kill -9) from a live one (`remove_stale`)."""
    return f"{os.getpid():x}x{secrets.token_hex(2)}"


def owner_pid(netns: str) -> int | None:
    m = re.match(rf"^{PREFIX}([0-9a-f]+)x[0-9a-f]+-", netns)
    return int(m.group(1), 16) if m else None


def _alive_owner(pid: int | None) -> bool:
    """The owner still runs (any process of that pid: a reused pid only delays the cleanup)."""
    return pid is not None and os.path.exists(f"/proc/{pid}")


def _ip(*args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        msg = " ".join((r.stderr or r.stdout or "").split())
        raise BenchError(f"simcluster: `{' '.join(args)}` failed: {msg or f'exit {r.returncode}'}; "
                         "it needs CAP_NET_ADMIN, network namespaces, veth, bridge and the tbf qdisc")
    return r


class Network:
    """The namespaces, links and qdiscs of one invocation. `build()` then `teardown()` (always)."""

    def __init__(self, rates: list[int], id_: str | None = None, pairs: dict | None = None):
        self.id = id_ or new_id()
        self.pairs = dict(pairs or {})  # (a, b), a < b -> bits/s between them
        self.nodes = [Node(index=i, rate_bits_s=r, id=self.id, slow_peers=tuple(sorted(
            (b if a == i else a, bits) for (a, b), bits in self.pairs.items() if i in (a, b))))
            for i, r in enumerate(rates)]
        self.switch = f"{PREFIX}{self.id}-sw"
        self.bridge = f"br-{self.id}"
        self.made: list[str] = []  # namespaces created so far (teardown deletes exactly these)

    @property
    def namespaces(self) -> list[str]:
        return [self.switch, *(n.netns for n in self.nodes)]

    def _netns_add(self, name: str):
        self.made.append(name)  # before: a signal inside the call would leave it out of the teardown's list
        _ip("ip", "netns", "add", name)
        _ip("ip", "-n", name, "link", "set", "lo", "up")

    def build(self):
        self._netns_add(self.switch)
        _ip("ip", "-n", self.switch, "link", "add", self.bridge, "type", "bridge")
        _ip("ip", "-n", self.switch, "link", "set", self.bridge, "up")
        for n in self.nodes:
            self._netns_add(n.netns)
            # both ends are created inside their namespaces: no interface ever exists in the host's
            _ip("ip", "link", "add", n.ifname, "netns", n.netns, "type", "veth", "peer", "name", n.port,
                "netns", self.switch)
            _ip("ip", "-n", self.switch, "link", "set", n.port, "master", self.bridge, "up")
            _ip("ip", "-n", n.netns, "addr", "add", f"{n.address}/24", "dev", n.ifname)
            _ip("ip", "-n", n.netns, "link", "set", n.ifname, "up")
            for cmd in n.egress():
                _ip("tc", "-n", n.netns, *cmd)
            _ip("tc", "-n", self.switch, "qdisc", "add", "dev", n.port, "root", *n.tbf())

    def set_link(self, index: int, up: bool):
        """Node `index`'s link at the switch's end (its port): down (the cable pulled) or up again."""
        _ip("ip", "-n", self.switch, "link", "set", self.nodes[index].port, "up" if up else "down")

    def pids(self, namespaces: list[str] | None = None) -> list[int]:
        """Every process still inside one of this invocation's namespaces (or of those given)."""
        out = []
        for ns in self.made if namespaces is None else namespaces:
            r = _ip("ip", "netns", "pids", ns, check=False)
            out += [int(p) for p in r.stdout.split() if p.isdigit()]
        return out

    def teardown(self) -> list[str]:
        """Delete every namespace made (their links and qdiscs go with them); returns problems."""
        problems = []
        for ns in reversed(self.made):
            r = _ip("ip", "netns", "del", ns, check=False)
            if r.returncode != 0 and ns in leftover_namespaces(self.id):
                problems.append(f"namespace {ns} could not be deleted: {' '.join(r.stderr.split())}")
        self.made = [ns for ns in self.made if ns in leftover_namespaces(self.id)]
        return problems

    def facts(self) -> dict:
        """What meta.json records about the network (bench.simcluster.run adds the rest)."""
        return {
            "topology": "star: each node one veth link to a Linux bridge in a namespace of its own (the switch)",
            "subnet": f"{SUBNET}.0/24 (private, only inside this invocation's namespaces; no route out)",
            "id": self.id,
            "switch_namespace": self.switch,
            "links": [{"node": n.name, "between": [n.ifname, n.port], "rate_bits_s": n.rate_bits_s,
                       "rate": format_rate(n.rate_bits_s), "qdisc": " ".join(n.tbf()),
                       "egress": ["tc " + " ".join(c) for c in n.egress()],
                       "shaped": "both directions (the node's egress and the switch port's)",
                       "added_delay_s": 0.0} for n in self.nodes],
            "pairs": [{"between": [f"node{a}", f"node{b}"], "rate_bits_s": bits, "rate": format_rate(bits),
                       "shaped": f"both directions: htb at node{a}'s egress to node{b} and at node{b}'s to node{a}"}
                      for (a, b), bits in sorted(self.pairs.items())],
        }


KEPT = "KEPT"  # a file in an invocation's temporary directory: its cluster stays up after it exits (--keep-up)


def id_of(name: str) -> str | None:
    """The invocation id in a namespace or temporary directory name (`dbsc-<id>-...`)."""
    m = re.match(rf"^{PREFIX}([0-9a-f]+x[0-9a-f]+)-", name)
    return m.group(1) if m else None


def kept() -> dict[str, Path]:
    """id -> temporary directory of every cluster left up on purpose (--keep-up)."""
    return {id_of(d.name): d for d in Path(tempfile.gettempdir()).glob(f"{PREFIX}*")
            if id_of(d.name) and (d / KEPT).exists()}


def remove_namespace(ns: str) -> bool:
    """SIGKILL every process in one of this module's namespaces, then delete it; True when gone."""
    pids = _ip("ip", "netns", "pids", ns, check=False).stdout.split()
    for pid in (int(p) for p in pids if p.isdigit()):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    return _ip("ip", "netns", "del", ns, check=False).returncode == 0


def remove_stale() -> list[str]:
    """Delete the namespaces of invocations that died without tearing down (kill -9): every
    `dbsc-` namespace whose owner pid no longer runs, after killing what runs in it. A cluster
    left up on purpose (--keep-up) is not stale: `distbench simcluster --down ID` removes it."""
    removed = []
    keep = kept()
    for ns in leftover_namespaces():
        if _alive_owner(owner_pid(ns)) or id_of(ns) in keep:
            continue
        if remove_namespace(ns):
            removed.append(ns)
    for d in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):  # their /etc/hosts, Slurm's files (bench.simcluster.run)
        if owner_pid(d.name) is not None and not _alive_owner(owner_pid(d.name)) and id_of(d.name) not in keep:
            shutil.rmtree(d, ignore_errors=True)
    return removed


def leftover_namespaces(id_: str | None = None) -> list[str]:
    """Namespaces of this module still present (of one invocation when `id_` is given)."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    names = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    want = f"{PREFIX}{id_}-" if id_ else PREFIX
    return [n for n in names if n.startswith(want)]
