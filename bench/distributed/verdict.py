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
"""

import datetime
import os
import time

import torch.distributed as dist

from bench.distributed.env import adopt_launcher_env, launcher
from bench.errors import BenchError

DEFAULT_TIMEOUT_S = 300.0  # a refusal before the suite (and its timeout_s) was read: the suite default
_STORES: list = []  # kept alive: rank 0 hosts the TCPStore that init_process_group then reuses (multi-tenant)


def _store(timeout_s: float):
    """(store, rank, world) of this launch, by env:// rendezvous (the same store init_process_group
    finds at MASTER_ADDR:MASTER_PORT)."""
    adopt_launcher_env(os.environ)
    store, rank, world = next(dist.rendezvous("env://", timeout=datetime.timedelta(seconds=timeout_s)))
    _STORES.append(store)
    return store, rank, world


def exchange(message: str, timeout_s: float) -> list[tuple[int, str]]:
    """Post this rank's verdict ("" = passed); [(rank, verdict)] of every rank, in rank order."""
    store, rank, world = _store(timeout_s)
    prefix = f"distbench/preflight/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    keys = [f"{prefix}/{r}" for r in range(world)]
    store.set(keys[rank], message)
    store.wait(keys, datetime.timedelta(seconds=timeout_s))
    out = [(r, store.get(k).decode()) for r, k in enumerate(keys)]
    store.add(f"{prefix}/read", 1)
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

    def __enter__(self):
        return self

    def __exit__(self, etype, err, tb):
        if launcher(os.environ) is None or (etype is not None and not issubclass(etype, Exception)):
            return False  # self-launch; or Ctrl-C / exit: not a verdict
        mine = "" if err is None else (" ".join(str(err).split()) if isinstance(err, BenchError) else
                                       f"{type(err).__name__}: {' '.join(str(err).split())}") or type(err).__name__
        outcomes = exchange(mine, self.timeout_s)
        if err is not None:
            return False  # this rank's own refusal, as it was
        why = first_refusal(outcomes)
        if why:
            raise BenchError(why)
        return False
