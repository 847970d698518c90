"""Who is still answering: every rank's heartbeat in the launch's store, and the question a rank
asks when its case hangs or fails, "which node stopped answering?".

A heartbeat is a counter in the store, added to every HEARTBEAT_S by a daemon thread of its own,
on a store client of its own, so a dead link never blocks the rank and the process group's store is
never shared across threads. A store operation over a dead link can block for good (the client's
timeout bounds connecting and waiting, not every reply): whoever asks gives up on the client's lock
after LOCK_WAIT_S, and a failing rank asks in a thread it leaves after ASK_S. Values are compared only by the rank that reads them, on its own clock: no clocks are
compared across hosts. The store is the launch's (MASTER_ADDR:MASTER_PORT: torchrun's agent store,
else rank 0's), on node 0.

silent_ranks() reads every rank's counter twice, WINDOW_S apart, on the heartbeat's own client: a
rank whose counter has not moved is silent. From a node that has lost its link the store itself
does not answer (this rank's own beats fail); that is said as such (StoreSilent). describe() turns
either into the words of one line: which node, which ranks. With two nodes, a dead link at either
end looks the same from both: said so. A rank that ends on an error of its own says bye first
(the cascade after one node dies: its peers' collectives fail, they exit, and their silence is
not the fault): those are named apart.
"""

import datetime
import os
from contextlib import contextmanager

import torch.distributed as dist
import threading
import time

HEARTBEAT_S = 1.0
CLIENT_TIMEOUT_S = 5.0  # one store operation of the heartbeat or the probe
WINDOW_S = 3.0  # a counter that has not moved in this long (three beats) is silent
LOCK_WAIT_S = 2.0  # the heartbeat thread holding its client longer than this is stuck in the store
ASK_S = 15.0  # the most a failing rank spends asking who stopped answering (bench.harness.rank)


class StoreSilent(Exception):
    """The launch's store did not answer from this rank."""


def store_address() -> str:
    return f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"


def client(timeout_s: float = CLIENT_TIMEOUT_S):
    """A store client of its own to the launch's store (MASTER_ADDR / MASTER_PORT)."""
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)


class Heartbeat:
    """add(key, 1) every HEARTBEAT_S until stop(), on a store client of its own made once (a
    client made again from a node without its link would only add c10d's connection errors;
    after a timed-out operation a late reply is read by the next one, harmless for a counter).
    read(keys) reads counters on the same client, under the same lock."""

    def __init__(self, key: str, store=None):
        self.key, self.store = key, store
        self.lock, self._stop = threading.Lock(), threading.Event()
        self.errors, self.last_ok = 0, time.monotonic()
        self._beat_once()
        self.thread = threading.Thread(target=self._beat, daemon=True, name="distbench-heartbeat")
        self.thread.start()

    def _beat_once(self):
        try:
            with self.lock:
                if self.store is None:
                    self.store = client()
                self.store.add(self.key, 1)
            self.last_ok = time.monotonic()
        except Exception:  # noqa: BLE001 - a link that is down: the next beat tries again
            self.errors += 1

    def _beat(self):
        while not self._stop.wait(HEARTBEAT_S):
            self._beat_once()

    def silent_for(self) -> float:
        """Seconds since this rank's own last successful beat."""
        return time.monotonic() - self.last_ok

    def read(self, keys: list[str]) -> list[int]:
        with self._locked():
            if self.store is None:
                raise StoreSilent("no connection to the store")
            return [self.store.add(k, 0) for k in keys]

    @contextmanager
    def _locked(self):
        """Hold the client's lock; StoreSilent when the heartbeat thread has held it for LOCK_WAIT_S
        (it is blocked in a store operation: the store does not answer)."""
        if not self.lock.acquire(timeout=LOCK_WAIT_S):
            raise StoreSilent(f"this rank's heartbeat has been waiting on the store for over {LOCK_WAIT_S:g} s")
        try:
            yield
        finally:
            self.lock.release()

    def bye(self, message: str):
        """This rank ends on an error of its own: said in the store (key + '/bye') before it goes,
        so that the others do not take its silence for the fault. Skipped where the store does not
        answer (its own beats fail)."""
        if self.silent_for() > WINDOW_S:
            return
        try:
            with self._locked():
                if self.store is not None:
                    self.store.set(self.key + "/bye", " ".join(message.split())[:300])
        except Exception:  # noqa: BLE001 - a rank without its link cannot say goodbye
            pass

    def ended(self, keys: list[str]) -> dict[int, str]:
        """{index: message} of the keys whose ranks said bye."""
        with self._locked():
            return {i: self.store.get(k + "/bye").decode() for i, k in enumerate(keys)
                    if self.store.check([k + "/bye"])}

    def stop(self):
        self._stop.set()
        self.thread.join(timeout=CLIENT_TIMEOUT_S + HEARTBEAT_S)


