"""The history plot (`distbench history --output-dir DIR`, the report's history section): one panel per
machine fingerprint (machines never share a line), x = runs in commit order, y = each run's median
with its p25-p75 spread as an error bar; runs in a baseline generation are marked (g<N>), flagged
steps are dashed vertical lines labelled as detections (bench.regress.history)."""

from pathlib import Path

from bench.errors import BenchError
from bench.regress import history as hs
from bench.regress.compare import group_label, normalize_kind, reading
from bench.regress.history_plot import plot_history
from bench.report.plots.common import Image, Section, slug
from bench.results import index as ix


def history_section(entries, out_dir, max_groups: int = 12):
    """The report's history section: for each reported run whose suite has more than one run
    under its results root on the same machine, every group of the run across those runs (one
    PNG per group) and the steps flagged (bench.regress.history); None when no suite has history."""

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
