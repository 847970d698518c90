"""The training engine the strategies and pipeline kinds share (docs/architecture.md).

- trainers: one small module per strategy (dp, ddp, layer, tp, pp, fsdp, composed), each registering
  a `Strategy` (base) in REGISTRY; importing this package registers all of them;
- the pipeline runtime and its arithmetic: schedules (torch.distributed.pipelining's), replay (a
  schedule's own action order with measured or exact durations), theory (textbook bubbles),
  breakdown (per-rank compute / exposed comm / idle);
- layouts: dims (ParallelDims, the DeviceMesh degrees), layout (building a composed layout),
  footprint and memory (bytes per rank and stage, for preflight);
- one case: case (CaseSpec), measure (a case on every rank -> its rows), reading (how stored
  training rows are read), plots and layout_table (the kinds' report sections).
"""

from bench.registry import on_first_use

TRAINERS = ("dp", "ddp", "layer", "tp", "pp", "fsdp", "composed")  # registration order is display order

__all__ = ["REGISTRY", "Strategy"]


__getattr__ = on_first_use(__name__, TRAINERS, __all__)  # `from bench.training import REGISTRY`: every unit registered first
