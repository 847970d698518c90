"""Like with like: the settings that change a case's numbers without changing its key. A baseline
and a run (or the two sides of an A/B) are compared only when they agree on each one recorded."""

import pandas as pd

from bench.kind import KINDS
from bench.regress.compare import reading


# meta.json config fields that change a case's numbers without changing its key (budget and
# iteration floors change how many samples a median is taken over; blocking how ops overlap)
CONFIG_SETTINGS = ("modes", "blocking", "budget_s", "iters", "warmup", "max_iters", "blocks", "dtypes", "placements",
                   "threads", "backend")
SOFTWARE_SETTINGS = ("torch", "nccl", "cuda")  # full versions (the fingerprint has major.minor only)
CLUSTER_SETTINGS = ("driver_version", "cuda_driver_version", "power_limit_w")  # power limit: compared when recorded


def _nccl_env_of(meta: dict) -> dict | None:
    if "nccl_env" in meta:
        return dict(meta.get("nccl_env") or {})
    envs = [la["nccl_env"] for la in (meta.get("launches") or {}).values() if "nccl_env" in la]
    return {k: v for e in envs for k, v in e.items()} if envs else None


def _distinct(rows: pd.DataFrame, col: str):
    vals = sorted({str(v) for v in rows[col].dropna()}) if col in rows.columns else []
    return vals[0] if len(vals) == 1 else tuple(vals) if vals else None


def settings_differences(meta_a: dict, rows_a: pd.DataFrame, meta_b: dict, rows_b: pd.DataFrame,
                         kind: str | None = None) -> list[str]:
    """'field: a vs b' for every setting that changes the numbers and differs between two
    measurements (a baseline and a run, or the base and the candidate of an A/B). A field is
    compared only when both sides record it (older runs lack some)."""
    out = []
    ca, cb = meta_a.get("config") or {}, meta_b.get("config") or {}
    for k in CONFIG_SETTINGS:
        if k in ca and k in cb and ca[k] != cb[k]:
            out.append(f"{k}: {ca[k]!r} vs {cb[k]!r}")
    columns = reading(kind).settings if kind else tuple(dict.fromkeys(c for k in KINDS for c in k.read.settings))
    said = {o.split(":")[0] for o in out} | {"mode" if "modes" in o else "" for o in out}
    for col in columns:
        va, vb = _distinct(rows_a, col), _distinct(rows_b, col)
        if col not in said and va is not None and vb is not None and va != vb:
            out.append(f"{col}: {va!r} vs {vb!r}")
    ea, eb = _nccl_env_of(meta_a), _nccl_env_of(meta_b)
    if ea is not None and eb is not None:
        for k in sorted(set(ea) | set(eb)):
            if ea.get(k) != eb.get(k):
                out.append(f"{k}: {repr(ea[k]) if k in ea else 'unset'} vs {repr(eb[k]) if k in eb else 'unset'}")
    for section, names in (("software", SOFTWARE_SETTINGS), ("cluster", CLUSTER_SETTINGS)):
        sa, sb = meta_a.get(section) or {}, meta_b.get(section) or {}
        for k in names:
            if sa.get(k) is not None and sb.get(k) is not None and str(sa[k]) != str(sb[k]):
                out.append(f"{k}: {sa[k]!r} vs {sb[k]!r}")
    return out


# Row columns that say what a figure means: the timing mode, the reduction over ranks, blocking, and
# an imported tool's own options that change its time (nccl-tests -z, -G, -C ...: bench.imports).
# Two rows of one case key that differ in one of them are two measurements, not a change.
DEFINITION = ("mode", "rank_reduce", "blocking", "tool_options")


def _said(v) -> str:
    """A definition value as compared: null and '' alike (distbench's rows carry no tool_options)."""
    return "" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


def unlike_cases(rows_a: pd.DataFrame, rows_b: pd.DataFrame, keys: list[str]) -> list[str]:
    """'column: a vs b (N case(s), e.g. KEY)' for every definition column in which the rows of a
    case key present on both sides differ; [] when every shared case was measured alike."""
    keys = [k for k in keys if k in rows_a.columns and k in rows_b.columns]
    out = []
    for col in DEFINITION:
        if col not in rows_a.columns and col not in rows_b.columns:
            continue
        sides = []
        for df in (rows_a, rows_b):
            vals = df[col] if col in df.columns else pd.Series([None] * len(df), index=df.index)
            key = df[keys].astype("string").fillna("").agg(" ".join, axis=1) if keys else pd.Series("", index=df.index)
            sides.append(pd.DataFrame({"key": key, "v": [_said(v) for v in vals]}).groupby("key")["v"]
                         .agg(lambda s: tuple(sorted(set(s)))))
        a, b = sides
        shared = a.index.intersection(b.index)
        diff = [k for k in shared if a[k] != b[k]]
        if diff:
            pairs = sorted({(a[k], b[k]) for k in diff})
            what = "; ".join(f"{'/'.join(map(repr, x))} vs {'/'.join(map(repr, y))}" for x, y in pairs[:3])
            out.append(f"{col}: {what} ({len(diff)} case(s), e.g. {diff[0]})")
    return out
