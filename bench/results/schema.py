"""The versioned result schema shared by every benchmark kind (documented in docs/schema.md).

One store serves every kind: a new kind adds columns to `results`, it does not get a new store.
Bump SCHEMA_VERSION when a column changes meaning or type; adding a nullable column is not a
bump. Readers check `schema_version` in meta.json.
"""

SCHEMA_VERSION = 2  # 2: `kind` is the kind's one name (collectives | allreduce | strategies | pipeline);
# table strategy_spans added

# Columns every results row has, whatever its kind, with pandas dtypes.
COMMON = {
    "run_id": "string",
    "suite": "string",
    "kind": "string",  # collectives | allreduce | strategies | pipeline (meta.json's kind; v1: collective | algorithm | strategy)
    "case_id": "string",  # stable key: identical case specs give identical ids across runs
    "world": "int64",
    "nodes": "int64",
    "backend": "string",
    "device_type": "string",
    "threads_per_rank": "int64",
    "oversubscribed": "bool",
    "degraded": "string",  # why the number is not what it claims to be; "" when it is
    "profile_trace": "string",  # --profile: rank 0's torch.profiler Chrome trace, relative to the run dir (rank r: .rank<r>.json); null: not traced
}

COLLECTIVE = {
    "collective": "string",
    "algorithm": "string",  # "native" for the backend's own; ring/tree/... from bench.allreduce
    "size_bytes": "int64",  # S: total array bytes (nccl-tests)
    "count": "int64",  # elements of S
    "dtype": "string",
    "op": "string",  # reduce op, "" for data movement
    "root": "int64",  # -1 where the collective has none
    "placement": "string",  # out-of-place | in-place
    "mode": "string",  # latency | throughput | nccl-tests (bench/timing/loop.py says what each sample is)
    "rank_reduce": "string",  # how the ranks' times of one iteration make the figure: max | avg | min | rank0 (nccl-tests -a)
    "blocking": "bool",  # throughput mode: each op waited for (True) or a block's ops in flight (False; PARAM --z 0)
    "warmup_iters": "int64",
    "iters": "int64",
    "samples": "int64",
    "warmup_op_s": "float64",
    "time_median_s": "float64",  # median over iterations of the iteration's time reduced over ranks (rank_reduce)
    "time_p5_s": "float64",  # 5th percentile (numpy linear), same samples
    "time_p25_s": "float64",  # 25th percentile
    "time_p75_s": "float64",  # 75th percentile
    "time_p95_s": "float64",  # 95th percentile
    "time_min_s": "float64",  # fastest iteration
    "time_max_s": "float64",  # slowest iteration
    "time_mean_s": "float64",  # mean (for reference: medians are the statistic)
    "time_stdev_s": "float64",  # sample standard deviation (ddof=1)
    "time_cv": "float64",  # stdev / mean
    "time_iqr_s": "float64",  # p75 - p25
    "noisy": "bool",  # IQR / median > 0.1 (torch.utils.benchmark's rule)
    "algbw_gbps": "float64",  # S / time_median_s / 1e9
    "busbw_gbps": "float64",  # algbw * bus_factor
    "bus_factor": "float64",
    "rank_median_min_s": "float64",
    "rank_median_max_s": "float64",
    "rank_skew_s": "float64",  # max - min over ranks of each rank's own median
    "slowest_rank": "int64",
    "checks": "int64",
    "wrong": "int64",  # wrong elements summed over ranks and checks
    "max_error": "float64",  # imported nccl-tests before 2.13: its `error` column (the largest deviation), as printed
}

SAMPLES = {
    "run_id": "string",
    "case_id": "string",
    "size_bytes": "int64",
    "placement": "string",
    "rank": "int64",
    "iteration": "int64",
    "seconds": "float64",
}

RANKS = {
    "run_id": "string",
    "case_id": "string",
    "size_bytes": "int64",
    "placement": "string",
    "rank": "int64",
    "node_rank": "int64",
    "host": "string",
    "median_s": "float64",
}

