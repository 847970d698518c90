"""gather: every rank's shard to root, concatenated in rank order. busbw factor (n-1)/n."""

import torch.distributed as dist

from bench.collectives.base import Bufs, Collective, empty, gathered_values, move_range, register


@register
class Gather(Collective):
    name = "gather"
    has_root = True
    sharded = True

    def bus_factor(self, n):
        return (n - 1) / n

    def buff_numel(self, count, world):
        return count // world, count  # nccl-tests src/gather.cu:10 GatherGetCollByteCount (recv: the root's)

    def setup(self, c):
        mine = move_range(c.rank, c.rank * c.shard, c.shard, c.dtype, c.device)
        outs = [empty(c, c.shard) for _ in range(c.world)] if c.rank == c.root else None
        return Bufs(inputs=mine, outputs=outs)

    def call(self, c, b, async_op=False):
        return dist.gather(b.inputs, b.outputs, dst=c.global_rank(c.root), group=c.group, async_op=async_op)

    def result(self, c, b):
        return b.outputs if c.rank == c.root else None  # pieces in rank order, not joined

    def expected(self, c):
        return gathered_values(c) if c.rank == c.root else None
