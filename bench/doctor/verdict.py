"""The doctor's verdict (pure, pandas/numpy): ranked suspects, each with one line of evidence.

Robust statistics within a class, never across classes: the median and the MAD (median absolute
deviation, scaled by 1.4826 so that it estimates one standard deviation of a normal sample). A
value is an outlier when it is worse than its class median by more than `mad_k` MADs AND by more
than a relative floor (`min_shortfall` for bandwidth, `latency_excess` for latency,
`compute_excess` for compute time): the floor keeps a tiny MAD (a quiet class) from flagging noise.

Order of attribution, each step on what the steps before left unexplained:
1. compute: each rank's matmul time against the median rank;
2. nodes (>= 3 nodes): each node's bandwidth with its fastest peer node (the median of the rank
   pairs between them), against the inter-node pairs that do not touch it (leave one out, so that
   a slow node does not dilute its healthy peers, and a slow link is not taken for a slow node; a
   slow node explains its pairs);
3. node links (>= 3 nodes): the median bandwidth of the rank pairs from node A to node B, per
   direction, against the other directed node pairs (`link A <-> B`, or `link A -> B` when one
   direction only);
4. rank links: every ordered rank pair's bandwidth within its class (intra-node or inter-node),
   then its latency (not judged, by default, when the launch was oversubscribed: the round trip of
   a small message then waits for the scheduler); a pair slow both ways is one `<->` suspect;
5. groups (only when group_factor > 0): an all_reduce slower than group_factor x its expectation.
Pairs that touch a rank found in step 1 are set aside (explained) before steps 2-4. Suspects are
ranked by how many times worse than their class they are (`factor`).
"""

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

MAD_SCALE = 1.4826  # MAD -> sigma of a normal distribution
MB = 1e6  # evidence in MB/s (10^6 bytes per second)


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    mad_k: float = 4.0
    min_shortfall: float = 0.3
    node_shortfall: float = 0.2  # the node and node-link steps' floor (medians over many pairs)
    latency_excess: float = 1.0
    compute_excess: float = 0.3
    group_factor: float = 0.0
    latency_verdict: str = "auto"  # on | off | auto: judged unless the launch was oversubscribed
    compute_statistic: str = "min"  # min: each rank's best repetition; median: its median one


@dataclass(frozen=True, kw_only=True)
class Suspect:
    name: str  # what is suspected: 'node node1', 'link node0 <-> node1', 'rank 3 compute' ...
    scope: str  # node | node-link | rank-link | latency | compute | group
    factor: float  # how many times worse than its class median (>= 1)
    mads: float  # MADs from the class median (inf when the class has no spread)
    evidence: str  # one line
    explains: tuple = field(default=(), compare=False)  # the (src, dst) pairs it accounts for
    rank: int = field(default=-1, compare=False)  # a compute suspect's rank (-1 for the others)


