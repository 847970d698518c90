"""Frames the plots share: runs labelled for legends, and spread bands from the raw samples."""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.results.store import Run


@dataclass
class Entry:
    """A run in the report: its legend label, and whether it is a --baseline run (drawn grey, dashed)."""

    label: str
    run: Run
    baseline: bool = False


def table(entries: list[Entry], name: str) -> pd.DataFrame:
    """One table over all entries, with _label / _baseline columns (empty frame when none has it)."""
    frames = []
    for e in entries:
        df = e.run.tables.get(name)
        if df is not None and len(df):
            frames.append(df.assign(_label=e.label, _baseline=e.baseline))
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def lacking(entries: list[Entry], name: str) -> list[str]:
    return [e.label for e in entries if e.run.tables.get(name) is None or not len(e.run.tables[name])]


RANK_AGG = {"max": "max", "avg": "mean", "min": "min", "rank0": "first"}  # bench.timing.stats.reduce_ranks


def sample_quantiles(samples: pd.DataFrame, keys=("case_id", "size_bytes", "placement")) -> pd.DataFrame:
    """p25 / p75 seconds of the per-iteration time reduced over ranks as the harness computes it
    (column rank_reduce when the samples carry it, from their results rows: max = the slowest
    rank's sample, avg = the mean over ranks ...; max otherwise)."""
    keys = [k for k in keys if k in samples]
    if samples.empty or "seconds" not in samples:
        return pd.DataFrame(columns=[*keys, "_label", "band_p25_s", "band_p75_s"])
    how = samples["rank_reduce"].fillna("max") if "rank_reduce" in samples else pd.Series("max", index=samples.index)
    parts = []
    for h, part in samples.assign(_how=how).groupby("_how"):
        part = part.sort_values("rank") if "rank" in part else part
        parts.append(part.groupby(["_label", *keys, "iteration"], dropna=False)["seconds"]
                     .agg(RANK_AGG.get(h, "max")).reset_index())
    per_iter = pd.concat(parts, ignore_index=True)
    q = per_iter.groupby(["_label", *keys], dropna=False)["seconds"].quantile([0.25, 0.75]).unstack()
    q.columns = ["band_p25_s", "band_p75_s"]
    return q.reset_index()


def with_band(results: pd.DataFrame, samples: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """results + band_p25_s / band_p75_s, and a sentence saying where the band came from."""
    df = results.copy()
    if not samples.empty:
        on = [k for k in ("_label", "case_id", "size_bytes", "placement") if k in samples and k in df]
        if "rank_reduce" in df and "rank_reduce" not in samples:
            samples = samples.merge(df[[*on, "rank_reduce"]].drop_duplicates(on), on=on, how="left")
        q = sample_quantiles(samples)
        keys = [k for k in ("_label", "case_id", "size_bytes", "placement") if k in q and k in df]
        df = df.merge(q, on=keys, how="left")
        if "time_p25_s" in df:
            df["band_p25_s"] = df["band_p25_s"].fillna(df["time_p25_s"])
            df["band_p75_s"] = df["band_p75_s"].fillna(df["time_p75_s"])
        how = ("Bands: p25-p75 of the per-iteration time reduced over ranks as each row's rank_reduce says "
               "(max: the slowest rank), computed here from the raw samples (samples.parquet); rows without "
               "samples use the stored time_p25_s / time_p75_s.")
    else:
        df["band_p25_s"] = df.get("time_p25_s", np.nan)
        df["band_p75_s"] = df.get("time_p75_s", np.nan)
        how = ("Bands: the stored time_p25_s / time_p75_s columns (no samples table in these runs), the same "
               "statistic: p25-p75 of the per-iteration time reduced over ranks (rank_reduce).")
    return df, how


def series_keys(df: pd.DataFrame, candidates, multi_run: bool) -> list[str]:
    """The columns that actually vary (so a legend entry says only what distinguishes a line)."""
    keys = [c for c in candidates if c in df and df[c].astype("string").nunique(dropna=False) > 1]
    return (["_label"] if multi_run else []) + keys


def series_label(key_cols: list[str], values, fmt=None) -> str:
    values = values if isinstance(values, tuple) else (values,)
    parts = []
    for c, v in zip(key_cols, values):
        if fmt and c in fmt:
            parts.append(fmt[c](v))
        elif c == "world":
            parts.append(f"w{v}")
        else:
            parts.append(str(v))
    return " ".join(parts) or "all"


def num(df: pd.DataFrame, col: str) -> np.ndarray:
    """A nullable column as float64 with NaN for nulls (matplotlib cannot plot pd.NA)."""
    return pd.to_numeric(df[col], errors="coerce").astype("float64").to_numpy() if col in df else np.full(len(df), np.nan)
