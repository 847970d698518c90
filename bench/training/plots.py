"""Pipeline and strategies: throughput and speedup vs chunks, bubble measured vs theory vs replay,
a per-rank Gantt of one step, memory vs chunks and checkpoint mode, the micro-batch efficiency
curve, and the strategy comparison (throughput and peak memory per strategy and model)."""

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bench.report.plots.common import Section, chunk_axis, finish_axes, legend, new_figure, save, style
from bench.report.plots.data import Entry, lacking, num, series_keys, series_label, table
from bench.training.layout_table import layout_table

# "_fixed" is what a sweep holds constant: the mini-batch (mini-batch mode, micro-batch = batch / chunks)
# or the micro-batch (micro-batch mode); the other one varies along the line, so it is no series key.
_PP_SERIES = ("model", "schedule", "sweep_mode", "checkpoint", "stages", "world", "layout", "_fixed")


def _with_fixed(pp: pd.DataFrame) -> pd.DataFrame:
    mb_mode = pp.get("sweep_mode", pd.Series("", index=pp.index)).astype(str) == "micro-batch"
    fixed = np.where(mb_mode, "micro-batch " + pp["micro_batch"].astype(str), "batch " + pp["batch"].astype(str))
    return pp.assign(_fixed=fixed)
# "wait": blocked on a peer that was not ready (bubble, hatched grey); "comm": the transfer itself
ACTION_COLORS = {"fwd": "#1f77b4", "bwd": "#ff7f0e", "bwd_input": "#d62728", "bwd_weight": "#bcbd22",
                 "recompute": "#9467bd", "comm": "#2ca02c", "wait": "#c7c7c7", "idle": "#e3e3e3"}
ACTION_ORDER = ("idle", "wait", "fwd", "bwd", "bwd_input", "bwd_weight", "recompute", "comm")
MAX_GANTT_PER_RUN = 8  # one PNG per case; beyond this the page gets long, and the rest is named as left out


