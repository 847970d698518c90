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
- Noise band (per case and metric): a one-sided prediction bound for one new launch, on logs:
      band_log = t_{1-alpha, R-1} * s * sqrt(1 + 1/R)
  with R repeats and s the sample standard deviation (ddof=1) of log(repeat median).
  Shown as band = exp(band_log) - 1 (e.g. +18%). No band with R < 2.
- Threshold: worse by more than BOTH the tolerance and the band:
      log(worse) > max(log(1 + tolerance), band_log)
  Tolerance: 10% by default, 25% below 1 MiB (latency-bound sizes); per suite and per case in
  a rules file (Rules.load).
- `unstable`: no band (R < 2) or band > max_band (35%): the baseline's launches disagree too
  much to decide; listed, never fails on its own and left out of the kind's geometric mean.
- Per kind and gated metric: G = mean of log(worse) over the cases that have a value and a baseline
  (ok / regression / improved / unstable; not wrong, throttled, missing). An unstable case cannot
  fail alone, but it counts here with weight 1/n, because this mean has its own band from the
  same repeats: g_r = mean over those cases of log(repeat_r / center), and
      band_G = t_{1-alpha, R-1} * stdev(g_r) * sqrt(1 + 1/R);
  regression when G > max(log(1 + geomean_tolerance), band_G). So a uniform 1.5x slowdown
  fails even when every single case sits inside its own band. When the current rows hold m
  launches (the gate's confirmation: m = 2, each case the geometric mean of its launches), the
  band is the bound for a mean of m launches: t * stdev(g_r) * sqrt(1/m + 1/R). The kind is
  `unstable` when even that two-launch band exceeds max_band.
- Decision alpha: `alpha` for verdicts; the gate screens a first launch at the looser
  `screen_alpha` (0.10) only to choose what to re-run (docs/gate.md).
- Current rows with `wrong` > 0 are `wrong`; rows telemetry marks `throttled` are `throttled`
  (reported, not decidable).
"""

import fnmatch
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from bench.errors import BenchError
from bench.suite import tomllib
from bench.units import format_size, parse_size

KIND_ALIASES = {
    "collective": "collectives", "collectives": "collectives",
    "algorithm": "allreduce", "allreduce": "allreduce",
    "strategy": "strategies", "strategies": "strategies", "pipeline": "pipeline",
}
BASE_KEYS = ("case_id", "size_bytes", "placement", "world")
KIND_KEYS = {
    "collectives": (),
    "allreduce": ("algorithm", "variant"),
    "strategies": ("strategy", "model", "chunks", "schedule", "checkpoint"),
    "pipeline": ("strategy", "model", "chunks", "schedule", "checkpoint"),
}


@dataclass(frozen=True)
class Metric:
    column: str
    lower_is_better: bool
    gated: bool  # decides the gate; the others are shown only


_COMM = (Metric("time_median_s", True, True), Metric("busbw_gbps", False, False))
_TRAIN = (Metric("step_median_s", True, True), Metric("samples_per_s", False, False),
          Metric("tokens_per_s", False, False), Metric("peak_memory_bytes", True, True),
          Metric("bubble_measured", True, False))
METRICS = {"collectives": _COMM, "allreduce": _COMM, "strategies": _TRAIN, "pipeline": _TRAIN}

VERDICTS = ("wrong", "regression", "improved", "ok", "unstable", "throttled", "n/a", "missing", "new")


def normalize_kind(kind) -> str:
    k = KIND_ALIASES.get(str(kind or "").strip().lower())
    if k is None:
        raise BenchError(f"unknown result kind '{kind}'; known: {', '.join(sorted(set(KIND_ALIASES.values())))}")
    return k


def key_columns(kind: str, df: pd.DataFrame | None = None) -> list[str]:
    cols = [*BASE_KEYS, *KIND_KEYS[normalize_kind(kind)]]
    return [c for c in cols if df is None or c in df.columns]


# ---------------------------------------------------------------------------------------------
# Rules: tolerances per suite and per case


@dataclass(frozen=True)
class Rules:
    """Gate settings. A rules file (TOML, e.g. suites/smoke.gate.toml) sets any field; its
    [cases] table maps a case pattern (fnmatch on 'case_id@size_bytes' or on 'case_id') to a
    tolerance, e.g. `"broadcast.*@4194304" = 0.2`."""

    tolerance: float = 0.10  # fraction worse that is never a regression
    small_tolerance: float = 0.25  # the same below small_bytes (latency-bound messages)
    small_bytes: int = 1 << 20
    geomean_tolerance: float = 0.10  # per kind, on the geometric mean of ratios
    alpha: float = 0.01  # one-sided: chance that an unchanged launch falls outside the band
    screen_alpha: float = 0.10  # the gate's first look: which cases to re-run (a false flag costs one launch)
    max_band: float = 0.35  # wider band than this: `unstable` (a 1.5x slowdown must clear it)
    cases: dict = field(default_factory=dict)  # pattern -> tolerance
    source: str = "defaults"

    def tolerance_for(self, case_id: str, size_bytes) -> float:
        size = _int_or_none(size_bytes)
        for pat, tol in self.cases.items():
            if fnmatch.fnmatchcase(f"{case_id}@{size}", pat) or fnmatch.fnmatchcase(str(case_id), pat):
                return float(tol)
        if size is not None and 0 < size < self.small_bytes:
            return self.small_tolerance
        return self.tolerance

    @classmethod
    def load(cls, path) -> "Rules":
        path = Path(path)
        try:
            raw = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise BenchError(f"gate rules file '{path}' not found") from None
        except tomllib.TOMLDecodeError as e:
            raise BenchError(f"gate rules file '{path}': malformed TOML: {e}") from None
        raw = dict(raw.get("gate", raw))
        out = {}
        allowed = ("tolerance", "small_tolerance", "small_bytes", "geomean_tolerance", "alpha", "screen_alpha",
                   "max_band", "cases")
        for k, v in raw.items():
            if k not in allowed:
                raise BenchError(f"gate rules file '{path}': unknown key '{k}'; allowed: {', '.join(allowed)}")
            if k == "small_bytes":
                v = parse_size(str(v))
            elif k == "cases":
                if not isinstance(v, dict) or not all(isinstance(t, (int, float)) for t in v.values()):
                    raise BenchError(f"gate rules file '{path}': [cases] maps a case pattern to a tolerance number")
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise BenchError(f"gate rules file '{path}': key '{k}' must be a number >= 0, got {v!r}")
            out[k] = v
        for k in ("alpha", "screen_alpha"):
            if not 0 < float(out.get(k, getattr(cls, k))) < 0.5:
                raise BenchError(f"gate rules file '{path}': {k} must be in (0, 0.5)")
        return cls(**out, source=str(path))


def _int_or_none(v):
    try:
        return None if v is None or pd.isna(v) else int(v)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# Statistics


def band_log(log_values, alpha: float, launches: int = 1) -> float:
    """One-sided (1 - alpha) prediction bound, in log units, for the mean of `launches` new launches
    given R repeats (NaN with fewer than 2): t_{1-alpha, R-1} * s * sqrt(1/launches + 1/R)."""
    x = np.asarray([v for v in log_values if np.isfinite(v)], dtype=float)
    r = x.size
    if r < 2:
        return math.nan
    s = float(np.std(x, ddof=1))
    return float(stats.t.ppf(1 - alpha, r - 1) * s * math.sqrt(1 / launches + 1 / r))


def geometric_center(values) -> float:
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    return float(stats.gmean(x)) if x.size else math.nan


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
    kinds: pd.DataFrame  # one row per gated metric: the geometric-mean rule
    repeats: int
    rules: Rules


def compare_rows(baseline: pd.DataFrame, current: pd.DataFrame, kind: str, rules: Rules = Rules(),
                 alpha: float | None = None) -> Comparison:
    """baseline: results rows of R repeats (distinguished by run_id); current: rows of one run
    (several run_ids in `current` are first reduced to their geometric mean per case, and the
    kind's band is that of a mean of so many launches). alpha: the decision alpha (default
    rules.alpha; `unstable` is always judged at rules.alpha)."""
    kind = normalize_kind(kind)
    decide = rules.alpha if alpha is None else alpha
    keys = [k for k in key_columns(kind) if k in baseline.columns or k in current.columns]
    b, c = _keyed(baseline, keys), _keyed(current, keys)
    if "run_id" not in b.columns:
        b["run_id"] = "baseline"
    repeat_ids = sorted(b["run_id"].astype(str).unique())
    b["run_id"] = b["run_id"].astype(str)
    metrics = [m for m in METRICS[kind] if m.column in b.columns or m.column in c.columns]
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
            row = {**dict(zip(keys, key)), "metric": m.column, "lower_is_better": m.lower_is_better,
                   "gated": m.gated, "tolerance": tol, "wrong": wrong, "throttled": throttled}
            per_repeat = {}
            if bg is not None:
                vals = _num(bg, m.column)
                for rid, v in zip(bg["run_id"], vals):
                    if np.isfinite(v) and v > 0:
                        per_repeat[rid] = float(v)
            cur = geometric_center(_num(cg, m.column)) if cg is not None else math.nan
            center = geometric_center(list(per_repeat.values()))
            logs = [math.log(v / center) for v in per_repeat.values()] if center > 0 else []
            bl = band_log(logs, rules.alpha)
            dl = band_log(logs, decide)
            wl = worse_log(center, cur, m.lower_is_better)
            row.update({
                "repeats": len(per_repeat), "baseline": center, "current": cur,
                "ratio": cur / center if center > 0 and np.isfinite(cur) else math.nan,
                "worse": math.exp(wl) if np.isfinite(wl) else math.nan,
                "band": math.exp(bl) - 1 if np.isfinite(bl) else math.nan,
                "spread": (max(per_repeat.values()) / min(per_repeat.values())) if per_repeat else math.nan,
                "_worse_log": wl, "_band_log": bl, "_decide_log": dl,
                "_repeat_logs": {rid: math.log(v / center) for rid, v in per_repeat.items()} if center > 0 else {},
            })
            row["verdict"] = _case_verdict(row, bg is not None, cg is not None, rules)
            rows.append(row)
    cases = _typed_keys(pd.DataFrame(rows))
    launches = max(1, c["run_id"].nunique()) if "run_id" in c.columns else 1
    kinds = _kind_summary(cases, repeat_ids, rules, decide, launches) if len(cases) else pd.DataFrame()
    return Comparison(kind=kind, cases=cases, kinds=kinds, repeats=len(repeat_ids), rules=rules)


def _typed_keys(df: pd.DataFrame) -> pd.DataFrame:
    """Integer key columns back to integers (they are matched as strings)."""
    for k in ("size_bytes", "world", "chunks"):
        if k in df.columns:
            df[k] = pd.to_numeric(df[k].replace("", None), errors="coerce").astype("Int64")
    return df


def _case_verdict(row: dict, in_base: bool, in_cur: bool, rules: Rules) -> str:
    if not in_base:
        return "new"
    if not in_cur:
        return "missing"
    if row["wrong"] > 0:
        return "wrong"
    if row["throttled"]:
        return "throttled"
    wl, bl = row["_worse_log"], row["_band_log"]
    if not np.isfinite(wl):
        return "n/a"
    if not np.isfinite(bl) or math.exp(bl) - 1 > rules.max_band:
        return "unstable"
    threshold = max(math.log1p(row["tolerance"]), row["_decide_log"]) + EPS_LOG
    if wl > threshold:
        return "regression"
    if -wl > threshold:
        return "improved"
    return "ok"


DECIDABLE = ("ok", "regression", "improved")
EPS_LOG = 1e-12  # a ratio exactly at the threshold is not beyond it, whichever direction it was computed in
AGGREGATED = (*DECIDABLE, "unstable")  # cases in the kind's geometric mean (it has its own band)


def _kind_summary(cases: pd.DataFrame, repeat_ids, rules: Rules, decide: float, launches: int) -> pd.DataFrame:
    out = []
    for metric, g in cases[cases["gated"]].groupby("metric", sort=False):
        d = g[g["verdict"].isin(AGGREGATED) & np.isfinite(g["_worse_log"].astype(float))]
        row = {"metric": metric, "cases": len(g), "decidable": len(d), "unstable": int((g["verdict"] == "unstable").sum()),
               "tolerance": rules.geomean_tolerance}
        if d.empty:
            out.append({**row, "geomean_worse": math.nan, "band": math.nan, "verdict": "unstable" if len(g) else "n/a"})
            continue
        G = float(d["_worse_log"].mean())
        # each repeat's own geometric-mean deviation over the same cases
        sign = np.where(d["lower_is_better"], 1.0, -1.0)
        g_r = []
        for rid in repeat_ids:
            vals = [s * logs[rid] for s, logs in zip(sign, d["_repeat_logs"]) if rid in logs]
            if vals:
                g_r.append(float(np.mean(vals)))
        bl = band_log(g_r, decide, launches)
        row.update({"geomean_worse": math.exp(G), "band": math.exp(bl) - 1 if np.isfinite(bl) else math.nan,
                    "launches": launches, "_G": G, "_band_log": bl})
        confirmed = band_log(g_r, rules.alpha, 2)  # the band a confirmed (two-launch) verdict uses
        if not np.isfinite(confirmed) or math.exp(confirmed) - 1 > rules.max_band:
            row["verdict"] = "unstable"
        else:
            threshold = max(math.log1p(rules.geomean_tolerance), bl) + EPS_LOG
            row["verdict"] = "regression" if G > threshold else "improved" if -G > threshold else "ok"
        out.append(row)
    return pd.DataFrame(out)


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
        for m in METRICS[kind]:
            if m.column in f.columns and m.column in c.columns:
                a, b2 = pd.to_numeric(row[m.column], errors="coerce"), pd.to_numeric(again[m.column], errors="coerce")
                if pd.notna(a) and pd.notna(b2):
                    out.at[i, m.column] = min(a, b2) if m.lower_is_better else max(a, b2)
        if "wrong" in c.columns and pd.notna(again.get("wrong")):
            out.at[i, "wrong"] = max(int(row.get("wrong") or 0), int(again["wrong"]))
    return out


__all__ = ["Comparison", "Metric", "METRICS", "Rules", "band_log", "compare_rows", "key_columns",
           "normalize_kind", "public", "with_confirmation", "worse_log"]


# ---------------------------------------------------------------------------------------------
# Rendering (terminal table, markdown for CI logs and PR comments, JSON)


def format_value(metric: str, v) -> str:
    if v is None or not np.isfinite(v):
        return "-"
    if metric.endswith("_s"):
        return f"{v * 1e3:.3f} ms" if v >= 1e-3 else f"{v * 1e6:.1f} us"
    if metric.endswith("_bytes"):
        return f"{v / 2**20:.1f} MiB"
    if metric.endswith("_gbps"):
        return f"{v:.3f} GB/s"
    return f"{v:.4g}"


def _pct(v) -> str:
    return "-" if v is None or not np.isfinite(v) else f"+{v * 100:.0f}%"


def case_table(cases: pd.DataFrame) -> pd.DataFrame:
    """The displayed columns, formatted."""
    rows = []
    for _, r in cases.iterrows():
        size = _int_or_none(r.get("size_bytes"))
        row = {"case": r["case_id"], "size": format_size(size) if size is not None else "",
               "placement": r.get("placement", ""), "metric": r["metric"] + ("" if r["gated"] else " (info)"),
               "baseline": format_value(r["metric"], r["baseline"]), "current": format_value(r["metric"], r["current"]),
               "ratio": "-" if not np.isfinite(r["ratio"]) else f"{r['ratio']:.3f}",
               "band": _pct(r["band"]), "tol": f"{r['tolerance'] * 100:.0f}%", "verdict": r["verdict"]}
        if "first_verdict" in cases.columns and r["first_verdict"] != r["verdict"]:
            row["verdict"] = f"{r['verdict']} (first launch: {r['first_verdict']})"
        for k in ("algorithm", "variant", "strategy", "model", "chunks", "schedule", "checkpoint"):
            if k in cases.columns and str(r.get(k, "")) not in ("", "nan", "<NA>"):
                row["case"] += f" [{k}={r[k]}]"
        rows.append(row)
    return pd.DataFrame(rows)


def _render_frame(df: pd.DataFrame, fmt: str) -> str:
    if df.empty:
        return ""
    cols = list(df.columns)
    cells = [[str(x) for x in row] for row in df.itertuples(index=False)]
    if fmt == "markdown":
        out = ["| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
        return "\n".join(out)
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    fmt_row = lambda row: "  ".join(x.ljust(w) for x, w in zip(row, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt_row(cols), fmt_row(["-" * w for w in widths]), *map(fmt_row, cells)])


def render_cases(cases: pd.DataFrame, fmt: str = "table") -> str:
    return _render_frame(case_table(cases), fmt)


def render_kinds(kinds: pd.DataFrame, fmt: str = "table") -> str:
    if kinds.empty:
        return ""
    df = pd.DataFrame([{
        "per kind": f"geomean {r['metric']}", "decidable cases": f"{r['decidable']}/{r['cases']}",
        "worse": "-" if not np.isfinite(r["geomean_worse"]) else f"{r['geomean_worse']:.3f}x",
        "band": _pct(r["band"]), "tol": f"{r['tolerance'] * 100:.0f}%", "verdict": r["verdict"]}
        for _, r in kinds.iterrows()])
    return _render_frame(df, fmt)


def render(cmp: Comparison, fmt: str = "table", title: str = "") -> str:
    """A comparison as a table, markdown or JSON text."""
    if fmt == "json":
        def records(df):
            return json.loads(public(df).to_json(orient="records")) if len(df) else []

        return json.dumps({"title": title, "kind": cmp.kind, "repeats": cmp.repeats, "rules": cmp.rules.source,
                           "cases": records(cmp.cases), "kinds": records(cmp.kinds)}, indent=2) + "\n"
    head = f"## {title}" if fmt == "markdown" and title else title
    parts = [p for p in (head, render_cases(cmp.cases, fmt), render_kinds(cmp.kinds, fmt)) if p]
    return "\n\n".join(parts) + "\n"
