"""The measured loop shared by every communication benchmark.

Three modes, named in every row (column `mode`; the reduction over ranks is `rank_reduce`):
- latency: barrier, then one op per timed iteration; one sample per iteration. On CPU: host
  time around the blocking call or work.wait(). On CUDA: device time on the current stream from
  the moment the op could start to its end. The stream is first held by a spin kernel
  (torch.cuda._sleep) while the host dispatches the op, and the start event is recorded behind
  it, so the host's dispatch time is not in the sample. A sample whose hold ran out before the
  dispatch had finished (the start event had already fired) on any rank is taken again, barrier
  included, by every rank with twice the hold: the ranks agree on it (agree_max), so they issue
  the same collectives in the same order and hold for the same number of cycles. The hold comes
  back down too: after BACKOFF_AFTER samples in a row that needed no retry it is halved (never
  under HOLD_CYCLES), and the wait doubles when a halved hold proves too short. A sample still
  early at MAX_HOLD_CYCLES is kept and counted (column `samples_with_dispatch`).
  An op whose wait blocks the host until the stream is done (NCCL's barrier: WorkNCCL's
  synchronize waits for the stream that holds the barrier tensor; any op of gloo on CUDA tensors)
  can never be held: its start event has always fired when the wait returns. Such an op is
  declared by its unit (measure's blocks_host) or found by one probe after the warm-up (the stream
  held HOLD_PROBE_CYCLES, the op dispatched, then waited for: had the hold ended when the wait
  returned, though not when the dispatch did?; a dispatch longer than the hold probes again with
  twice the hold), and
  is timed without the hold, start event, dispatch, wait, end event: every sample then contains
  its dispatch (column `latency_hold` = 'none', `samples_with_dispatch` = every sample).
  Start skew inside a CUDA latency sample (the spread over ranks of the moments their start
  events fire) = the spread of the ranks' exits from the barrier + the spread of their kernel
  launch latencies + hold_cycles x the spread of 1/SM clock. The hold shifts every rank's start by
  the same number of cycles, so it adds skew only where the clocks differ (a throttled GPU), and it
  does not absorb the barrier's exit skew either (every rank's hold starts at its own exit). For
  a collective no rank can finish before every rank has started (all_reduce, all_gather, ...), the
  earliest rank's sample contains the whole skew, so the `max` rank reduction reads high by up to
  the skew (on CPU likewise by the barrier's exit skew). It is not measured separately: for such
  a collective the spread over ranks of one iteration's samples (the samples table keeps them
  all) is the skew give or take the spread of the ranks' end times (docs/telemetry.md, "The CUDA
  latency sample").
- throughput: ops back to back under one timer, divided by their number; repeated in `blocks`
  blocks so that spread can be reported. blocking=True waits for each op before issuing the next;
  blocking=False issues the block's ops asynchronously and waits for them all at the end, several
  in flight at once (PARAM comms.py's default, its `--z 0`). On CUDA the timer is a pair of events
  on the current stream (the first op's dispatch is inside the block).
- nccl-tests: nccl-tests' own definition (src/common.cu, BenchTime, lines 726-772 at a0b82b2):
  barrier, a host timer, the block's ops launched back to back in one stream (op(False): on CUDA
  this only enqueues), one synchronisation of the device, host seconds / ops. Each block is one
  such measurement; reported averaged over ranks by default, as nccl-tests' `-a 1` (see
  bench.timing.stats.RANK_REDUCTIONS).
Warm-up runs at every size. The iteration count adapts to a per-size time budget, with floors:
budget / (the slowest rank's seconds per sample), at least `iters` (20) ops, but no more than
SLOW_FLOOR_X budgets (or SLOW_FLOOR_S, whichever is more) are spent reaching that floor, and never fewer than MIN_SAMPLES (5) ops: a
2.7 s all_reduce on a slow link gets 5 samples, not 20 (stored: column `iters`). Seconds per sample
are first the warm-up's seconds per op; in latency mode, where a sample costs more than its op (the
barrier, on CUDA the hold and the agreement), the count is sized again from what SIZE_SAMPLES
samples cost in full (after the first, which settles the hold), agreed over ranks, so a case keeps
within about its budget. The loop tells the
case's wall-clock limit what it still needs (bench.timing.deadline): after the warm-up's first op
when there are more (that op's seconds x the ops still to come) and after the count is known.

Test only: DISTBENCH_TEST_SLOWDOWN=F (F >= 1) makes every timed op really take F times as long (the
rank keeps its core busy for (F-1) x the op's own time inside the timed region, as a slower
CPU-bound collective would; a sleep instead freed the core and sped the next ops up, so 1.5 read
as about 1.2), to check that the regression gate catches a slowdown (tools/gate_eval.py,
docs/gate.md). Patterns select cases (issue 18): a comma-separated list of `F` (every case),
`NAME=F` (cases whose case_id is NAME or starts with `NAME.`; NAME may hold fnmatch wildcards) and
`NAME@SIZE=F` (that size only, e.g. `all_reduce@16M=2`); the first that matches wins. Unset in
normal use.
"""

