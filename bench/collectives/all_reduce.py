"""all_reduce: element-wise reduction, result on every rank. busbw factor 2(n-1)/n."""

import torch.distributed as dist

from bench.collectives.base import Bufs, Collective, expected_range, reduce_range, register


@register
class AllReduce(Collective):
    name = "all_reduce"
    reduces = True
    placements = ("in-place",)  # torch.distributed.all_reduce has no out-of-place form

    def bus_factor(self, n):
        return 2 * (n - 1) / n

    def buff_numel(self, count, world):
        return count, count  # nccl-tests src/all_reduce.cu:34 AllReduceGetCollByteCount

    def setup(self, c):
        buf = reduce_range(c.rank, 0, c.count, c)
        return Bufs(inputs=buf, outputs=buf)

    def call(self, c, b, async_op=False):
        return dist.all_reduce(b.inputs, op=c.torch_op, group=c.group, async_op=async_op)

    def result(self, c, b):
        return b.outputs

    def expected(self, c):
        return expected_range(0, c.count, c)
