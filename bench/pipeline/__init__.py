"""The pipeline kind: a chunks (micro-batch) sweep of torch.distributed.pipelining schedules, with
the measured and the exact bubble (bench.pipeline.kind, config). The planner that predicts layouts
from stored runs is a room of its own (bench.plan); this kind draws the predictions it stores. The
runtime, schedules, replay and bubble arithmetic it measures with are the training engine's
(bench.training), shared with strategies."""
