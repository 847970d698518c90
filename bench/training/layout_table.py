"""The report's layout comparison: at each world where several layouts ran (pp x tp, fsdp x tp,
ddp x tp, pp x dp, ... and the single strategies), what each costs and buys per device."""

import pandas as pd

from bench.report.plots.data import num

TITLE = ("Layouts at equal world: throughput per device, bubble (mean / worst pipeline rank), memory per rank "
         "(max over ranks: CUDA peak reserved or host peak RSS), communication share of the step: "
         "communication outside the compute spans (pipeline p2p waits; for ddp / fsdp alone the timed "
         "forward+backward minus the same compute without communication). TP and FSDP collectives inside "
         "a composed layout's forward/backward count as its compute (no comm-free run of a shard to subtract)")


def layout_rows(res: pd.DataFrame) -> pd.DataFrame:
    """One row per case at every world with >= 2 layouts, best throughput first within a world."""
    if res.empty or "layout" not in res:
        return pd.DataFrame()
    df = res.assign(layout=res["layout"].fillna("").astype(str))
    df = df[df["layout"] != ""]
    many = df.groupby("world")["layout"].transform("nunique") > 1
    df = df[many]
    if df.empty:
        return df
    out = pd.DataFrame({
        "run": df.get("_label", pd.Series("", index=df.index)), "world": df["world"], "layout": df["layout"],
        "strategy": df["strategy"], "model": df["model"], "schedule": df["schedule"].fillna("").replace("", "-"),
        "chunks": df["chunks"], "samples/s/device": num(df, "samples_per_s_per_device"),
        "bubble mean": num(df, "bubble_measured"), "bubble max": num(df, "bubble_max"),
        "peak MiB/rank": num(df, "peak_memory_bytes") / 2**20, "comm share": num(df, "comm_share"),
        "wrong": df["wrong"], "degraded": df.get("degraded", pd.Series("", index=df.index)).fillna(""),
    })
    out = out.sort_values(["run", "world", "model", "samples/s/device"], ascending=[True, True, True, False])
    return out


def layout_table(res: pd.DataFrame) -> tuple[str, str] | None:
    """(title, HTML) for the report section, or None when no world has two layouts."""
    rows = layout_rows(res)
    if rows.empty:
        return None
    return TITLE, rows.round(4).to_html(index=False, escape=True, na_rep="-", classes="data", border=0)
