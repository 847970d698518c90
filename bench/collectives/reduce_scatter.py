"""reduce_scatter (list of per-rank inputs) and reduce_scatter_single (one tensor; in-place means
the output is this rank's slice of the input, as in nccl-tests). busbw factor (n-1)/n."""

import torch.distributed as dist

from bench.collectives import compat
from bench.collectives.base import Bufs, Collective, empty, expected_range, reduce_range, register


class _ReduceScatterBase(Collective):
    reduces = True
    sharded = True

    def bus_factor(self, n):
        return (n - 1) / n

    def buff_numel(self, count, world):
        return count, count // world  # nccl-tests src/reduce_scatter.cu:10 ReduceScatterGetCollByteCount

    def result(self, c, b):
        return b.outputs

    def expected(self, c):
        return expected_range(c.rank * c.shard, c.shard, c)


@register
class ReduceScatter(_ReduceScatterBase):
    name = "reduce_scatter"

    def setup(self, c):
        chunks = [reduce_range(c.rank, k * c.shard, c.shard, c) for k in range(c.world)]
        return Bufs(inputs=chunks, outputs=empty(c, c.shard))

    def call(self, c, b, async_op=False):
        return dist.reduce_scatter(b.outputs, b.inputs, op=c.torch_op, group=c.group, async_op=async_op)


@register
class ReduceScatterSingle(_ReduceScatterBase):
    name = "reduce_scatter_single"
    placements = ("out-of-place", "in-place")

    def setup(self, c):
        inp = reduce_range(c.rank, 0, c.count, c)
        out = inp[c.rank * c.shard:(c.rank + 1) * c.shard] if c.inplace else empty(c, c.shard)
        return Bufs(inputs=inp, outputs=out)

    def call(self, c, b, async_op=False):
        return compat.reduce_scatter_single(b.outputs, b.inputs, op=c.torch_op, group=c.group,
                                            async_op=async_op)
