"""Collectives: busbw vs size and latency vs size per collective (p25-p75 bands), energy per GB
vs size (bench.report.plots.energy), the nccl-tests-style table and the wrong-elements summary."""

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bench.report.plots.common import (Section, finish_axes, legend, new_figure, save, size_axis, size_label,
                                       style)
from bench.report.plots.data import Entry, lacking, num, series_keys, series_label, table, with_band
from bench.report.plots.energy import per_gb_vs_size
from bench.results.fingerprint import of_run

SMALL_BYTES = 64 * 1024  # "small sizes" of the latency plot: where alpha dominates on most fabrics
_SERIES = ("world", "dtype", "placement", "mode", "op", "root", "algorithm")


def _curves(ax, df, keys, y_of, multi_run):
    """One line per series with its p25-p75 band; baselines dashed grey. Returns nothing drawn -> False."""
    drawn = False
    groups = df.groupby(keys, dropna=False, sort=True) if keys else [((), df)]
    for i, (key, g) in enumerate(groups):
        g = g.sort_values("size_bytes")
        base = bool(g["_baseline"].iloc[0])
        st = style(i, baseline=base)
        x = num(g, "size_bytes")
        y, lo, hi = y_of(g)
        if not np.isfinite(y).any():
            continue
        lab = series_label(keys, key) + (" (baseline)" if base and "_label" not in keys else "")
        ax.plot(x, y, label=lab, **st)
        if np.isfinite(lo).any():
            ax.fill_between(x, lo, hi, color=st["color"], alpha=0.12 if base else 0.2, linewidth=0)
        drawn = True
    return drawn


def _busbw(g):
    # busbw = S * factor / t: the band's slow end (p75 time) is the low bandwidth
    scale = num(g, "size_bytes") * num(g, "bus_factor") / 1e9
    return num(g, "busbw_gbps"), scale / num(g, "band_p75_s"), scale / num(g, "band_p25_s")


def _latency_us(g):
    return num(g, "time_median_s") * 1e6, num(g, "band_p25_s") * 1e6, num(g, "band_p75_s") * 1e6


def _nccl_table(df: pd.DataFrame) -> str:
    """nccl-tests' layout: size count type redop root | time algbw busbw #wrong per placement."""
    base = ["size_bytes", "count", "dtype", "op", "root"]
    out = None
    for place in ("out-of-place", "in-place"):
        p = df[df["placement"] == place]
        if p.empty:
            continue
        p = p[base + ["time_median_s", "algbw_gbps", "busbw_gbps", "wrong", "noisy"]].copy()
        p[f"{place} time (us)"] = [f"{t * 1e6:.2f}{'*' if bool(n) else ''}" for t, n in
                                   zip(num(p, "time_median_s"), p["noisy"].fillna(False))]
        p[f"{place} algbw (GB/s)"] = num(p, "algbw_gbps").round(3)
        p[f"{place} busbw (GB/s)"] = num(p, "busbw_gbps").round(3)
        p[f"{place} #wrong"] = p["wrong"]
        p = p.drop(columns=["time_median_s", "algbw_gbps", "busbw_gbps", "wrong", "noisy"])
        out = p if out is None else out.merge(p, on=base, how="outer")
    if out is None:
        return "<p>no rows</p>"
    out = out.sort_values("size_bytes").rename(columns={"size_bytes": "size (B)", "count": "count (elements)",
                                                        "dtype": "type", "op": "redop"})
    out["redop"] = out["redop"].replace("", "none")
    return out.to_html(index=False, escape=True, na_rep="-", classes="data", border=0)


