"""Clusters left up on purpose (`distbench simcluster --scheduler slurm --keep-up`): what a person
is told to use one, and `--down ID|all`, which removes it (processes, namespaces, CPU-quota cgroups,
temporary directory). A kept cluster is marked by a KEPT file (bench.simcluster.net.kept), so no
later invocation takes it for a killed one's leftovers (owner_alive)."""

import os
import shutil
import sys

from bench.errors import BenchError
from bench.simcluster import cpu, net
from bench.simcluster.slurm import PARTITION


def owner_alive(name: str) -> bool:
    pid = net.owner_pid(name)  # a name not of this module's form is left alone; a kept cluster's too
    return pid is None or os.path.exists(f"/proc/{pid}") or net.id_of(name) in net.kept()


def lines(cluster) -> list[str]:
    """What a person needs to use a kept cluster, and to remove it."""
    out = [f"distbench: simcluster {cluster.net.id} is kept up (--keep-up): nodes "
           + ", ".join(f"{n.name} ({n.netns}, {n.address})" for n in cluster.net.nodes)]
    if cluster.slurm:
        bin_ = cluster.slurm.root / "bin"
        out += [f"  submit to its Slurm (partition {PARTITION}) with the wrappers in {bin_}:",
                f"    export PATH={bin_}:$PATH",
                "    sinfo; sbatch --wait job.sh; squeue; scancel JOBID",
                f"  (each runs on the head host: ip netns exec {cluster.net.switch} ..., SLURM_CONF={cluster.slurm.conf})"]
    out.append(f"  tear it down with: distbench simcluster --down {cluster.net.id}   (or --down all)")
    return out


def down(ids: list[str], err=None) -> int:
    """Tear down kept clusters: every process in their namespaces, the namespaces, their CPU-quota
    cgroups and temporary directories. 'all' names every kept cluster. Exit 2 for an unknown id."""
    err = err or sys.stderr
    have = net.kept()
    want = sorted(have) if ids == ["all"] else ids
    unknown_ = [i for i in want if i not in have]
    if unknown_:
        raise BenchError(f"simcluster --down {','.join(unknown_)}: no kept cluster of that id; kept: "
                         f"{', '.join(sorted(have)) or 'none'}")
    for id_ in want:
        tmp = have[id_]
        removed = [ns for ns in net.leftover_namespaces(id_) if net.remove_namespace(ns)]
        removed += cpu.remove_stale(lambda name: net.id_of(name) != id_ and owner_alive(name))
        shutil.rmtree(tmp, ignore_errors=True)
        left = net.leftover_namespaces(id_)
        err.write(f"distbench: simcluster {id_}: torn down ({len(removed)} namespace(s) and cgroup(s) removed"
                  + (f"; left: {', '.join(left)}" if left else "") + ")\n")
    if not want:
        err.write("distbench: simcluster: no kept cluster\n")
    return 0
