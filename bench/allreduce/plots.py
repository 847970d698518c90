"""Allreduce algorithms: time and busbw vs size per algorithm / NCCL variant with the measured
crossover marked, the fitted alpha-beta lines over the points with their residuals, and the
model's predicted time vs world size (titled as model output, never as a measurement)."""

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bench.report.plots.common import (Section, chunk_axis, finish_axes, legend, new_figure, save, size_axis,
                                       size_label, style)
from bench.report.plots.data import Entry, lacking, num, table, with_band

_BLOCK = ("dtype", "op", "mode")


def _labels(df: pd.DataFrame) -> pd.Series:
    v = df["variant"].fillna("") if "variant" in df else pd.Series("", index=df.index)
    return np.where(v != "", df["algorithm"].astype(str) + "[" + v.astype(str) + "]", df["algorithm"].astype(str))


def _block_name(key) -> str:
    return " ".join(f"{k}={v}" for k, v in zip(_BLOCK, key))


def _crossovers(cross: pd.DataFrame, lab: str, world: int, key) -> list[tuple[float, str]]:
    if cross.empty:
        return []
    c = cross[(cross["_label"] == lab) & (num(cross, "world") == world)]
    for k, v in zip(_BLOCK, key):
        if k in c:
            c = c[c[k].astype(str) == str(v)]
    out = []
    for _, r in c.iterrows():
        b = r.get("measured_bytes")
        if r.get("measured_kind") in ("crossover", "inverted", "mixed") and pd.notna(b):
            out.append((float(b), f"measured {r['measured_kind']} {size_label(float(b))}B"))
    return out


def _fits(resid: pd.DataFrame, run_label: str, world: int) -> pd.DataFrame:
    """Fitted points at this world: the single-world fit when there is one, else a multi-world fit."""
    if resid.empty:
        return resid
    r = resid[(resid["_label"] == run_label) & (num(resid, "world") == world)]
    own = r[r["fit_worlds"].astype(str) == str(world)]
    return own if not own.empty else r


