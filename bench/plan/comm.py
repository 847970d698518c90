"""The planner's communication terms: Hockney's alpha-beta of each collective at each group size,
fitted on a stored collectives run of the target machine, and where each layout's groups sit.

    t(collective, n ranks, S bytes) = alpha[c, n, scope, k] + S * beta[c, n, scope, k]

S is the collective's size as the run stores it (`size_bytes`, nccl-tests' S: an all_gather's
output, a reduce_scatter's input, an all_reduce's buffer); scope is `intra` (every rank of the
group on one node) or `inter` (the group crosses nodes), as each row's `group_scope` says (decided
per group when it was measured; a run stored without it takes its launch's: inter when the launch
spans nodes, said in the source); k is how
many groups ran it at once (`distbench collectives --group-size n` at world k x n; 1 without). The
fit is the shared one (bench.timing.alphabeta, one step of S bytes per call: per group size it is
exact for any algorithm whose cost is a + b S), over the median time per size.

Which timing mode: a training step issues its collectives back to back with its compute, no barrier
before each, every group on its own clock. The fits take, per collective, the rows of the first
mode the run has of MODES_PREFERRED: throughput (ops back to back, the groups unaligned), then
nccl-tests, then latency (a barrier before every op: every group starts at once, the most
contention); the source names the mode(s) taken.

A layout's groups run at once: a pp2 x tp2 step has two tp groups all-reducing on one host, which
share its cores (and, across nodes, its links). Each term asks for k = world / n groups at once
and takes the fit measured so where the run has it; else the fit measured with the nearest k,
saying so (`all_reduce measured with 1 group(s) at once, the layout runs 2`): on a host whose
ranks share cores, a group measured alone misses the time its peers wait for a descheduled rank.

Where the figures come from, named in every prediction that uses them:
  - a `distbench collectives` run (`collectives run R`),
  - an nccl-tests log imported with `distbench import nccl-tests` (`nccl-tests import R`),
  - a run under `distbench simcluster` (`simcluster link RATE (run R)`), whose nodes are the
    simulated ones,
  - none given: `default: no communication calibration` and every term 0 (a floor, marked).
A group size the run did not measure takes the nearest measured one's fit scaled by the ring's
step and byte factors (alpha x (n - 1) / (n0 - 1); beta x f(n) / f(n0), f = 2 (n - 1) / n for
all_reduce, (n - 1) / n for all_gather and reduce_scatter: nccl-tests PERFORMANCE.md), marked.
"""

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.errors import BenchError
from bench.results.rundir import read_meta
from bench.results.store import load_run
from bench.timing import alphabeta
from bench.timing.busbw import bus_factor

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
MODES_PREFERRED = ("throughput", "nccl-tests", "latency")
DEFAULT = "default: no communication calibration (terms 0, a floor)"


@dataclass(frozen=True, kw_only=True)
class CollFit:
    collective: str
    group: int  # ranks in the group
    scope: str  # intra | inter
    at_once: int = 1  # groups that ran the collective at once (--group-size: world / group)
    alpha_s: float  # seconds per call
    beta_s_per_byte: float  # seconds per byte of S

    def seconds(self, nbytes: float) -> float:
        return alphabeta.predict(alphabeta.one_message, 2, nbytes, self.alpha_s, self.beta_s_per_byte)


