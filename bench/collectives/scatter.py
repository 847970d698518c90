"""scatter: root sends shard k of its array to rank k. busbw factor (n-1)/n."""

import torch.distributed as dist

from bench.collectives.base import Bufs, Collective, empty, move_range, register


@register
class Scatter(Collective):
    name = "scatter"
    has_root = True
    sharded = True

    def bus_factor(self, n):
        return (n - 1) / n

    def buff_numel(self, count, world):
        return count, count // world  # nccl-tests src/scatter.cu:10 ScatterGetCollByteCount (send: the root's)

    def _shard_values(self, c, k):
        # root's shard for rank k carries k's identity, so a shard sent to the wrong rank is caught
        return move_range(k, k * c.shard, c.shard, c.dtype, c.device)

    def setup(self, c):
        chunks = [self._shard_values(c, k) for k in range(c.world)] if c.rank == c.root else None
        return Bufs(inputs=chunks, outputs=empty(c, c.shard))

    def call(self, c, b, async_op=False):
        return dist.scatter(b.outputs, b.inputs, src=c.global_rank(c.root), group=c.group, async_op=async_op)

    def result(self, c, b):
        return b.outputs

    def expected(self, c):
        return self._shard_values(c, c.rank)
