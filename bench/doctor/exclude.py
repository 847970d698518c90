"""The doctor's verdict as a scheduler can use it: the nodes to leave out of the next job.

A doctor run stores, in its meta.json, `exclude`:
    {"nodes": ["node2"],                 # host names, in the order of the suspects that name them
     "slurm": "--exclude=node2",         # the sbatch / srun option ("" when no node is excluded)
     "because": ["node node2: ..."],     # the suspects behind each node, one evidence line each
     "not_excluded": ["link node0 <-> node1: ..."]}  # suspects that no node's exclusion removes
Which suspects name a node: a slow node (`node`), a rank's slow compute (`compute`: the node the
rank ran on). A slow link between two nodes, a rank pair or a group names no single node: it is
listed under `not_excluded` (leaving out one end would hide, not fix, it; the user decides).

`read_exclude(run_dir)` is what `distbench jobspec ... --exclude-from RUN` and the simulated
Slurm read.
"""

from pathlib import Path

from bench.errors import BenchError
from bench.results.rundir import read_meta

NODE_SCOPES = ("node", "compute")  # suspects that name one node to leave out


def exclude_of(suspects, rank_nodes: dict[int, str]) -> dict:
    """The `exclude` block from the verdict's suspects (worst first); rank_nodes: rank -> host."""
    nodes, because, not_excluded = [], [], []
    for s in suspects:
        host = None
        if s.scope == "node":
            host = s.name.split(" ", 1)[1]
        elif s.scope == "compute" and s.rank in rank_nodes:
            host = rank_nodes[s.rank]
        if host is None:
            not_excluded.append(s.evidence)
            continue
        because.append(s.evidence)
        if host not in nodes:
            nodes.append(host)
    return {"nodes": nodes, "slurm": f"--exclude={','.join(nodes)}" if nodes else "", "because": because,
            "not_excluded": not_excluded}


def rank_hosts(meta: dict) -> dict[int, str]:
    """rank -> host from a run's launches (every rank's facts)."""
    return {int(r["rank"]): str(r["host"]) for launch in (meta or {}).get("launches", {}).values()
            for r in launch.get("ranks", []) if "rank" in r and "host" in r}


def exclude_lines(meta: dict, run_dir) -> list[str]:
    """What the summary says of the exclude list ([] for a run stored before it was kept)."""
    block = (meta or {}).get("exclude")
    if not isinstance(block, dict):
        return []
    out = []
    if block.get("nodes"):
        out.append(f"# exclude from the next job: {block['slurm']} (sbatch / srun); or distbench jobspec slurm ... "
                   f"--exclude-from {run_dir}")
    if block.get("not_excluded"):
        out.append(f"# not excluded ({len(block['not_excluded'])} suspect(s) name no single node: a link, a pair or a "
                   "group; excluding one end would hide, not fix it)")
    return out


def read_exclude(run_dir) -> list[str]:
    """The host names a doctor run says to exclude ([] when it found no node to leave out).
    One-line errors: not a run directory, not a doctor run, a doctor run stored before the list."""
    path = Path(run_dir)
    problems: list[str] = []
    meta = read_meta(path, problems)
    if not meta:
        raise BenchError(f"--exclude-from {run_dir}: not a stored run (no readable meta.json there"
                         f"{': ' + problems[0] if problems else ''}); give a doctor run's directory, "
                         "e.g. results/doctor/<run_id>")
    if meta.get("kind") != "doctor":
        raise BenchError(f"--exclude-from {run_dir}: that run is of kind '{meta.get('kind')}', not 'doctor'; "
                         "give the directory of a `distbench doctor` run")
    block = meta.get("exclude")
    if not isinstance(block, dict) or not isinstance(block.get("nodes"), list):
        raise BenchError(f"--exclude-from {run_dir}: this doctor run has no exclude list (stored by a distbench "
                         "before it kept one, or not finished); run `distbench doctor` again")
    return [str(n) for n in block["nodes"]]