def robust(values) -> tuple[float, float]:
    """(median, scaled MAD) of the finite values; (nan, nan) when there are none."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return math.nan, math.nan
    med = float(np.median(v))
    return med, float(np.median(np.abs(v - med))) * MAD_SCALE


def _mads(diff: float, mad: float) -> float:
    return diff / mad if mad > 0 else (math.inf if diff > 0 else 0.0)


def low(value: float, med: float, mad: float, k: float, floor: float) -> float | None:
    """MADs below the median when `value` is a low outlier (more than k MADs AND more than
    `floor` x median below it), else None."""
    if not (np.isfinite(value) and np.isfinite(med) and med > 0):
        return None
    m = _mads(med - value, mad)
    return m if m > k and (med - value) > floor * med else None


def high(value: float, med: float, mad: float, k: float, floor: float) -> float | None:
    """MADs above the median when `value` is a high outlier (k MADs AND floor x median above)."""
    if not (np.isfinite(value) and np.isfinite(med) and med > 0):
        return None
    m = _mads(value - med, mad)
    return m if m > k and (value - med) > floor * med else None


def fmt_mads(m: float) -> str:
    return "inf MADs (the class has no spread)" if math.isinf(m) else f"{m:.1f} MADs"


def fmt_bw(b: float) -> str:
    return f"{b / MB:.3g} MB/s"


def fmt_s(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us"


def pair_matrix(results: pd.DataFrame) -> pd.DataFrame:
    """One row per ordered pair: src, dst, src_node, dst_node, cls, flows, bw (bytes/s at the large
    size), lat (one-way seconds at the small size), from the doctor's `pair` result rows."""
    cols = ["src", "dst", "src_node", "dst_node", "cls", "flows", "bw", "lat"]
    if results is None or results.empty or "doctor_test" not in results:
        return pd.DataFrame(columns=cols)
    p = results[results["doctor_test"] == "pair"]
    if p.empty:
        return pd.DataFrame(columns=cols)
    large, small = p["size_bytes"].max(), p["size_bytes"].min()
    key = ["src_rank", "dst_rank"]
    big = p[p["size_bytes"] == large].set_index(key)
    lit = p[p["size_bytes"] == small].set_index(key)
    out = pd.DataFrame({
        "src_node": big["src_host"].astype(str), "dst_node": big["dst_host"].astype(str),
        "cls": big["link_class"].astype(str), "flows": big["concurrent_flows"].astype(float),
        "bw": large / big["time_median_s"].astype(float),
        "lat": lit["time_median_s"].astype(float).reindex(big.index),
    })
    out = out.reset_index().rename(columns={"src_rank": "src", "dst_rank": "dst"})
    out["src"], out["dst"] = out["src"].astype(int), out["dst"].astype(int)
    return out[cols].sort_values(["src", "dst"]).reset_index(drop=True)


def compute_table(results: pd.DataFrame, statistic: str = "min") -> pd.DataFrame:
    """rank, node, t (seconds per matmul: each rank's best repetition, or its median one) of the
    `compute` rows. The best by default: load from outside only adds time to a repetition, while
    a CPU quota or a throttled GPU slows every one (each outlasts a quota period)."""
    if results is None or results.empty or "doctor_test" not in results:
        return pd.DataFrame(columns=["rank", "node", "t"])
    c = results[results["doctor_test"] == "compute"]
    col = "time_min_s" if statistic == "min" and "time_min_s" in c else "time_median_s"
    return pd.DataFrame({"rank": c["src_rank"].astype(int), "node": c["src_host"].astype(str),
                         "t": c[col].astype(float)}).reset_index(drop=True)


def compute_suspects(comp: pd.DataFrame, th: Thresholds) -> list[Suspect]:
    med, mad = robust(comp["t"])
    out = []
    for r in comp.itertuples():
        m = high(r.t, med, mad, th.mad_k, th.compute_excess)
        if m is not None:
            out.append(Suspect(name=f"rank {r.rank} compute", scope="compute", factor=r.t / med, mads=m, rank=r.rank,
                               evidence=f"rank {r.rank} ({r.node}) compute: {fmt_s(r.t)} per matmul ({th.compute_statistic} "
                                        f"of its repetitions), median of "
                                        f"{len(comp)} ranks {fmt_s(med)}, {fmt_mads(m)} above (+{r.t / med - 1:.0%})"))
    return out


def node_suspects(inter: pd.DataFrame, th: Thresholds) -> list[Suspect]:
    """A node is slow when even its fastest peer is slow with it: its score is the best, over the
    other nodes, of the median bandwidth of the rank pairs between it and that node (both ways),
    judged against the median and MAD of the inter-node pairs that do not touch it (leave one out).
    A slow node slows every one of its node links; a slow link between two nodes slows one of
    theirs (the node-link step names it). Judged against the other nodes' own medians instead, a
    slow node diluted its healthy peers: at 3 nodes each of them has half its pairs with the slow
    one and scores (s + 1) / 2, so a node at 0.6x read only 25% below them."""
    nodes = sorted(set(inter["src_node"]) | set(inter["dst_node"]))
    if len(nodes) < 3:
        return []
    out = []
    for n in nodes:
        near = (inter["src_node"] == n) | (inter["dst_node"] == n)
        t, rest = inter[near], inter[~near]
        if t.empty or rest.empty:
            continue
        peer = np.where(t["src_node"] == n, t["dst_node"], t["src_node"])
        by_peer = t.groupby(peer)["bw"].median()
        score, best = float(by_peer.max()), str(by_peer.idxmax())
        med, mad = robust(rest["bw"])
        m = low(score, med, mad, th.mad_k, th.node_shortfall)
        if m is not None:
            out.append(Suspect(name=f"node {n}", scope="node", factor=med / score, mads=m,
                               explains=tuple(zip(t["src"], t["dst"])),
                               evidence=f"node {n}: {fmt_bw(score)} with its fastest peer ({best}; median over the "
                                        f"pairs between them), median of the {len(rest)} inter-node pairs that do not "
                                        f"touch it {fmt_bw(med)}, {fmt_mads(m)} below ({score / med - 1:.0%})"))
    return out


