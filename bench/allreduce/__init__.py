"""Allreduce algorithms built on point-to-point operations, one file each, plus the cost model.
Importing this package registers all of them, in the order tables show them."""

# isort: off  (registration order is display order)
from bench.allreduce import ring, tree, star, halving_doubling, native  # noqa: F401
# isort: on
from bench.allreduce.base import OPS, REGISTRY, Algorithm, Plan

__all__ = ["OPS", "REGISTRY", "Algorithm", "Plan"]