import fnmatch
import math
import os
import time
from dataclasses import dataclass
from typing import Callable

import torch

from bench.errors import BenchError
from bench.timing import deadline
from bench.timing.timers import make_timer, sync
from bench.units import parse_size

MODES = ("latency", "throughput", "nccl-tests")
HOLD_CYCLES = 200_000  # first spin-kernel hold of a CUDA latency sample (~0.1 ms at ~2 GHz); doubled as needed
MAX_HOLD_CYCLES = 200_000 << 8  # ~26 ms at ~2 GHz: a sample still early then is kept (its dispatch is in it)
HOLD_PROBE_CYCLES = 4_000_000  # the probe's hold (~2 ms at ~2 GHz), far above any op's dispatch
BACKOFF_AFTER = 8  # samples in a row without a retry before the hold is halved (doubled after a failed halving)
SIZE_SAMPLES = 3  # latency mode: samples whose full cost sizes the count again
MIN_SAMPLES = 5  # the fewest timed ops of a size, however slow its op (= the default throughput blocks)
SLOW_FLOOR_X = 10.0  # reaching the `iters` floor may take this many budgets ...
SLOW_FLOOR_S = 2.0  # ... or this many seconds, whichever is more


@dataclass(frozen=True, kw_only=True)
class LoopSpec:
    mode: str = "latency"
    warmup: int = 5  # floor of warm-up iterations
    iters: int = 20  # floor of timed iterations (ops)
    max_iters: int = 10_000
    budget_s: float = 0.2  # target timed seconds per size
    blocks: int = 5  # throughput mode: samples = blocks, each of iters/blocks ops
    blocking: bool = True  # throughput mode: wait for each op (True) or keep the block's ops in flight


@dataclass(frozen=True, kw_only=True)
class LoopResult:
    samples_s: list[float]  # this rank's samples: per op (latency) or per block / ops (throughput)
    warmup_s: float  # mean seconds per warm-up op on this rank
    ops: int  # timed ops
    hold: str = ""  # CUDA latency: 'spin' (samples held behind a spin kernel) or 'none' (the op's wait blocks the host)
    dispatch_in: int = 0  # CUDA latency: samples whose host dispatch is inside them (no hold, or the hold at its cap)


def slowdown_for(case: str = "", size_bytes: int = 0, text: str | None = None) -> float:
    """The test-only slowdown factor of one case from DISTBENCH_TEST_SLOWDOWN (1.0: none)."""
    text = os.environ.get("DISTBENCH_TEST_SLOWDOWN", "") if text is None else text
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        name, _, factor = part.rpartition("=")
        name, _, size = name.partition("@")
        try:
            f = float(factor)
            want = parse_size(size) if size else None
        except (ValueError, BenchError):
            f, want = math.nan, None
        if not f >= 1.0:
            raise BenchError(f"DISTBENCH_TEST_SLOWDOWN '{text}': '{part}' is not F, NAME=F or NAME@SIZE=F "
                             "with F >= 1 (e.g. 1.5, all_reduce=1.5, all_reduce@16M=2)")
        hit = not name or fnmatch.fnmatchcase(case, name) or fnmatch.fnmatchcase(case, name + ".*")
        if hit and (want is None or want == int(size_bytes)):
            return f
    return 1.0


def _stretch(t0: float, factor: float):
    """Test-only slowdown: stay busy so that the time since t0 becomes factor x itself."""
    if factor > 1.0:
        now = time.perf_counter()
        until = now + (factor - 1.0) * (now - t0)
        while time.perf_counter() < until:
            pass


def _run(op: Callable, async_op: bool):
    work = op(async_op)
    if work is not None:
        work.wait()


