"""`distbench history`: one case or one group across stored runs, ordered by commit, per machine.

What a point is. Each stored run gives one value of the kind's first gated metric (e.g. a
collective's time_median_s) for the chosen target, with its spread (the run's p25 and p75 of the
same metric, where the kind stores them):
- a case (`--case CASE_ID[@SIZE]`) at one size: the run's median and quartiles as stored;
- a case over several sizes, or a group (`--group NAME`: a value of the kind's Reading.group
  column, e.g. a collective, an algorithm, a strategy, a schedule; a collective's long case id may
  be given by its short name, as the gate prints it): the geometric mean over the target's cases
  that every run of the line has (so a point never moves because a run measured other sizes).

Lines. Runs are split by machine fingerprint (bench.results.fingerprint): machines are never mixed
in one line. Within a line runs are ordered by their commit's place in the repository's history
(`git rev-list --topo-order`), runs of one commit by start time; when a run's commit is not in the
repository (or there is none), the line is ordered by start time and says so.

Baseline generations. A run that is a repeat of a stored baseline generation of the same machine
(results/baselines/<fingerprint>/history.parquet: its run_id and generation) is marked `g<N>`.

Steps. Step changes are found by asv's step detection (asv.step_detect.detect_steps: a piecewise
constant fit of the series' logarithms (times change by factors) minimising the L1 misfit plus a
penalty per step, the penalty chosen automatically; P. Virtanen, airspeed velocity,
https://github.com/airspeed-velocity/asv, asv/step_detect.py). A boundary between two fitted levels is flagged when the levels differ by more
than the threshold (default the gate's tolerance, 10%). It is a detection, not proof: a flagged
step says where the series moved, not that this commit moved it (`distbench bisect` measures that).
"""

import json
import math
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import BenchError, unknown
from bench.regress.compare import Rules, group_label, normalize_kind, reading
from bench.results import index as ix
from bench.results.fingerprint import Fingerprint
from bench.units import parse_size

DEFAULT_THRESHOLD = Rules.tolerance  # the gate's tolerance: a smaller step is not flagged
DETECTION = ("step detection (asv.step_detect: L1 piecewise-constant fit, automatic penalty); "
             "a detection, not proof: `distbench bisect` measures which commit moved it")


@dataclass(frozen=True, kw_only=True)
class Target:
    """What to follow: a case (case_id, optionally one size) or a group (a value of a group column)."""

    case: str | None = None
    group: str | None = None
    size_bytes: int | None = None

    @classmethod
    def parse(cls, case: str | None, group: str | None) -> "Target":
        if bool(case) == bool(group):
            raise BenchError("give exactly one of --case CASE_ID[@SIZE] and --group NAME "
                             "(a collective, an algorithm, a strategy or a schedule)")
        if case and "@" in case:
            cid, _, size = case.rpartition("@")
            return cls(case=cid, size_bytes=parse_size(size))
        return cls(case=case, group=group)

    @property
    def label(self) -> str:
        if self.case:
            return self.case + (f"@{self.size_bytes}" if self.size_bytes is not None else "")
        return str(self.group)


@dataclass
class Step:
    fingerprint: str
    position: int  # index in the line of the first run at the new level
    git_sha: str
    run_id: str
    before: float
    after: float

    @property
    def ratio(self) -> float:
        return self.after / self.before

    def describe(self, lower_is_better: bool) -> str:
        worse = (self.ratio > 1) == lower_is_better
        return (f"{'slower' if worse else 'faster'} x{self.ratio:.2f} at {self.git_sha[:12] or '?'} "
                f"(run {self.run_id}; level {self.before:.4g} -> {self.after:.4g})")


@dataclass
class History:
    target: Target
    kind: str
    metric: str
    lower_is_better: bool
    points: pd.DataFrame  # one row per run: fingerprint, order, git_sha, git_dirty, start, run_id, value, lo, hi, baseline, step
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    threshold: float = DEFAULT_THRESHOLD

    def lines(self):
        return [(f, g) for f, g in self.points.groupby("fingerprint", sort=True)]


