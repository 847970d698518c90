"""Collective units, one file each; importing this package registers all of them."""

from bench.collectives import (  # noqa: F401  (imported for registration)
    all_gather,
    all_reduce,
    all_to_all,
    barrier,
    broadcast,
    gather,
    reduce,
    reduce_scatter,
    scatter,
    sendrecv,
)
from bench.collectives.base import REGISTRY, Bufs, Collective, Ctx

__all__ = ["REGISTRY", "Bufs", "Collective", "Ctx"]
