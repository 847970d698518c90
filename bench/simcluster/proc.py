"""What every process simcluster starts runs before exec, and how it is signalled: shared by the
torchrun / mpirun nodes (bench.simcluster.run) and Slurm's daemons (bench.simcluster.slurm)."""

import ctypes
import os
import signal


def in_child(die_with_parent: bool, cgroup_procs: str | None):
    """Before exec: SIGKILL this process when simcluster dies (kill -9: PR_SET_PDEATHSIG), unless
    it must outlive it (a cluster kept up); with a node's CPU quota, join the node's cgroup here, so
    that everything it starts is born inside (a failure shows as a quota not applied)."""
    if die_with_parent:
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if cgroup_procs:
        try:
            with open(cgroup_procs, "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass


def signal_group(pid: int, sig):
    """`sig` to the process group `pid` leads (each node's or daemon's own session)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