def _time_and_residuals(sec, out_dir, blk, key, world, resid, cross, multi):
    fig, axes = new_figure(8.0, 6.2, nrows=2, ncols=1, sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    ax, rax = axes[0][0], axes[1][0]
    fitted_any = False
    for i, ((run_lab, lab), g) in enumerate(blk.groupby(["_label", "_algo"], sort=True)):
        g = g.sort_values("size_bytes")
        st = style(i, baseline=bool(g["_baseline"].iloc[0]))
        name = f"{run_lab}: {lab}" if multi else lab
        x = num(g, "size_bytes")
        ax.plot(x, num(g, "time_median_s") * 1e6, label=f"{name} measured", **st)
        ax.fill_between(x, num(g, "band_p25_s") * 1e6, num(g, "band_p75_s") * 1e6, color=st["color"], alpha=0.18,
                        linewidth=0)
        f = _fits(resid, run_lab, world)
        f = f[f["label"] == lab].sort_values("size_bytes") if not f.empty else f
        if not f.empty:
            fitted_any = True
            ax.plot(num(f, "size_bytes"), num(f, "fitted_s") * 1e6, color=st["color"], linestyle=":", linewidth=1.2,
                    label=f"{name} alpha-beta fit ({f['fit_worlds'].iloc[0]})")
            rax.plot(num(f, "size_bytes"), num(f, "rel_residual") * 100, color=st["color"], marker=st["marker"],
                     linestyle="-", linewidth=0.8, markersize=3)
    marks = []
    for run_lab in blk["_label"].unique():
        marks += _crossovers(cross, run_lab, world, key)
    sizes = pd.to_numeric(blk["size_bytes"], errors="coerce").dropna()
    lo, hi = (float(sizes.min()), float(sizes.max())) if len(sizes) else (0.0, 0.0)
    for j, (b, text) in enumerate(marks):
        ax.axvline(b, color="k", linestyle="--", linewidth=0.9)
        # staggered so several runs' markers never print over each other; on the side of the line
        # with more room, so a crossover near the largest size stays inside the axes
        right = lo > 0 and b > (lo * hi) ** 0.5
        ax.annotate(text, xy=(b, 1 - 0.07 * (j + 1)), xycoords=("data", "axes fraction"), fontsize=7,
                    ha="right" if right else "left", va="top", xytext=(-3 if right else 3, 0),
                    textcoords="offset points",
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.7", "alpha": 0.9})
    ax.set_yscale("log")
    ax.set_ylabel("time per allreduce (us, log)")
    ax.set_title(f"allreduce time vs size, world {world} ({_block_name(key)})")
    ax.grid(True, which="both", alpha=0.3)
    legend(ax)
    rax.axhline(0, color="0.5", linewidth=0.8)
    rax.set_ylabel("fit residual (%)")
    rax.set_xlabel("message size S (bytes, log2)")
    rax.grid(True, alpha=0.3)
    if not fitted_any:
        rax.text(0.5, 0.5, "no fitted alpha-beta points stored for this world", transform=rax.transAxes,
                 ha="center", va="center", fontsize=8)
        sec.missing.append(f"world {world} ({_block_name(key)}): no residuals (fit) rows, so no fitted lines")
    size_axis(rax, num(blk, "size_bytes"))
    cross_txt = "; ".join(t for _, t in marks) or "no measured crossover in this range"
    return save(fig, out_dir, f"allreduce_time_vs_size_w{world}_{'_'.join(map(str, key))}",
                f"allreduce: time vs size with alpha-beta fits, world {world}",
                f"Log-log plot of allreduce time in microseconds against message size at world {world} for each "
                f"algorithm, measured medians with p25-p75 bands and dotted fitted alpha-beta lines; lower panel: "
                f"relative fit residuals in percent. Crossover: {cross_txt}.")


def _busbw(out_dir, blk, key, world, multi):
    fig, axes = new_figure()
    ax = axes[0][0]
    for i, ((run_lab, lab), g) in enumerate(blk.groupby(["_label", "_algo"], sort=True)):
        g = g.sort_values("size_bytes")
        st = style(i, baseline=bool(g["_baseline"].iloc[0]))
        scale = num(g, "size_bytes") * num(g, "bus_factor") / 1e9
        ax.plot(num(g, "size_bytes"), num(g, "busbw_gbps"), label=f"{run_lab}: {lab}" if multi else lab, **st)
        ax.fill_between(num(g, "size_bytes"), scale / num(g, "band_p75_s"), scale / num(g, "band_p25_s"),
                        color=st["color"], alpha=0.18, linewidth=0)
    size_axis(ax, num(blk, "size_bytes"))
    finish_axes(ax, "message size S (bytes, log2)", "bus bandwidth (GB/s, 2(n-1)/n factor)",
                f"allreduce busbw vs size, world {world} ({_block_name(key)})")
    return save(fig, out_dir, f"allreduce_busbw_vs_size_w{world}_{'_'.join(map(str, key))}",
                f"allreduce: busbw vs size, world {world}",
                f"Line plot of allreduce bus bandwidth in GB/s against message size at world {world}, one line per "
                "algorithm, with p25-p75 bands.")


def _predictions(out_dir, pred: pd.DataFrame, multi: bool):
    sizes = sorted(pred["size_bytes"].dropna().unique())
    ncols = min(3, len(sizes))
    nrows = int(np.ceil(len(sizes) / ncols))
    fig, axes = new_figure(4.2 * ncols + 1, 3.8 * nrows, nrows=nrows, ncols=ncols)
    flat = [a for row in axes for a in row]
    for ax, size in zip(flat, sizes):
        p = pred[pred["size_bytes"] == size]
        for i, ((run_lab, lab), g) in enumerate(p.groupby(["_label", "label"], sort=True)):
            g = g.sort_values("world")
            st = style(i, baseline=bool(g["_baseline"].iloc[0]))
            name = f"{run_lab}: {lab}" if multi else lab
            ax.plot(num(g, "world"), num(g, "predicted_time_s") * 1e6, label=f"{name} (model)", **st)
            m = g[pd.notna(g["measured_time_s"])] if "measured_time_s" in g else g.iloc[:0]
            if not m.empty:
                ax.scatter(num(m, "world"), num(m, "measured_time_s") * 1e6, color=st["color"], marker="x", s=30,
                           zorder=3, label=f"{name} measured")
        chunk_axis(ax, p["world"].dropna().unique())
        ax.set_yscale("log")
        ax.set_xlabel("world size (ranks, log2)")
        ax.set_ylabel("predicted time (us, log)")
        ax.set_title(f"S = {size_label(size)}B", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        legend(ax)
    for ax in flat[len(sizes):]:
        ax.set_visible(False)
    basis = ", ".join(sorted({str(w) for w in pred["fit_worlds"].dropna()}))
    fig.suptitle(f"MODEL OUTPUT, not measurements: predicted allreduce time vs world size (fit on world {basis})",
                 fontsize=10)
    return save(fig, out_dir, "allreduce_MODEL_OUTPUT_predicted_time_vs_world",
                "MODEL OUTPUT: predicted allreduce time vs world size",
                f"Model output, not measured: predicted allreduce time in microseconds against world size for each "
                f"algorithm, one panel per message size ({', '.join(size_label(s) + 'B' for s in sizes)}), fitted on "
                f"world {basis}; crosses mark measurements where they exist.")


def section(entries: list[Entry], out_dir: Path) -> Section:
    sec = Section("allreduce", "Allreduce algorithms")
    res = table(entries, "results")
    if res.empty or "algorithm" not in res:
        sec.missing.append("No allreduce results table in: " + ", ".join(e.label for e in entries))
        return sec
    res, band_how = with_band(res, table(entries, "samples"))
    res["_algo"] = _labels(res)
    sec.notes.append(band_how)
    sec.notes.append("busbw uses nccl-tests' all_reduce factor 2(n-1)/n for every algorithm: a normalisation, "
                     "not the bytes each algorithm moves. Dotted lines: alpha-beta fit t = a(n) alpha + b(n) S beta.")
    resid, cross, pred, model = (table(entries, t) for t in ("residuals", "crossover", "predictions", "model"))
    for name in ("samples", "residuals", "crossover", "predictions", "model"):
        for lab in lacking(entries, name):
            sec.missing.append(f"{lab}: no {name} table")
    multi = res["_label"].nunique() > 1
    blocks = res.groupby([c for c in _BLOCK if c in res] + ["world"], dropna=False, sort=True)
    for key_world, blk in blocks:
        *key, world = key_world
        sec.images.append(_time_and_residuals(sec, out_dir, blk, tuple(key), int(world), resid, cross, multi))
        sec.images.append(_busbw(out_dir, blk, tuple(key), int(world), multi))
    if not pred.empty:
        sec.images.append(_predictions(out_dir, pred, multi))
    if not model.empty:
        cols = [c for c in ("_label", "label", "fit_worlds", "oversubscribed", "points", "alpha_us", "bandwidth_gbps",
                            "rms_rel_residual", "max_abs_rel_residual", "used_for_predictions", "latency_s",
                            "peak_busbw_gbps", "n_half_bytes") if c in model]
        sec.tables.append(("alpha-beta fits (model output) and measured latency / peak / n1/2",
                           model[cols].rename(columns={"_label": "run"}).round(4).to_html(
                               index=False, escape=True, na_rep="-", classes="data", border=0)))
    if not cross.empty:
        cols = [c for c in ("_label", "dtype", "op", "mode", "world", "oversubscribed", "measured_kind",
                            "measured_bytes", "model_kind", "model_bytes", "textbook_kind", "textbook_bytes")
                if c in cross]
        sec.tables.append(("Tree/ring crossover (measured vs model)", cross[cols].rename(
            columns={"_label": "run"}).to_html(index=False, escape=True, na_rep="-", classes="data", border=0)))
    plt.close("all")
    return sec


def headline(entries: list[Entry], out_dir: Path) -> Section:
    """The answer first: busbw vs size per algorithm at the largest world, and each one's peak."""
    sec = Section("allreduce-headline", "Allreduce algorithms")
    res = table([e for e in entries if not e.baseline], "results")
    if res.empty or "algorithm" not in res:
        sec.missing.append("no allreduce results rows")
        return sec
    res = res.assign(_alg=_labels(res))
    sized = res[(num(res, "size_bytes") > 0) & (num(res, "busbw_gbps") > 0)]
    if sized.empty:
        sec.missing.append("busbw is null at every size")
        return sec
    world = int(num(sized, "world").max())
    top = sized[num(sized, "world") == world]
    multi = top["_label"].nunique() > 1
    fig, axes = new_figure(5.0, 3.2)
    ax = axes[0][0]
    for i, (key, g) in enumerate(top.groupby(["_label", "_alg"] if multi else ["_alg"], sort=True)):
        best = g.assign(_b=num(g, "busbw_gbps")).groupby("size_bytes")["_b"].max()
        ax.plot(best.index.to_numpy(dtype=float), best.to_numpy(dtype=float),
                label=" ".join(map(str, key if isinstance(key, tuple) else (key,))), **{**style(i), "markersize": 3})
    size_axis(ax, num(top, "size_bytes"))
    ax.set_xlabel("message size (bytes)", fontsize=8)
    ax.set_ylabel("busbw (GB/s)", fontsize=8)
    ax.set_title(f"allreduce busbw vs size per algorithm (world {world})", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    legend(ax)
    sec.images.append(save(fig, out_dir, "headline_allreduce_busbw", "allreduce: busbw vs size",
                           f"Line plot of allreduce bus bandwidth in GB/s against message size per algorithm at world {world}."))
    idx = top.assign(_b=num(top, "busbw_gbps")).groupby(["_label", "_alg"])["_b"].idxmax()
    pk = top.loc[idx].sort_values("busbw_gbps", ascending=False)
    t = pd.DataFrame({**({"run": pk["_label"]} if multi else {}), "algorithm": pk["_alg"],
                      "peak busbw (GB/s)": [f"{b:.3g} at {size_label(s)}B" for b, s in
                                            zip(num(pk, "busbw_gbps"), num(pk, "size_bytes"))]})
    sec.tables.append((f"peak busbw per algorithm (world {world})",
                       t.to_html(index=False, escape=True, na_rep="-", classes="data", border=0)))
    plt.close("all")
    return sec
