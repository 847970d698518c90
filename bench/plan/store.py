"""Where `distbench plan --validate` writes: a run directory of its own, <root>/plan/<run_id>/
(root: --out, else the first validation run's results root), never the measured runs it read. Per
validated run its cases' predictions beside the measurements, and the ranked recommendation for
its mini-batch, as table plan_predictions (the report draws them beside the runs: `distbench
report RUN... PLAN_DIR`); meta.json says which runs and machines."""

import sys
from pathlib import Path

import pandas as pd

from bench.plan import model as pl
from bench.plan.search import as_dict, calibration_runs, candidates, predict, why
from bench.results.metadata import new_run_id, utc_now
from bench.results.rundir import RunDir, write_json
from bench.results.schema import SCHEMA_VERSION, conform
from bench.results.store import write_parquet
from bench.training import schedules as scheds

TOP = 5  # recommendations stored per validated run


def store(cals: dict, held: list[pl.Observation], rows: list[dict], out, runs, to: str, how: str,
          target: pl.Link | None = None, where=None) -> Path:
    """Write the predictions of a validation (held-out cases `held`, their `rows`) as a run of
    their own; returns its path."""
    cal = next(iter(cals.values()))
    out_rows = []
    for d in sorted({o.run_dir for o in held}, key=str):
        out_rows += _run_rows(cals, [o for o in held if o.run_dir == d], rows, to, how, target, where)
    for r in out_rows:
        r["calibration_runs"] = ",".join(calibration_runs(cals))
        r["calibration_machine"] = cal.machine
    root = Path(out) if out else RunDir.at(Path(runs[0]).resolve()).root
    rd = RunDir(root, "plan", new_run_id())
    rd.path.mkdir(parents=True, exist_ok=False)
    write_parquet(conform(pd.DataFrame(out_rows), "plan_predictions"), rd.path / "plan_predictions.parquet")
    write_json({"schema_version": SCHEMA_VERSION, "run_id": rd.run_id, "kind": "pipeline", "suite": "plan",
                "state": "complete", "started_utc": utc_now(), "command_line": " ".join(["distbench", *sys.argv[1:]]),
                "notes": ["predictions of distbench plan --validate (model output, not measurements)"],
                "plan": {"calibration_runs": calibration_runs(cals), "calibration_machine": cal.machine,
                         "validation_runs": [str(r) for r in runs], "predicted_for": to}},
               rd.meta_path)
    return rd.path


def _run_rows(cals: dict, mine: list[pl.Observation], rows: list[dict], to: str, how: str,
              target: pl.Link | None, where=None) -> list[dict]:
    """One validated run's rows: its held-out cases (role validation), then the ranked
    recommendation for its mini-batch over its layouts (role recommended)."""
    run_id, batch = mine[0].run_id, max(o.dp * o.fsdp * o.chunks * o.micro_batch for o in mine)
    dps = sorted({o.dp for o in mine})
    modes = set.intersection(*(set(pl.layout_for(cals, o.dp * o.fsdp * o.tp).checkpoints) for o in mine))
    cands, _ = candidates(cals, sorted({o.stages for o in mine}), list(scheds.SCHEDULES),
                          sorted({o.chunks for o in mine} | {1, 2, 4, 8, 16}), batch,
                          sorted({o.checkpoint for o in mine} & modes) or None, dps,
                          sorted({o.tp for o in mine}), sorted({o.fsdp for o in mine}))
    there = mine[0].machine if mine[0].machine == to else ""
    wire = target if there and how == "--target-p2p" else None  # a run of the mapped machine: its link
    best, _ = pl.recommend([predict(cals, c, link=wire, to=there, how=how if there else "", where=where)
                            for c in cands])
    ids = {o.case_id for o in mine}
    out = []
    for r in rows:
        if r["run_id"] == run_id and r["case_id"] in ids:
            keep = {k: v for k, v in r.items() if k not in ("step_error", "peak_error", "calibrated_on", "measured_on")}
            out.append({**keep, "role": "validation", "rank": 0, "measured_machine": r["measured_on"]})
    for i, p in enumerate(best[:TOP], 1):
        out.append({"run_id": run_id, "case_id": "", "role": "recommended", "rank": i,
                    **{k: v for k, v in as_dict(p).items() if k not in ("calibrated_on", "comm_s")},
                    "candidate": p.candidate.label, "why": why(p, best) if i == 1 else ""})
    return out
