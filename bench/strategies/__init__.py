"""The strategies kind: train reference models under dp, ddp, layer, tp, pp, fsdp and composed
layouts, one case per strategy x model (bench.strategies.kind). The trainers, the pipeline runtime
and the measuring of a case are the training engine's (bench.training), shared with the pipeline kind."""
