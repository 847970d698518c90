"""Memory arithmetic the message-size sweeps share: bytes per element, and which sizes of a sweep
fit a budget (the preflight refusal's hint)."""

import torch

from bench.units import format_size, parse_dtype


def elem_bytes(dtype: str) -> int:
    return torch.empty((), dtype=parse_dtype(dtype)).element_size()


def sizes_that_fit(per_rank):
    """fits(cfg, world, budget) of a size sweep: the sizes whose every case fits the budget."""
    def fits(cfg, world: int, budget: float) -> list[str]:
        return [f"{format_size(s)}B" for s in sorted(set(cfg.size_list())) if per_rank(cfg, world, [s])[0] <= budget]

    return fits
