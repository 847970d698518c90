"""The planner judged on measured runs it was not calibrated on (`distbench plan --validate`):
the held-out cases, predicted beside their measurements, and the statistics over them: the step
time and peak memory MAPE, per validation launch its launch factor, per configuration measured in
several launches its median over them, and per sweep how far the model's pick is from the
measured best (over launches, with the launch-to-launch test of that shortfall)."""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.plan import model as pl
from bench.plan.search import Where, predict


@dataclass(frozen=True, kw_only=True)
class Validation:
    held: list  # the held-out cases (plan.Observation)
    rows: list  # per held-out case: predicted beside measured (dicts, the JSON `cases`)
    pooled: list  # per configuration measured in more than one launch: its median over them (over_launches)
    left_out: int  # cases given that were calibration runs or configurations


def _config(o) -> tuple:
    return (o.stages, o.schedule, o.chunks, o.micro_batch, o.checkpoint)


def _calibrated(cals: dict, o: pl.Observation, where: Where | None = None) -> bool:
    """Was `o` (its run, or its configuration in its layout) used for calibration? A layout with tp or
    fsdp inside the stages is only where the calibration measured it (Where.measured)."""
    measured = where.measured if where else {}
    if any(o.run_id in c.runs for c in [*cals.values(), *measured.values()]):
        return True
    if o.tp > 1 or o.fsdp > 1:
        mine = measured.get((o.dp, o.fsdp, o.tp))
        return mine is not None and _config(o) in mine.configs
    return o.dp in cals and _config(o) in cals[o.dp].configs


def validate(cals: dict, given: list[pl.Observation], to: str = "", how: str = "",
             target: pl.Link | None = None, where: Where | None = None) -> Validation:
    """Held-out cases only: a case of a calibration run, or a configuration (ranks, schedule,
    chunks, micro-batch) the calibration measured, is left out and counted. A run of another
    machine than the calibration's is refused unless the user mapped the calibration onto it
    (`to`: --target-machine, --target-p2p); its cases are then predicted for it (with the target
    link, where given)."""
    machine = next(iter(cals.values())).machine
    to = to or machine
    for o in given:
        if o.machine not in (machine, to):
            raise BenchError(f"validation run {o.run_id} was measured on {o.machine}, the calibration on {machine}"
                             + (f", the target ({how}) is {to}" if to != machine else "")
                             + "; pass runs of the calibration's machine, or say which machine it predicts with "
                             "--target-machine RUN_DIR (or --target-p2p RUN_DIR: the other machine's link)")
    held = [o for o in given if not _calibrated(cals, o, where)]
    if not held:
        raise BenchError("--validate runs are all calibration runs or configurations; pass measured runs of "
                         "configurations the model was not fitted on")
    rows = [_row(cals, o, machine, how, target, where) for o in held]
    return Validation(held=held, rows=rows, pooled=over_launches(rows), left_out=len(given) - len(rows))


def _row(cals: dict, o: pl.Observation, machine: str, how: str, target: pl.Link | None,
         where: Where | None = None) -> dict:
    """One held-out case predicted (for its own machine where the user mapped the calibration onto
    it) beside its measurement."""
    moved = o.machine != machine
    p = predict(cals, pl.Candidate(stages=o.stages, dp=o.dp, tp=o.tp, fsdp=o.fsdp, schedule=o.schedule,
                                   chunks=o.chunks, micro_batch=o.micro_batch, checkpoint=o.checkpoint),
                link=target if moved and how == "--target-p2p" else None, to=o.machine if moved else "",
                how=how if moved else "", where=where)
    peak = max(o.peak_bytes.values()) if o.peak_bytes else float("nan")
    return {"run_id": o.run_id, "case_id": o.case_id, "candidate": p.candidate.label, "stages": o.stages, "dp": o.dp,
            "tp": o.tp, "fsdp": o.fsdp, "layout": p.candidate.layout, "comm_source": p.comm_source,
            "oversubscribed": o.oversubscribed,
            "schedule": o.schedule, "chunks": o.chunks, "micro_batch": o.micro_batch,
            "checkpoint": o.checkpoint, "predicted_step_s": p.step_s, "measured_step_s": o.step_s,
            "step_error": p.step_s / o.step_s - 1, "predicted_bubble": p.bubble, "measured_bubble": o.bubble,
            "predicted_peak_bytes": p.peak_bytes, "measured_peak_bytes": peak,
            "peak_error": p.peak_bytes / peak - 1 if peak else float("nan"), "extrapolated": p.extrapolated,
            "calibrated_on": p.calibrated_on, "predicted_for": p.predicted_for, "measured_on": o.machine}


