"""barrier: no payload; timed once per run at size 0. No bandwidth."""

import torch.distributed as dist

from bench.collectives.base import Bufs, Collective, register


@register
class Barrier(Collective):
    name = "barrier"
    sized = False

    def bus_factor(self, n):
        return 0.0

    def buff_numel(self, count, world):
        return 0, 0

    def setup(self, c):
        return Bufs()

    def call(self, c, b, async_op=False):
        if c.device.type == "cuda":
            return dist.barrier(group=c.group, async_op=async_op, device_ids=[c.device.index])
        return dist.barrier(group=c.group, async_op=async_op)

    def wait_blocks_host(self, c):
        """On CUDA, yes: NCCL's barrier is an all-reduce of a tensor it holds, and waiting on it
        synchronizes that stream (WorkNCCL::synchronizeInternal); gloo's waits are all host-side."""
        return True if c.device.type == "cuda" else None

    def result(self, c, b):
        return None

    def expected(self, c):
        return None
