"""Issue 31 item 1: a CUDA latency sample is retried, and its hold lengthened, by all ranks
together. Two gloo ranks run bench.timing.loop.measure in latency mode on a faked CUDA device
(CPU tensors; the timer, the spin kernel and the device sync are fakes): only rank 0's timer says
"the start event had already fired" (the hold was too short). Before the fix rank 0 alone issued
the op again while rank 1 went on to the barrier, and the group timed out."""

import pytest
import torch
import torch.distributed as dist

from conftest import spawn

from bench.timing import loop
from bench.timing.loop import HOLD_CYCLES, LoopSpec

SPEC = LoopSpec(mode="latency", warmup=1, iters=3, max_iters=3, budget_s=1e-9)  # 3 timed samples


def _latency_on_faked_cuda(info, early_by_rank: dict) -> dict:
    """One rank: measure() on 'cuda:0' whose timer reports early starts as scripted for this rank;
    every collective the rank issues is logged in order."""
    early = list(early_by_rank.get(info.rank, []))
    log, holds = [], []

    class FakeCudaTimer:
        def start(self):
            pass

        def started(self) -> bool:  # the start event had already fired when the dispatch returned
            return early.pop(0) if early else False

        def stop(self) -> float:
            return 1e-3

        def mark(self):  # the blocking-wait probe: the end of its hold
            pass

        def elapsed(self) -> float:  # the probe's hold
            return 1.0

        def ended(self) -> bool:  # the probe's hold had not ended after the dispatch nor after the wait
            return False

    buf = torch.zeros(4)

    def op(async_op):
        log.append("op")
        return dist.all_reduce(buf, async_op=async_op)

    def barrier():
        log.append("barrier")
        dist.barrier()

    def agree_max(x: float) -> float:
        log.append("agree_max")
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "make_timer", lambda device: FakeCudaTimer())
        mp.setattr(loop, "sync", lambda device: None)
        mp.setattr(torch.cuda, "_sleep", holds.append)
        res = loop.measure(op, spec=SPEC, device=torch.device("cuda", 0), barrier=barrier, agree_max=agree_max)
    return {"log": log, "holds": holds, "samples": len(res.samples_s), "ops": res.ops}


def test_a_short_hold_on_one_rank_is_retried_by_every_rank():
    # rank 0's first timed try starts early; rank 1's never does
    out = spawn(_latency_on_faked_cuda, 2, {0: [True]}, timeout_s=10.0)  # a desynchronised group fails in 10 s, not 120
    assert out[0] == out[1]  # the same collectives in the same order, the same holds and samples
    warm = ["barrier", "op", "agree_max"]  # warm-up, then the agreed iteration count
    probe = ["barrier", "op", "agree_max"]  # does the op's wait block the host? (agreed: no)
    sample = ["barrier", "op", "agree_max"]  # every try: barrier, the op, the agreed 'any rank early?'
    assert out[0]["log"] == warm + probe + sample * 4  # 3 samples, the first taken twice
    assert out[0]["holds"] == [loop.HOLD_PROBE_CYCLES, HOLD_CYCLES] + [2 * HOLD_CYCLES] * 3  # doubled on both ranks, kept after
    assert out[0]["samples"] == 3 and out[0]["ops"] == 3
