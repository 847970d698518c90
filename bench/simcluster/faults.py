"""Faults in time on the simulated cluster: a node's link taken down (and back up), a node's
processes all killed, at set seconds after the command starts.

`--link-down node1=20s` takes node1's link down 20 s after the command starts and leaves it down;
`--link-down node1=20s:15s` brings it back 15 s later. The link is the switch's end of the node's
veth (`ip link set ... down` in the switch's namespace): the cable pulled at the switch. The node
keeps its address and its processes; its packets go nowhere, as on a real cluster whose port went
dark: TCP retransmits, and the connection survives if the link returns before TCP or the
collective gives up. `--kill-node node1=30s` sends SIGKILL to every process in node1's namespace
(its launcher's agent and its ranks), as a node that loses power. Every fault is a line on stderr
when it happens and an entry in meta.json's `simcluster.faults`.
"""

import os
import re
import signal
import threading
import time
from dataclasses import dataclass

from bench.errors import BenchError

SPEC = re.compile(r"node(\d+)=(\d+(?:\.\d+)?)s(?::(\d+(?:\.\d+)?)s)?")


@dataclass(frozen=True)
class Fault:
    action: str  # "link-down" | "kill-node"
    node: int
    at_s: float
    for_s: float | None = None  # link-down: back up after this long; None: stays down

    def describe(self) -> str:
        if self.action == "kill-node":
            return f"node{self.node}'s processes killed at {self.at_s:g} s"
        back = f", back up {self.for_s:g} s later" if self.for_s is not None else ", for good"
        return f"node{self.node}'s link down at {self.at_s:g} s{back}"


def parse(link_down: list[str], kill_node: list[str], nodes: int) -> list[Fault]:
    """--link-down nodeI=ATs[:FORs] and --kill-node nodeI=ATs (repeat, or comma lists)."""
    out = []
    for flag, specs in (("--link-down", link_down), ("--kill-node", kill_node)):
        for part in (p.strip() for s in specs for p in s.split(",")):
            if not part:
                continue
            m = SPEC.fullmatch(part)
            if not m or (flag == "--kill-node" and m.group(3)):
                form = "nodeI=ATs[:FORs] (node1=20s, node1=20s:15s)" if flag == "--link-down" else "nodeI=ATs (node1=30s)"
                raise BenchError(f"simcluster {flag} '{part}': expected {form}")
            node = int(m.group(1))
            if node >= nodes:
                raise BenchError(f"simcluster {flag} '{part}': node{node} does not exist; allowed node0 .. node{nodes - 1}")
            out.append(Fault("link-down" if flag == "--link-down" else "kill-node", node, float(m.group(2)),
                             float(m.group(3)) if m.group(3) else None))
    return sorted(out, key=lambda f: f.at_s)


class Injector:
    """A daemon thread that carries the faults out at their times after start(): set_link(node,
    up: bool) and kill(node) are the cluster's; say(line) reports each one. stop() ends it (a
    fault not yet due is not carried out; a link it took down is brought back by the teardown,
    which deletes the namespaces)."""

    def __init__(self, faults: list[Fault], set_link, kill, say):
        self.faults, self.set_link, self.kill, self.say = faults, set_link, kill, say
        self.done: list[dict] = []  # what happened, for meta.json
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="simcluster-faults")

    def start(self):
        if self.faults:
            self.t0 = time.monotonic()
            self.thread.start()

    def _events(self):
        for f in self.faults:
            if f.action == "kill-node":
                yield f.at_s, f, "kill"
            else:
                yield f.at_s, f, "down"
                if f.for_s is not None:
                    yield f.at_s + f.for_s, f, "up"

    def _run(self):
        for at, f, what in sorted(self._events(), key=lambda e: e[0]):
            if self._stop.wait(max(0.0, self.t0 + at - time.monotonic())):
                return
            try:
                if what == "kill":
                    n = self.kill(f.node)
                    line = f"node{f.node}: killed its {n} process(es) (SIGKILL) at {at:g} s"
                else:
                    self.set_link(f.node, what == "up")
                    line = f"node{f.node}: link {what} at {at:g} s"
            except Exception as e:  # noqa: BLE001 - a fault that could not be made is said, never silent
                line = f"warning: node{f.node}: could not {what} at {at:g} s: {e}"
            self.done.append({"node": f"node{f.node}", "event": what, "at_s": at, "said": line})
            self.say(line)

    def stop(self):
        self._stop.set()

    def facts(self) -> dict:
        return {"planned": [{"fault": f.describe(), "action": f.action, "node": f"node{f.node}", "at_s": f.at_s,
                             "for_s": f.for_s} for f in self.faults], "happened": self.done}


def kill_all(pids) -> int:
    n = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except ProcessLookupError:
            pass
    return n