# Per-case telemetry summary joined into results rows (bench/telemetry/summary.py; docs/telemetry.md).
# Null where nothing was read (GPU columns on a CPU-only host, everything under --no-telemetry).
TELEMETRY_SUMMARY = {
    "telemetry_samples": "int64",  # sampling instants (the node with the most)
    "telemetry_interval_s": "float64",
    "case_start_unix_s": "float64",  # the sampled window, time.time() on rank 0's host
    "case_end_unix_s": "float64",
    "gpus_sampled": "int64",
    "gpu_mem_used_peak_bytes": "int64",  # max over GPUs and samples (whole device)
    "gpu_mem_total_bytes": "int64",  # per GPU (the largest)
    "gpu_proc_mem_peak_bytes": "int64",  # the benchmark's own processes on one GPU, max
    "gpu_util_mean_pct": "float64",
    "gpu_util_max_pct": "float64",
    "gpu_mem_util_mean_pct": "float64",
    "gpu_mem_util_max_pct": "float64",
    "gpu_power_mean_w": "float64",  # sum over GPUs of each one's mean draw
    "gpu_energy_j": "float64",  # sum over GPUs of the energy counter difference
    "gpu_temp_max_c": "float64",
    "gpu_sm_clock_mean_mhz": "float64",
    "gpu_mem_clock_mean_mhz": "float64",
    "gpu_pcie_tx_bytes": "float64",
    "gpu_pcie_rx_bytes": "float64",
    "gpu_nvlink_tx_bytes": "float64",
    "gpu_nvlink_rx_bytes": "float64",
    "throttled": "bool",  # any clock-event reason other than gpu_idle seen (null: none read)
    "throttle_reasons": "string",  # names seen, comma-separated
    "host_cpu_util_mean_pct": "float64",  # over cores and samples, all nodes
    "host_cpu_util_max_pct": "float64",  # the busiest core's busiest sample
    "rank_rss_peak_bytes": "int64",  # max over ranks and samples
    "host_load1_max": "float64",
    "telemetry_missing": "string",  # why GPU columns are null, and metrics that could not be read
}

# The long telemetry table: one row per sampled value, or per metric that could not be read
# (value null, reason given). Case keys beyond size_bytes/placement are kept as extra columns.
TELEMETRY = {
    "run_id": "string",
    "case_id": "string",
    "size_bytes": "int64",
    "placement": "string",
    "algorithm": "string",  # allreduce kind: the case's algorithm label (e.g. ring, native[NCCL_ALGO=Tree])
    "strategy": "string",  # strategies / pipeline kinds: the case's strategy
    "model": "string",  # strategies / pipeline kinds: the case's model preset
    "host": "string",
    "node_rank": "int64",
    "device_uuid": "string",  # NVML uuid ('GPU-...'); null for host metrics
    "rank": "int64",  # per-rank metrics (rss_bytes); else null
    "core": "int64",  # per-core metrics (cpu_util_pct); else null
    "time_s": "float64",  # Unix seconds (time.time) on the sampling host
    "metric": "string",  # name with its unit: power_w, energy_j (counter), mem_used_bytes, ...
    "value": "float64",
    "reason": "string",  # why the metric is missing; null when it has a value
}

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

# ---- strategy / pipeline kinds (bench.training): additive columns and tables ----------------

