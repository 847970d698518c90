"""distbench: benchmarks for collective communication and parallel training in PyTorch."""

__version__ = "0.1.0"
