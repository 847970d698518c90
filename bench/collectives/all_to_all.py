"""all_to_all (lists) and all_to_all_single: shard k of rank r goes to rank k, slot r.
busbw factor (n-1)/n."""

import torch
import torch.distributed as dist

from bench.collectives.base import Bufs, Collective, empty, move_range, register


def _sent(c, src, dst):
    """What rank `src` sends to rank `dst`: identifies both ends."""
    return move_range(src, dst * c.shard, c.shard, c.dtype, c.device)


class _AllToAllBase(Collective):
    sharded = True

    def bus_factor(self, n):
        return (n - 1) / n

    def expected(self, c):
        return torch.cat([_sent(c, src, c.rank) for src in range(c.world)])


@register
class AllToAll(_AllToAllBase):
    name = "all_to_all"

    def setup(self, c):
        return Bufs(inputs=[_sent(c, c.rank, k) for k in range(c.world)],
                    outputs=[empty(c, c.shard) for _ in range(c.world)])

    def call(self, c, b, async_op=False):
        return dist.all_to_all(b.outputs, b.inputs, group=c.group, async_op=async_op)

    def result(self, c, b):
        return torch.cat(b.outputs)


@register
class AllToAllSingle(_AllToAllBase):
    name = "all_to_all_single"

    def setup(self, c):
        inp = torch.cat([_sent(c, c.rank, k) for k in range(c.world)])
        return Bufs(inputs=inp, outputs=empty(c, c.count))

    def call(self, c, b, async_op=False):
        return dist.all_to_all_single(b.outputs, b.inputs, group=c.group, async_op=async_op)

    def result(self, c, b):
        return b.outputs