@dataclass(frozen=True, kw_only=True)
class Comm:
    """Every fitted collective of one source; `seconds` answers a term and says how it was found."""

    source: str  # where the figures come from (named in every prediction)
    fits: dict = field(default_factory=dict)  # (collective, group, scope, at_once) -> CollFit
    machine: str = ""  # the machine the figures were measured on ("" for the default)
    ranks_per_node: int = 0  # the measured machine's ranks per node where its run spanned nodes (0: one node)

    def seconds(self, collective: str, group: int, nbytes: float, scope: str = "intra",
                at_once: int = 1) -> tuple[float, str]:
        """(seconds, note): note is "" when the fit was measured at this group size, scope and
        number of groups at once."""
        if group <= 1 or nbytes <= 0:
            return 0.0, ""
        if (collective, group, scope, at_once) in self.fits:
            return self.fits[(collective, group, scope, at_once)].seconds(nbytes), ""
        same = [f for f in self.fits.values() if f.collective == collective and f.scope == scope]
        if not same:
            other = [f for f in self.fits.values() if f.collective == collective]
            if not other:
                return 0.0, f"{collective} not measured in {self.source} (term 0)"
            same, why = other, f"{collective} {scope}-node not measured (used {other[0].scope}-node)"
        else:
            why = ""
        near = min(same, key=lambda f: (abs(f.group - group), abs(f.at_once - at_once), f.group, f.at_once))
        if near.at_once != at_once:
            why = "; ".join(filter(None, [why, f"{collective} measured with {near.at_once} group(s) at once, the "
                                               f"layout runs {at_once}"]))
        if near.group == group:
            return near.seconds(nbytes), why
        step = (group - 1) / (near.group - 1) if near.group > 1 else float(group - 1)
        byte = bus_factor(collective, group) / bus_factor(collective, near.group)
        t = near.alpha_s * step + nbytes * near.beta_s_per_byte * byte
        return t, "; ".join(filter(None, [why, f"{collective} at {group} ranks scaled from {near.group} (ring)"]))


def none() -> Comm:
    return Comm(source=DEFAULT)


def source_of(meta: dict, run_dir) -> str:
    """`simcluster link RATE (run R)`, `nccl-tests import R`, `fingerprint R` (a doctor --cluster-fingerprint
    run) or `collectives run R` from meta.json."""
    rid = meta.get("run_id") or Path(run_dir).name
    sim = meta.get("simcluster")
    if sim:
        rates = sorted({n.get("link_rate", "?") for n in sim.get("nodes", [])}) if isinstance(sim, dict) else []
        return f"simcluster link {'/'.join(rates) or '?'} (run {rid})"
    tool = (meta.get("source") or {}).get("tool") if isinstance(meta.get("source"), dict) else None
    if tool:
        return f"{tool} import {rid}"
    if meta.get("kind") == "doctor":
        return f"fingerprint {rid}"
    return f"collectives run {rid}"


