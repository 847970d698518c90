"""The planner in the pipeline report: predicted vs measured step time of the held-out cases
(`distbench plan --validate` stores them as plan_predictions in a plan run of its own, drawn
when that run is in the report beside the runs) and the ranked recommendation. Both are
labelled as model output and name the machine the model was calibrated on."""

from pathlib import Path

import numpy as np

from bench.plan.model import mape
from bench.report.plots.common import Section, finish_axes, new_figure, save, style
from bench.report.plots.data import Entry, num, table


def _machines(rows) -> str:
    """' on <machine>' (and ', predicted for <machine>' where the user mapped it), where recorded."""
    if "calibration_machine" not in rows or rows["calibration_machine"].isna().all():
        return ""
    cal = str(rows["calibration_machine"].dropna().iloc[0])
    to = sorted(set(rows["predicted_for"].dropna().astype(str)) - {cal}) if "predicted_for" in rows else []
    return f" on {cal}" + (f", predicted for {', '.join(to)}" if to else "")


def add(sec: Section, entries: list[Entry], out_dir: Path) -> Section:
    plan = table(entries, "plan_predictions")
    if plan.empty:
        return sec
    val = plan[plan["role"] == "validation"]
    if not val.empty:
        pred, meas = num(val, "predicted_step_s") * 1e3, num(val, "measured_step_s") * 1e3
        fig, axes = new_figure(6.4, 5.2)
        ax = axes[0][0]
        for i, (sched, g) in enumerate(val.assign(_p=pred, _m=meas).groupby("schedule", sort=True)):
            ax.scatter(g["_m"], g["_p"], label=str(sched), color=style(i)["color"], s=28)
        hi = float(np.nanmax([pred.max(), meas.max()])) * 1.05
        ax.plot([0, hi], [0, hi], color="0.5", linestyle=":", linewidth=1, label="predicted = measured")
        err = mape(zip(pred, meas))
        finish_axes(ax, "measured step (ms, median)", "predicted step (ms, model output)",
                    f"planner: predicted vs measured step, {len(val)} held-out cases, MAPE {err:.1f}%")
        sec.images.append(save(fig, out_dir, "pipeline_plan_predicted_vs_measured",
                               "planner: predicted vs measured step (model output)",
                               "Scatter of the planner's predicted step time against the measured median step of "
                               "each held-out pipeline case, one colour per schedule, with the line where they agree."))
        sec.notes.append(f"Planner (docs/plan.md): step time MAPE {err:.1f}% over {len(val)} held-out case(s); "
                         f"calibrated on run(s) {val['calibration_runs'].iloc[0]}{_machines(val)}. "
                         "Predictions are model output.")
    rec = plan[plan["role"] == "recommended"].sort_values("rank")
    if not rec.empty:
        t = rec.assign(**{"predicted step (ms)": num(rec, "predicted_step_s") * 1e3,
                          "predicted samples/s": num(rec, "predicted_samples_per_s"),
                          "predicted bubble": num(rec, "predicted_bubble"),
                          "predicted peak/rank (MiB)": num(rec, "predicted_peak_bytes") / 2**20})
        cols = ["rank", "candidate", "predicted step (ms)", "predicted samples/s", "predicted bubble",
                "predicted peak/rank (MiB)", "extrapolated"]
        sec.tables.append((f"planner recommendation (model predictions, best first){_machines(rec)}",
                           t[cols].to_html(index=False, escape=True, float_format=lambda x: f"{x:.3g}", na_rep="-")))
        if str(rec["why"].iloc[0]):
            sec.notes.append(f"Planner: {rec['why'].iloc[0]}")
    return sec
