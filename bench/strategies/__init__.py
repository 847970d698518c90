"""Parallel training strategies: one small module per strategy, registered by name.

Each module has NAME, SINGLE_PROCESS and setup(ctx) -> Trainer (see bench.strategies.base).
"""

import importlib

from bench.errors import unknown

NAMES = ("dp", "ddp", "layer", "tp", "pp", "fsdp")


def get(name: str):
    if name not in NAMES:
        raise unknown("strategy", name, NAMES)
    return importlib.import_module(f"bench.strategies.{name}")
