"""native: the backend's own all_reduce (gloo's ring on CPU; NCCL picks ring/tree/NVLS/...
itself, or what NCCL_ALGO / NCCL_PROTO ask for: each setting runs in its own launch).

The backend's algorithm is not visible from here, so the model fits it with the ring's
coefficients (the nccl-tests busbw convention): its alpha and 1/beta are effective values.
"""

import torch
import torch.distributed as dist

from bench.allreduce.base import Algorithm, Plan, register
from bench.units import torch_op


@register
class Native(Algorithm):
    name = "native"

    def scratch_bytes(self, size_bytes: int, world: int, chunk_bytes: int) -> int:
        return 0  # the backend's own buffers are not ours to count
    p2p = False
    model = "ring's: a = 2(n-1), b = 2(n-1)/n (effective values)"

    def cost(self, n):
        return 2 * (n - 1), 2 * (n - 1) / n

    def allreduce(self, x: torch.Tensor, p: Plan) -> None:
        dist.all_reduce(x, op=torch_op(p.op), group=p.group)
