"""sendrecv: ring shift, rank r sends its buffer to r+1 and receives from r-1 (nccl-tests
sendrecv). busbw factor 1."""

import torch.distributed as dist

from bench.collectives.base import Bufs, Collective, empty, move_range, register


class _Batch:
    """The list of p2p works of batch_isend_irecv, waited as one."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()
        return True


@register
class SendRecv(Collective):
    name = "sendrecv"
    min_world = 2

    def bus_factor(self, n):
        return 1.0

    def buff_numel(self, count, world):
        return count, count  # nccl-tests src/sendrecv.cu:10 SendRecvGetCollByteCount

    def setup(self, c):
        return Bufs(inputs=move_range(c.rank, 0, c.count, c.dtype, c.device),
                    outputs=empty(c, c.count))

    def call(self, c, b, async_op=False):
        nxt, prv = c.global_rank((c.rank + 1) % c.world), c.global_rank((c.rank - 1) % c.world)
        ops = [dist.P2POp(dist.isend, b.inputs, nxt, c.group), dist.P2POp(dist.irecv, b.outputs, prv, c.group)]
        work = _Batch(dist.batch_isend_irecv(ops))
        if async_op:
            return work
        work.wait()
        return None

    def result(self, c, b):
        return b.outputs

    def expected(self, c):
        return move_range((c.rank - 1) % c.world, 0, c.count, c.dtype, c.device)
