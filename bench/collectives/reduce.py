"""reduce: element-wise reduction of every rank's buffer into root's. busbw factor 1."""

import torch.distributed as dist

from bench.collectives.base import Bufs, Collective, expected_range, reduce_range, register


@register
class Reduce(Collective):
    name = "reduce"
    reduces = True
    has_root = True
    placements = ("in-place",)  # torch.distributed.reduce reduces into the buffer it reads

    def bus_factor(self, n):
        return 1.0

    def buff_numel(self, count, world):
        return count, count  # nccl-tests src/reduce.cu:10 ReduceGetCollByteCount

    def setup(self, c):
        buf = reduce_range(c.rank, 0, c.count, c)
        return Bufs(inputs=buf, outputs=buf)

    def call(self, c, b, async_op=False):
        return dist.reduce(b.inputs, dst=c.global_rank(c.root), op=c.torch_op, group=c.group, async_op=async_op)

    def result(self, c, b):
        return b.outputs if c.rank == c.root else None

    def expected(self, c):
        return expected_range(0, c.count, c) if c.rank == c.root else None