def _step_from_raw(res: pd.DataFrame, steps: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """step_s per case from strategy_steps (median over timed steps of the slowest rank's step wall),
    falling back to the stored step_median_s where a case has no steps."""
    df = res.copy()
    df["step_s"] = num(df, "step_median_s")
    if steps.empty or "step_wall_s" not in steps:
        return df, "Speedup from the stored step_median_s (no strategy_steps table)."
    per_step = steps.groupby(["_label", "case_id", "step"])["step_wall_s"].max()
    raw = per_step.groupby(["_label", "case_id"]).median().rename("_raw_step_s").reset_index()
    df = df.merge(raw, on=["_label", "case_id"], how="left")
    df["step_s"] = np.where(np.isfinite(num(df, "_raw_step_s")), num(df, "_raw_step_s"), df["step_s"])
    return df, ("Speedup = (batch / step) / (batch / step at chunks=1) of the same model, sweep mode, checkpoint "
                "and stages, with step = median over timed steps of the slowest rank's step wall, recomputed from "
                "strategy_steps.")


def _speedups(pp: pd.DataFrame) -> pd.DataFrame:
    ref_keys = [k for k in ("_label", "model", "sweep_mode", "checkpoint", "stages", "world", "layout") if k in pp]
    mb_mode = pp.get("sweep_mode", pd.Series("", index=pp.index)).astype(str) == "micro-batch"
    pp = pp.assign(_thr=num(pp, "batch") / num(pp, "step_s"), _mb=np.where(mb_mode, pp.get("micro_batch"), -1))
    ones = pp[num(pp, "chunks") == 1]
    # chunks=1 runs under GPipe only (1F1B needs chunks >= stages): any schedule's chunks=1 is the reference
    ref = ones.groupby(ref_keys + ["_mb"], dropna=False)["_thr"].max().rename("_thr1").reset_index()
    out = pp.merge(ref, on=ref_keys + ["_mb"], how="left")
    out["speedup"] = out["_thr"] / out["_thr1"]
    return out


def _lines_vs_chunks(sec, out_dir, pp, keys, y_of, name, title, ylabel, alt):
    fig, axes = new_figure()
    ax = axes[0][0]
    groups = pp.groupby(keys, dropna=False, sort=True) if keys else [((), pp)]
    for i, (key, g) in enumerate(groups):
        g = g.sort_values("chunks")
        st = style(i, baseline=bool(g["_baseline"].iloc[0]))
        y, lo, hi = y_of(g)
        ax.plot(num(g, "chunks"), y, label=series_label(keys, key), **st)
        if lo is not None and np.isfinite(lo).any():
            ax.fill_between(num(g, "chunks"), lo, hi, color=st["color"], alpha=0.18, linewidth=0)
    chunk_axis(ax, pp["chunks"].dropna().unique())
    finish_axes(ax, "chunks m (micro-batches per mini-batch, log2)", ylabel, title)
    sec.images.append(save(fig, out_dir, name, title, alt))


def _bubble(sec, out_dir, pp, keys, prefix):
    keys = [k for k in keys if k != "schedule"]
    for sched, s in pp.groupby("schedule", sort=True):
        fig, axes = new_figure()
        ax = axes[0][0]
        groups = s.groupby(keys, dropna=False, sort=True) if keys else [((), s)]
        for i, (key, g) in enumerate(groups):
            g = g.sort_values("chunks")
            base = bool(g["_baseline"].iloc[0])
            st = style(i, baseline=base)
            lab = series_label(keys, key)
            lab = f"{lab}: " if lab != "all" else ""
            x = num(g, "chunks")
            ax.plot(x, num(g, "bubble_measured") * 100, label=f"{lab}measured idle/step", **st)
            ax.plot(x, num(g, "bubble_gpipe_theory") * 100, color=st["color"], linestyle="--", linewidth=1, marker="_", markersize=9,
                    label=f"{lab}GPipe (p-1)/(m+p-1)")
            ax.plot(x, num(g, "bubble_megatron_theory") * 100, color=st["color"], linestyle=":", linewidth=1.2, marker="1", markersize=8,
                    label=f"{lab}Megatron (p-1)/(v m)")
            ax.plot(x, num(g, "replay_bubble") * 100, color=st["color"], linestyle="-.", marker="x", linewidth=1,
                    label=f"{lab}calibrated replay")
            if "bubble_exact" in g and np.isfinite(num(g, "bubble_exact")).any():
                ax.plot(x, num(g, "bubble_exact") * 100, color=st["color"], linestyle="none", marker="*", markersize=10,
                        label=f"{lab}exact (timed workload)")
        chunk_axis(ax, s["chunks"].dropna().unique())
        finish_axes(ax, "chunks m (micro-batches per mini-batch, log2)", "bubble (% of step wall)",
                    f"pipeline bubble vs chunks, schedule {sched}: measured vs theory vs replay")
        sec.images.append(save(
            fig, out_dir, f"{prefix}_bubble_vs_chunks_{sched}", f"pipeline bubble vs chunks ({sched})",
            f"Line plot of the {sched} pipeline bubble in percent of the step against chunks: measured idle "
            "fraction (solid), GPipe theory (dashed), Megatron theory (dotted) and calibrated replay (dash-dot)."))


def _bubble_by_schedule(sec, out_dir, pp, prefix):
    """One bar group per schedule (and world, chunks, model): the measured bubble beside the exact
    one (timed workload), the schedule's own formula and the calibrated replay."""
    cols = [("bubble_measured", "measured"), ("bubble_exact", "exact (timed workload)"),
            ("bubble_theory", "theory (schedule's formula)"), ("replay_bubble", "calibrated replay")]
    cols = [(c, lab) for c, lab in cols if c in pp and np.isfinite(num(pp, c)).any()]
    if "bubble_theory" not in pp or not cols:
        return
    keys = [k for k in ("_label", "model", "world", "chunks", "schedule") if k in pp]
    g = pp.groupby(keys, dropna=False, sort=True)[[c for c, _ in cols]].median().reset_index()
    if g.empty:
        return
    fig, axes = new_figure(max(8.0, 0.9 * len(g) + 2), 4.8)
    ax = axes[0][0]
    width = 0.8 / len(cols)
    x = np.arange(len(g))
    for i, (c, lab) in enumerate(cols):
        ax.bar(x + (i - (len(cols) - 1) / 2) * width, num(g, c) * 100, width, label=lab, color=style(i)["color"])
    multi = g["_label"].nunique() > 1 if "_label" in g else False
    ax.set_xticks(x)
    ax.set_xticklabels([(f"{r['_label']}\n" if multi else "") + f"{r['schedule']}\n{r['model']} p={r['world']} m={r['chunks']}"
                        for _, r in g.iterrows()], fontsize=7, rotation=0 if len(g) <= 8 else 45)
    ax.set_ylabel("bubble (% of step wall)")
    ax.set_title("pipeline bubble per schedule: measured vs exact vs theory")
    ax.grid(True, axis="y", alpha=0.3)
    legend(ax)
    sec.images.append(save(fig, out_dir, f"{prefix}_bubble_by_schedule", "pipeline bubble per schedule",
                           f"Bar chart of the pipeline bubble in percent of the step for {len(g)} schedule cases: "
                           + ", ".join(lab for _, lab in cols) + "."))


def _gantt(sec, out_dir, spans: pd.DataFrame, prefix: str):
    """One timed step per case: each rank's forward / backward / recompute / comm spans over a grey
    idle background (time not covered by any action); an 'idle' action, where stored, is drawn as such,
    and a 'step' action (the rank's own span) as an outline."""
    for lab, runspans in spans.groupby("_label", sort=True):
        cases = list(dict.fromkeys(runspans["case_id"]))
        if len(cases) > MAX_GANTT_PER_RUN:
            sec.notes.append(f"{lab}: Gantt charts drawn for the first {MAX_GANTT_PER_RUN} of {len(cases)} cases; "
                             f"left out: {', '.join(cases[MAX_GANTT_PER_RUN:])}")
        for cid in cases[:MAX_GANTT_PER_RUN]:
            c = runspans[runspans["case_id"] == cid]
            ranks = sorted(int(r) for r in c["rank"].dropna().unique())
            t0 = min(0.0, float(np.nanmin(num(c, "start_s"))))
            t1 = float(np.nanmax(num(c, "end_s")))
            fig, axes = new_figure(9.0, 2.2 + 0.5 * max(2, len(ranks)))
            ax = axes[0][0]
            for r in ranks:  # the background: whatever no action covers is idle
                ax.broken_barh([(0, (t1 - t0) * 1e3)], (r - 0.4, 0.8), facecolors=ACTION_COLORS["idle"])
            actions = [a for a in ACTION_ORDER if a in set(c["action"].astype(str))]
            others = sorted(set(c["action"].astype(str)) - set(ACTION_COLORS) - {"step"})
            for action in actions + others:
                a = c[c["action"].astype(str) == action]
                for r, g in a.groupby("rank"):
                    bars = [((s - t0) * 1e3, (e - s) * 1e3) for s, e in zip(num(g, "start_s"), num(g, "end_s")) if e >= s]
                    ax.broken_barh(bars, (int(r) - 0.4, 0.8), facecolors=ACTION_COLORS.get(action, "#8c564b"),
                                   edgecolor="white", linewidth=0.3, hatch="///" if action == "wait" else None)
            own = c[c["action"].astype(str) == "step"]
            for r, g in own.groupby("rank"):
                bars = [((s - t0) * 1e3, (e - s) * 1e3) for s, e in zip(num(g, "start_s"), num(g, "end_s"))]
                ax.broken_barh(bars, (int(r) - 0.45, 0.9), facecolors="none", edgecolor="black", linewidth=0.8)
            names = ["idle"] + [a for a in actions if a != "idle"] + others
            labels = {"wait": "wait for peer (bubble)", "comm": "transfer (comm)", "bwd_input": "bwd input-grad (I)",
                      "bwd_weight": "bwd weight-grad (W)"}
            handles = [plt.Rectangle((0, 0), 1, 1, facecolor=ACTION_COLORS.get(k, "#8c564b"),
                                     hatch="///" if k == "wait" else None) for k in names]
            if not own.empty:
                handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="none", edgecolor="black"))
                names.append("own step span")
            ax.legend(handles, [labels.get(n, n) for n in names], fontsize=7, ncol=min(len(handles), 6), loc="upper center",
                      bbox_to_anchor=(0.5, -0.5 if len(ranks) <= 2 else -0.25), frameon=False)
            ax.set_yticks(ranks)
            ax.set_yticklabels([f"rank {r}" for r in ranks])
            ax.set_ylim(max(ranks) + 0.6, min(ranks) - 0.6)
            ax.set_xlim(0, (t1 - t0) * 1e3 * 1.01)
            ax.set_xlabel("time since the step start (ms)")
            ax.set_ylabel("rank")
            ax.set_title(f"one timed step per rank: {cid}", fontsize=9)
            ax.grid(True, axis="x", alpha=0.3)
            sec.images.append(save(
                fig, out_dir, f"{prefix}_gantt_{cid}", f"per-rank timeline of one step: {cid}",
                f"Gantt chart of one timed step of {cid} ({lab}): for each of {len(ranks)} ranks, bars of "
                f"{', '.join(names)} in milliseconds since the step start ({(t1 - t0) * 1e3:.1f} ms in all)."))


