"""all_to_all (lists) and all_to_all_single: shard k of rank r goes to rank k, slot r.
busbw factor (n-1)/n."""

import torch.distributed as dist

from bench.collectives.base import Bufs, Collective, empty, move_range, register


def _sent(c, src, dst):
    """What rank `src` sends to rank `dst`: identifies both ends."""
    return move_range(src, dst * c.shard, c.shard, c.dtype, c.device)


class _AllToAllBase(Collective):
    sharded = True

    def bus_factor(self, n):
        return (n - 1) / n

    def buff_numel(self, count, world):
        return count, count  # nccl-tests src/alltoall.cu:18 AlltoAllGetCollByteCount: nranks * (count / nranks) each

    def expected(self, c):
        return [_sent(c, src, c.rank) for src in range(c.world)]  # pieces in rank order, not joined


@register
class AllToAll(_AllToAllBase):
    name = "all_to_all"

    def setup(self, c):
        return Bufs(inputs=[_sent(c, c.rank, k) for k in range(c.world)],
                    outputs=[empty(c, c.shard) for _ in range(c.world)])

    def call(self, c, b, async_op=False):
        return dist.all_to_all(b.outputs, b.inputs, group=c.group, async_op=async_op)

    def result(self, c, b):
        return b.outputs  # the pieces in rank order (the check walks them: no joined copy)


@register
class AllToAllSingle(_AllToAllBase):
    name = "all_to_all_single"

    def setup(self, c):
        inp = empty(c, c.count)  # filled shard by shard: a cat of the pieces would hold them and the whole at once
        for k in range(c.world):
            inp[k * c.shard:(k + 1) * c.shard] = _sent(c, c.rank, k)
        return Bufs(inputs=inp, outputs=empty(c, c.count))

    def call(self, c, b, async_op=False):
        return dist.all_to_all_single(b.outputs, b.inputs, group=c.group, async_op=async_op)

    def result(self, c, b):
        return b.outputs
