"""Collective units, one file each; the first use of REGISTRY (or Bufs, Collective, Ctx) imports all
of them, which registers them. Not at the import of this package: the units import torch, and the
collectives kind's registration (bench.collectives.kind), which every command reads, must not."""

import importlib

UNITS = ("all_gather", "all_reduce", "all_to_all", "barrier", "broadcast", "gather", "reduce", "reduce_scatter",
         "scatter", "sendrecv")  # registration order is display order

__all__ = ["REGISTRY", "Bufs", "Collective", "Ctx"]


def __getattr__(name: str):
    """`from bench.collectives import REGISTRY` (PEP 562): every unit imported (registered), then the name."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for unit in UNITS:
        importlib.import_module(f"{__name__}.{unit}")
    return getattr(importlib.import_module(f"{__name__}.base"), name)
