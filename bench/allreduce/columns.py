"""The allreduce kind's columns (docs/schema.md): what its results rows add, and its own tables
(Kind.columns; bench.results.schema merges them)."""

# Allreduce algorithms (bench/allreduce, kind "allreduce"; docs/allreduce.md): extra results columns
# and the cost-model tables. Everything in `model`, `predictions` and `crossover` is model output.
ALLREDUCE = {
    "messages": "int64",  # messages the busiest rank sends per call (a chunked ring: 2(n-1)*ceil(S/(n*chunk)))
    "chunk_bytes": "int64",  # ring's pipelined chunk (0: one chunk per segment, nccl's default); 0 for the other algorithms
    "variant": "string",  # "NCCL_ALGO=Tree" etc. of a native launch; "" when none is set
    "nccl_env": "string",  # JSON of every NCCL_* / TORCH_NCCL_* variable of the launch
    "model_steps": "float64",  # a(n) of t = a*alpha + b*S*beta
    "model_bytes_factor": "float64",  # b(n)
}

MODEL = {  # one row per fitted (algorithm, worlds) and per algorithm and world measured
    "run_id": "string",
    "suite": "string",
    "label": "string",  # algorithm, or algorithm[variant]
    "algorithm": "string",
    "variant": "string",
    "dtype": "string",
    "op": "string",
    "mode": "string",
    "figure": "string",  # the measured time the fit is made from, in words (mode, rank reduction)
    "fit_worlds": "string",  # "2", "4", "2,4"
    "oversubscribed": "bool",  # any fitted point came from an oversubscribed launch
    "coefficients": "string",  # a(n), b(n) in words
    "points": "int64",
    "alpha_s": "float64",
    "alpha_us": "float64",
    "beta_s_per_byte": "float64",
    "bandwidth_gbps": "float64",  # 1 / beta, 1e9 B/s
    "rms_rel_residual": "float64",  # (fitted - measured) / measured
    "max_abs_rel_residual": "float64",
    "used_for_predictions": "bool",
    "latency_s": "float64",  # measured, at the smallest size (single-world rows only)
    "latency_size_bytes": "int64",
    "peak_busbw_gbps": "float64",  # measured
    "peak_size_bytes": "int64",
    "n_half_bytes": "float64",  # smallest size reaching half the peak busbw (interpolated)
    "n_half_at_or_below": "bool",  # the smallest size already reaches it
}

RESIDUALS = {
    "run_id": "string",
    "label": "string",
    "fit_worlds": "string",
    "world": "int64",
    "size_bytes": "int64",
    "measured_s": "float64",
    "fitted_s": "float64",
    "rel_residual": "float64",
}

PREDICTIONS = {  # model output, never measurements
    "run_id": "string",
    "suite": "string",
    "source": "string",  # always "model"
    "label": "string",
    "algorithm": "string",
    "dtype": "string",
    "op": "string",
    "mode": "string",
    "figure": "string",  # the measured time the fit behind the prediction is made from (mode, rank reduction)
    "fit_worlds": "string",  # the launches whose fit made the prediction
    "fit_oversubscribed": "bool",
    "world": "int64",
    "size_bytes": "int64",
    "predicted_time_s": "float64",
    "predicted_algbw_gbps": "float64",
    "predicted_busbw_gbps": "float64",  # 2(n-1)/n factor, as measured rows
    "measured_time_s": "float64",  # the measurement at this world and size, where one exists
}

CROSSOVER = {  # tree vs ring, per measured world
    "run_id": "string",
    "dtype": "string",
    "op": "string",
    "mode": "string",
    "figure": "string",  # the measured time compared (mode, rank reduction)
    "world": "int64",
    "oversubscribed": "bool",
    "measured_kind": "string",  # crossover | ring_always | tree_always | inverted | mixed
    "measured_bytes": "float64",
    "measured_changes": "int64",  # how many times the faster of the two changes across sizes
    "model_kind": "string",  # from each algorithm's own fit at this world
    "model_bytes": "float64",
    "textbook_kind": "string",  # one alpha and beta (ring's fit) for both: coefficients alone
    "textbook_bytes": "float64",
}

# NCCL variant launches of the allreduce kind (bench/allreduce/nccl_log.py): what NCCL chose, read
# from its NCCL_DEBUG=INFO / NCCL_DEBUG_SUBSYS=TUNING log. One row per launch, size and choice.
NCCL_TUNING = {
    "run_id": "string",
    "launch": "string",  # meta.json launches key, e.g. "2:NCCL_ALGO=Tree"
    "variant": "string",  # the launch's NCCL_ALGO / NCCL_PROTO setting, e.g. "NCCL_ALGO=Tree"
    "size_bytes": "int64",  # bytes of the all_reduce (NCCL's nBytes; the rows' size_bytes)
    "algorithm_asked": "string",  # NCCL_ALGO of the launch ("" when not set)
    "algorithm_chosen": "string",  # Tree | Ring | CollNetDirect | CollNetChain | NVLS | NVLSTree | PAT | unknown
    "protocol_asked": "string",  # NCCL_PROTO of the launch ("" when not set)
    "protocol_chosen": "string",  # LL | LL128 | Simple | unknown
    "matches_asked": "bool",  # the choice is within what was asked (False: NCCL fell back silently)
    "calls": "int64",  # log lines with this choice, over the launch's ranks
    "log_files": "int64",  # NCCL log files of the launch that were read
}


COLUMNS = {"results": ALLREDUCE, "model": MODEL, "residuals": RESIDUALS, "predictions": PREDICTIONS,
           "crossover": CROSSOVER, "nccl_tuning": NCCL_TUNING}
