"""broadcast: root's buffer to every rank. busbw factor 1 (nccl-tests PERFORMANCE.md)."""

import torch.distributed as dist

from bench.collectives.base import Bufs, Collective, empty, move_range, register


@register
class Broadcast(Collective):
    name = "broadcast"
    has_root = True
    placements = ("in-place",)  # torch.distributed.broadcast writes the buffer it reads

    def bus_factor(self, n):
        return 1.0

    def buff_numel(self, count, world):
        return count, count  # nccl-tests src/broadcast.cu:10 BroadcastGetCollByteCount

    def setup(self, c):
        buf = move_range(c.root, 0, c.count, c.dtype, c.device) if c.rank == c.root else empty(c, c.count)
        return Bufs(inputs=buf, outputs=buf)

    def call(self, c, b, async_op=False):
        return dist.broadcast(b.inputs, src=c.global_rank(c.root), group=c.group, async_op=async_op)

    def result(self, c, b):
        return b.outputs

    def expected(self, c):
        return move_range(c.root, 0, c.count, c.dtype, c.device)
