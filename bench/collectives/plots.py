"""Collectives: busbw vs size and latency vs size per collective (p25-p75 bands), the
nccl-tests-style table and the wrong-elements summary."""

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bench.report.plots.common import (Section, finish_axes, legend, new_figure, save, size_axis, size_label,
                                       style)
from bench.report.plots.data import Entry, lacking, num, series_keys, series_label, table, with_band

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
    return sec
