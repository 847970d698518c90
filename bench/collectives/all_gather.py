"""all_gather (list of per-rank tensors) and all_gather_single (one tensor; in-place means the
input is this rank's slice of the output, as in nccl-tests). busbw factor (n-1)/n."""

import torch.distributed as dist

from bench.collectives import compat
from bench.collectives.base import Bufs, Collective, empty, gathered_values, move_range, register


def _mine(c):
    return move_range(c.rank, c.rank * c.shard, c.shard, c.dtype, c.device)


class _AllGatherBase(Collective):
    sharded = True

    def bus_factor(self, n):
        return (n - 1) / n

    def buff_numel(self, count, world):
        return count // world, count  # nccl-tests src/all_gather.cu:10 AllGatherGetCollByteCount: base, base * nranks

    def expected(self, c):
        return gathered_values(c)


@register
class AllGather(_AllGatherBase):
    name = "all_gather"

    def setup(self, c):
        return Bufs(inputs=_mine(c), outputs=[empty(c, c.shard) for _ in range(c.world)])

    def call(self, c, b, async_op=False):
        return dist.all_gather(b.outputs, b.inputs, group=c.group, async_op=async_op)

    def result(self, c, b):
        return b.outputs  # the pieces in rank order (the check walks them: no joined copy)


@register
class AllGatherSingle(_AllGatherBase):
    name = "all_gather_single"
    placements = ("out-of-place", "in-place")

    def setup(self, c):
        out = empty(c, c.count)
        if c.inplace:
            inp = out[c.rank * c.shard:(c.rank + 1) * c.shard]
            inp.copy_(_mine(c))
        else:
            inp = _mine(c)
        return Bufs(inputs=inp, outputs=out)

    def call(self, c, b, async_op=False):
        return compat.all_gather_single(b.outputs, b.inputs, group=c.group, async_op=async_op)

    def result(self, c, b):
        return b.outputs