class _Hold:
    """The spin kernel's cycles for the samples of one case, equal on every rank: they change only
    on agreed facts (any rank early), so every rank grows and shrinks it alike."""

    def __init__(self):
        self.cycles = HOLD_CYCLES
        self.calm = 0  # samples in a row that needed no retry
        self.patience = BACKOFF_AFTER
        self.halved = False  # the last change was a halving
        self.capped = 0  # samples kept early at MAX_HOLD_CYCLES

    def early(self) -> bool:
        """Too short: double it (True), or False at the cap."""
        if self.cycles >= MAX_HOLD_CYCLES:
            self.capped += 1
            return False
        if self.halved:  # the halving was too much: wait twice as long before the next one
            self.patience *= 2
        self.cycles, self.calm, self.halved = min(2 * self.cycles, MAX_HOLD_CYCLES), 0, False
        return True

    def enough(self):
        self.calm += 1
        if self.calm >= self.patience and self.cycles > HOLD_CYCLES:
            self.cycles, self.calm, self.halved = max(self.cycles // 2, HOLD_CYCLES), 0, True


def _held_sample(op: Callable, timer, hold: _Hold, barrier: Callable, agree_max: Callable[[float], float]) -> float:
    """CUDA latency sample without the host's dispatch: barrier, hold the stream with a spin
    kernel, record the start event behind it, dispatch the op. If the start event has already
    fired on ANY rank when its dispatch returned, that rank's hold was too short: every rank
    doubles the hold and takes the sample again, barrier included. The decision is agreed
    (agree_max of the early flags), so every rank issues the same collectives in the same order
    and keeps the same hold; a rank deciding alone would issue one op more than the others (a
    hang on NCCL, or the retry matched against the next sample's barrier)."""
    while True:
        barrier()
        torch.cuda._sleep(hold.cycles)
        timer.start()
        _run(op, async_op=True)
        early = timer.started()
        t = timer.stop()
        if agree_max(1.0 if early else 0.0) <= 0.0:  # outside the timed span: stop() has synchronised
            hold.enough()
            return t
        if not hold.early():
            return t  # kept at the cap: counted in dispatch_in


def _plain_sample(op: Callable, timer, barrier: Callable) -> float:
    """A sample with its dispatch inside (an op whose wait blocks the host cannot be held)."""
    barrier()
    timer.start()
    _run(op, async_op=True)
    return timer.stop()


def _wait_blocks_host(op: Callable, timer, barrier: Callable, agree_max: Callable[[float], float],
                      device: torch.device) -> bool:
    """One probe, every rank: hold the stream with a spin kernel and mark its end with an event,
    dispatch the op, then wait for it. An op whose wait blocks the host returns from wait() after
    the hold has ended; one whose wait returns at once (NCCL's collectives: the current stream
    waits, not the host) returns well inside it. The verdict needs the hold to outlast the
    dispatch: where the hold had already ended when the dispatch returned (a slow dispatch, a
    stalled host) the probe proved nothing and is taken again with twice the hold, up to
    MAX_HOLD_CYCLES (then: not blocking; the held samples retry and count as they go). Agreed:
    one rank's blocking wait makes every rank's samples plain."""
    cycles = HOLD_PROBE_CYCLES
    while True:
        barrier()
        timer.start()
        torch.cuda._sleep(cycles)
        timer.mark()
        work = op(True)
        unsure = timer.ended()  # the hold ended during the dispatch: wait() cannot tell us anything
        if work is not None:
            work.wait()
        blocked = not unsure and timer.ended()
        timer.elapsed()
        sync(device)
        verdict = agree_max(2.0 if unsure else (1.0 if blocked else 0.0))
        if verdict < 2.0 or cycles >= MAX_HOLD_CYCLES:
            return verdict == 1.0
        cycles *= 2


def _sized_samples(take: Callable[[], float], n: int, spec: LoopSpec, agree_max: Callable[[float], float]) -> list[float]:
    """n samples from take(), or fewer: after the first (it settles a hold), SIZE_SAMPLES samples
    are timed in full and the count is sized again from their cost (agreed: the slowest rank's) by
    iterations(), never above n: the budget's count at the full cost, the `iters` floor as far as
    iterations() allows. Every rank takes the same number."""
    samples = [take()]
    if n <= 1 + SIZE_SAMPLES:
        return samples + [take() for _ in range(n - 1)]
    t0 = time.perf_counter()
    samples += [take() for _ in range(SIZE_SAMPLES)]
    per_sample = agree_max((time.perf_counter() - t0) / SIZE_SAMPLES)
    n = max(len(samples), min(n, iterations(spec, per_sample)))
    deadline.need(per_sample * (n - len(samples)))
    return samples + [take() for _ in range(n - len(samples))]


def iterations(spec: LoopSpec, warm_op_s: float) -> int:
    """Timed ops for a per-size budget, given the slowest rank's warm-up seconds per op: budget /
    op, raised to the `iters` floor only as far as max(SLOW_FLOOR_X budgets, SLOW_FLOOR_S) allows,
    never under MIN_SAMPLES (nor under `iters` when that is smaller), never over max_iters."""
    if warm_op_s <= 0:
        return int(max(spec.max_iters, spec.iters))
    want = math.ceil(spec.budget_s / warm_op_s)
    cap_s = max(SLOW_FLOOR_X * spec.budget_s, SLOW_FLOOR_S)
    floor = min(spec.iters, max(MIN_SAMPLES, math.floor(cap_s / warm_op_s)))
    return int(min(max(want, floor), max(spec.max_iters, spec.iters)))


def measure(op: Callable, *, spec: LoopSpec, device: torch.device, barrier: Callable,
            agree_max: Callable[[float], float], case: str = "", size_bytes: int = 0,
            blocks_host: bool | None = None) -> LoopResult:
    """op(async_op) runs one collective and returns a Work or None.

    barrier() synchronises ranks; agree_max(x) returns the max of x over ranks (so every rank
    picks the same iteration count: ranks issuing different numbers of ops would hang).
    blocks_host: the unit says whether the op's wait blocks the host (CUDA latency mode); None:
    probe it.
    """
    timer = make_timer(device)
    barrier()
    timer.start()
    for i in range(spec.warmup):
        t0 = time.perf_counter()
        _run(op, async_op=True)
        if i == 0 and spec.warmup > 1:  # the first op's seconds tell the case's limit what the rest needs
            sync(device)
            deadline.need((time.perf_counter() - t0) * (spec.warmup + MIN_SAMPLES))
    sync(device)
    warm = timer.stop() / max(spec.warmup, 1)
    n = iterations(spec, agree_max(warm))
    deadline.need(warm * (n + 1))
    samples: list[float] = []
    slow = slowdown_for(case, size_bytes)  # test only (module docstring); case, size_bytes: which case this is
    hold, dispatch_in = "", 0
    if spec.mode == "latency" and device.type == "cuda":
        if blocks_host is None:
            blocks_host = _wait_blocks_host(op, timer, barrier, agree_max, device)
        if blocks_host:
            samples = _sized_samples(lambda: _plain_sample(op, timer, barrier), n, spec, agree_max)
            hold, dispatch_in = "none", len(samples)
        else:
            held = _Hold()
            samples = _sized_samples(lambda: _held_sample(op, timer, held, barrier, agree_max), n, spec, agree_max)
            hold, dispatch_in = "spin", held.capped
        n = len(samples)
    elif spec.mode == "latency":
        def host_sample() -> float:
            barrier()
            t0 = time.perf_counter()
            timer.start()
            _run(op, async_op=True)
            _stretch(t0, slow)
            return timer.stop()

        samples = _sized_samples(host_sample, n, spec, agree_max)
        n = len(samples)
    elif spec.mode == "nccl-tests":
        per_block = max(1, math.ceil(n / spec.blocks))
        n = per_block * spec.blocks
        for _ in range(spec.blocks):
            barrier()
            t0 = time.perf_counter()
            for _ in range(per_block):
                op(False)  # back to back in one stream
            sync(device)  # one synchronisation
            _stretch(t0, slow)
            samples.append((time.perf_counter() - t0) / per_block)
    elif spec.mode == "throughput":
        per_block = max(1, math.ceil(n / spec.blocks))
        n = per_block * spec.blocks
        for _ in range(spec.blocks):
            barrier()
            t0 = time.perf_counter()
            timer.start()
            if spec.blocking:
                for _ in range(per_block):
                    op(False)  # issue back to back; on CUDA this only enqueues
            else:
                works = [op(True) for _ in range(per_block)]
                for w in works:
                    if w is not None:
                        w.wait()
            _stretch(t0, slow)
            samples.append(timer.stop() / per_block)
    else:
        raise ValueError(f"unknown timing mode {spec.mode!r}")
    return LoopResult(samples_s=samples, warmup_s=warm, ops=n, hold=hold, dispatch_in=dispatch_in)
