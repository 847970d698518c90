"""Version shims: torch 2.13 renames all_gather_into_tensor -> all_gather_single and
reduce_scatter_tensor -> reduce_scatter_single (the old names warn FutureWarning)."""

import torch.distributed as dist

all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
