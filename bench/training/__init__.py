"""Parallel training strategies: one small module per strategy, each registering a `Strategy`
(bench.strategies.base) in REGISTRY; importing this package registers all of them."""

# isort: off  (registration order is display order)
from bench.strategies import dp, ddp, layer, tp, pp, fsdp, composed  # noqa: F401
# isort: on
from bench.strategies.base import REGISTRY, Strategy

__all__ = ["REGISTRY", "Strategy"]