STRATEGY = {
    "strategy": "string",  # dp | ddp | layer | tp | pp | fsdp
    "model": "string",  # preset (bench.workloads.models.PRESETS)
    "family": "string",  # mlp | gpt
    "params": "int64",
    "devices": "int64",  # devices the case used in all (world x devices per process)
    "chunks": "int64",  # micro-batches per mini-batch (pipeline; 1 elsewhere)
    "schedule": "string",  # gpipe | 1f1b | interleaved | looped_bfs | interleaved_zb | zbv | dualpipev; "" when not a pipeline
    "stage_placement": "string",  # pipeline: loop (rank r holds r, r+p, ...) | v (r and 2p-1-r)
    "checkpoint": "string",  # always | except_last | never (torchgpipe's modes)
    "batch": "int64",  # global mini-batch, samples
    "micro_batch": "int64",  # samples per micro-batch of one data-parallel pipeline
    "sweep_mode": "string",  # mini-batch (fixed mini-batch split into chunks) | micro-batch (fixed micro-batch)
    "balance": "string",  # blocks per stage, "" = even
    "bucket_cap_mb": "float64",  # ddp only
    "layout": "string",  # the mesh's degrees outermost first, e.g. pp2.dp2.tp2 (bench.training.dims)
    "pp_degree": "int64",  # pipeline ranks of the mesh
    "dp_degree": "int64",  # DDP replicas (mesh dimension dp_replicate)
    "fsdp_degree": "int64",  # FSDP2 shards (mesh dimension dp_shard)
    "tp_degree": "int64",  # tensor-parallel degree
    "comm_share": "float64",  # (exposed_comm_s + exposed_comm_est_s where known) / step_median_s
    "stages": "int64",  # pipeline stages in all (ranks x stages per rank)
    "steps": "int64",  # timed steps
    "step_median_s": "float64",  # step wall: earliest start to latest end over ranks
    "step_p5_s": "float64",
    "step_p25_s": "float64",
    "step_p75_s": "float64",
    "step_p95_s": "float64",
    "step_min_s": "float64",
    "step_max_s": "float64",
    "step_mean_s": "float64",
    "step_stdev_s": "float64",
    "step_cv": "float64",
    "step_iqr_s": "float64",
    "samples_per_s": "float64",  # batch / step_median_s
    "samples_per_s_per_device": "float64",
    "tokens_per_s": "float64",  # transformer only
    "tokens_per_s_per_device": "float64",
    "fwd_s": "float64",  # mean over ranks of the median per-step forward compute
    "bwd_s": "float64",  # backward compute without recompute (full, or input + weight gradient)
    "bwd_input_s": "float64",  # zero-bubble schedules: the input-gradient actions (I), recompute included
    "bwd_weight_s": "float64",  # zero-bubble schedules: the weight-gradient actions (W)
    "recompute_s": "float64",  # checkpoint recompute inside backward
    "compute_s": "float64",
    "exposed_comm_s": "float64",  # blocked in comm waits while no other rank computed
    "idle_s": "float64",  # waiting for other ranks (bubble)
    "overhead_s": "float64",  # own span - compute - waits
    "comm_in_compute": "bool",  # collectives run inside the timed fwd/bwd (ddp, fsdp, tp)
    "solo_compute_s": "float64",  # same local fwd+bwd without any comm (ddp, fsdp)
    "exposed_comm_est_s": "float64",  # compute_s - solo_compute_s where comm_in_compute
    "memory_kind": "string",  # cuda | host
    "peak_memory_bytes": "int64",  # max over devices: CUDA peak reserved, or host peak RSS
    "peak_allocated_bytes": "Int64",  # CUDA: max over ranks of allocated_bytes.all.peak in the measured steps; host: null
    "peak_reserved_bytes": "Int64",  # CUDA: max over ranks of reserved_bytes.all.peak in the measured steps; host: null
    "host_peak_rss_bytes": "int64",
    "loss": "float64",
    "tolerance": "string",
    "max_abs_diff": "float64",  # vs the single-process reference, loss and gradients
    "bubble_measured": "float64",  # mean over ranks of idle / step wall
    "bubble_max": "float64",
    "nocompute_frac": "float64",  # mean over ranks of 1 - compute / step wall
    "bubble_gpipe_theory": "float64",  # (p-1)/(m+p-1); (p-1)/(v m+p-1) interleaved
    "bubble_megatron_theory": "float64",  # (p-1)/(v m)
    "bubble_theory": "float64",  # the schedule's own formula (bench.training.schedules), as a fraction of the step
    "bubble_theory_formula": "string",  # which formula, with its source
    "bubble_exact": "float64",  # timed workload: the schedule's order replayed with the known action times; null elsewhere
    "exact_step_s": "float64",  # timed workload: the step that replay takes
    "replay_step_s": "float64",
    "replay_bubble": "float64",  # replay with measured per-stage times: schedule + imbalance
    "replay_schedule_bubble": "float64",  # replay with balanced times: the schedule alone
    "replay_imbalance": "float64",  # replay_bubble - replay_schedule_bubble
    "comm_overhead_frac": "float64",  # nocompute_frac - replay_bubble
    "stage_fwd_s": "string",  # per-stage median forward per micro-batch, ms, comma list
    "stage_bwd_s": "string",  # full backward (B), or input + weight gradient under split-backward schedules
    "stage_bwd_input_s": "string",  # split-backward schedules: per-stage median input-gradient action (I), ms
    "stage_bwd_weight_s": "string",  # and weight-gradient action (W), ms
}

STRATEGY_RANKS = {
    "run_id": "string", "case_id": "string", "rank": "int64", "host": "string", "role": "string",
    "step_wall_s": "float64", "own_span_s": "float64", "compute_s": "float64", "fwd_s": "float64",
    "bwd_s": "float64", "bwd_input_s": "float64", "bwd_weight_s": "float64", "recompute_s": "float64",
    "idle_s": "float64", "exposed_comm_s": "float64",
    "overhead_s": "float64", "bubble": "float64", "nocompute_frac": "float64", "replay_bubble": "float64",
    "bubble_exact": "float64",  # timed workload: this rank's idle share in the exact replay
    "stalled_by": "string",  # "rank:seconds,...": its waiting per step charged to the rank at the end of the wait chain
    "solo_compute_s": "float64", "memory_kind": "string", "peak_allocated_bytes": "Int64",
    "peak_active_bytes": "Int64", "peak_reserved_bytes": "Int64", "device_used_bytes": "Int64",
    "device_total_bytes": "Int64", "host_peak_rss_bytes": "int64", "host_peak_is_lifetime": "bool",
    "peak_bytes": "int64",
}

