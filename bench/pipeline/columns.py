"""The pipeline kind's columns: the training kinds' (bench.training.columns) and the planner's
validation table (docs/plan.md; Kind.columns, merged by bench.results.schema)."""

from bench.training.columns import COLUMNS as TRAINING

PLAN_PREDICTIONS = {  # a plan run of its own, by `distbench plan --validate` (docs/plan.md): model output, not measured
    "run_id": "string", "case_id": "string",
    "role": "string",  # validation (a held-out case of this run) | recommended (a ranked candidate)
    "rank": "int64",  # recommended: 1 = best predicted; validation: 0
    "candidate": "string",  # "pp<ranks>[ dp<replicas>] <schedule> m=<chunks> b=<micro-batch>[ ckpt=<mode>]"
    "stages": "int64",
    "dp": "int64",  # data-parallel replicas of the pipeline (world = stages x dp x fsdp x tp); micro_batch is one replica's
    "tp": "int64",  # tensor-parallel degree inside every stage (predicted by composition: bench.plan.compose)
    "fsdp": "int64",  # FSDP2 shards of every stage (predicted by composition)
    "layout": "string",  # "pp2", "pp2 dp2", "pp2 tp2", "pp2 fsdp2": the candidate's degrees above one
    "oversubscribed": "bool",  # validation: the measured case put more ranks than cores on a host (time-sharing)
    "comm_source": "string",  # where its communication terms came from (a collectives run, an nccl-tests import, a simcluster run, the default) or the calibrated layout
    "schedule": "string", "chunks": "int64", "micro_batch": "int64",
    "checkpoint": "string",  # activation checkpointing mode of the candidate (always | except_last | never)
    "predicted_step_s": "float64", "measured_step_s": "float64",  # measured: the case's step_median_s
    "predicted_samples_per_s": "float64", "predicted_bubble": "float64", "measured_bubble": "float64",
    "predicted_peak_bytes": "float64", "measured_peak_bytes": "float64",  # max over ranks
    "extrapolated": "string",  # why the model left its calibrated range, or ""
    "calibration_runs": "string",  # run ids, comma list
    "why": "string",  # recommended rank 1: the trade-off behind the pick
    "calibration_machine": "string",  # the machine the calibration runs measured (device, backend, nodes)
    "predicted_for": "string",  # the machine predicted for: the calibration's unless the user mapped another
    "measured_machine": "string",  # validation: the machine the validated run measured
}


COLUMNS = {**TRAINING, "plan_predictions": PLAN_PREDICTIONS}
