"""The overlap kind's report section: the hidden share of communication against message size per
collective (with the ideal, perfect overlap without interference, dashed), each side's slowdown
under the other beside it, and DDP's exposed communication against its bucket size; the headline
is the first two for the latest run."""

import html
import math

import matplotlib.pyplot as plt

from bench.overlap.summary import pair_table, training_table
from bench.report.plots.common import Section, finish_axes, legend, new_figure, save, size_axis, style


def _hidden(pairs, out_dir, name, title):
    fig, axes = new_figure(6.4, 4.2)
    ax = axes[0][0]
    for i, (coll, g) in enumerate(pairs.groupby("collective")):
        st = style(i)
        ax.plot(g["size_bytes"], g["hidden_share"], label=f"{coll}", **st)
        ax.plot(g["size_bytes"], g["ideal_hidden_share"], linestyle="--", color=st.get("color"), alpha=0.5,
                label=f"{coll} ideal")
    ax.axhline(1.0, color="grey", linewidth=0.6)
    ax.axhline(0.0, color="grey", linewidth=0.6)
    size_axis(ax, sorted(set(pairs["size_bytes"])))
    finish_axes(ax, "message size (bytes)", "hidden share of communication", title)
    legend(ax)
    return save(fig, out_dir, name, title, f"{title}: hidden share against message size per collective",
                caption="hidden = (comm + compute - both) / comm; dashed: min(comm, compute) / comm (perfect overlap)")


def _slowdowns(pairs, out_dir, name, title):
    fig, axes = new_figure(6.4, 4.2)
    ax = axes[0][0]
    for i, (coll, g) in enumerate(pairs.groupby("collective")):
        st = style(i)
        ax.plot(g["size_bytes"], g["comm_slowdown"], label=f"{coll}: comm", **st)
        ax.plot(g["size_bytes"], g["compute_slowdown"], linestyle=":", marker="x", color=st.get("color"),
                label=f"{coll}: compute")
    ax.axhline(1.0, color="grey", linewidth=0.6)
    size_axis(ax, sorted(set(pairs["size_bytes"])))
    finish_axes(ax, "message size (bytes)", "time beside the other / alone", title)
    legend(ax)
    return save(fig, out_dir, name, title, f"{title}: each side's slowdown under the other",
                caption="1: no interference; above 1: running together cost that side time")


def _exposed(tr, out_dir, name, title):
    ddp = tr[tr["overlap_test"] == "ddp"].sort_values("bucket_cap_mb")
    fig, axes = new_figure(6.4, 4.2)
    ax = axes[0][0]
    ax.plot(ddp["bucket_cap_mb"], ddp["overlap_exposed_s"] * 1e3, label="exposed (step - no_sync step)", **style(0))
    ax.plot(ddp["bucket_cap_mb"], ddp["overlap_comm_s"] * 1e3, label="bucket all-reduces alone", **style(1))
    ax.set_xscale("log")
    finish_axes(ax, "DDP bucket_cap_mb", "ms per step", title)
    legend(ax)
    return save(fig, out_dir, name, title, f"{title}: DDP's exposed communication against bucket size")


def _table(tr) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(str(r.case_id))}</td><td>{r.overlap_both_s * 1e3:.2f}</td>"
        f"<td>{r.overlap_compute_s * 1e3:.2f}</td><td>{r.overlap_exposed_s * 1e3:.2f}</td>"
        f"<td>{r.overlap_comm_s * 1e3:.2f}</td><td>{'-' if not math.isfinite(r.hidden_share) else f'{r.hidden_share:.2f}'}</td></tr>"
        for r in tr.itertuples())
    return ("<table><tr><th>variant</th><th>step ms</th><th>no-comm step ms</th><th>exposed ms</th>"
            f"<th>collectives alone ms</th><th>hidden share</th></tr>{rows}</table>")


def _draw(sec, e, out_dir, prefix=""):
    res = e.run.tables.get("results")
    pairs, tr = pair_table(res), training_table(res)
    if pairs.empty and tr.empty:
        sec.missing.append(f"{e.label}: no overlap rows")
        return
    if not pairs.empty:
        sec.images.append(_hidden(pairs, out_dir, f"{prefix}overlap-hidden-{e.label}", f"{e.label}: hidden share"))
        sec.images.append(_slowdowns(pairs, out_dir, f"{prefix}overlap-slowdown-{e.label}", f"{e.label}: slowdowns"))
    if not tr.empty:
        if (tr["overlap_test"] == "ddp").any():
            sec.images.append(_exposed(tr, out_dir, f"{prefix}overlap-ddp-{e.label}", f"{e.label}: DDP exposed communication"))
        sec.tables.append((f"{e.label}: training steps", _table(tr)))


def section(entries, out_dir) -> Section:
    sec = Section("overlap", "Overlap: communication hidden behind compute")
    for e in entries:
        _draw(sec, e, out_dir)
    plt.close("all")
    return sec


def headline(entries, out_dir) -> Section:
    """The answer first: the latest run's hidden share against size and DDP's exposed communication."""
    sec = Section("overlap-headline", "overlap")
    runs = [e for e in entries if not getattr(e, "baseline", False)]
    if not runs:
        sec.missing.append("no overlap run")
        return sec
    _draw(sec, runs[-1], out_dir, prefix="headline-")
    sec.images = [i for i in sec.images if "slowdown" not in i.file] + [i for i in sec.images if "slowdown" in i.file]
    plt.close("all")
    return sec
