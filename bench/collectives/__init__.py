"""Collective units, one file each; the first use of REGISTRY (or Bufs, Collective, Ctx) imports all
of them, which registers them. Not at the import of this package: the units import torch, and the
collectives kind's registration (bench.collectives.kind), which every command reads, must not."""

from bench.registry import on_first_use

UNITS = ("all_gather", "all_reduce", "all_to_all", "barrier", "broadcast", "gather", "reduce", "reduce_scatter",
         "scatter", "sendrecv")  # registration order is display order

__all__ = ["REGISTRY", "Bufs", "Collective", "Ctx"]


__getattr__ = on_first_use(__name__, UNITS, __all__)  # `from bench.collectives import REGISTRY`: every unit registered first
