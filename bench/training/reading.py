"""How stored training rows (strategies and pipeline kinds) are read: the Kind's `read` table."""

from bench.kind import Metric

TRAIN_KEYS = ("strategy", "model", "chunks", "schedule", "checkpoint")
TRAIN_METRICS = (Metric("step_median_s", True, True), Metric("samples_per_s", False, False),
                 Metric("tokens_per_s", False, False), Metric("peak_memory_bytes", True, True),
                 Metric("bubble_measured", True, False),
                 Metric("energy_per_sample_j", True, False))  # over the timed steps (docs/telemetry.md, "Energy")
# what changes a training case's numbers beside its key (a baseline must agree on each)
TRAIN_SETTINGS = ("dtype", "device_type", "threads_per_rank", "batch", "micro_batch")