def silent_ranks(beat: Heartbeat, keys: list[str], window_s: float = WINDOW_S) -> list[int]:
    """Indices of the keys whose counters did not move in window_s; StoreSilent if the store
    does not answer this rank (its own beats fail, or a read does)."""
    if beat.silent_for() > window_s:
        raise StoreSilent(f"this rank's own heartbeat has failed for {beat.silent_for():.0f} s")
    try:
        first = beat.read(keys)
        time.sleep(window_s)
        second = beat.read(keys)
    except StoreSilent:
        raise
    except Exception as e:  # noqa: BLE001 - DistStoreError, a timeout, a refused connection
        raise StoreSilent(" ".join(str(e).split())[:200]) from None
    return [i for i, (a, b) in enumerate(zip(first, second)) if a == b]


def describe(silent: list[int], hosts: list[str], me: int, ended: dict | None = None) -> str:
    """The words for ranks that stopped answering, by node: '' when none did. When every other node
    is silent and this rank shares node 0 with the store (so reading it proves nothing about its
    link), this node's link is named instead."""
    ended = {r: m for r, m in (ended or {}).items() if r != me}
    gone = sorted(set(ended) & set(silent))
    after = (f"; {', '.join(f'{hosts[r]} (rank {r})' for r in gone)} ended on an error of its own" if gone else "")
    silent = [r for r in silent if r not in ended]
    if not silent:
        return after.lstrip("; ")
    by_host: dict[str, list[int]] = {}
    for r in silent:
        by_host.setdefault(hosts[r] if r < len(hosts) else "?", []).append(r)
    others = {h for h in hosts if h != hosts[me]}
    # the store is on rank 0's node: a rank elsewhere that reads it has a working link itself
    if hosts[me] == hosts[0] and len(others) >= 2 and others <= set(by_host) and hosts[me] not in by_host:
        return (f"no other node answers (no heartbeat in {WINDOW_S:g} s from {', '.join(sorted(by_host))}): "
                f"this node's ({hosts[me]}'s) link is the likely fault{after}")
    parts = [f"{h} (rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))})" for h, rs in sorted(by_host.items())]
    two = (f" (of two nodes, {hosts[me]}'s link and {parts[0].split()[0]}'s cannot be told apart from here)"
           if len(others) == 1 and len(by_host) == 1 and hosts[me] not in by_host else "")
    return f"{', '.join(parts)} stopped answering: no heartbeat in {WINDOW_S:g} s{two}{after}"


def explain(beat: Heartbeat, keys: list[str], hosts: list[str], me: int) -> str:
    """One clause for a failure message: who stopped answering, as this rank sees it ('' if all do)."""
    try:
        silent = silent_ranks(beat, keys)
        return describe(silent, hosts, me, beat.ended(keys) if silent else {})
    except StoreSilent as e:
        host0 = hosts[0] if hosts else "node 0"
        return (f"the launch's store at {store_address()} ({host0}) does not answer from {hosts[me] if me < len(hosts) else 'here'}: "
                f"this node's link, or {host0}, is down ({e})")


STALL_BEATS = 3  # a rank this many beats short over a case has stalled in it


class Stalls:
    """Rank 0, around each case: which ranks' heartbeats stalled during it (a link that went down
    and came back, a rank stopped for a while). Their counters are read at the case's start and
    end; a rank that beat STALL_BEATS fewer times than the case's seconds allow was silent for
    about that long, and the case's samples hold it. Only cases longer than STALL_BEATS seconds
    can be flagged."""

    def __init__(self, beat: Heartbeat, keys: list[str], hosts):
        self.beat, self.keys, self.hosts = beat, keys, hosts
        self.t0, self.c0 = 0.0, None

    def start(self):
        self.t0 = time.monotonic()
        try:
            self.c0 = self.beat.read(self.keys)
        except Exception:  # noqa: BLE001 - no start reading: nothing is judged for this case
            self.c0 = None

    def note(self) -> str:
        """'' or the words for the case's `degraded` column."""
        if self.c0 is None:
            return ""
        elapsed = time.monotonic() - self.t0
        try:
            c1 = self.beat.read(self.keys)
        except Exception:  # noqa: BLE001
            return ""
        hosts = self.hosts()
        short = [(r, elapsed / HEARTBEAT_S - (b - a)) for r, (a, b) in enumerate(zip(self.c0, c1))]
        stalled = [(r, miss) for r, miss in short if miss >= STALL_BEATS]
        if not stalled:
            return ""
        who = ", ".join(f"{hosts[r] if r < len(hosts) else '?'} (rank {r}) ~{miss * HEARTBEAT_S:.0f} s"
                        for r, miss in stalled)
        return f"heartbeats stalled during this case: {who} (a link outage or a stopped rank: the samples hold it)"
