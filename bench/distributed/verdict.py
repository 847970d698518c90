"""Preflight's verdict, agreed by every rank of an external launch (torchrun, srun, mpirun).

Each process an external launcher starts runs the CLI itself: configure, then preflight (memory,
a writable results root, ...), then the process group. A rank that refused on its own used to
exit before process-group init, and the others waited there for it until the group's timeout
(300 s by default). Now every rank posts its verdict ("" or its one-line refusal) to the
launch's TCPStore (the one init_process_group then uses: torchrun's agent store, else rank 0's
at MASTER_ADDR:MASTER_PORT) and waits for every rank's, which takes as long as the slowest rank's
preflight (seconds). A rank that refused exits 2 with its own message; every other rank exits 2
with the message of the lowest rank that refused. When none refused the launch goes on to
process-group init. Under self-launch (elastic_launch) preflight runs once, in the launcher, and
nothing is exchanged.

A rank that dies before posting its verdict (killed, out of memory, a segfault in preflight) used to
leave the others in store.wait for the whole timeout and then a raw store error. Every rank now
connects to the store when it enters preflight and beats (bench.distributed.liveness: a counter in the
store, every second, on a client of its own) until it has read every verdict; a waiting rank stops, in one line naming the rank (LaunchError,
exit 1), when a missing rank's counter has not moved for STALE_S seconds of its own clock (no clocks
are compared across hosts), or when a rank was never seen ARRIVE_S after this one posted its own.
A store that stops answering (rank 0 hosts it and has gone) is one line too.
"""

import datetime
import os
import time

import torch.distributed as dist

from bench.distributed import liveness
from bench.distributed.env import adopt_launcher_env, launcher
from bench.errors import BenchError, LaunchError

DEFAULT_TIMEOUT_S = 300.0  # a refusal before the suite (and its timeout_s) was read: the suite default
STALE_S = 15.0  # a rank whose heartbeat has not moved this long (waiter's clock) has stopped answering
ARRIVE_S = 60.0  # a rank never seen this long after the waiter posted its verdict never arrived
POLL_S = 0.2
_STORES: list = []  # kept alive: rank 0 hosts the TCPStore that init_process_group then reuses (multi-tenant)


def _store(timeout_s: float):
    """(store, rank, world) of this launch, by env:// rendezvous (the same store init_process_group
    finds at MASTER_ADDR:MASTER_PORT)."""
    adopt_launcher_env(os.environ)
    store, rank, world = next(dist.rendezvous("env://", timeout=datetime.timedelta(seconds=timeout_s)))
    _STORES.append(store)
    return store, rank, world


def _prefix() -> str:
    return f"distbench/preflight/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def connect():
    """(store, Heartbeat) of this rank as it enters preflight under an external launcher."""
    store = _store(DEFAULT_TIMEOUT_S)[0]  # rank 0 without torchrun's agent hosts it: made before the beat connects
    return store, liveness.Heartbeat(f"{_prefix()}/alive/{os.environ['RANK']}")


def _silent(store, missing: list[int], seen: dict, since: float, now: float) -> str:
    """'' while every missing rank still beats, else why the wait ends (naming the ranks)."""
    stale, never = [], []
    for r in missing:
        key = f"{_prefix()}/alive/{r}"
        if store.check([key]):
            count = store.add(key, 0)
            if seen.get(r, (None, 0.0))[0] != count:
                seen[r] = (count, now)
            elif now - seen[r][1] > STALE_S:
                stale.append(r)
        elif now - since > ARRIVE_S:
            never.append(r)
    if stale:
        return (f"rank(s) {', '.join(map(str, stale))} stopped answering before posting a preflight verdict "
                f"(no heartbeat for {STALE_S:g} s): died or hung before the launch; its own output says why")
    if never:
        return (f"rank(s) {', '.join(map(str, never))} never reached preflight ({ARRIVE_S:g} s after this rank "
                "posted its verdict): not started, or died first; its launcher's output says why")
    return ""


def exchange(message: str, timeout_s: float, store=None) -> list[tuple[int, str]]:
    """Post this rank's verdict ("" = passed); [(rank, verdict)] of every rank, in rank order.
    Waits while every missing rank beats (at most timeout_s); LaunchError naming the ranks that
    stopped answering or never arrived."""
    if store is None:
        store, rank, world = _store(timeout_s)
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    prefix = _prefix()
    keys = [f"{prefix}/{r}" for r in range(world)]
    since = time.monotonic()
    seen: dict = {}
    try:
        store.set(keys[rank], message)
        while not store.check(keys):
            now = time.monotonic()
            missing = [r for r, k in enumerate(keys) if not store.check([k])]
            why = _silent(store, missing, seen, since, now)
            if not why and now - since > timeout_s:
                why = f"rank(s) {', '.join(map(str, missing))} posted no preflight verdict in {timeout_s:g} s"
            if why:
                raise LaunchError(why)
            time.sleep(POLL_S)
        out = [(r, store.get(k).decode()) for r, k in enumerate(keys)]
        store.add(f"{prefix}/read", 1)
    except RuntimeError as e:  # DistStoreError & co: the store host has gone
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        raise LaunchError(f"the launch's store at {where} stopped answering during preflight (its host, rank 0 "
                          f"or the launcher's agent, ended or cannot be reached): {' '.join(str(e).split())}") from None
    if rank == 0 and any(m for _, m in out):
        # rank 0 may host the store (no torchrun agent): it leaves only when every rank has read it
        deadline = time.monotonic() + timeout_s
        while store.add(f"{prefix}/read", 0) < world and time.monotonic() < deadline:
            time.sleep(0.01)
    return out


def first_refusal(outcomes: list[tuple[int, str]]) -> str:
    """The message the ranks that passed exit with: the lowest refusing rank's, naming it."""
    refused = [(r, m) for r, m in outcomes if m]
    return f"rank {refused[0][0]} refused before the launch: {refused[0][1]}" if refused else ""


class Verdict:
    """`with Verdict() as v:` around configure and preflight (set v.timeout_s once the suite is
    read). Under an external launcher its exit posts this rank's outcome and waits for every
    rank's: this rank's own error is raised as it was; else a refusal of another rank is raised
    as a BenchError (exit 2) on this one."""

    def __init__(self):
        self.timeout_s = DEFAULT_TIMEOUT_S
        self.store = self.beat = None

    def __enter__(self):
        if launcher(os.environ) is not None:  # connect now: the heartbeat covers all of preflight
            self.store, self.beat = connect()
        return self

    def __exit__(self, etype, err, tb):
        try:
            return self._exit(etype, err)
        finally:
            if self.beat:
                self.beat.stop()

    def _exit(self, etype, err):
        if launcher(os.environ) is None or (etype is not None and not issubclass(etype, Exception)):
            return False  # self-launch; or Ctrl-C / exit: not a verdict
        mine = "" if err is None else (" ".join(str(err).split()) if isinstance(err, BenchError) else
                                       f"{type(err).__name__}: {' '.join(str(err).split())}") or type(err).__name__
        outcomes = exchange(mine, self.timeout_s, self.store)
        if err is not None:
            return False  # this rank's own refusal, as it was
        why = first_refusal(outcomes)
        if why:
            raise BenchError(why)
        return False
