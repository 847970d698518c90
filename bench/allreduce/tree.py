"""tree: binomial-tree reduce to rank 0, then binomial-tree broadcast from rank 0.

Reduce: at mask 1, 2, 4, ... a rank with that bit set sends its partial sum to rank - mask and
stops; the others receive from rank + mask (when it exists) and reduce. Broadcast runs the same
tree backwards. Depth ceil(log2 n) each way, and every step moves the whole array.
Cost: a = 2 ceil(log2 n), b = 2 ceil(log2 n) (Thakur et al. 2005, binomial reduce + bcast).
"""

import torch

from bench.allreduce.base import Algorithm, Plan, ceil_log2, combine, exchange, register, wait


@register
class Tree(Algorithm):
    name = "tree"

    def scratch_bytes(self, size_bytes: int, world: int, chunk_bytes: int) -> int:
        return size_bytes  # one child's array at a time
    model = "a = 2 ceil(log2 n), b = 2 ceil(log2 n)"

    def cost(self, n):
        d = ceil_log2(n)
        return 2 * d, 2 * d

    def allreduce(self, x: torch.Tensor, p: Plan) -> None:
        n, r = p.world, p.rank
        if n == 1 or x.numel() == 0:
            return
        red = combine(p.op)
        tmp = self.scratch(x, x.numel())
        mask = 1
        while mask < n:  # reduce towards rank 0
            if r & mask:
                wait(exchange(sends=[(x, r - mask)], group=p.group))
                break
            if r + mask < n:
                wait(exchange(recvs=[(tmp, r + mask)], group=p.group))
                red(x, tmp)
            mask <<= 1
        # broadcast: rank r got its result from r - lowbit(r); it feeds r + m for m < lowbit(r)
        low = r & -r if r else 1 << ceil_log2(n)
        if r:
            wait(exchange(recvs=[(x, r - low)], group=p.group))
        m = low >> 1
        while m:
            if r + m < n:
                wait(exchange(sends=[(x, r + m)], group=p.group))
            m >>= 1
