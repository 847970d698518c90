"""Compare a current run with a baseline, case by case, with a between-launch noise band.

The rule (docs/gate.md has the reasoning and the numbers behind it):

- Cases are matched on the case key: case_id, size_bytes, placement, world, plus the kind's own
  keys (allreduce: algorithm, variant; strategies/pipeline: strategy, model, chunks, schedule,
  checkpoint). The kind comes from meta.json (`collective`/`collectives`, `algorithm`/`allreduce`,
  `strategy`/`strategies`, `pipeline` are all understood).
- Every metric has a direction. `worse` is the ratio that is > 1 when the current run is worse:
  current / baseline where smaller is better (time, step time, memory, bubble fraction),
  baseline / current where bigger is better (busbw, samples/s, tokens/s).
- Baseline center: the geometric mean of the baseline's repeat medians (one per fresh launch).
- Two-way model (issue 18; docs/gate.md has the decomposition of the committed baseline): per
  metric, x_ir = log(worse) of case i in launch r = case + launch + residual. A launch's common
  factor L_r is the median of x_ir over the metric's cases (robust to a minority of changed cases).
- Three levels, each judged on its own band (two_sample: a prediction bound from the baseline's
  repeats for a mean of m launches, t_{1-alpha,R-1} * s * sqrt(1/m + 1/R); or, A/B, Student's
  pooled two-sample bound on R + m - 2 df), and each a regression when worse by more than BOTH its
  tolerance and its band:
    launch factor (the kind row): mean over cases of x_ir (the geometric mean of ratios), with
      geomean_tolerance; what a uniform slowdown moves;
    groups (the kind's Reading.group: per collective case_id, algorithm, strategy, schedule): mean
      over the group's cases of x_ir - L_r, with geomean_tolerance and alpha / groups;
    cases: x_ir - L_r with the case's tolerance (10%, 25% below 1 MiB, per suite and case in a
      rules file, Rules.load); A/B: alpha / cases.
- `unstable`: no band, a case band > max_case_band (100%), a kind or group band > max_band (50%)
  for a mean of two launches: listed, never fails on its own.
- Decision alpha: `alpha` for verdicts; the gate screens a first launch at the looser
  `screen_alpha` (0.10) only to choose what to re-run (docs/gate.md).
- Current rows with `wrong` > 0 are `wrong`; rows telemetry marks `throttled` are `throttled`
  (reported, not decidable).
"""

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.kind import BASE_KEYS, KINDS, Metric, Reading, kind_named  # noqa: F401  (Metric, BASE_KEYS re-exported)
from bench.regress.rules import Rules  # noqa: F401  (the judges import it from here)

VERDICTS = ("wrong", "regression", "improved", "ok", "unstable", "throttled", "n/a", "missing", "new")


def normalize_kind(kind) -> str:
    """The registered kind a stored name means (a kind's name or one of its aliases)."""
    try:
        return kind_named(kind).name
    except BenchError:
        raise BenchError(f"unknown result kind '{kind}'; known: {', '.join(KINDS.names())}") from None


def reading(kind) -> Reading:
    """How this kind's rows are read: its keys, metrics, group column and settings (bench.kind)."""
    return KINDS.get(normalize_kind(kind)).read


def key_columns(kind: str, df: pd.DataFrame | None = None) -> list[str]:
    return [c for c in reading(kind).key_columns() if df is None or c in df.columns]


# ---------------------------------------------------------------------------------------------
# Statistics


def _t_ppf(q: float, df: int) -> float:
    """Student's t quantile (scipy.stats, imported here: scipy.stats costs about 2 s at start, and
    every distbench command imports this module)."""
    from scipy import stats  # lazy: scipy.stats costs about 2 s at every command's start

    return float(stats.t.ppf(q, df))


def band_log(log_values, alpha: float, launches: int = 1) -> float:
    """One-sided (1 - alpha) prediction bound, in log units, for the mean of `launches` new launches
    given R repeats (NaN with fewer than 2): t_{1-alpha, R-1} * s * sqrt(1/launches + 1/R)."""
    x = np.asarray([v for v in log_values if np.isfinite(v)], dtype=float)
    r = x.size
    if r < 2:
        return math.nan
    s = float(np.std(x, ddof=1))
    return _t_ppf(1 - alpha, r - 1) * s * math.sqrt(1 / launches + 1 / r)


