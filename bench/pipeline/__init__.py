"""The pipeline kind: a chunks (micro-batch) sweep of torch.distributed.pipelining schedules, with
the measured and the exact bubble (bench.pipeline.kind, config), and the planner that predicts
layouts from stored runs (plan, plan_cli, plan_plots). The runtime, schedules, replay and bubble
arithmetic it measures with are the training engine's (bench.training), shared with strategies."""