# ---------------------------------------------------------------------------------------------
# Reading the rows of the target


def _rows(runs: pd.DataFrame) -> pd.DataFrame:
    """Every results row of these runs (one DuckDB scan, as of one moment per run), with its run directory."""
    df, _ = ix.scan_runs(runs["dir"], "*")  # files it cannot read are named by ix.build (Index.problems)
    if df.empty:
        return df
    df["kind"] = df["kind"].map(normalize_kind)
    return df


def _match(rows: pd.DataFrame, target: Target) -> tuple[pd.DataFrame, str]:
    """(the target's rows, their kind); unknown case or group: BenchError naming the known ones."""
    if target.case:
        hit = rows[rows["case_id"] == target.case]
        if hit.empty:
            raise unknown("case", target.case, sorted(rows["case_id"].dropna().unique()))
        if target.size_bytes is not None:
            sized = hit[hit["size_bytes"] == target.size_bytes]
            if sized.empty:
                raise unknown(f"size of case {target.case}", target.size_bytes,
                              sorted(hit["size_bytes"].dropna().astype(int).unique()))
            hit = sized
    else:
        parts, names = [], set()
        for kind, g in rows.groupby("kind"):
            try:
                col = reading(kind).group
            except BenchError:
                continue  # a kind no longer registered
            if col not in g:
                continue
            values = g[col].dropna().astype(str)
            labels = {v: group_label(kind, v, values.unique()) for v in values.unique()}
            names.update(labels.values())
            want = {v for v, lab in labels.items() if target.group in (v, lab)}
            parts.append(g[g[col].astype(str).isin(want)])
        hit = pd.concat(parts) if parts else rows.iloc[:0]
        if hit.empty:
            raise unknown("group", target.group, sorted(names))
    kinds = sorted(hit["kind"].unique())
    if len(kinds) > 1:
        raise BenchError(f"'{target.label}' names cases of several kinds ({', '.join(kinds)}); add --kind KIND")
    return hit, kinds[0]


def _spread_columns(metric: str, rows: pd.DataFrame) -> tuple[str | None, str | None]:
    lo, hi = metric.replace("median", "p25"), metric.replace("median", "p75")
    ok = "median" in metric and lo in rows and hi in rows
    return (lo, hi) if ok else (None, None)


def _geomeans(v: pd.Series, by: pd.Series) -> pd.Series:
    """Per group of `by`, the geometric mean of v's positive values (one groupby, not a loop over
    runs); a group with one such value keeps it exactly; none: NaN."""
    v = pd.to_numeric(v, errors="coerce").astype(float)
    v = v.where(v > 0)
    g = pd.DataFrame({"by": by.values, "v": v.values, "log": np.log(v.values)}).groupby("by", sort=False)
    n, first = g["v"].count(), g["v"].first()
    return pd.Series(np.where(n == 1, first, np.exp(g["log"].mean())), index=n.index).where(n > 0)


# ---------------------------------------------------------------------------------------------
# Order, baselines, steps