def section(entries: list[Entry], out_dir: Path) -> Section:
    sec = Section("collectives", "Collectives")
    res = table(entries, "results")
    if res.empty:
        sec.missing.append("No collectives results table in: " + ", ".join(e.label for e in entries))
        return sec
    if "collective" not in res:
        sec.missing.append("results table has no 'collective' column")
        return sec
    samples = table(entries, "samples")
    for lab in lacking(entries, "samples"):
        sec.missing.append(f"{lab}: no samples table (raw per-iteration times); its bands use time_p25_s/time_p75_s")
    res, band_how = with_band(res, samples)
    sec.notes.append(band_how)
    sec.notes.append("busbw = algbw x bus factor (nccl-tests PERFORMANCE.md); time = median over iterations, "
                     "reduced over ranks as the row's rank_reduce says (max: the slowest rank; avg: nccl-tests' "
                     "default), in the row's mode; '*' in the tables marks a noisy row (IQR/median > 0.1).")
    multi = res["_label"].nunique() > 1
    for coll in sorted(res["collective"].dropna().unique()):
        c = res[res["collective"] == coll]
        keys = series_keys(c, _SERIES, multi)
        sized = c[num(c, "size_bytes") > 0]
        if not sized.empty:
            fig, axes = new_figure()
            ax = axes[0][0]
            if _curves(ax, sized, keys, _busbw, multi):
                size_axis(ax, num(sized, "size_bytes"))
                finish_axes(ax, "message size S (bytes, log2)", "bus bandwidth (GB/s, 1e9 B/s)",
                            f"{coll}: bus bandwidth vs message size")
                sec.images.append(save(
                    fig, out_dir, f"collectives_{coll}_busbw_vs_size", f"{coll}: busbw vs size",
                    f"Line plot of {coll} bus bandwidth in GB/s against message size from "
                    f"{size_label(sized['size_bytes'].min())}B to {size_label(sized['size_bytes'].max())}B, "
                    f"one line per {', '.join(k.strip('_') for k in keys) or 'run'}, with p25-p75 bands."))
            else:
                plt.close(fig)
                sec.missing.append(f"{coll}: busbw is null at every size")
            per_gb_vs_size(sec, sized, keys, out_dir, coll)
        if not (num(c, "size_bytes") > 0).any():
            sec.missing.append(f"{coll}: moves no data (S = 0), so no size axis: its latency is in the table below")
            continue
        small = c[(num(c, "size_bytes") > 0) & (num(c, "size_bytes") <= SMALL_BYTES)]
        if small.empty:
            sec.missing.append(f"{coll}: no sizes <= {size_label(SMALL_BYTES)}B measured, so no small-size latency plot")
            continue
        fig, axes = new_figure()
        ax = axes[0][0]
        _curves(ax, small, keys, _latency_us, multi)
        size_axis(ax, num(small, "size_bytes"))
        ax.set_yscale("log")
        ax.set_xlabel("message size S (bytes, log2)")
        ax.set_ylabel("time per op (us, log)")
        ax.set_title(f"{coll}: latency vs message size (sizes <= {size_label(SMALL_BYTES)}B)")
        ax.grid(True, which="both", alpha=0.3)
        legend(ax)
        sec.images.append(save(
            fig, out_dir, f"collectives_{coll}_latency_vs_size_small", f"{coll}: latency vs size (small sizes)",
            f"Log-log plot of {coll} median time per op in microseconds against message sizes up to "
            f"{size_label(SMALL_BYTES)}B, with p25-p75 bands."))
    # nccl-tests style tables, one per run and case
    for (lab, cid), g in res.groupby(["_label", "case_id"], sort=True):
        sec.tables.append((f"{lab}: {cid}", _nccl_table(g)))
    wrong = res.groupby(["_label", "collective"], dropna=False).agg(
        rows=("case_id", "size"), checks=("checks", "sum"), wrong_elements=("wrong", "sum")).reset_index()
    wrong["status"] = np.where(wrong["wrong_elements"] > 0, "FAILED", "OK")
    wrong = wrong.rename(columns={"_label": "run"})
    sec.tables.insert(0, ("Wrong elements (summed over ranks and checks)",
                          wrong.to_html(index=False, escape=True, na_rep="-", classes="data", border=0)))
    _peer_section(sec, entries, out_dir)
    return sec


