"""Allreduce algorithms built on point-to-point operations, one file each, plus the cost model.
The first use of REGISTRY (or OPS, Algorithm, Plan) imports all of them, which registers them in
the order tables show them. Not at the import of this package: the algorithms import torch, and
the allreduce kind's registration (bench.allreduce.kind), which every command reads, must not."""

from bench.registry import on_first_use

ALGORITHMS = ("ring", "tree", "star", "halving_doubling", "native")  # registration order is display order

__all__ = ["OPS", "REGISTRY", "Algorithm", "Plan"]


__getattr__ = on_first_use(__name__, ALGORITHMS, __all__)  # `from bench.allreduce import REGISTRY`: every unit registered first