def _strategy_bars(sec, out_dir, res, col, scale, ylabel, title, name, what):
    """Grouped bars: one group per (model, strategy), one bar per run; pp shows its best-throughput case."""
    res = res.assign(_y=num(res, col) * scale, _thr=num(res, "samples_per_s"))
    best = res.sort_values("_thr", ascending=False).groupby(["_label", "model", "strategy"], sort=True).head(1)
    groups = sorted({(m, s) for m, s in zip(best["model"], best["strategy"])})
    runs = list(dict.fromkeys(best["_label"]))
    if not groups or not np.isfinite(best["_y"]).any():
        sec.missing.append(f"strategy comparison: no {col} values")
        return
    fig, axes = new_figure(max(8.0, 0.55 * len(groups) * max(1, len(runs) ** 0.5) + 2), 4.8)
    ax = axes[0][0]
    width = 0.8 / len(runs)
    for i, lab in enumerate(runs):
        b = best[best["_label"] == lab].set_index(["model", "strategy"])
        ys = [float(b.loc[g, "_y"]) if g in b.index else np.nan for g in groups]
        st = style(i, baseline=bool(best.loc[best["_label"] == lab, "_baseline"].iloc[0]))
        ax.bar(np.arange(len(groups)) + (i - (len(runs) - 1) / 2) * width, ys, width, color=st["color"],
               label=lab, hatch="//" if st["linestyle"] == "--" else None)
    ax.set_xticks(np.arange(len(groups)))
    ax.set_xticklabels([f"{m}\n{s}" for m, s in groups], fontsize=8, rotation=0 if len(groups) <= 12 else 45)
    ax.set_xlabel("model / strategy (pp: its best-throughput case)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    if len(runs) > 1:
        legend(ax, title="run")
    sec.images.append(save(fig, out_dir, name, title,
                           f"Bar chart of {what} per strategy and model, one bar per run "
                           f"({len(groups)} strategy/model pairs, {len(runs)} run(s))."))


def _pipeline_plots(sec, out_dir, pp, kind: str, multi: bool, how: str):
    """Throughput, speedup, bubble and peak memory of the pipeline rows against chunks."""
    keys = series_keys(pp, _PP_SERIES, multi)
    _lines_vs_chunks(
        sec, out_dir, pp, keys,
        lambda g: (num(g, "samples_per_s"), num(g, "batch") / num(g, "step_p75_s"), num(g, "batch") / num(g, "step_p25_s")),
        f"{kind}_throughput_vs_chunks", "pipeline throughput vs chunks (per schedule and sweep mode)",
        "throughput (samples/s)",
        "Line plot of pipeline training throughput in samples per second against chunks, one line per "
        "schedule and sweep mode, with bands from the step p25-p75.")
    sp = _speedups(pp)
    if np.isfinite(sp["speedup"]).any():
        _lines_vs_chunks(sec, out_dir, sp, keys, lambda g: (num(g, "speedup"), None, None),
                         f"{kind}_speedup_vs_chunks1", "pipeline speedup vs chunks=1", "speedup (x, vs chunks=1)",
                         "Line plot of pipeline throughput speedup relative to chunks=1 against chunks.")
        sec.notes.append(how)
    else:
        sec.missing.append("speedup vs chunks=1: no chunks=1 case to compare with")
    if "bubble_measured" in pp:
        _bubble(sec, out_dir, pp, keys, kind)
        _bubble_by_schedule(sec, out_dir, pp, kind)
    mem_keys = [k for k in series_keys(pp, ("model", "checkpoint", "schedule", "sweep_mode", "stages"), multi)]
    if "checkpoint" not in mem_keys:
        mem_keys.append("checkpoint")
    mk = str(pp["memory_kind"].dropna().iloc[0]) if "memory_kind" in pp and pp["memory_kind"].notna().any() else ""
    what = "CUDA peak reserved per device" if mk == "cuda" else "host peak RSS per rank (CPU run)"
    _lines_vs_chunks(sec, out_dir, pp, mem_keys, lambda g: (num(g, "peak_memory_bytes") / 2**20, None, None),
                     f"{kind}_peak_memory_vs_chunks_by_checkpoint",
                     f"peak memory vs chunks and checkpoint mode ({what})", "peak memory (MiB)",
                     f"Line plot of {what} in MiB against chunks, one line per checkpoint mode.")


def _efficiency(sec, out_dir, eff, kind: str, multi: bool):
    """The micro-batch efficiency curve: one process, the same mini-batch in m sequential chunks."""
    fig, axes = new_figure()
    ax = axes[0][0]
    for i, ((lab, model), g) in enumerate(eff.groupby(["_label", "model"], sort=True)):
        g = g.sort_values("micro_batch")
        ax.plot(num(g, "micro_batch"), num(g, "relative_throughput"), label=f"{lab}: {model}" if multi else model,
                **style(i, baseline=bool(g["_baseline"].iloc[0])))
    chunk_axis(ax, eff["micro_batch"].dropna().unique())
    ax.axhline(1.0, color="0.5", linewidth=0.8)
    finish_axes(ax, "micro-batch size (samples, log2)", "throughput relative to the whole mini-batch (x)",
                "micro-batch efficiency (one process, same mini-batch in m sequential chunks)")
    sec.images.append(save(fig, out_dir, f"{kind}_microbatch_efficiency", "micro-batch efficiency",
                           "Line plot of single-process throughput relative to the unsplit mini-batch against "
                           "micro-batch size in samples."))


def section(entries: list[Entry], out_dir: Path, kind: str, pipeline: bool) -> Section:
    """Plots of training runs; `kind` names the files, `pipeline`: a pipeline sweep (chunks, bubble)
    rather than a strategy comparison."""
    sec = Section(kind, kind)
    res = table(entries, "results")
    if res.empty or "strategy" not in res:
        sec.missing.append(f"No {kind} results table in: " + ", ".join(e.label for e in entries))
        return sec
    for t in ("strategy_steps", "strategy_ranks", "strategy_spans"):
        for lab in lacking(entries, t):
            sec.missing.append(f"{lab}: no {t} table"
                               + (" (per-rank action spans of one step): no Gantt chart" if t == "strategy_spans" else ""))
    multi = res["_label"].nunique() > 1
    res, how = _step_from_raw(res, table(entries, "strategy_steps"))
    pp = res[res["strategy"] == "pp"]
    if not pp.empty:
        _pipeline_plots(sec, out_dir, _with_fixed(pp), kind, multi, how)
    elif pipeline:
        sec.missing.append("no pipeline (pp) rows in these runs")
    spans = table(entries, "strategy_spans")
    if not spans.empty:
        _gantt(sec, out_dir, spans, kind)
    eff = table(entries, "microbatch_efficiency")
    if not eff.empty:
        _efficiency(sec, out_dir, eff, kind, multi)
    elif pipeline:
        sec.missing.append("no microbatch_efficiency table (run without --no-efficiency to get the curve)")
    if res["strategy"].nunique() > 1 or not pipeline:
        _strategy_bars(sec, out_dir, res, "samples_per_s", 1.0, "throughput (samples/s)",
                       "strategy comparison: throughput per strategy and model", f"{kind}_throughput_by_strategy",
                       "training throughput in samples per second")
        mk = str(res["memory_kind"].dropna().iloc[0]) if "memory_kind" in res and res["memory_kind"].notna().any() else ""
        _strategy_bars(sec, out_dir, res, "peak_memory_bytes", 1 / 2**20,
                       "peak memory (MiB, " + ("CUDA peak reserved per device)" if mk == "cuda" else "host peak RSS per rank)"),
                       "strategy comparison: peak memory per strategy and model", f"{kind}_peak_memory_by_strategy",
                       "peak memory in MiB")
    lay = layout_table(res)  # composed layouts beside each other at equal world
    if lay:
        sec.tables.append(lay)
    cols = [c for c in ("_label", "case_id", "strategy", "model", "world", "chunks", "schedule", "checkpoint", "batch",
                        "micro_batch", "step_median_s", "step_iqr_s", "samples_per_s", "bubble_measured",
                        "bubble_exact", "bubble_theory", "bubble_theory_formula",
                        "bubble_gpipe_theory", "bubble_megatron_theory", "replay_bubble", "peak_memory_bytes",
                        "wrong", "degraded") if c in res]
    sec.tables.append(("Cases (step = median step wall; bubble fractions of the step)", res[cols].rename(
        columns={"_label": "run"}).round(4).to_html(index=False, escape=True, na_rep="-", classes="data", border=0)))
    plt.close("all")
    return sec


def _small_axes(ax, xlabel: str, ylabel: str, title: str):
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    legend(ax)


def _html(df: pd.DataFrame) -> str:
    return df.to_html(index=False, escape=True, na_rep="-", classes="data", border=0)


def headline(entries: list[Entry], out_dir: Path, kind: str, pipeline: bool) -> Section:
    """The answer first. Pipeline: throughput vs chunks per schedule, and the best configuration with
    its bubble (measured, and GPipe's (p-1)/(m+p-1)). Strategies: throughput per strategy, with its
    peak memory and step time."""
    sec = Section(f"{kind}-headline", kind)
    res = table([e for e in entries if not e.baseline], "results")
    if res.empty or "strategy" not in res or "samples_per_s" not in res:
        sec.missing.append(f"no {kind} results rows")
        return sec
    res = res[np.isfinite(num(res, "samples_per_s"))]
    multi = res["_label"].nunique() > 1
    if pipeline:
        pp = res[res["strategy"] == "pp"]
        if pp.empty:
            sec.missing.append("no pipeline (pp) rows")
            return sec
        fig, axes = new_figure(5.0, 3.2)
        ax = axes[0][0]
        keys = [k for k in ("_label", "schedule") if k in pp and (k != "_label" or multi)]
        for i, (key, g) in enumerate(pp.groupby(keys, sort=True)):
            best = g.assign(_t=num(g, "samples_per_s")).groupby("chunks")["_t"].max()  # best over the other settings
            ax.plot(best.index.to_numpy(dtype=float), best.to_numpy(dtype=float),
                    label=" ".join(map(str, key if isinstance(key, tuple) else (key,))), **style(i))
        chunk_axis(ax, pp["chunks"].dropna().unique())
        _small_axes(ax, "chunks (micro-batches per step)", "samples/s", "pipeline throughput vs chunks (best per chunks)")
        sec.images.append(save(fig, out_dir, f"headline_{kind}_throughput", f"{kind}: throughput vs chunks",
                               "Line plot of the best pipeline throughput in samples per second at each chunk count, "
                               "one line per schedule."))
        top = pp.assign(_t=num(pp, "samples_per_s")).sort_values("_t", ascending=False)
        top = top.drop_duplicates([k for k in ("_label", "schedule") if k in top]).head(4)
        cols = {"schedule": "schedule", "stages": "stages", "chunks": "chunks", "checkpoint": "checkpoint",
                "samples_per_s": "samples/s", "bubble_measured": "bubble", "bubble_gpipe_theory": "(p-1)/(m+p-1)"}
        for c in ("stages", "checkpoint"):  # shown only where they vary (the details have every column)
            if c in pp and pp[c].astype("string").nunique(dropna=False) < 2:
                cols.pop(c)
        t = top[[c for c in (["_label"] if multi else []) + list(cols) if c in top]].rename(columns={"_label": "run", **cols})
        for c in ("samples/s",):
            t[c] = num(t, c).round(1)
        for c in ("bubble", "(p-1)/(m+p-1)"):
            if c in t:
                t[c] = [f"{v:.0%}" if np.isfinite(v) else "-" for v in num(t, c)]
        sec.tables.append(("best configuration per schedule (bubble: idle / step wall, mean over ranks)", _html(t)))
        return sec
    label = res["strategy"].astype(str) + (" " + res["model"].astype(str) if res.get("model") is not None and
                                           res["model"].nunique() > 1 else "")
    if multi:
        label = res["_label"].astype(str) + ": " + label
    res = res.assign(_what=label.to_numpy())
    best = res.loc[res.assign(_t=num(res, "samples_per_s")).groupby("_what")["_t"].idxmax()].sort_values("_what")
    fig, axes = new_figure(5.0, 3.2)
    ax = axes[0][0]
    x = np.arange(len(best))
    ax.bar(x, num(best, "samples_per_s"), color=[style(i)["color"] for i in range(len(best))])
    ax.set_xticks(x)
    ax.set_xticklabels(best["_what"], rotation=30 if len(best) > 4 else 0, ha="right" if len(best) > 4 else "center",
                       fontsize=7)
    _small_axes(ax, "", "samples/s", "training throughput per strategy")
    sec.images.append(save(fig, out_dir, f"headline_{kind}_throughput", f"{kind}: throughput per strategy",
                           "Bar chart of training throughput in samples per second for each strategy."))
    mk = str(res["memory_kind"].dropna().iloc[0]) if "memory_kind" in res and res["memory_kind"].notna().any() else ""
    t = pd.DataFrame({"strategy": best["_what"], "samples/s": num(best, "samples_per_s").round(1),
                      "step (ms)": (num(best, "step_median_s") * 1e3).round(2),
                      ("peak MiB (CUDA reserved)" if mk == "cuda" else "peak MiB (host RSS)"):
                          (num(best, "peak_memory_bytes") / 2**20).round(1)})
    t = t.sort_values("samples/s", ascending=False)
    if len(t) > 6:  # a short table: the rest are in the details
        sec.notes.append(f"{len(t) - 6} more in the {kind} section")
        t = t.head(6)
    sec.tables.append(("throughput and peak memory per strategy (its best case)", _html(t)))
    return sec
