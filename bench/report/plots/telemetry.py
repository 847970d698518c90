"""Telemetry timelines per run: GPU utilization / power / memory / SM clock and host CPU / RSS,
with case boundaries shaded, and a line saying what was not available and why."""

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bench.report.plots.common import Section, legend, new_figure, save, slug, style
from bench.report.plots.data import Entry, num

GPU_PANELS = (("gpu_util_pct", "GPU utilization (%)", 1.0), ("power_w", "power (W)", 1.0),
              ("mem_used_bytes", "memory used (GiB)", 1 / 2**30), ("sm_clock_mhz", "SM clock (MHz)", 1.0))
HOST_PANELS = (("cpu_util_pct", "host CPU, mean over cores (%)", 1.0), ("rss_bytes", "RSS per rank (MiB)", 1 / 2**20))


def _case_windows(res: pd.DataFrame) -> list[tuple[float, float]]:
    if res is None or "case_start_unix_s" not in res:
        return []
    w = res[["case_start_unix_s", "case_end_unix_s"]].dropna().astype("float64").drop_duplicates()
    return sorted(zip(w["case_start_unix_s"], w["case_end_unix_s"]))


def _shade(ax, windows, t0):
    # alternate shading marks each case window; text labels would collide with hundreds of cases
    for i, (s, e) in enumerate(windows):
        ax.axvspan(s - t0, e - t0, color="0.85" if i % 2 == 0 else "0.93", linewidth=0, zorder=0)


def _series(tel, metric, scale):
    """(name, t, y) per device / rank / host; cpu_util is the mean over cores per sampling instant."""
    m = tel[(tel["metric"] == metric) & tel["value"].notna()]
    if m.empty:
        return []
    if metric == "cpu_util_pct":
        g = m.groupby(["host", "time_s"])["value"].mean().reset_index()
        return [(f"host {h}", num(x, "time_s"), num(x, "value") * scale) for h, x in g.groupby("host")]
    if metric == "rss_bytes":
        return [(f"rank {int(r)}", num(x.sort_values("time_s"), "time_s"), num(x.sort_values("time_s"), "value") * scale)
                for r, x in m.groupby("rank")]
    key = "device_uuid" if m["device_uuid"].notna().any() else "host"
    return [(f"GPU {str(d)[:12]}", num(x.sort_values("time_s"), "time_s"), num(x.sort_values("time_s"), "value") * scale)
            for d, x in m.groupby(key)]


def _timeline(sec, out_dir, e: Entry, tel, windows, panels, what, t0):
    present = [(m, lab, sc) for m, lab, sc in panels if not tel[(tel["metric"] == m) & tel["value"].notna()].empty]
    if not present:
        return
    fig, axes = new_figure(9.0, 2.1 * len(present) + 0.8, nrows=len(present), ncols=1, sharex=True)
    for ax_row, (metric, ylabel, scale) in zip(axes, present):
        ax = ax_row[0]
        _shade(ax, windows, t0)
        for i, (name, t, y) in enumerate(_series(tel, metric, scale)):
            st = style(i)
            ax.plot(t - t0, y, label=name, color=st["color"], linewidth=1.0)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(True, alpha=0.3)
        legend(ax)
    axes[-1][0].set_xlabel("time since the run's first sample (s); shaded bands: one case each")
    axes[0][0].set_title(f"{what} telemetry timeline: {e.label}")
    sec.images.append(save(
        fig, out_dir, f"telemetry_{what}_timeline_{slug(e.label)}", f"{what} telemetry: {e.label}",
        f"Timelines of {', '.join(lab for _, lab, _ in present)} against seconds since the first sample for run "
        f"{e.label}, with {len(windows)} case window(s) shaded alternately."))


def unavailable(e: Entry) -> list[str]:
    """Why metrics are missing, from the telemetry rows' reason column and meta.json."""
    out = []
    tmeta = e.run.meta.get("telemetry") or {}
    if tmeta.get("enabled") is False:
        return [f"{e.label}: telemetry was off for this run (--no-telemetry)"]
    if tmeta.get("gpu_metrics"):
        out.append(f"{e.label}: GPU metrics unavailable: {tmeta['gpu_metrics']}")
    tel = e.run.tables.get("telemetry")
    if tel is not None and "reason" in tel:
        r = tel[tel["reason"].notna()][["metric", "reason"]].drop_duplicates()
        for metric, reason in zip(r["metric"], r["reason"]):
            line = f"{e.label}: {metric} unavailable: {reason}"
            if metric == "gpu_metrics" and tmeta.get("gpu_metrics") == reason:
                continue
            out.append(line)
    return out


def section(entries: list[Entry], out_dir: Path) -> Section:
    sec = Section("telemetry", "Telemetry")
    for e in entries:
        if e.baseline:
            continue  # timelines are per run; a baseline's own report has them
        tel = e.run.tables.get("telemetry")
        sec.missing += unavailable(e)
        if tel is None or tel.empty:
            sec.missing.append(f"{e.label}: no telemetry table")
            continue
        windows = _case_windows(e.run.tables.get("results"))
        t0 = float(np.nanmin(num(tel, "time_s")))
        _timeline(sec, out_dir, e, tel, windows, GPU_PANELS, "gpu", t0)
        _timeline(sec, out_dir, e, tel, windows, HOST_PANELS, "host", t0)
        seen = set(tel.loc[tel["value"].notna(), "metric"].astype(str))
        if not seen & {m for m, _, _ in GPU_PANELS}:
            sec.missing.append(f"{e.label}: no GPU utilization / power / memory / clock samples, so no GPU timeline")
        if not seen & {m for m, _, _ in HOST_PANELS}:
            sec.missing.append(f"{e.label}: no host CPU / RSS samples")
    plt.close("all")
    return sec
