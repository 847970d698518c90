"""Reference models and synthetic data for the strategy benchmarks. The names below are imported
from models.py and data.py on first use (PEP 562): both import torch, and the light readers of
this package (the presets in specs.py) must not pay for it."""

import importlib

_WHERE = {"Batches": "data", "dataset": "data", "PRESETS": "models", "ModelSpec": "models", "build_model": "models",
          "get_spec": "models", "loss_fn": "models"}

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