def over_launches(rows: list[dict]) -> list[dict]:
    """Each configuration measured in more than one validation launch, once, with the median over
    its launches of the measured step, bubble and peak. On a shared host a launch is fast or slow
    as a whole (docs/gate.md), of the order of the model's error; a configuration's median over
    launches is its better measurement, while one launch's MAPE also carries that launch's factor."""
    if not rows:
        return []
    out = []
    df = _layouts(pd.DataFrame(rows))
    for _, g in df.groupby(["stages", "dp", "tp", "fsdp", "schedule", "chunks", "micro_batch", "checkpoint"],
                           sort=False):
        n = g["run_id"].nunique()
        if n < 2:
            continue
        r = g.iloc[0].to_dict()
        by_launch = g.groupby("run_id")["measured_step_s"].median()
        r.update(run_id=f"median of {n} launches", case_id=f"{r['case_id']} x{n}", launches=n,
                 measured_by_launch={str(k): float(v) for k, v in by_launch.items()},
                 measured_step_s=float(g["measured_step_s"].median()),
                 measured_bubble=float(g["measured_bubble"].median()),
                 measured_peak_bytes=float(g["measured_peak_bytes"].median()))
        r["step_error"] = r["predicted_step_s"] / r["measured_step_s"] - 1
        r["peak_error"] = r["predicted_peak_bytes"] / r["measured_peak_bytes"] - 1
        out.append(r)
    return out


def per_launch(rows: list[dict]) -> dict:
    """Per validation launch: its step MAPE; its launch factor, the geometric mean of measured /
    predicted over its cases (a launch fast or slow as a whole, which no model of the workload
    predicts: host load, frequency, placement); and the MAPE with that factor taken out (predicted
    x factor against measured), which is what is left of the model's error within the launch.
    The factor is fitted on the launch it judges (one parameter over its cases): a diagnostic."""
    out = {}
    for run, g in (pd.DataFrame(rows).groupby("run_id", sort=True) if rows else ()):
        factor = float(np.exp(np.mean(np.log(g["measured_step_s"] / g["predicted_step_s"]))))
        out[run] = {"step_mape_pct": pl.mape(zip(g["predicted_step_s"], g["measured_step_s"])),
                    "launch_factor": factor,
                    "step_mape_factor_out_pct": pl.mape(zip(g["predicted_step_s"] * factor, g["measured_step_s"]))}
    return out


def per_layout(rows: list[dict]) -> dict:
    """Per layout (pp2, pp2 tp2, ...): its step and peak memory MAPE, case count and comm source."""
    if not rows:
        return {}
    df = pd.DataFrame(rows)
    key = df["layout"] if "layout" in df else [pl.layout_label(s, d) for s, d in zip(df["stages"], df["dp"])]
    out = {}
    for lay, g in df.assign(_layout=key).groupby("_layout", sort=True):
        sub = g.drop(columns="_layout").to_dict("records")
        out[lay] = {"cases": len(sub), **{k: v for k, v in errors(sub).items() if k.endswith("mape_pct")},
                    "comm_source": str(sub[0].get("comm_source", ""))}
    return out


def by_sharing(rows: list[dict]) -> dict:
    """The step and peak MAPE of the oversubscribed cases (more ranks than cores: they time-share the
    host, which the collectives a --comm run measured alone do not) and of the others, apart."""
    out = {}
    for name, flag in (("oversubscribed", True), ("not_oversubscribed", False)):
        sub = [r for r in rows if bool(r.get("oversubscribed", False)) == flag]
        if sub:
            out[name] = {"cases": len(sub), **{k: v for k, v in errors(sub).items() if k.endswith("mape_pct")}}
    return out


def errors(rows: list[dict]) -> dict:
    """Step time and peak memory MAPE, and the bubble's gap in percentage points."""
    gaps = [abs(r["predicted_bubble"] - r["measured_bubble"]) * 100 for r in rows
            if not math.isnan(r["predicted_bubble"]) and not math.isnan(r["measured_bubble"])]
    return {"step_mape_pct": pl.mape((r["predicted_step_s"], r["measured_step_s"]) for r in rows),
            "peak_mape_pct": pl.mape((r["predicted_peak_bytes"], r["measured_peak_bytes"]) for r in rows
                                     if not math.isnan(r["measured_peak_bytes"])),
            "bubble_mean_gap_pp": float(np.mean(gaps)) if gaps else None,
            "bubble_max_gap_pp": max(gaps) if gaps else None}


def _layouts(df: pd.DataFrame) -> pd.DataFrame:
    """Rows without tp / fsdp / dp columns (older stored predictions) are pipelines alone."""
    return df.assign(**{k: df[k] if k in df else 1 for k in ("dp", "tp", "fsdp")})


