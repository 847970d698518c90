"""Reference models and synthetic data for the strategy benchmarks."""

from bench.workloads.data import Batches, dataset
from bench.workloads.models import PRESETS, ModelSpec, build_model, get_spec, loss_fn

__all__ = ["Batches", "dataset", "PRESETS", "ModelSpec", "build_model", "get_spec", "loss_fn"]