def node_link_suspects(inter: pd.DataFrame, th: Thresholds) -> list[Suspect]:
    """Directed node pairs (median over their rank pairs) against each other; both directions
    flagged -> one `<->` suspect."""
    if len(set(inter["src_node"]) | set(inter["dst_node"])) < 3:
        return []
    groups = {k: g for k, g in inter.groupby(["src_node", "dst_node"])}
    score = {k: float(np.median(g["bw"])) for k, g in groups.items()}
    med, mad = robust(score.values())
    flagged = {k: m for k in score if (m := low(score[k], med, mad, th.mad_k, th.node_shortfall)) is not None}
    out, seen = [], set()
    for (a, b), m in sorted(flagged.items(), key=lambda kv: score[kv[0]]):
        if (a, b) in seen:
            continue
        both = (b, a) in flagged
        seen |= {(a, b), (b, a)}
        if both:
            a, b = sorted((a, b))  # 'link node0 <-> node2', whichever direction was slower
        keys = [(a, b), (b, a)] if both else [(a, b)]
        pairs = pd.concat([groups[k] for k in keys])
        value = float(np.median(pairs["bw"]))
        arrow = "<->" if both else "->"
        one = "" if both else f" (one direction: {b} -> {a} {fmt_bw(score.get((b, a), math.nan))})"
        out.append(Suspect(name=f"link {a} {arrow} {b}", scope="node-link", factor=med / value, mads=m,
                           explains=tuple(zip(pairs["src"], pairs["dst"])),
                           evidence=f"link {a} {arrow} {b}: {fmt_bw(value)}, median of {len(score)} directed node "
                                    f"pairs {fmt_bw(med)}, {fmt_mads(m)} below ({value / med - 1:.0%}){one}"))
    return out


def rank_link_suspects(pairs: pd.DataFrame, th: Thresholds, latency: bool = True) -> list[Suspect]:
    """Ordered rank pairs against their own class (intra or inter), bandwidth then latency."""
    out = []
    tests = [("bw", low, th.min_shortfall)] + ([("lat", high, th.latency_excess)] if latency else [])
    for cls, c in pairs.groupby("cls"):
        where = "intra-node" if cls == "intra" else "inter-node"
        for col, test, floor in tests:
            med, mad = robust(c[col])
            hits = {}
            for r in c.itertuples():
                m = test(getattr(r, col), med, mad, th.mad_k, floor)
                if m is not None:
                    hits[(r.src, r.dst)] = (getattr(r, col), m)
            done = set()
            for (s, d), (v, m) in sorted(hits.items(), key=lambda kv: -kv[1][1]):
                if (s, d) in done:
                    continue
                both = (d, s) in hits
                done |= {(s, d), (d, s)}
                if both:
                    s, d = min(s, d), max(s, d)
                arrow = "<->" if both else "->"
                if col == "bw":
                    text = f"{fmt_bw(v)}, median of {where} pairs {fmt_bw(med)}, {fmt_mads(m)} below ({v / med - 1:.0%})"
                    factor, name = med / v, f"link rank {s} {arrow} rank {d}"
                else:
                    text = f"{fmt_s(v)} one-way, median of {where} pairs {fmt_s(med)}, {fmt_mads(m)} above (+{v / med - 1:.0%})"
                    factor, name = v / med, f"latency rank {s} {arrow} rank {d}"
                out.append(Suspect(name=name, scope="rank-link" if col == "bw" else "latency", factor=factor, mads=m, evidence=f"{name}: {text}",
                                   explains=((s, d), (d, s)) if both else ((s, d),)))
    return out


