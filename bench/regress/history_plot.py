"""The history plot (`distbench history --output-dir DIR`, the report's history section): one panel per
machine fingerprint (machines never share a line), x = runs in commit order, y = each run's median
with its p25-p75 spread as an error bar; runs in a baseline generation are marked (g<N>), flagged
steps are dashed vertical lines labelled as detections (bench.regress.history)."""

import math
from pathlib import Path


def plot_history(h, path) -> Path:
    import matplotlib  # lazy: matplotlib only for a plot

    matplotlib.use("Agg")  # files only: never needs a display, same output on every host
    import matplotlib.pyplot as plt  # lazy: as above

    lines = h.lines()
    fig, axes = plt.subplots(len(lines), 1, figsize=(9, 3.2 * len(lines)), squeeze=False)
    steps = {}
    for s in h.steps:
        steps.setdefault(s.fingerprint, []).append(s)
    for ax, (finger, pts) in zip(axes[:, 0], lines):
        x = list(pts["order"])
        y = [v * 1e3 if h.metric.endswith("_s") else v for v in pts["value"]]
        scale = 1e3 if h.metric.endswith("_s") else 1.0
        lo = [max(0.0, (v - l) * scale) if math.isfinite(l) else 0.0 for v, l in zip(pts["value"], pts["lo"])]
        hi = [max(0.0, (u - v) * scale) if math.isfinite(u) else 0.0 for v, u in zip(pts["value"], pts["hi"])]
        ax.errorbar(x, y, yerr=[lo, hi], fmt="o-", ms=3, lw=1, capsize=2, label="median, p25-p75")
        base = pts[pts["baseline"] != ""]
        if len(base):
            ax.scatter(list(base["order"]), [v * scale for v in base["value"]], marker="s", s=40, facecolors="none",
                       edgecolors="tab:green", label="baseline generation", zorder=3)
            for r in base.itertuples():
                ax.annotate(r.baseline, (r.order, r.value * scale), textcoords="offset points", xytext=(0, 6),
                            fontsize=7, color="tab:green", ha="center")
        for s in steps.get(finger, []):
            ax.axvline(s.position - 0.5, color="tab:red", ls="--", lw=1)
            ax.annotate(f"step x{s.ratio:.2f} (detected)", (s.position - 0.5, ax.get_ylim()[1]), fontsize=7,
                        color="tab:red", ha="left", va="top", rotation=90)
        labels = [(sha[:7] if sha else "?") for sha in pts["git_sha"]]
        every = max(1, len(labels) // 20)
        ax.set_xticks(x[::every])
        ax.set_xticklabels(labels[::every], rotation=60, fontsize=7)
        ax.set_ylabel(f"{h.metric} ({'ms' if h.metric.endswith('_s') else ''})".replace(" ()", ""))
        ax.set_title(f"{h.target.label} on {finger}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel("runs in commit order (commit sha)")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
