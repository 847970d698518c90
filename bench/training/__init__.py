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

import importlib

TRAINERS = ("dp", "ddp", "layer", "tp", "pp", "fsdp", "composed")  # registration order is display order

__all__ = ["REGISTRY", "Strategy"]


def __getattr__(name: str):
    """`from bench.training import REGISTRY` (PEP 562): every trainer imported (registered), then the
    name. Not at the import of this package: the trainers import torch, and the kinds' registrations,
    which every command reads, import the engine's light modules (columns, reading, summary)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for trainer in TRAINERS:
        importlib.import_module(f"{__name__}.{trainer}")
    return getattr(importlib.import_module(f"{__name__}.base"), name)
