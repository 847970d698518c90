"""Energy per GB moved against message size (docs/telemetry.md, "Energy"): one line per series
of a size sweep, from the rows' `energy_per_gb_j` (the NVML counter over the timed span, summed
over the case's GPUs, per 1e9 bus bytes of every rank). Rows without a figure are left out and
the section says why (their `energy_note`)."""

from pathlib import Path

import numpy as np
import pandas as pd

from bench.report.plots.common import Section, finish_axes, new_figure, save, size_axis, size_label, style
from bench.report.plots.data import num, series_label


def _why_none(df: pd.DataFrame) -> str:
    notes = [str(n) for n in df.get("energy_note", pd.Series(dtype=object)).dropna() if str(n)]
    if not notes:
        return "no energy figures (telemetry off, or a run stored before them)"
    why = list(dict.fromkeys(notes))
    return "; ".join(why[:3]) + (f" (and {len(why) - 3} more reasons)" if len(why) > 3 else "")


def per_gb_vs_size(sec: Section, df: pd.DataFrame, keys: list[str], out_dir: Path, what: str):
    """Add the J/GB vs size plot of `what` (e.g. a collective) to `sec`, or a line saying why not."""
    sized = df[num(df, "size_bytes") > 0]
    have = sized[np.isfinite(num(sized, "energy_per_gb_j"))] if "energy_per_gb_j" in sized else sized.iloc[:0]
    if have.empty:
        sec.missing.append(f"{what}: no energy per GB: {_why_none(sized)}")
        return
    fig, axes = new_figure()
    ax = axes[0][0]
    groups = have.groupby(keys, dropna=False, sort=True) if keys else [((), have)]
    for i, (key, g) in enumerate(groups):
        g = g.sort_values("size_bytes")
        base = bool(g["_baseline"].iloc[0]) if "_baseline" in g else False
        lab = series_label(keys, key) + (" (baseline)" if base and "_label" not in keys else "")
        ax.plot(num(g, "size_bytes"), num(g, "energy_per_gb_j"), label=lab, **style(i, baseline=base))
    size_axis(ax, num(have, "size_bytes"))
    ax.set_yscale("log")
    finish_axes(ax, "message size S (bytes, log2)", "energy per GB of bus traffic (J / 1e9 B, log)",
                f"{what}: energy per GB moved vs message size")
    left = len(sized) - len(have)
    sec.images.append(save(
        fig, out_dir, f"energy_{what}_per_gb_vs_size", f"{what}: energy per GB vs size",
        f"Log-log plot of {what} energy in joules per 1e9 bus bytes (every rank's) against message size from "
        f"{size_label(have['size_bytes'].min())}B to {size_label(have['size_bytes'].max())}B, one line per "
        f"{', '.join(k.strip('_') for k in keys) or 'run'}.",
        caption="NVML energy counter over the timed span, summed over the case's GPUs"
                + (f"; {left} row(s) without a figure: {_why_none(sized[~sized.index.isin(have.index)])}" if left else "")))