STRATEGY_STEPS = {
    "run_id": "string", "case_id": "string", "step": "int64", "rank": "int64", "step_wall_s": "float64",
    "own_span_s": "float64", "compute_s": "float64", "fwd_s": "float64", "bwd_s": "float64",
    "bwd_input_s": "float64", "bwd_weight_s": "float64",
    "recompute_s": "float64", "idle_s": "float64", "exposed_comm_s": "float64", "overhead_s": "float64",
}

STRATEGY_SPANS = {  # one timed step (the median-wall one) per case: what each rank did when
    "run_id": "string", "case_id": "string", "step": "int64", "rank": "int64",
    "stage": "int64",  # pipeline stage of a compute action; -1 for comm / step
    "micro_batch": "int64",  # -1 where not per micro-batch
    "action": "string",  # fwd | bwd | bwd_input | bwd_weight | recompute (inside a backward) | wait (blocked on a
    # peer not ready: bubble) | comm (blocked in a p2p transfer) | step (own span)
    "start_s": "float64",  # seconds from the earliest step start over ranks (one host's clock)
    "end_s": "float64",
}

MICROBATCH_EFFICIENCY = {
    "run_id": "string", "case_id": "string", "model": "string", "batch": "int64", "chunks": "int64",
    "micro_batch": "int64", "step_median_s": "float64", "step_p5_s": "float64", "step_p25_s": "float64",
    "step_p75_s": "float64", "step_p95_s": "float64", "step_min_s": "float64", "step_max_s": "float64",
    "step_mean_s": "float64", "step_stdev_s": "float64", "step_cv": "float64", "step_iqr_s": "float64",
    "noisy": "bool", "samples_per_s": "float64",
    "relative_throughput": "float64", "ideal_pipeline_step_s": "float64", "stages": "int64",
}

PLAN_PREDICTIONS = {  # a plan run of its own, by `distbench plan --validate` (docs/plan.md): model output, not measured
    "run_id": "string", "case_id": "string",
    "role": "string",  # validation (a held-out case of this run) | recommended (a ranked candidate)
    "rank": "int64",  # recommended: 1 = best predicted; validation: 0
    "candidate": "string",  # "pp<ranks>[ dp<replicas>] <schedule> m=<chunks> b=<micro-batch>[ ckpt=<mode>]"
    "stages": "int64",
    "dp": "int64",  # data-parallel replicas of the pipeline (world = stages x dp); micro_batch is one replica's
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


TABLES = {
    "results": {**COMMON, **COLLECTIVE, **TELEMETRY_SUMMARY, **ALLREDUCE, **STRATEGY},
    "samples": SAMPLES, "ranks": RANKS, "telemetry": TELEMETRY,
    "model": MODEL, "residuals": RESIDUALS, "predictions": PREDICTIONS, "crossover": CROSSOVER,
    "strategy_ranks": STRATEGY_RANKS, "strategy_steps": STRATEGY_STEPS,
    "strategy_spans": STRATEGY_SPANS, "microbatch_efficiency": MICROBATCH_EFFICIENCY,
    "nccl_tuning": NCCL_TUNING, "plan_predictions": PLAN_PREDICTIONS,
}


def conform(df, table: str):
    """Add any missing column as null and cast every column to its dtype (one pass: a results
    table has over a hundred columns). A column the schema does not know is refused: a
    mistyped row key must not become a new column while the real one stays null."""
    import pandas as pd  # lazy: pandas only to conform a frame; the schema (tools/schema_doc.py) needs none

    if table not in TABLES:
        raise ValueError(f"table '{table}' is not in the schema; known: {', '.join(sorted(TABLES))}")
    cols = TABLES[table]
    unknown = [c for c in df.columns if c not in cols]
    if unknown:
        raise ValueError(f"table '{table}': column(s) {', '.join(map(repr, unknown))} not in the schema "
                         "(bench/results/schema.py)")
    missing = {c: pd.array([pd.NA] * len(df), dtype=_nullable(d)) for c, d in cols.items() if c not in df.columns}
    if missing:
        df = pd.concat([df, pd.DataFrame(missing, index=df.index)], axis=1)
    df = df.astype({c: _nullable(d) for c, d in cols.items()})
    return df[list(cols)]


def _nullable(dtype: str) -> str:
    return {"int64": "Int64", "bool": "boolean", "float64": "Float64"}.get(dtype, dtype)
