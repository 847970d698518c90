"""The overlap kind's columns (docs/schema.md, docs/overlap.md defines every figure): what its
results rows add, and its raw samples table (Kind.columns; bench.results.schema merges them).
A row is one collective at one size against one compute action (overlap_test 'pair'), or one
training variant (overlap_test 'ddp' at one bucket_cap_mb, 'fsdp' with or without prefetch)."""

from bench.results.schema import GENERIC

OVERLAP = {
    "overlap_test": "string",  # overlap: pair (a collective against a compute action) | ddp | fsdp
    "overlap_compute": "string",  # overlap: gemm (matmuls) | sleep (host sleep on CPU, spin kernel on CUDA: known duration)
    "gemm_iters": "int64",  # overlap: matmuls per compute action (side: gemm_n)
    "compute_threads": "int64",  # overlap: CPU: torch intra-op threads of the compute thread
    "compute_target_s": "float64",  # overlap: sleep: the compute action's set duration
    "overlap_comm_s": "float64",  # overlap: pair: the collective alone; ddp/fsdp: the step's collectives alone (DDP's buckets all-reduced back to back)
    "overlap_compute_s": "float64",  # overlap: pair: the compute action alone; ddp: the step under no_sync (no all-reduce); fsdp: the local step of the unsharded model
    "overlap_both_s": "float64",  # overlap: pair: both started together, until both finish; ddp/fsdp: the step
    "overlap_comm_under_s": "float64",  # overlap: pair: the collective's own duration while the compute ran
    "overlap_compute_under_s": "float64",  # overlap: pair: the compute's own duration while the collective ran
    "overlap_exposed_s": "float64",  # overlap: ddp/fsdp: overlap_both_s - overlap_compute_s (what the step waited for)
    "hidden_share": "float64",  # overlap: (comm + compute - both) / comm; ddp/fsdp: 1 - exposed / comm (unclamped)
    "overlap_efficiency": "float64",  # overlap: pair: (comm + compute - both) / min(comm, compute) (unclamped)
    "comm_slowdown": "float64",  # overlap: pair: comm_under / comm alone
    "compute_slowdown": "float64",  # overlap: pair: compute_under / compute alone
    "ideal_hidden_share": "float64",  # overlap: pair: min(comm, compute) / comm (perfect overlap, no interference)
    "buckets": "int64",  # overlap: ddp: DDP's gradient buckets (after its rebuild)
    "bucket_bytes": "string",  # overlap: ddp: each bucket's bytes, comma list, in all-reduce order
    "nccl_ctas": "int64",  # overlap: NCCL_MIN_CTAS = NCCL_MAX_CTAS of the launch (NCCL's channels); null: NCCL's own choice
    "prefetch": "string",  # overlap: fsdp: explicit (set_modules_to_forward/backward_prefetch) | implicit (FSDP2's default)
}

SAMPLES = {**GENERIC["samples"],  # every rank's raw repetition of every part
           "part": "string"}  # comm | compute | both | both.comm | both.compute (pair); step | step.nocomm | comm (ddp, fsdp)

COLUMNS = {"results": OVERLAP, "overlap_samples": SAMPLES}