def geometric_center(values) -> float:
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    return float(np.exp(np.mean(np.log(x)))) if x.size else math.nan


def worse_log(baseline: float, current: float, lower_is_better: bool) -> float:
    """log of the worse-ratio: > 0 when current is worse than baseline."""
    if not (baseline > 0 and current > 0):
        return math.nan
    r = math.log(current / baseline)
    return r if lower_is_better else -r


# ---------------------------------------------------------------------------------------------
# Matching and the comparison


def _keyed(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Key columns as plain strings (nulls -> ''), so rows match whatever the stored dtypes."""
    out = df.copy()
    for k in keys:
        out[k] = out[k].astype("string").fillna("").astype(str) if k in out.columns else ""
    return out


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df.columns:
        return pd.Series(np.nan, index=df.index, dtype=float)
    return pd.to_numeric(df[col], errors="coerce").astype(float)


@dataclass
class Comparison:
    kind: str
    cases: pd.DataFrame  # one row per case key and metric
    kinds: pd.DataFrame  # one row per gated metric: the launch's common factor (geometric mean)
    repeats: int
    rules: Rules
    groups: pd.DataFrame = field(default_factory=pd.DataFrame)  # per gated metric and group


def compare_rows(baseline: pd.DataFrame, current: pd.DataFrame, kind: str, rules: Rules = Rules(),
                 alpha: float | None = None, ab: bool = False) -> Comparison:
    """baseline: results rows of R repeats (distinguished by run_id); current: rows of m launches
    (one run_id each; a case's current value is the geometric mean of its launches).
    alpha: the decision alpha (default rules.alpha; `unstable` is always judged at rules.alpha).
    ab=False (a stored baseline): bands from the baseline's repeats, for a mean of m new launches.
    ab=True (same-machine A/B: baseline = the base revision's launches, current = the candidate's,
    interleaved): pooled two-sample bands from both arms, and the alpha shared (Bonferroni) among
    the cases and among the groups (a flag is then confirmed by fresh pairs: ab.confirm_ab)."""
    kind = normalize_kind(kind)
    decide = rules.alpha if alpha is None else alpha
    keys = [k for k in key_columns(kind) if k in baseline.columns or k in current.columns]
    b, c = _keyed(baseline, keys), _keyed(current, keys)
    for df, default in ((b, "baseline"), (c, "current")):
        df["run_id"] = df["run_id"].astype(str) if "run_id" in df.columns else default
    repeat_ids = sorted(b["run_id"].unique())
    # a shown metric that no row has (energy on a host without the counter) adds only empty rows
    metrics = [m for m in reading(kind).metrics if (m.column in b.columns or m.column in c.columns)
               and (m.gated or _num(b, m.column).notna().any() or _num(c, m.column).notna().any())]
    b_groups = {k if isinstance(k, tuple) else (k,): g for k, g in b.groupby(keys, sort=False)}
    c_groups = {k if isinstance(k, tuple) else (k,): g for k, g in c.groupby(keys, sort=False)}
    order = list(b_groups) + [k for k in c_groups if k not in b_groups]  # baseline order, then new cases
    rows = []
    for key in order:
        kr = dict(zip(keys, key))
        bg, cg = b_groups.get(key), c_groups.get(key)
        wrong = int(_num(cg, "wrong").fillna(0).sum()) if cg is not None else 0
        throttled = bool(cg["throttled"].fillna(False).astype(bool).any()) if cg is not None and "throttled" in cg else False
        tol = rules.tolerance_for(kr["case_id"], kr.get("size_bytes"))
        for m in metrics:
            row = {**kr, "metric": m.column, "lower_is_better": m.lower_is_better,
                   "gated": m.gated, "tolerance": tol, "wrong": wrong, "throttled": throttled}
            per_repeat, per_launch = _positive(bg, m.column), _positive(cg, m.column)
            cur = geometric_center(list(per_launch.values()))
            center = geometric_center(list(per_repeat.values()))
            sign = 1.0 if m.lower_is_better else -1.0
            wl = worse_log(center, cur, m.lower_is_better)
            row.update({
                "repeats": len(per_repeat), "baseline": center, "current": cur,
                "ratio": cur / center if center > 0 and np.isfinite(cur) else math.nan,
                "worse": math.exp(wl) if np.isfinite(wl) else math.nan,
                "spread": (max(per_repeat.values()) / min(per_repeat.values())) if per_repeat else math.nan,
                "_worse_log": wl,
                # worse-oriented logs against the baseline's center, per baseline repeat and per current launch
                "_repeat_logs": {r: sign * math.log(v / center) for r, v in per_repeat.items()} if center > 0 else {},
                "_current_logs": {r: sign * math.log(v / center) for r, v in per_launch.items()} if center > 0 else {},
            })
            row["verdict"] = _case_precheck(row, bg is not None, cg is not None)
            rows.append(row)
    cases = _typed_keys(pd.DataFrame(rows))
    launches = max(1, c["run_id"].nunique())
    kinds, groups = pd.DataFrame(), pd.DataFrame()
    if len(cases):
        cases, kinds, groups = _decide(kind, cases, repeat_ids, rules, decide, launches, ab)
    return Comparison(kind=kind, cases=cases, kinds=kinds, repeats=len(repeat_ids), rules=rules, groups=groups)


def _positive(rows: pd.DataFrame | None, column: str) -> dict:
    """{run_id: value} of the positive finite values of a column (several rows of one run: their geometric mean)."""
    if rows is None:
        return {}
    out: dict[str, list] = {}
    for rid, v in zip(rows["run_id"], _num(rows, column)):
        if np.isfinite(v) and v > 0:
            out.setdefault(str(rid), []).append(float(v))
    return {r: geometric_center(v) for r, v in out.items()}


def _typed_keys(df: pd.DataFrame) -> pd.DataFrame:
    """Integer key columns back to integers (they are matched as strings)."""
    for k in ("size_bytes", "world", "chunks"):
        if k in df.columns:
            df[k] = pd.to_numeric(df[k].replace("", None), errors="coerce").astype("Int64")
    return df


def _case_precheck(row: dict, in_base: bool, in_cur: bool) -> str:
    """The verdicts that need no statistics; 'pending' for a case the decomposition decides."""
    if not in_base:
        return "new"
    if not in_cur:
        return "missing"
    if row["wrong"] > 0:
        return "wrong"
    if row["throttled"]:
        return "throttled"
    if not np.isfinite(row["_worse_log"]):
        return "n/a"
    return "pending"


DECIDABLE = ("ok", "regression", "improved")
EPS_LOG = 1e-12  # a ratio exactly at the threshold is not beyond it, whichever direction it was computed in
AGGREGATED = (*DECIDABLE, "unstable")  # cases in the kind's geometric mean (it has its own band)
MIN_CASES_FOR_LAUNCH_FACTOR = 3  # with fewer, a launch's median case is the case itself


def two_sample(base, cur, alpha: float, pooled: bool = False) -> tuple[float, float]:
    """(estimate, band_log): estimate = mean(cur) - mean(base); band = the one-sided (1 - alpha)
    bound on it for unchanged code. pooled=False: the variance from `base` alone (R - 1 df), a
    prediction bound for a mean of m = len(cur) new launches: t * s_base * sqrt(1/m + 1/R).
    pooled=True (A/B, both arms measured alike): Student's two-sample t with the pooled variance,
    R + m - 2 df: t * s_pooled * sqrt(1/R + 1/m). band NaN when the variance cannot be estimated."""
    x = np.asarray([v for v in base if np.isfinite(v)], dtype=float)
    y = np.asarray([v for v in cur if np.isfinite(v)], dtype=float)
    if not y.size or not x.size:
        return math.nan, math.nan
    est = float(y.mean() - x.mean())
    r, m = x.size, y.size
    if pooled and m >= 2 and r >= 2:
        df = r + m - 2
        s = math.sqrt(((r - 1) * np.var(x, ddof=1) + (m - 1) * np.var(y, ddof=1)) / df)
        return est, _t_ppf(1 - alpha, df) * s * math.sqrt(1 / r + 1 / m)
    if r < 2:
        return est, math.nan
    return est, _t_ppf(1 - alpha, r - 1) * float(np.std(x, ddof=1)) * math.sqrt(1 / m + 1 / r)


def _verdict(est: float, band: float, reach: float, tolerance: float, max_band: float) -> str:
    """regression / improved when beyond both the tolerance and the band; unstable when `reach`
    (the band the decision could have at best) is wider than max_band."""
    if not np.isfinite(est):
        return "n/a"
    if not np.isfinite(band) or not np.isfinite(reach) or math.exp(reach) - 1 > max_band:
        return "unstable"
    threshold = max(math.log1p(tolerance), band) + EPS_LOG
    return "regression" if est > threshold else "improved" if -est > threshold else "ok"


def group_label(kind: str, value, all_values) -> str:
    """A group's display name: a collective's case_id is shortened to its collective
    (all_reduce.float32.sum... -> all_reduce) unless two groups would share the short name."""
    value = str(value)
    if reading(kind).group != "case_id":
        return value
    short = {str(v).split(".")[0] for v in set(map(str, all_values))}
    return value.split(".")[0] if len(short) == len(set(map(str, all_values))) else value


def _decide(kind, cases, repeat_ids, rules: Rules, decide: float, launches: int, ab: bool):
    """The two-way rule (docs/gate.md): per metric, log worse = case + launch + residual.
    - launch factor of a launch: the median over the metric's cases of its worse-logs (a median,
      so that a slowdown confined to a minority of cases does not move it);
    - kind (the launch's common factor, the geometric mean over cases) judged on its own band;
    - each group's mean residual (a contrast against the launch's median case) judged on its own
      band (alpha shared among the groups);
    - each case's residual judged on its own band."""
    cases = cases.copy()
    cases["residual"] = math.nan
    cases["band"] = math.nan
    for col in ("_band_log", "_decide_log"):
        cases[col] = math.nan
    gcol = reading(kind).group
    kinds, groups = [], []
    for metric, idx in cases.groupby("metric", sort=False).groups.items():
        sub = cases.loc[idx]
        live = sub[sub["verdict"] == "pending"]  # in both, with a value: decided here
        known = sub[sub["_repeat_logs"].map(len) > 0]  # in the baseline: its band is shown even without a current value
        base_all = pd.DataFrame(list(known["_repeat_logs"]), index=known.index, columns=repeat_ids, dtype=float)
        base = base_all.loc[live.index]
        cur = pd.DataFrame(list(live["_current_logs"]), index=live.index, dtype=float)
        frame = live if len(live) else known  # the cases whose median is each launch's common factor
        use_launch = len(frame) >= MIN_CASES_FOR_LAUNCH_FACTOR
        lb = base_all.loc[frame.index].median(axis=0) if use_launch else pd.Series(0.0, index=base_all.columns)
        lc = cur.median(axis=0) if use_launch else pd.Series(0.0, index=cur.columns)
        rb_all, rc = base_all - lb, cur - lc
        rb = rb_all.loc[live.index]
        n_cases = max(1, len(frame))
        case_alpha, reach_alpha = (decide / n_cases, rules.alpha / n_cases) if ab else (decide, rules.alpha)
        for i in known.index:
            current = rc.loc[i] if i in rc.index else pd.Series([0.0])  # no current value: the band for one launch
            est, band = two_sample(rb_all.loc[i], current, case_alpha, ab)
            _, reach = two_sample(rb_all.loc[i], current, reach_alpha, ab)
            cases.at[i, "band"] = math.exp(band) - 1 if np.isfinite(band) else math.nan
            cases.at[i, "_band_log"], cases.at[i, "_decide_log"] = reach, band
            if i in live.index:
                cases.at[i, "residual"] = math.exp(est) if np.isfinite(est) else math.nan
                cases.at[i, "verdict"] = _verdict(est, band, reach, float(cases.at[i, "tolerance"]), rules.max_case_band)
        if not bool(sub["gated"].iloc[0]):
            continue
        kinds.append(_aggregate({"metric": metric, "cases": len(sub), "unstable": int((cases.loc[idx, "verdict"] == "unstable").sum())},
                                base.mean(axis=0), cur.mean(axis=0), rules, decide, launches, ab, len(live)))
        names = live[gcol].astype(str) if gcol in live.columns else pd.Series("", index=live.index)
        if names.nunique() < 2:
            continue  # one group: the kind's row is the group
        n_groups = names.nunique()
        for name in dict.fromkeys(names):
            members = names.index[names == name]
            g = _aggregate({"metric": metric, "group": group_label(kind, name, names.unique()), "_group": name,
                            "cases": len(members)},
                           rb.loc[members].mean(axis=0), rc.loc[members].mean(axis=0), rules, decide / n_groups,
                           launches, ab, len(members), reach_alpha=rules.alpha / n_groups)
            groups.append(g)
    return cases, pd.DataFrame(kinds), pd.DataFrame(groups)


def _aggregate(row: dict, base: pd.Series, cur: pd.Series, rules: Rules, alpha: float, launches: int, ab: bool,
               decidable: int, reach_alpha: float | None = None) -> dict:
    """A kind's or a group's row: estimate and band of a mean log over cases, per launch."""
    est, band = two_sample(base, cur, alpha, ab)
    # the band the verdict has at best: a mean of two launches at alpha (the stored gate's confirmation)
    reach_cur = list(cur.dropna()) if ab or len(cur.dropna()) >= 2 else [0.0, 0.0]
    _, reach = two_sample(base, reach_cur, rules.alpha if reach_alpha is None else reach_alpha, ab)
    row.update({"decidable": decidable, "tolerance": rules.geomean_tolerance, "launches": launches,
                "geomean_worse": math.exp(est) if np.isfinite(est) else math.nan,
                "worse": math.exp(est) if np.isfinite(est) else math.nan,
                "band": math.exp(band) - 1 if np.isfinite(band) else math.nan, "_G": est, "_band_log": band})
    row["verdict"] = _verdict(est, band, reach, rules.geomean_tolerance, rules.max_band) if decidable else "n/a"
    return row


def decompose(results: pd.DataFrame, kind: str, metric: str | None = None) -> dict:
    """The two-way decomposition of a baseline's repeats (log value = case + launch + residual,
    least squares) for docs/gate.md: sd of the launch effects, the raw between-launch sd (pooled
    over cases) and the residual sd ((I-1)(J-1) df)."""
    kind = normalize_kind(kind)
    metric = metric or next(m.column for m in reading(kind).metrics if m.gated)
    keys = key_columns(kind, results)
    y = np.log(_keyed(results, keys).pivot_table(index=keys, columns="run_id", values=metric, aggfunc="median"))
    y = y.dropna()
    v = y.to_numpy(dtype=float)
    i, j = v.shape
    case = v.mean(axis=1, keepdims=True)
    launch = v.mean(axis=0, keepdims=True) - v.mean()
    resid = v - case - launch
    return {"cases": i, "launches": j, "launch_sd": float(np.std(launch, ddof=1)),
            "launch_effects": [float(x) for x in launch.ravel()],
            "raw_sd": float(np.sqrt(np.var(v, axis=1, ddof=1).mean())),
            "residual_sd": float(np.sqrt((resid ** 2).sum() / ((i - 1) * (j - 1))))}


def public(df: pd.DataFrame) -> pd.DataFrame:
    """The frame without the internal (underscore) columns."""
    return df[[c for c in df.columns if not str(c).startswith("_")]] if len(df) else df


def with_confirmation(first: pd.DataFrame, confirm: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Current rows where each re-run case takes, per metric, the better of its two launches:
    a regression stands only when both fresh launches are beyond the threshold."""
    kind = normalize_kind(kind)
    keys = [k for k in key_columns(kind) if k in first.columns]
    f, c = _keyed(first, keys), _keyed(confirm, keys)
    c = c.drop_duplicates(keys, keep="last").set_index(keys)
    out = f.copy()
    for i, row in f.iterrows():
        key = tuple(row[k] for k in keys)
        if key not in c.index:
            continue
        again = c.loc[key]
        for m in reading(kind).metrics:
            if m.column in f.columns and m.column in c.columns:
                a, b2 = pd.to_numeric(row[m.column], errors="coerce"), pd.to_numeric(again[m.column], errors="coerce")
                if pd.notna(a) and pd.notna(b2):
                    out.at[i, m.column] = min(a, b2) if m.lower_is_better else max(a, b2)
        if "wrong" in c.columns and pd.notna(again.get("wrong")):
            out.at[i, "wrong"] = max(int(row.get("wrong") or 0), int(again["wrong"]))
    return out


__all__ = ["Comparison", "Metric", "Rules", "reading", "band_log", "compare_rows", "decompose",
           "group_label", "key_columns", "normalize_kind", "public", "two_sample", "with_confirmation", "worse_log"]