def commit_positions(repo=None) -> dict[str, int]:
    """sha -> place in the repository's history (oldest first, topological); {} without git."""
    try:
        proc = subprocess.run(["git", "rev-list", "--topo-order", "--reverse", "--all"], capture_output=True,
                              text=True, cwd=repo, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    return {s: i for i, s in enumerate(proc.stdout.split())} if proc.returncode == 0 else {}


def baseline_generations(root) -> dict[tuple[str, str], int]:
    """(fingerprint slug, run_id) -> the newest baseline generation that run is a repeat of."""
    out: dict[tuple[str, str], int] = {}
    for hist in sorted((Path(root) / "baselines").glob("*/history.parquet")):
        try:
            slug = Fingerprint.from_dict(json.loads((hist.parent / "meta.json").read_text())["fingerprint"]).slug()
            df = ix.scan([hist], "DISTINCT run_id, generation")
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for r in df.itertuples():
            out[(slug, str(r.run_id))] = max(int(r.generation), out.get((slug, str(r.run_id)), 0))
    return out


def detect_steps(values, threshold: float) -> list[tuple[int, float, float]]:
    """(index of the first value at the new level, level before, level after) for every boundary of
    asv's piecewise-constant fit whose levels differ by more than `threshold` (a fraction)."""
    from asv.step_detect import detect_steps as asv_steps  # lazy: only history needs it

    y = [float(v) for v in values]
    if len(y) < 2 or not all(math.isfinite(v) and v > 0 for v in y):
        return []
    # fitted on log values: a time's noise and its changes are multiplicative (a launch 2x slower),
    # and on raw values one slow launch's spread hid a 7x step from the automatic penalty
    fit = asv_steps([math.log(v) for v in y])  # [(left, right, level, min, error)], right exclusive
    out = []
    for a, b in zip(fit, fit[1:]):
        if abs(b[2] - a[2]) > math.log1p(threshold):
            out.append((int(b[0]), math.exp(a[2]), math.exp(b[2])))
    return out


# ---------------------------------------------------------------------------------------------


def history(root, target: Target, *, suite=None, kind=None, fingerprint=None, metric=None, repo=None,
            threshold: float = DEFAULT_THRESHOLD) -> History:
    idx = ix.build(root)
    runs = ix.select(idx.runs, suite=suite, fingerprint=fingerprint,
                     kind=normalize_kind(kind) if kind else None)
    runs = runs[runs["rows"] > 0]
    where = " ".join(x for x in (f"of suite '{suite}'" if suite else "", f"of kind '{kind}'" if kind else "",
                                 f"on '{fingerprint}'" if fingerprint else "") if x)
    if runs.empty:
        raise BenchError(f"empty history: no stored run with results {where + ' ' if where else ''}under '{root}'; "
                         "run the suite first, or check --out / --suite (see `distbench runs`)")
    hit, kind = _match(_rows(runs), target)
    read = reading(kind)
    metrics = {m.column: m for m in read.metrics}
    metric = metric or read.gated()[0].column
    if metric not in metrics:
        raise unknown(f"metric of kind {kind}", metric, metrics)
    lo_col, hi_col = _spread_columns(metric, hit)
    keys = [c for c in read.key_columns() if c in hit]
    meta = runs.set_index("dir")
    hit = hit.assign(fingerprint=hit["dir"].map(meta["fingerprint"]))
    positions = commit_positions(repo)
    gens = baseline_generations(root)
    points, steps, notes = [], [], [f"not read: {p}" for p in idx.problems]
    for finger, line in hit.groupby("fingerprint", sort=True):
        case = pd.Series(list(map(tuple, line[keys].astype(str).values)), index=line.index)
        runs_with = line.groupby(case)["dir"].nunique()  # the target's cases every run of this line has
        line = line[case.map(runs_with).eq(line["dir"].nunique()).values]
        if line.empty:
            notes.append(f"{finger}: no case of '{target.label}' is in every run; nothing plotted")
            continue
        dirs = line["dir"]
        pts = pd.DataFrame({"cases": dirs.value_counts(sort=False), "value": _geomeans(line[metric], dirs)})
        for col, name in ((lo_col, "lo"), (hi_col, "hi")):
            pts[name] = _geomeans(line[col], dirs) if col else math.nan
        pts = pts.rename_axis("dir").reset_index().sort_values("dir", kind="stable")
        m = meta.loc[pts["dir"]]
        pts = pts.assign(fingerprint=finger, git_sha=m["git_sha"].values, git_dirty=m["git_dirty"].values,
                         start=m["start"].values, run_id=m["run_id"].values)
        pts["baseline"] = [f"g{gens[(finger, r)]}" if (finger, r) in gens else "" for r in pts["run_id"]]
        pts["_pos"] = pts["git_sha"].map(positions)
        pts = pts[["fingerprint", "git_sha", "git_dirty", "start", "run_id", "dir", "cases", "value", "lo", "hi",
                   "baseline", "_pos"]]
        by_commit = pts["_pos"].notna().all()
        if not by_commit:
            notes.append(f"{finger}: ordered by start time ({int(pts['_pos'].isna().sum())} run(s) on commits "
                         "not in this repository)")
        pts = pts.sort_values(["_pos", "start"] if by_commit else ["start"], kind="stable").reset_index(drop=True)
        pts["order"] = range(len(pts))
        pts["step"] = ""
        for i, before, after in detect_steps(pts["value"], threshold):
            s = Step(fingerprint=finger, position=i, git_sha=str(pts.at[i, "git_sha"]), run_id=str(pts.at[i, "run_id"]),
                     before=before, after=after)
            pts.at[i, "step"] = s.describe(metrics[metric].lower_is_better).split(" at ")[0]
            steps.append(s)
        points.append(pts.drop(columns="_pos"))
    if not points:
        raise BenchError(f"empty history for '{target.label}': {'; '.join(notes)}")
    return History(target=target, kind=kind, metric=metric, lower_is_better=metrics[metric].lower_is_better,
                   points=pd.concat(points, ignore_index=True), steps=steps, notes=notes, threshold=threshold)


# ---------------------------------------------------------------------------------------------
# Rendering (text and JSON; the plot is bench.report.plots.history)


def _fmt(metric: str, v) -> str:
    if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "-"
    if metric.endswith("_s"):
        for unit, f in (("s", 1), ("ms", 1e3), ("us", 1e6)):
            if abs(v) * f >= 1 or unit == "us":
                return f"{v * f:.4g} {unit}"
    return f"{v:.4g}"


def to_text(h: History) -> str:
    out = [f"# history of {h.kind} {'case' if h.target.case else 'group'} '{h.target.label}': {h.metric} "
           f"({'lower' if h.lower_is_better else 'higher'} is better), median [p25, p75] per run"]
    for finger, pts in h.lines():
        out.append(f"\n## machine {finger}: {len(pts)} run(s)")
        out.append(f"{'#':>4}  {'commit':<13} {'start (UTC)':<26} {'run id':<24} {'cases':>5} {h.metric:>12} "
                   f"{'[p25, p75]':<24} {'base':<5} step")
        for r in pts.itertuples():
            sha = (r.git_sha[:12] if r.git_sha else "?") + ("+" if r.git_dirty else " ")
            spread = f"[{_fmt(h.metric, r.lo)}, {_fmt(h.metric, r.hi)}]"
            out.append(f"{r.order:>4}  {sha:<13} {r.start:<26} {r.run_id:<24} {r.cases:>5} {_fmt(h.metric, r.value):>12} "
                       f"{spread:<24} {r.baseline:<5} {r.step}")
    out.append("")
    if h.steps:
        out.append(f"steps flagged (> {h.threshold:.0%} between fitted levels; {DETECTION}):")
        out += [f"  {s.fingerprint}: {s.describe(h.lower_is_better)}" for s in h.steps]
    else:
        out.append(f"no step flagged (> {h.threshold:.0%} between fitted levels; {DETECTION})")
    out += [f"note: {n}" for n in h.notes]
    return "\n".join(out) + "\n"


def to_json(h: History) -> str:
    pts = json.loads(h.points.to_json(orient="records"))
    return json.dumps({"target": h.target.label, "kind": h.kind, "metric": h.metric, "threshold": h.threshold,
                       "method": DETECTION, "points": pts, "notes": h.notes,
                       "steps": [{"fingerprint": s.fingerprint, "position": s.position, "git_sha": s.git_sha,
                                  "run_id": s.run_id, "before": s.before, "after": s.after, "ratio": s.ratio}
                                 for s in h.steps]}, indent=1) + "\n"