def kendall_tau(predicted, measured) -> float:
    """Kendall's tau (scipy.stats.kendalltau, tau-b) between predicted and measured throughput: 1
    when the model orders the sweep's configurations as they measured; nan under two of them."""
    from scipy.stats import kendalltau  # lazy: scipy only when a validation is scored

    if len(predicted) < 2:
        return float("nan")
    return float(kendalltau(predicted, measured).statistic)


def sweeps(rows: list[dict]) -> list[dict]:
    """Per validation sweep (one run, one layout), the configuration the model ranks first among
    those measured, against the measured best, how far short of it the pick's measured throughput
    is (0 when the model picked the best), and Kendall's tau between predicted and measured
    throughput over the sweep. Throughput is batch / step for both. Where two or more layouts
    were measured at one world (pp4, pp2 x dp2, pp2 x tp2 on 4 devices), the world is a sweep of
    its own over every run given: the layout question itself. Over launches (over_launches' rows) a
    layout is one sweep, whatever the launch count of each of its configurations."""
    if not rows:
        return []
    df = _layouts(pd.DataFrame(rows))
    df = df.assign(world=df["stages"] * df["dp"] * df["fsdp"] * df["tp"],
                   layout=[pl.layout_label(s, d, t, f) for s, d, t, f in zip(df["stages"], df["dp"], df["tp"],
                                                                              df["fsdp"])])
    if "launches" in df:  # one sweep per layout over launches, named by its launch counts
        counts = df.groupby("layout")["launches"].agg(["min", "max"])
        df["run_id"] = [f"median of {lo} launches" if lo == hi else f"median of {lo}-{hi} launches"
                        for lo, hi in (counts.loc[lay] for lay in df["layout"])]
    groups = [((run, layout), g) for (run, layout), g in df.groupby(["run_id", "layout"], sort=True)]
    groups += [((f"world {w} (every run)", f"{g['layout'].nunique()} layouts"), g)
               for w, g in df.groupby("world", sort=True) if g["layout"].nunique() > 1]
    out = []
    for (run, layout), g in groups:
        batch = g["dp"] * g["fsdp"] * g["chunks"] * g["micro_batch"]
        predicted, measured = batch / g["predicted_step_s"], batch / g["measured_step_s"]
        picked, best = g.loc[predicted.idxmax()], g.loc[measured.idxmax()]
        out.append({"run_id": run, "layout": layout, "stages": int(picked["stages"]), "cases": len(g),
                    "picked": picked["candidate"], "picked_samples_per_s": measured[predicted.idxmax()],
                    "best": best["candidate"], "best_samples_per_s": measured.max(),
                    "shortfall": 1 - measured[predicted.idxmax()] / measured.max(),
                    "kendall_tau": kendall_tau(predicted.tolist(), measured.tolist()),
                    **launch_test(picked, best, batch[predicted.idxmax()], batch[measured.idxmax()])})
    return out


def launch_test(picked, best, picked_batch: float, best_batch: float) -> dict:
    """Does the shortfall hold launch by launch? Over the launches that measured both the pick and
    the best (paired: a launch fast or slow as a whole moves both), the per-launch shortfall
    1 - (pick's throughput / best's; negative where the pick was faster), how many launches had the
    best faster, and a 95% confidence interval of the shortfall from the mean of log(best's
    throughput / pick's) over them (Student's t, n - 1 degrees of freedom; the quantile from
    scipy.stats.t). `faster`: "best" when the interval lies above 0, "pick" when below (the medians
    over launches and the launches paired can disagree), else None; `resolved`: either. All None
    (and the count 0 or the launches of a pick that is the best) without two paired launches with
    finite steps, or when the model picked the best."""
    mine, theirs = picked.get("measured_by_launch"), best.get("measured_by_launch")
    both = sorted(set(mine) & set(theirs)) if isinstance(mine, dict) and isinstance(theirs, dict) else []
    logs = np.log([(best_batch / theirs[k]) / (picked_batch / mine[k]) for k in both]) if both else np.array([])
    if picked["candidate"] == best["candidate"] or len(both) < 2 or not np.isfinite(logs).all():
        return {"launches_paired": len(both), "best_faster_in": None, "launch_shortfall_median": None,
                "shortfall_ci95": None, "faster": None, "resolved": None}
    from scipy.stats import t  # lazy: scipy only when a validation is scored

    half = float(t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs)))
    lo, hi = (1 - float(np.exp(-(logs.mean() + d))) for d in (-half, half))
    faster = "best" if lo > 0 else "pick" if hi < 0 else None
    return {"launches_paired": len(both), "best_faster_in": int((logs > 0).sum()),
            "launch_shortfall_median": float(np.median(1 - np.exp(-logs))), "shortfall_ci95": [lo, hi],
            "faster": faster, "resolved": faster is not None}
