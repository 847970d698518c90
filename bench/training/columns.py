"""The training kinds' columns (strategies and pipeline, docs/schema.md): what their results rows
add, and their own tables (Kind.columns; bench.results.schema merges them)."""

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
    "spin_intended_s": "float64",  # timed workload on CUDA: seconds its spins were meant to take in the timed steps, summed over ranks
    "spin_measured_s": "float64",  # ... what CUDA events around each spin measured, summed over ranks (bench/workloads/spin.py)
    "spin_drift": "float64",  # the worst rank's measured / intended - 1; beyond 5% the row is degraded (the SM clock moved)
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
    "peak_memory_rank": "int64",  # the rank peak_memory_bytes came from (the lowest on a tie); each peak its own rank
    "peak_allocated_bytes": "Int64",  # CUDA: max over ranks of allocated_bytes.all.peak in the measured steps; host: null
    "peak_allocated_rank": "Int64",  # the rank peak_allocated_bytes came from; host: null
    "peak_reserved_bytes": "Int64",  # CUDA: max over ranks of reserved_bytes.all.peak in the measured steps; host: null
    "peak_reserved_rank": "Int64",  # the rank peak_reserved_bytes came from (may differ from peak_allocated_rank); host: null
    "host_peak_rss_bytes": "int64",  # max over ranks of the host peak RSS
    "host_peak_rss_rank": "int64",  # the rank host_peak_rss_bytes came from
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


COLUMNS = {"results": STRATEGY, "strategy_ranks": STRATEGY_RANKS, "strategy_steps": STRATEGY_STEPS,
           "strategy_spans": STRATEGY_SPANS, "microbatch_efficiency": MICROBATCH_EFFICIENCY}
