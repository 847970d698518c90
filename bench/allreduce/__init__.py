"""Allreduce algorithms built on point-to-point operations, one file each, plus the cost model.
The first use of REGISTRY (or OPS, Algorithm, Plan) imports all of them, which registers them in
the order tables show them. Not at the import of this package: the algorithms import torch, and
the allreduce kind's registration (bench.allreduce.kind), which every command reads, must not."""

import importlib

ALGORITHMS = ("ring", "tree", "star", "halving_doubling", "native")  # registration order is display order

__all__ = ["OPS", "REGISTRY", "Algorithm", "Plan"]


def __getattr__(name: str):
    """`from bench.allreduce import REGISTRY` (PEP 562): every algorithm imported (registered), then the name."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for algorithm in ALGORITHMS:
        importlib.import_module(f"{__name__}.{algorithm}")
    return getattr(importlib.import_module(f"{__name__}.base"), name)
