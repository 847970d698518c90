"""star: the parameter-server pattern (nn.DataParallel's design): every rank sends its array to
rank 0, which reduces them in rank order and sends the result back to each rank.

The root's link carries everything: 2 rounds of n-1 messages of S bytes each.
Cost: a = 2(n-1), b = 2(n-1) (the root's sends and receives serialise on its link).
"""

import torch

from bench.allreduce.base import Algorithm, Plan, combine, exchange, register, wait


@register
class Star(Algorithm):
    name = "star"

    def scratch_bytes(self, size_bytes: int, world: int, chunk_bytes: int) -> int:
        return (world - 1) * size_bytes  # the root receives every other rank's whole array
    model = "a = 2(n-1), b = 2(n-1)"

    def cost(self, n):
        return 2 * (n - 1), 2 * (n - 1)

    def allreduce(self, x: torch.Tensor, p: Plan) -> None:
        n, r = p.world, p.rank
        if n == 1 or x.numel() == 0:
            return
        if r != 0:
            wait(exchange(sends=[(x, 0)], group=p.group))
            wait(exchange(recvs=[(x, 0)], group=p.group))
            return
        red = combine(p.op)
        bufs = self.scratch(x, (n - 1) * x.numel()).view(n - 1, x.numel())
        pending = [exchange(recvs=[(bufs[i - 1], i)], group=p.group) for i in range(1, n)]
        for i, works in enumerate(pending):  # reduce in rank order, each as soon as it is in
            wait(works)
            red(x, bufs[i])
        wait(exchange(sends=[(x, i) for i in range(1, n)], group=p.group))
