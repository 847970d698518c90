"""Shared plotting helpers: the Agg backend, size axes with K/M/G ticks, a style per series that
stays distinguishable from 1 to 10+ runs, and saving each figure as a PNG named after what it shows.
"""

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display, same output on every host

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator  # noqa: E402

# Legends longer than this go below the plot, so they never cover a curve.
_LEGEND_INSIDE_MAX = 6
_LINESTYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass
class Image:
    """One PNG of the report: file name (relative to the report), title and alt text."""

    file: str
    title: str
    alt: str
    caption: str = ""


@dataclass
class Section:
    """One part of the page: images, HTML tables (already rendered, escaped), notes and what is missing."""

    id: str
    title: str
    images: list[Image] = field(default_factory=list)
    tables: list[tuple[str, str]] = field(default_factory=list)  # (caption, html)
    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def slug(text: str) -> str:
    """A file-name-safe piece: letters, digits, '-', '_' (used to name PNGs after what they show)."""
    s = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-.")
    return s[:80] or "x"


def size_label(n: float) -> str:
    """4096 -> '4K' (powers of 1024, as sizes are given on the command line)."""
    for unit, f in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= f:
            v = n / f
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{n:.0f}"


def size_axis(ax, sizes, axis: str = "x"):
    """log2 axis with K/M/G tick labels at powers of two; at most ~12 labels so they never overlap."""
    sizes = [s for s in sizes if s and s > 0]
    if axis == "x":
        ax.set_xscale("log", base=2)
    else:
        ax.set_yscale("log", base=2)
    if not sizes:
        return
    lo, hi = int(math.floor(math.log2(min(sizes)))), int(math.ceil(math.log2(max(sizes))))
    step = max(1, math.ceil((hi - lo + 1) / 12))
    ticks = [2.0**e for e in range(lo, hi + 1, step)]
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_minor_locator(NullLocator())
    (ax.set_xticklabels if axis == "x" else ax.set_yticklabels)([size_label(t) for t in ticks])
    if axis == "x":
        pad = 2 ** 0.25
        ax.set_xlim(min(sizes) / pad, max(sizes) * pad)


def chunk_axis(ax, values, max_labels: int = 6):
    """log2 x axis for chunk / micro-batch / world counts with plain integer labels; beyond
    max_labels values every k-th is labelled (the rest keep an unlabelled tick), so a narrow
    panel's labels never overlap."""
    vals = sorted({int(v) for v in values if v and v > 0})
    ax.set_xscale("log", base=2)
    if vals:
        step = max(1, math.ceil(len(vals) / max_labels))
        shown = vals[::step]
        ax.xaxis.set_major_locator(FixedLocator(shown))
        ax.xaxis.set_minor_locator(FixedLocator([v for v in vals if v not in shown]))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticklabels([str(v) for v in shown])
        ax.set_xlim(vals[0] / 1.3, vals[-1] * 1.3)


def style(i: int, baseline: bool = False) -> dict:
    """Series i: tab10 colour, then a new line style / marker every 10 series, so 10 runs x 2
    placements remain distinguishable. Baselines are grey, dashed and thinner."""
    if baseline:
        return {"color": "0.45", "linestyle": "--", "marker": _MARKERS[i % len(_MARKERS)], "linewidth": 1.0,
                "markersize": 3, "alpha": 0.9}
    color = plt.get_cmap("tab10")(i % 10)
    return {"color": color, "linestyle": _LINESTYLES[(i // 10) % len(_LINESTYLES)],
            "marker": _MARKERS[(i // 10 + i) % len(_MARKERS)], "linewidth": 1.6, "markersize": 4}


def new_figure(width_in: float = 8.0, height_in: float = 4.6, nrows: int = 1, ncols: int = 1, **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width_in, height_in), squeeze=False, **kw)
    return fig, axes


def finish_axes(ax, xlabel: str, ylabel: str, title: str):
    """Every plot's last touches: axis labels with units, title, a light grid, the legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    legend(ax)


def legend(ax, title: str | None = None):
    """Legend inside when short; outside to the right when long, so it never covers data or a
    neighbouring panel (the saved PNG grows to hold it: bbox_inches="tight")."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    if len(handles) <= _LEGEND_INSIDE_MAX:
        ax.legend(fontsize=8, title=title, title_fontsize=8, loc="best", framealpha=0.85)
    else:
        ax.legend(fontsize=7, title=title, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  ncol=1 if len(handles) <= 24 else 2, framealpha=0.85, borderaxespad=0)


def save(fig, out_dir: Path, name: str, title: str, alt: str, caption: str = "") -> Image:
    """Write <name>.png (name says what it shows) and close the figure; the tight bbox keeps every
    label and an outside legend on the canvas."""
    fig.tight_layout()
    file = f"{slug(name)}.png"
    fig.savefig(Path(out_dir) / file, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return Image(file=file, title=title, alt=alt, caption=caption)


def finite(values) -> np.ndarray:
    a = np.asarray(values, dtype="float64")
    return a[np.isfinite(a)]