# ----------------------------------------------------------------------------- imported peers (nccl-tests, PARAM)

_PEER_KEYS = ("collective", "world", "dtype", "placement", "size_bytes")  # the same case and size
# ... measured by the same definition on the same machine: only then is a ratio a comparison. A
# latency-mode row (one op per sample, max over ranks) against nccl-tests' back-to-back average
# reads low by design; another GPU model, or the same one across nodes, measures something else.
_DEFINITION = ("mode", "rank_reduce", "blocking", "op", "tool_options", "_machine")  # tool_options: an import's -z/-G/-C


def machine_of(meta: dict) -> str:
    """The machine a run measured, as the overlay pairs and names it: the device model (the GPU
    model, or cpu and the CPU model) and the node count, from meta.json (bench.results.fingerprint)."""
    fp = of_run(meta)
    device = fp.device if fp.device != "cpu" else " ".join(filter(None, ["cpu", fp.cpu_model]))
    return f"{device}, {fp.nodes} node(s)"


def _peer_of(e: Entry) -> str:
    """'' for a distbench run; the tool's name for a run imported from one (meta.json source)."""
    src = e.run.meta.get("source") or {}
    return str(src.get("tool") or "") if isinstance(src, dict) else ""


def _own_and_peers(entries: list[Entry]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(distbench rows, imported rows), each with _label, _tool and _machine; baselines left out."""
    own = [e for e in entries if not e.baseline and not _peer_of(e)]
    peers = [e for e in entries if not e.baseline and _peer_of(e)]
    tool = {e.label: _peer_of(e) for e in peers}
    machine = {e.label: machine_of(e.run.meta) for e in own + peers}

    def frame(es):
        df = table(es, "results")
        if df.empty or "collective" not in df:
            return pd.DataFrame()
        return df.assign(_tool=[tool.get(lab, "distbench") for lab in df["_label"]],
                         _machine=[machine[lab] for lab in df["_label"]])

    return frame(own), frame(peers)


def _norm(v) -> str:
    """A definition value as compared: missing, '' and 'none' alike (an op of a collective without one)."""
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return ""
    text = str(v).strip()
    return "" if text.lower() == "none" else text


def _candidates(own: pd.DataFrame, peers: pd.DataFrame) -> pd.DataFrame:
    """Every (distbench row, imported row) of the same case and size, with both definitions
    (`<column>` and `peer_<column>`) and `_why`: how they differ ('' when alike)."""
    if own.empty or peers.empty:
        return pd.DataFrame()
    cols = [*_PEER_KEYS, "_label", *_DEFINITION, "busbw_gbps", "time_median_s"]
    a = own[[c for c in cols if c in own]].rename(columns={"_label": "run", "time_median_s": "time_s"})
    b = peers[[c for c in [*cols, "_tool"] if c in peers]].rename(columns={
        "_label": "peer_run", "_tool": "tool", "busbw_gbps": "peer_busbw_gbps", "time_median_s": "peer_time_s",
        **{c: f"peer_{c}" for c in _DEFINITION}})
    m = a.merge(b, on=list(_PEER_KEYS), how="inner")
    m = m[(num(m, "size_bytes") > 0) & (num(m, "peer_busbw_gbps") > 0)]
    if m.empty:
        return pd.DataFrame()

    def why(r) -> str:
        out = []
        for c in _DEFINITION:
            mine, theirs = _norm(r.get(c)), _norm(r.get(f"peer_{c}"))
            if mine != theirs:
                out.append(f"{c.lstrip('_')} {mine or '-'} vs {theirs or '-'}")
        return "; ".join(out)

    return m.assign(_why=[why(r) for r in m.to_dict("records")]).rename(
        columns={"_machine": "machine", "peer__machine": "peer_machine"})


def peer_ratios(own: pd.DataFrame, peers: pd.DataFrame) -> pd.DataFrame:
    """Per size: distbench busbw / the imported tool's busbw, where both measured the same case
    (collective, world, dtype, placement, size) by the same definition (mode, rank_reduce,
    blocking, op) on the same machine. Empty when nothing pairs."""
    m = _candidates(own, peers)
    if m.empty:
        return pd.DataFrame()
    m = m[m["_why"] == ""].drop(columns=["_why"])
    if m.empty:
        return pd.DataFrame()
    m = m.assign(busbw_ratio=num(m, "busbw_gbps") / num(m, "peer_busbw_gbps"),
                 time_ratio=num(m, "time_s") / num(m, "peer_time_s"))
    return m.sort_values(["collective", "world", "placement", "run", "peer_run", "size_bytes"]).reset_index(drop=True)


def peer_unpaired(own: pd.DataFrame, peers: pd.DataFrame) -> pd.DataFrame:
    """The same case measured by another definition or on another machine: one row per (run,
    peer run, collective, world, dtype, placement, why) with the sizes both measured; no ratio."""
    m = _candidates(own, peers)
    if m.empty:
        return pd.DataFrame()
    m = m[m["_why"] != ""]
    if m.empty:
        return pd.DataFrame()
    keys = ["run", "peer_run", "tool", "collective", "world", "dtype", "placement", "_why"]
    g = m.groupby(keys, sort=True, dropna=False)["size_bytes"].agg(sizes="count").reset_index()
    return g.rename(columns={"_why": "why"})


def _peer_section(sec: Section, entries: list[Entry], out_dir: Path):
    """distbench's busbw over the imported tool's, per size, where like measured like (a plot per
    collective and a table); the same cases measured otherwise drawn side by side without a ratio,
    with why."""
    own, peers = _own_and_peers(entries)
    if peers.empty:
        return
    tools = ", ".join(sorted(peers["_tool"].unique()))
    if own.empty:
        sec.notes.append(f"Imported from {tools} only: no distbench run of this kind in the report to set beside it.")
        return
    r, odd = peer_ratios(own, peers), peer_unpaired(own, peers)
    if r.empty and odd.empty:
        sec.missing.append(f"no size matches between the distbench runs and the {tools} import(s) (same collective, "
                           "world, dtype, placement and size): no ratio")
        return
    sec.notes.append(f"distbench vs {tools}: a ratio only like with like: the same collective, world, dtype, placement "
                     "and size, measured by the same definition (mode, rank_reduce, blocking, op) on the same machine "
                     "(device model and nodes). A latency-mode figure (one op per sample, max over ranks) set against "
                     "nccl-tests' average of back-to-back ops would read low by design; for nccl-tests run "
                     "`distbench collectives --mode nccl-tests`, for PARAM `--mode throughput --blocking 1` and its "
                     "rank reduction. Each tool defines its time its own way (the imported run's meta.json "
                     "source.definitions; docs/imports.md).")
    if not odd.empty:
        _unpaired_plots(sec, own, peers, odd, out_dir)
    if r.empty:
        return
    sec.notes.append(f"Ratio plots: distbench busbw / {tools} busbw at each size both measured alike; > 1: distbench "
                     "reports more bus bandwidth.")
    for coll, g in r.groupby("collective", sort=True):
        fig, axes = new_figure(height_in=3.6)
        ax = axes[0][0]
        for i, (key, s) in enumerate(g.groupby(["run", "peer_run", "tool", "placement", "world"], sort=True)):
            s = s.sort_values("size_bytes")
            ax.plot(num(s, "size_bytes"), num(s, "busbw_ratio"), label=f"{key[0]} / {key[2]} ({key[3]}, w{key[4]})",
                    **style(i))
        ax.axhline(1.0, color="0.3", linewidth=0.8)
        size_axis(ax, num(g, "size_bytes"))
        finish_axes(ax, "message size S (bytes, log2)", "busbw ratio (distbench / peer)",
                    f"{coll}: distbench busbw / {tools} busbw per size (same definition and machine)")
        sec.images.append(save(fig, out_dir, f"collectives_{coll}_busbw_ratio_vs_peer", f"{coll}: busbw vs {tools}",
                               f"Line plot of the ratio of distbench's {coll} bus bandwidth to {tools}'s at each message "
                               "size both measured by the same definition on the same machine, with a reference line "
                               "at 1."))
    t = r[["collective", "world", "dtype", "placement", "size_bytes", "run", "mode", "rank_reduce", "busbw_gbps",
           "peer_run", "tool", "peer_busbw_gbps", "busbw_ratio", "time_ratio", "machine"]].copy()
    for c in ("busbw_gbps", "peer_busbw_gbps", "busbw_ratio", "time_ratio"):
        t[c] = num(t, c).round(3)
    sec.tables.insert(0, (f"distbench vs {tools}, per size (same definition and machine)",
                          t.to_html(index=False, escape=True, na_rep="-", classes="data", border=0)))


def _unpaired_plots(sec: Section, own: pd.DataFrame, peers: pd.DataFrame, odd: pd.DataFrame, out_dir: Path):
    """The cases both measured, but not alike: each side's busbw against size, no ratio, the
    difference in the title; and a table of them."""
    for coll, g in odd.groupby("collective", sort=True):
        fig, axes = new_figure(height_in=3.6)
        ax = axes[0][0]
        whys = sorted(set(g["why"]))
        for i, (run, peer_run) in enumerate(sorted({(a, b) for a, b in zip(g["run"], g["peer_run"])})):
            for j, (df, lab, dash) in enumerate(((own, run, "-"), (peers, peer_run, "--"))):
                s = df[(df["_label"] == lab) & (df["collective"] == coll)]
                for k, (key, c) in enumerate(s.groupby(["world", "placement", "mode"], sort=True)):
                    c = c.sort_values("size_bytes")
                    st = style(2 * i + j)
                    st.update(linestyle=dash)
                    ax.plot(num(c, "size_bytes"), num(c, "busbw_gbps"),
                            label=f"{lab} ({key[2]}, {key[1]}, w{key[0]})", **st)
        size_axis(ax, num(pd.concat([own[own["collective"] == coll], peers[peers["collective"] == coll]]),
                          "size_bytes"))
        finish_axes(ax, "message size S (bytes, log2)", "busbw (GB/s)",
                    f"{coll}: busbw side by side, no ratio: " + " | ".join(whys))
        sec.images.append(save(fig, out_dir, f"collectives_{coll}_busbw_vs_peer_unpaired",
                               f"{coll}: busbw beside the imported run's (no ratio)",
                               f"Line plot of distbench's and the imported tool's {coll} bus bandwidth against message "
                               f"size (imported dashed), without a ratio: no ratio: {' | '.join(whys)}."))
    tools = ", ".join(sorted(set(odd["tool"])))
    sec.tables.insert(0, (f"distbench vs {tools}: not compared (different definitions or machines)",
                          odd.to_html(index=False, escape=True, na_rep="-", classes="data", border=0)))


def _peak(df: pd.DataFrame) -> pd.DataFrame:
    """Per run, collective and world: the largest busbw and the size it was reached at."""
    d = df[(num(df, "size_bytes") > 0) & np.isfinite(num(df, "busbw_gbps"))]
    if d.empty:
        return pd.DataFrame(columns=["_label", "_tool", "collective", "world", "peak_busbw_gbps", "peak_size_bytes"])
    idx = d.assign(_b=num(d, "busbw_gbps")).groupby(["_label", "collective", "world"])["_b"].idxmax()
    p = d.loc[idx, ["_label", "_tool", "collective", "world", "busbw_gbps", "size_bytes"]]
    return p.rename(columns={"busbw_gbps": "peak_busbw_gbps", "size_bytes": "peak_size_bytes"})


def headline(entries: list[Entry], out_dir: Path) -> Section:
    """The answer first: busbw vs size of every collective (imported peers dashed) and the peak busbw
    per collective, with how close it comes to an imported tool's peak."""
    sec = Section("collectives-headline", "Collectives")
    own, peers = _own_and_peers(entries)
    both = pd.concat([f for f in (own, peers) if not f.empty], ignore_index=True) if not (own.empty and peers.empty) \
        else pd.DataFrame()
    if both.empty:
        sec.missing.append("no collectives results rows")
        return sec
    sized = both[(num(both, "size_bytes") > 0) & (num(both, "busbw_gbps") > 0)]  # 0.00 printed: below the log axis
    if not sized.empty:
        fig, axes = new_figure(5.0, 3.2)
        ax = axes[0][0]
        colls = sorted(sized["collective"].unique())
        multi = sized["_label"].nunique() > 1
        for (lab, coll), g in sized.groupby(["_label", "collective"], sort=True):
            best = g.assign(_b=num(g, "busbw_gbps")).groupby("size_bytes")["_b"].max()  # best placement per size
            peer = g["_tool"].iloc[0] != "distbench"
            st = style(colls.index(coll))
            st.update(linestyle="--" if peer else "-", markersize=3)
            name = f"{coll} ({g['_tool'].iloc[0]})" if peer else (f"{coll} {lab}" if multi and not peers.empty and
                                                                 own["_label"].nunique() > 1 else coll)
            ax.plot(best.index.to_numpy(dtype=float), best.to_numpy(dtype=float), label=name, **st)
        size_axis(ax, num(sized, "size_bytes"))
        peaks = sized.assign(_b=num(sized, "busbw_gbps")).groupby(["_label", "collective"])["_b"].max()
        if peaks.min() > 0 and peaks.max() / peaks.min() > 20:  # curves orders of magnitude apart: all visible
            ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)", fontsize=8)
        ax.set_ylabel("busbw (GB/s)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.set_title("bus bandwidth vs size" + (" (dashed: imported)" if not peers.empty else ""), fontsize=9)
        legend(ax)
        sec.images.append(save(fig, out_dir, "headline_collectives_busbw", "collectives: busbw vs size",
                               "Line plot of bus bandwidth in GB/s against message size for every collective"
                               + ("; imported tools' curves dashed" if not peers.empty else "")))
    pk_own = _peak(own) if not own.empty else _peak(both.iloc[:0])
    pk_peer = _peak(peers) if not peers.empty else None
    alike = peer_ratios(own, peers)
    rows = []
    several = not own.empty and own["_label"].nunique() > 1
    for r in (pk_own if len(pk_own) else _peak(peers)).to_dict("records"):
        row = {"collective": r["collective"], "world": int(r["world"]),
               "peak busbw (GB/s)": f"{r['peak_busbw_gbps']:.3g} at {size_label(r['peak_size_bytes'])}B"}
        if several:
            row = {"run": r["_label"], **row}
        if pk_peer is not None and len(pk_own):
            # of peer: over the sizes measured alike only (same definition and machine: peer_ratios)
            p = alike[(alike["collective"] == r["collective"]) & (alike["world"] == r["world"])
                      & (alike["run"] == r["_label"])] if len(alike) else alike
            if len(p):
                best = p.loc[pd.to_numeric(p["peer_busbw_gbps"]).idxmax()]
                row["peer peak"] = f"{best['peer_busbw_gbps']:.3g} ({best['tool']})"
                row["of peer"] = f"{100 * num(p, 'busbw_gbps').max() / best['peer_busbw_gbps']:.3g}%"
            else:
                row["peer peak"], row["of peer"] = "-", "- (no peer row of the same definition and machine)"
        rows.append(row)
    if rows:
        sec.tables.append(("peak busbw per collective", pd.DataFrame(rows).to_html(
            index=False, escape=True, na_rep="-", classes="data", border=0)))
    if not len(pk_own) and pk_peer is not None:
        sec.notes.append(f"imported from {', '.join(sorted(peers['_tool'].unique()))}; no distbench run beside it")
    return sec
