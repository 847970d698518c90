"""The history plot (`distbench history -o DIR`, the report's history section): one panel per
machine fingerprint (machines never share a line), x = runs in commit order, y = each run's median
with its p25-p75 spread as an error bar; runs in a baseline generation are marked (g<N>), flagged
steps are dashed vertical lines labelled as detections (bench.results.history)."""

import math
from pathlib import Path

from bench.errors import BenchError
from bench.report.plots.common import Image, Section, plt, slug
from bench.results import history as hs
from bench.results import index as ix
from bench.results.compare import group_label, normalize_kind, reading


def plot_history(h, path) -> Path:
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


def history_section(entries, out_dir, max_groups: int = 12):
    """The report's history section: for each reported run whose suite has more than one run
    under its results root on the same machine, every group of the run across those runs (one
    PNG per group) and the steps flagged (bench.results.history); None when no suite has history."""

    sec = Section("history", "History across commits (runs of the same suite on the same machine)")
    seen = set()
    for e in entries:
        if e.baseline or "results" not in e.run.tables or e.run["results"].empty:
            continue
        root, suite = Path(e.run.dir).parent.parent, Path(e.run.dir).parent.name
        try:
            runs = ix.build(root).runs
            mine = runs[runs["dir"] == str(e.run.dir)]
            if mine.empty:
                continue
            finger = mine["fingerprint"].iloc[0]
            same = runs[(runs["suite"] == suite) & (runs["fingerprint"] == finger) & (runs["rows"] > 0)]
            if len(same) < 2 or (root, suite, finger) in seen:
                continue
            seen.add((root, suite, finger))
            rows = e.run["results"]
            kind = normalize_kind(rows["kind"].dropna().iloc[0])
            col = reading(kind).group
            values = rows[col].dropna().astype(str).unique() if col in rows else []
            groups = list(dict.fromkeys(group_label(kind, v, values) for v in values))
        except (BenchError, KeyError, IndexError, OSError) as err:
            sec.missing.append(f"no history for {e.label}: {err}")
            continue
        sec.notes.append(f"suite {suite} on {finger}: {len(same)} runs; {hs.DETECTION}")
        for g in groups[:max_groups]:
            try:
                h = hs.history(root, hs.Target(group=g), suite=suite, fingerprint=finger)
            except BenchError as err:
                sec.missing.append(f"no history for group {g} of suite {suite}: {err}")
                continue
            h.points = h.points[h.points["fingerprint"] == finger]
            h.steps = [s for s in h.steps if s.fingerprint == finger]
            name = f"history-{slug(suite)}-{slug(g)}-{slug(finger)}.png"
            plot_history(h, Path(out_dir) / name)
            sec.images.append(Image(name, f"{g} ({suite}) across commits",
                                    f"{h.metric} of {g} per run in commit order on {finger}"))
            sec.notes += [f"{g}: step {s.describe(h.lower_is_better)} (detection, not proof)" for s in h.steps]
        if len(groups) > max_groups:
            sec.missing.append(f"suite {suite}: {len(groups) - max_groups} more group(s) not plotted; "
                               "see `distbench history --group NAME`")
    return sec if (sec.images or sec.missing) else None
