"""The doctor's report section: per run, two heatmaps of the pair matrix (bandwidth at the large
size, one-way latency at the small size; row = sender, column = receiver), the pairs a suspect
accounts for outlined in red, node boundaries drawn, and the verdict as a table."""

import html

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.patches import Rectangle

from bench.doctor.fingerprint_table import table as fingerprint_table
from bench.doctor.summary import thresholds_of
from bench.doctor.verdict import pair_matrix, verdict_of
from bench.report.plots.common import Section, new_figure, save


def _grid(pairs, col: str, ranks: list[int], scale: float) -> np.ndarray:
    m = np.full((len(ranks), len(ranks)), np.nan)
    pos = {r: i for i, r in enumerate(ranks)}
    for r in pairs.itertuples():
        m[pos[r.src], pos[r.dst]] = getattr(r, col) * scale
    return m


def _heatmap(pairs, col, scale, unit, cmap, ranks, marked, nodes, out_dir, name, title, slow_ranks=()):
    fig, axes = new_figure(6.4, 5.4)
    ax = axes[0][0]
    m = _grid(pairs, col, ranks, scale)
    finite = m[np.isfinite(m)]
    spread = finite.size and finite.min() > 0 and finite.max() / finite.min() > 10
    # a log scale when intra- and inter-node figures are orders apart, so either class shows its spread
    im = ax.imshow(m, cmap=cmap, interpolation="nearest", norm=LogNorm() if spread else None)
    fig.colorbar(im, ax=ax, label=unit)
    pos = {r: i for i, r in enumerate(ranks)}
    for s, d in marked:
        if s in pos and d in pos:
            ax.add_patch(Rectangle((pos[d] - 0.5, pos[s] - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.2))
    edges = [i for i in range(1, len(ranks)) if nodes[ranks[i]] != nodes[ranks[i - 1]]]
    for e in edges:  # node boundaries (ranks are in rank order; nodes are contiguous under torchrun)
        ax.axhline(e - 0.5, color="black", linewidth=0.8)
        ax.axvline(e - 0.5, color="black", linewidth=0.8)
    if len(ranks) <= 16:
        for i in range(len(ranks)):
            for j in range(len(ranks)):
                if np.isfinite(m[i, j]):
                    ax.text(j, i, f"{m[i, j]:.3g}", ha="center", va="center", fontsize=7, color="white",
                            bbox={"facecolor": "black", "alpha": 0.35, "linewidth": 0, "pad": 1})
    ax.set_xticks(range(len(ranks)), [str(r) for r in ranks])
    ax.set_yticks(range(len(ranks)), [str(r) for r in ranks])
    for lab in (*ax.get_xticklabels(), *ax.get_yticklabels()):  # a compute suspect: its rank in red
        if lab.get_text() in {str(r) for r in slow_ranks}:
            lab.set_color("red")
            lab.set_fontweight("bold")
    ax.set_xlabel("receiver rank")
    ax.set_ylabel("sender rank")
    ax.set_title(title)
    return save(fig, out_dir, name, title, f"{title}: heatmap, row = sender, column = receiver",
                caption="red outline: a pair a suspect accounts for; red rank: a compute suspect; "
                        "black lines: node boundaries")


def _view(e):
    """One run's pair matrix, its suspects and what they mark (None when the run has no pair rows)."""
    res = e.run.tables.get("results")
    pairs = pair_matrix(res)
    if pairs.empty:
        return None
    suspects = verdict_of(res, thresholds_of(e.run.meta))
    return dict(pairs=pairs, suspects=suspects, marked={p for s in suspects for p in s.explains},
                slow={s.rank for s in suspects if s.rank >= 0}, ranks=sorted(set(pairs["src"]) | set(pairs["dst"])),
                nodes={**dict(zip(pairs["src"], pairs["src_node"])), **dict(zip(pairs["dst"], pairs["dst_node"]))})


def _bandwidth(v, out_dir, name, title):
    return _heatmap(v["pairs"], "bw", 1e-6, "MB/s", "viridis", v["ranks"], v["marked"], v["nodes"], out_dir, name,
                    title, v["slow"])


def _verdict_table(suspects) -> str:
    rows = "".join(f"<tr><td>{i}</td><td>{html.escape(s.name)}</td><td>{s.factor:.2f}x</td>"
                   f"<td>{html.escape(s.evidence)}</td></tr>" for i, s in enumerate(suspects, 1))
    body = rows or "<tr><td colspan='4'>no suspect</td></tr>"
    return f"<table><tr><th>#</th><th>suspect</th><th>factor</th><th>evidence</th></tr>{body}</table>"


def section(entries, out_dir) -> Section:
    sec = Section("doctor", "Doctor: pair matrix and suspects")
    for e in entries:
        v = _view(e)
        if v is None:
            sec.missing.append(f"{e.label}: no pair rows")
            continue
        sec.images.append(_bandwidth(v, out_dir, f"doctor-bandwidth-{e.label}", f"{e.label}: bandwidth per pair (MB/s)"))
        sec.images.append(_heatmap(v["pairs"], "lat", 1e6, "us", "magma_r", v["ranks"], v["marked"], v["nodes"],
                                   out_dir, f"doctor-latency-{e.label}", f"{e.label}: one-way latency per pair (us)",
                                   v["slow"]))
        sec.tables.append((f"{e.label}: verdict", _verdict_table(v["suspects"])))
        fp = fingerprint_table(e.run.tables.get("results"))
        if fp:
            sec.tables.append((f"{e.label}: fingerprint (what distbench plan --cluster-fingerprint prices)", _fingerprint_html(fp)))
    plt.close("all")
    return sec


def _fingerprint_html(rows) -> str:
    body = "".join(f"<tr><td>{html.escape(r['collective'])}</td><td>{html.escape(r['placement'])}</td>"
                   f"<td>{r['groups']} x {r['group_size']}</td><td>{html.escape(str(r['scope']))}</td>"
                   f"<td>{r['size_bytes']}</td><td>{r['time_s'] * 1e3:.3f}</td><td>{r['busbw_gbps']:.3f}</td></tr>"
                   for r in rows)
    return ("<table><tr><th>collective</th><th>placement</th><th>groups x ranks</th><th>scope</th><th>bytes</th>"
            f"<th>ms (max over ranks)</th><th>busbw GB/s</th></tr>{body}</table>")


def headline(entries, out_dir) -> Section:
    """The answer first: the latest doctor run's bandwidth heatmap (suspects outlined) and its verdict."""
    sec = Section("doctor-headline", "doctor")
    runs = [e for e in entries if not getattr(e, "baseline", False)]
    v = _view(runs[-1]) if runs else None
    if v is None:
        sec.missing.append("no doctor pair rows")
        return sec
    e = runs[-1]
    sec.images.append(_bandwidth(v, out_dir, f"headline-doctor-bandwidth-{e.label}", f"{e.label}: bandwidth per pair (MB/s)"))
    sec.tables.append((f"{e.label}: verdict", _verdict_table(v["suspects"])))
    plt.close("all")
    return sec
