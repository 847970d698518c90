"""The measured loop shared by every communication benchmark.

Two modes, named in every row:
- latency: barrier, then one op per timed iteration; one sample per iteration.
- throughput: ops back to back under one timer, divided by their number (nccl-tests' default);
  repeated in `blocks` blocks so that spread can be reported.
Warm-up runs at every size. The iteration count adapts to a per-size time budget, with floors.
"""

import math
from dataclasses import dataclass
from typing import Callable

import torch

from bench.timing.timers import make_timer, sync

MODES = ("latency", "throughput")


@dataclass(frozen=True, kw_only=True)
class LoopSpec:
    mode: str = "latency"
    warmup: int = 5  # floor of warm-up iterations
    iters: int = 20  # floor of timed iterations (ops)
    max_iters: int = 10_000
    budget_s: float = 0.2  # target timed seconds per size
    blocks: int = 5  # throughput mode: samples = blocks, each of iters/blocks ops


@dataclass(frozen=True, kw_only=True)
class LoopResult:
    samples_s: list[float]  # this rank's samples: per op (latency) or per block / ops (throughput)
    warmup_s: float  # mean seconds per warm-up op on this rank
    ops: int  # timed ops


def _run(op: Callable, async_op: bool):
    work = op(async_op)
    if work is not None:
        work.wait()


def iterations(spec: LoopSpec, warm_op_s: float) -> int:
    """Timed ops for a per-size budget, given the slowest rank's warm-up seconds per op."""
    want = math.ceil(spec.budget_s / warm_op_s) if warm_op_s > 0 else spec.max_iters
    return int(min(max(want, spec.iters), max(spec.max_iters, spec.iters)))


def measure(op: Callable, *, spec: LoopSpec, device: torch.device, barrier: Callable,
            agree_max: Callable[[float], float]) -> LoopResult:
    """op(async_op) runs one collective and returns a Work or None.

    barrier() synchronises ranks; agree_max(x) returns the max of x over ranks (so every rank
    picks the same iteration count: ranks issuing different numbers of ops would hang).
    """
    timer = make_timer(device)
    barrier()
    timer.start()
    for _ in range(spec.warmup):
        _run(op, async_op=True)
    sync(device)
    warm = timer.stop() / max(spec.warmup, 1)
    n = iterations(spec, agree_max(warm))
    samples: list[float] = []
    if spec.mode == "latency":
        for _ in range(n):
            barrier()
            timer.start()
            _run(op, async_op=True)
            samples.append(timer.stop())
    elif spec.mode == "throughput":
        per_block = max(1, math.ceil(n / spec.blocks))
        n = per_block * spec.blocks
        for _ in range(spec.blocks):
            barrier()
            timer.start()
            for _ in range(per_block):
                op(False)  # issue back to back; on CUDA this only enqueues
            samples.append(timer.stop() / per_block)
    else:
        raise ValueError(f"unknown timing mode {spec.mode!r}")
    return LoopResult(samples_s=samples, warmup_s=warm, ops=n)