def ranks_per_node_of(meta: dict) -> int:
    """Ranks per node of a run that spanned nodes: a simcluster run's own figure, else world / nodes
    of its widest multi-node launch; 0 when every launch was on one node."""
    sim = meta.get("simcluster")
    if isinstance(sim, dict) and sim.get("ranks_per_node"):
        return int(sim["ranks_per_node"])
    multi = [la for la in (meta.get("launches") or {}).values()
             if isinstance(la, dict) and int(la.get("nodes") or 1) > 1 and la.get("world")]
    return max((int(la["world"]) // int(la["nodes"]) for la in multi), default=0)


def fit_rows(rows, source: str, machine: str = "", ranks_per_node: int = 0) -> Comm:
    """rows: (collective, group, scope, size_bytes, median seconds[, groups at once]); one fit per
    (collective, group, scope, groups at once) with two or more sizes."""
    pts: dict = {}
    for c, n, scope, s, t, *k in rows:
        if c in COLLECTIVES and n > 1 and s > 0 and t > 0:
            pts.setdefault((c, int(n), scope, int(k[0]) if k else 1), []).append((float(s), float(t)))
    fits = {}
    for (c, n, scope, k), v in sorted(pts.items()):
        sizes, times = zip(*sorted(v))
        got = alphabeta.fit(alphabeta.one_message, [2] * len(sizes), sizes, times)
        if got is not None:
            fits[(c, n, scope, k)] = CollFit(collective=c, group=n, scope=scope, at_once=k, alpha_s=got.alpha_s,
                                             beta_s_per_byte=got.beta_s_per_byte)
    if not fits:
        raise BenchError(f"communication run '{source}' has no collective measured at two or more sizes on two or "
                         f"more ranks; measure one with distbench collectives -c all_reduce,all_gather,reduce_scatter "
                         f"-b 4K -e 64M")
    return Comm(source=source, fits=fits, machine=machine, ranks_per_node=ranks_per_node)


def comm_of(run_dir, machine: str = "") -> Comm:
    """The alpha-beta of every collective at every group size of a stored collectives run (its own,
    an nccl-tests import or a simcluster run: the source says which)."""
    run = load_run(run_dir)
    res = run.tables.get("results")
    if res is None or "collective" not in res.columns:
        raise BenchError(f"run '{run_dir}' has no collectives cases; pass a distbench collectives run, an imported "
                         "nccl-tests log (distbench import nccl-tests) or a distbench simcluster run")
    meta = run.meta or read_meta(Path(run_dir), [])
    if "doctor_test" in res.columns and res["doctor_test"].notna().any():  # a doctor run (the schema gives every run
        # the column, null outside the doctor's rows): its fingerprint's collective rows (its pairs are p2p, not groups)
        res = res[res["doctor_test"] == "collective"]
        if res.empty:
            raise BenchError(f"run '{run_dir}' is a doctor run without a fingerprint; measure one with "
                             "`distbench doctor --cluster-fingerprint`")
    def col(name: str, default: float) -> pd.Series:  # a numeric column, `default` where absent or null
        if name not in res.columns:
            return pd.Series(default, index=res.index, dtype=float)
        return pd.to_numeric(res[name], errors="coerce").fillna(default)

    scope, from_launch = scopes_of(res, col("nodes", 1))
    df = res.assign(scope=scope, _n=col("group_size", 0).where(lambda n: n > 0, col("world", 0)).astype(int),
                    _k=col("groups", 1).astype(int))
    df, modes = _preferred_mode(df)
    g = df.groupby(["collective", "_n", "scope", "size_bytes", "_k"])["time_median_s"].median().reset_index()
    g = g[["collective", "_n", "scope", "size_bytes", "time_median_s", "_k"]]
    source = source_of(meta, run_dir) + (f" ({', '.join(modes)} mode)" if modes else "")
    if from_launch:
        source += (f"; scope from the launch for {from_launch} multi-node row(s) stored without group_scope "
                   "(a group inside a node is priced as inter-node)")
    return fit_rows(g.itertuples(index=False, name=None), source, machine, ranks_per_node_of(meta))


def scopes_of(res: pd.DataFrame, nodes: pd.Series) -> tuple[list[str], int]:
    """Each row's scope: its `group_scope` as measured (bench.collectives.cases.group_scope; a mixed
    launch, some groups across nodes, is priced as inter: its slowest group sets the pace); where a
    row has none (an older run, an import), the launch's: inter when it spanned nodes. Also how many
    multi-node rows took the launch's."""
    stored = res["group_scope"] if "group_scope" in res.columns else pd.Series(None, index=res.index, dtype=object)
    out, from_launch = [], 0
    for s, n in zip(stored, nodes):
        if isinstance(s, str) and s:
            out.append("intra" if s == "intra" else "inter")
        else:
            out.append("inter" if n > 1 else "intra")
            from_launch += int(n > 1)
    return out, from_launch


def _preferred_mode(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Per collective, only the rows of its first mode in MODES_PREFERRED (a run without a mode
    column is taken whole); the modes taken."""
    if "mode" not in df.columns or df["mode"].isna().all():
        return df, []
    rank = {m: i for i, m in enumerate(MODES_PREFERRED)}
    order = df["mode"].map(lambda m: rank.get(m, len(rank)))
    best = order.groupby(df["collective"]).transform("min")
    kept = df[order == best]
    return kept, sorted(set(kept["mode"].dropna()), key=lambda m: rank.get(m, len(rank)))


def crosses(block: int, ranks_per_node: int) -> bool:
    """Does a group of `block` consecutive ranks (a mesh dimension and every one inside it) span
    more than one node? ranks_per_node 0: one node holds every rank."""
    return ranks_per_node > 0 and block > ranks_per_node


def scopes(tp: int, fsdp: int, dp: int, ranks_per_node: int, tp_across: bool = False) -> dict:
    """Each dimension's scope on the mesh (pp, dp_replicate, dp_shard, tp, tp innermost: a tp group is
    tp consecutive ranks, an fsdp group spans tp x fsdp, a dp group tp x fsdp x dp, and a pipeline
    neighbour is that block away). `tp_across`: the user places tp across nodes (inter)."""
    scope = lambda block: "inter" if crosses(block, ranks_per_node) else "intra"  # noqa: E731
    return {"tp": "inter" if tp_across and tp > 1 else scope(tp), "fsdp": scope(tp * fsdp),
            "dp": scope(tp * fsdp * dp),
            "pp": "inter" if ranks_per_node > 0 and tp * fsdp * dp >= ranks_per_node else "intra"}
