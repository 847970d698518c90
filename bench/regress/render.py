"""A comparison or a verdict as text: the terminal table, markdown for CI logs and PR comments,
JSON. Reads bench.regress.compare's frames; decides nothing."""

import json
import math

import numpy as np
import pandas as pd

from bench.kind import KINDS
from bench.regress.compare import Comparison, public
from bench.regress.rules import _int_or_none
from bench.units import format_size


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
    """The displayed columns, formatted; a case's own key columns (each kind's Reading.keys beyond
    the case id, e.g. an algorithm's variant or a strategy's schedule) follow its id as [key=value]."""
    keys = list(dict.fromkeys(k for kind in KINDS for k in kind.read.keys))
    rows = []
    for _, r in cases.iterrows():
        size = _int_or_none(r.get("size_bytes"))
        row = {"case": r["case_id"], "size": format_size(size) if size is not None else "",
               "placement": r.get("placement", ""), "metric": r["metric"] + ("" if r["gated"] else " (info)"),
               "baseline": format_value(r["metric"], r["baseline"]), "current": format_value(r["metric"], r["current"]),
               "ratio": "-" if not np.isfinite(r["ratio"]) else f"{r['ratio']:.3f}",
               "vs launch": "-" if not np.isfinite(r.get("residual", math.nan)) else f"{r['residual']:.3f}",
               "band": _pct(r["band"]), "tol": f"{r['tolerance'] * 100:.0f}%", "verdict": _said(r)}
        for k in keys:
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
        "per kind": f"launch factor (geomean {r['metric']})", "decidable cases": f"{r['decidable']}/{r['cases']}",
        "worse": "-" if not np.isfinite(r["geomean_worse"]) else f"{r['geomean_worse']:.3f}x",
        "band": _pct(r["band"]), "tol": f"{r['tolerance'] * 100:.0f}%", "verdict": _said(r)}
        for _, r in kinds.iterrows()])
    return _render_frame(df, fmt)


def render_groups(groups: pd.DataFrame, fmt: str = "table") -> str:
    """One line per group: e.g. `all_reduce  time_median_s  2.01x (band +6%)  regression`; worse is
    the group's geometric mean against the rest of its launch (the launch's median case)."""
    if groups.empty:
        return ""
    df = pd.DataFrame([{
        "group": r["group"], "metric": r["metric"], "cases": r["cases"],
        "vs launch": "-" if not np.isfinite(r["worse"]) else f"{r['worse']:.2f}x (band {_pct(r['band'])})",
        "tol": f"{r['tolerance'] * 100:.0f}%", "verdict": _said(r)} for _, r in groups.iterrows()])
    return _render_frame(df, fmt)


def _said(r) -> str:
    """A verdict, with the first launch's when a confirmation re-run changed it."""
    first, label = r.get("first_verdict"), r.get("_first_label")
    label = label if isinstance(label, str) and label else "first launch"
    return f"{r['verdict']} ({label}: {first})" if isinstance(first, str) and first != r["verdict"] else r["verdict"]


def render(cmp: Comparison, fmt: str = "table", title: str = "") -> str:
    """A comparison as a table, markdown or JSON text."""
    if fmt == "json":
        def records(df):
            return json.loads(public(df).to_json(orient="records")) if len(df) else []

        return json.dumps({"title": title, "kind": cmp.kind, "repeats": cmp.repeats, "rules": cmp.rules.source,
                           "cases": records(cmp.cases), "kinds": records(cmp.kinds), "groups": records(cmp.groups)},
                          indent=2) + "\n"
    head = f"## {title}" if fmt == "markdown" and title else title
    parts = [p for p in (head, render_kinds(cmp.kinds, fmt), render_groups(cmp.groups, fmt), render_cases(cmp.cases, fmt)) if p]
    return "\n\n".join(parts) + "\n"