def diagnose(pairs: pd.DataFrame, comp: pd.DataFrame, th: Thresholds, groups: pd.DataFrame | None = None,
             oversubscribed: bool = False) -> list[Suspect]:
    """Every suspect, worst first (see the module's docstring for the order of attribution)."""
    found = compute_suspects(comp, th) if len(comp) >= 3 else []
    slow_ranks = {s.rank for s in found}
    left = pairs[~(pairs["src"].isin(slow_ranks) | pairs["dst"].isin(slow_ranks))]
    for step in (node_suspects, node_link_suspects):
        new = step(left[left["cls"] == "inter"], th)
        explained = {p for s in new for p in s.explains}
        left = left[np.array([(s, d) not in explained for s, d in zip(left["src"], left["dst"])], dtype=bool)]
        found += new
    found += rank_link_suspects(left, th, latency_judged(th, oversubscribed))
    if groups is not None and th.group_factor > 0:
        for g in groups.itertuples():
            if np.isfinite(g.expected_s) and g.expected_s > 0 and g.t / g.expected_s > th.group_factor:
                found.append(Suspect(name=f"group {g.group}", scope="group", factor=g.t / g.expected_s, mads=math.nan,
                                     evidence=f"group {g.group} all_reduce: {fmt_s(g.t)}, expected {fmt_s(g.expected_s)} "
                                              f"from the pair matrix ({g.t / g.expected_s:.1f}x, limit {th.group_factor:g}x)"))
    return sorted(found, key=lambda s: -s.factor)


def expected_allreduce_s(ranks: list[int], size: int, pairs: pd.DataFrame) -> float:
    """A ring all_reduce of `size` bytes over `ranks` (in this order), from the pair matrix:
    2 (n - 1) alpha + 2 (n - 1) / n x size / B (the ring's reduce-scatter then all-gather; Thakur,
    Rabenseifner and Gropp 2005; nccl-tests PERFORMANCE.md's bus factor), where alpha is the largest
    one-way latency and B the smallest bandwidth of the ring's neighbour pairs, each pair's measured
    bandwidth times the flows that shared its node link when it was measured (one ring flow has
    the link to itself)."""
    n = len(ranks)
    if n < 2:
        return math.nan
    idx = pairs.set_index(["src", "dst"])
    hops = [(ranks[i], ranks[(i + 1) % n]) for i in range(n)]
    if any(h not in idx.index for h in hops):
        return math.nan
    bw = min(float(idx.loc[h, "bw"] * idx.loc[h, "flows"]) for h in hops)
    alpha = max(float(idx.loc[h, "lat"]) for h in hops)
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size / bw


def group_table(results: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """group, ranks, size, t (median seconds), expected_s, ratio of the `group` rows."""
    cols = ["group", "ranks", "size", "t", "expected_s", "ratio"]
    if results is None or results.empty or "doctor_test" not in results:
        return pd.DataFrame(columns=cols)
    g = results[results["doctor_test"] == "group"]
    rows = []
    for r in g.itertuples():
        ranks = [int(x) for x in str(r.group_ranks).split(",") if x]
        exp = expected_allreduce_s(ranks, int(r.size_bytes), pairs)
        rows.append({"group": r.group_name, "ranks": r.group_ranks, "size": int(r.size_bytes),
                     "t": float(r.time_median_s), "expected_s": exp, "ratio": float(r.time_median_s) / exp})
    return pd.DataFrame(rows, columns=cols)


def latency_judged(th: Thresholds, oversubscribed: bool) -> bool:
    """Latency is judged when asked (on), or by default (auto) when no rank shared its cores: with
    more ranks than cores a small message's round trip waits for the scheduler (milliseconds,
    at random), and that is not the link's latency."""
    return th.latency_verdict == "on" or (th.latency_verdict == "auto" and not oversubscribed)


def oversubscribed_rows(results: pd.DataFrame) -> bool:
    return bool(results is not None and "oversubscribed" in results and results["oversubscribed"].fillna(False).any())


def verdict_of(results: pd.DataFrame, th: Thresholds) -> list[Suspect]:
    """The verdict of a stored run's results rows."""
    pairs = pair_matrix(results)
    return diagnose(pairs, compute_table(results, th.compute_statistic), th, group_table(results, pairs),
                    oversubscribed_rows(results))
