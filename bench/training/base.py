"""What every strategy module shares: the compute clock, memory probes, the Ctx a strategy is
built from, the Trainer interface and the single-process reference check.

A strategy module registers one `Strategy` (name, single_process: runs at world 1 like dp and
layer, setup(ctx) -> Trainer, dims(world) -> ParallelDims, check(spec, case) -> a skip note or
None, raising BenchError for an impossible case). A Trainer owns its model, optimizer and data loader and offers
  step(check=False)  one training step (fwd + bwd, then optimizer unless check); timed by the runner
  loss()             the last step's mean loss over the global mini-batch (collective, untimed)
  grads()            {reference parameter name: full gradient} (collective, untimed)
  global_batch()     the last step's global mini-batch (x, y), for the reference (collective)
"""

import gc
import math
import resource
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist

from bench.registry import Registry
from bench.training.dims import ParallelDims
from bench.training.footprint import Footprint
from bench.workloads.models import ModelSpec, build_model, loss_fn

# Gradient check tolerance (float32): |got - ref| <= ATOL + RTOL * |ref|, elementwise.
RTOL, ATOL = 1e-4, 1e-5
TOLERANCE = f"rtol={RTOL:g} atol={ATOL:g} (float32)"


# Span kinds that are compute: forward, full backward, and the zero-bubble schedules' split
# backward (input gradient, weight gradient). "recompute" lies inside a backward span.
COMPUTE_KINDS = ("fwd", "bwd", "bwd_input", "bwd_weight")
SPAN_KINDS = (*COMPUTE_KINDS, "recompute")


class Clock:
    """Compute intervals of the local module: (kind, stage, mb, start_s, end_s), kind in
    SPAN_KINDS (recompute lies inside a backward interval), and communication waits (start_s,
    end_s, peers). perf_counter on CPU; on CUDA, events on the current stream of every device the
    process computes on (`devices`: layer puts consecutive groups on several GPUs, so a span
    recorded on one device's stream would end when that device's part ends, not the span),
    each placed relative to its device's reference event and resolved after the step's
    synchronize: a span runs from the earliest device's start to the latest device's end. A wait:
    events before and after it, so the time the stream stalls on the transfer counts, not the host
    call, which under NCCL returns at once."""

    def __init__(self, device: torch.device, devices: list[torch.device] | None = None):
        cuda = [d for d in dict.fromkeys(devices or [device]) if d.type == "cuda"]
        self.cuda = bool(cuda)
        self.devices = cuda
        self.phase = "fwd"
        self.reset()

    def reset(self):
        self.spans: list[tuple] = []
        self.waits: list[tuple] = []  # (start_s, end_s, peers): blocked in communication waits
        self._pending: list[tuple] = []
        self._pending_waits: list[tuple] = []
        if self.cuda:
            self._refs = self._record()
            self._ref_host = time.perf_counter()

    def _record(self) -> list:
        """One timing event per device, recorded on that device's current stream."""
        out = []
        for d in self.devices:
            e = torch.cuda.Event(enable_timing=True)
            e.record(torch.cuda.current_stream(d))
            out.append(e)
        return out

    @contextmanager
    def span(self, kind: str, stage: int = -1, mb: int = -1):
        if self.cuda:
            a = self._record()
            try:
                yield
            finally:
                self._pending.append((kind, stage, mb, a, self._record()))
        else:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self.spans.append((kind, stage, mb, t0, time.perf_counter()))

    @contextmanager
    def wait(self, peers=None):
        """Time a communication wait: host time on CPU, the stream's stall on CUDA."""
        if self.cuda:
            a = self._record()
            try:
                yield
            finally:
                self._pending_waits.append((a, self._record(), peers))
        else:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self.waits.append((t0, time.perf_counter(), peers))

    def _at(self, a: list, b: list) -> tuple[float, float]:
        """Host seconds of the earliest start and the latest end over the devices (an event's
        elapsed time is defined against an event of the same device only: its reference)."""
        start = min(self._ref_host + ref.elapsed_time(x) * 1e-3 for ref, x in zip(self._refs, a))
        end = max(self._ref_host + ref.elapsed_time(y) * 1e-3 for ref, y in zip(self._refs, b))
        return start, end

    def resolve(self) -> list[tuple]:
        """All spans in seconds (call after the device is synchronized); resolves the waits too."""
        if self._pending:
            for kind, s, m, a, b in self._pending:
                self.spans.append((kind, s, m, *self._at(a, b)))
            self._pending = []
        if self._pending_waits:
            self.waits.extend((*self._at(a, b), peers) for a, b, peers in self._pending_waits)
            self._pending_waits = []
        return self.spans

    def totals(self) -> dict:
        sp = self.resolve()
        return kind_totals(self.resolve())

    def compute_intervals(self) -> list[tuple[float, float]]:
        return [(s, e) for k, _, _, s, e in self.resolve() if k in COMPUTE_KINDS]


def kind_totals(spans) -> dict:
    """Seconds per kind of one step's spans: fwd, bwd (all backward: full, input and weight
    gradient, recompute taken out), bwd_input, bwd_weight (the split backward's parts, recompute
    included) and recompute."""
    tot = {k: sum(e - s for kk, _, _, s, e in spans if kk == k) for k in SPAN_KINDS}
    tot["bwd"] += tot["bwd_input"] + tot["bwd_weight"] - tot["recompute"]  # recompute is its own line
    return tot


# ---- memory ---------------------------------------------------------------------------------

def _read_status_kb(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def release_cached(devices) -> None:
    """Before the peaks are reset: what is no longer referenced is freed (gc.collect(): reference
    cycles), and the CUDA caching allocator gives its free blocks back (torch.cuda.empty_cache(),
    every device), so that memory of the correctness check (the reference model, the gathered
    gradients and global batch) is neither allocated nor reserved when the measured steps start."""
    gc.collect()
    if any(d.type == "cuda" for d in devices) and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def reset_peak(device: torch.device) -> bool:
    """Reset peak counters at the end of warm-up. Host: VmHWM via /proc/self/clear_refs ("5",
    Linux >= 4.0); returns False when the host peak could not be reset (then it is a lifetime peak)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def read_peak(device: torch.device, host_reset: bool) -> dict:
    """Peaks since reset_peak. CUDA: memory_stats allocated/active/reserved peaks and device-level
    used memory (mem_get_info: includes the CUDA context and NCCL buffers). Always: host peak RSS."""
    kb = _read_status_kb("VmHWM")
    if kb is None:
        kb, host_reset = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, False
    out = {"memory_kind": "host", "peak_allocated_bytes": None, "peak_active_bytes": None,
           "peak_reserved_bytes": None, "device_used_bytes": None, "device_total_bytes": None,
           "host_peak_rss_bytes": int(kb) * 1024, "host_peak_is_lifetime": not host_reset}
    if device.type == "cuda":
        st = torch.cuda.memory_stats(device)
        free, total = torch.cuda.mem_get_info(device)
        out.update({"memory_kind": "cuda", "peak_allocated_bytes": int(st.get("allocated_bytes.all.peak", 0)),
                    "peak_active_bytes": int(st.get("active_bytes.all.peak", 0)),
                    "peak_reserved_bytes": int(st.get("reserved_bytes.all.peak", 0)),
                    "device_used_bytes": int(total - free), "device_total_bytes": int(total)})
    return out


def peak_bytes(mem: dict) -> int:
    """The one number per device for summaries: CUDA peak reserved, or host peak RSS."""
    return int(mem["peak_reserved_bytes"] if mem["memory_kind"] == "cuda" else mem["host_peak_rss_bytes"])


# ---- the context a strategy is built from ------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Ctx:
    spec: ModelSpec
    rank: int
    world: int
    device: torch.device
    batch: int  # global mini-batch, samples
    seed: int
    steps: int  # steps the loader must cover (data is regenerated per epoch order)
    chunks: int = 1  # pipeline micro-batches
    schedule: str = "gpipe"
    checkpoint: str = "never"
    balance: tuple[int, ...] = ()  # blocks per stage / per device group
    bucket_cap_mb: float = 25.0
    lr: float = 1e-3
    dims: ParallelDims | None = None  # a composed layout's degrees (bench.training.layout); None: the strategy's own
    extra: dict = field(default_factory=dict)


class Trainer:
    """Defaults shared by the data-parallel-style trainers (override what differs)."""

    degraded = ""
    devices = 1  # devices this process drives
    role = ""
    comm_in_compute = False  # collectives run inside the timed forward/backward calls

    def __init__(self, ctx: Ctx, module, batches, params):
        self.ctx, self.module, self.batches = ctx, module, batches
        self.clock = Clock(ctx.device, self.device_list())  # every device it computes on (layer: several)
        self.loss_of = loss_fn(ctx.spec)
        self.opt = torch.optim.SGD(params, lr=ctx.lr) if params is not None else None
        self._last = None
        self._next = None  # a batch prefetched outside the timed step

    def prefetch(self):
        """Load the next batch onto the device before the timer starts, so data loading is not
        part of the timed step (runner: _timed_steps)."""
        self._next = self.batches.next(self.input_device())

    def next_batch(self):
        batch, self._next = self._next, None
        return batch if batch is not None else self.batches.next(self.input_device())

    def device_list(self) -> list[torch.device]:
        """Every device this process computes on (dp and layer drive several)."""
        return [self.ctx.device]

    def sync(self):
        for d in self.device_list():
            if d.type == "cuda":
                torch.cuda.synchronize(d)

    def input_device(self):
        return self.ctx.device

    def step_loss(self, out, y):
        return self.loss_of(out, y)

    def step(self, check: bool = False):
        x, y = self.next_batch()
        self._last = (x, y)
        with self.clock.span("fwd"):
            loss = self.step_loss(self.module(x), y)
        with self.clock.span("bwd"):
            loss.backward()
        self._loss_t = loss.detach()
        if not check:
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def loss(self) -> float:
        return float(self._loss_t.item())

    def grads(self) -> dict:
        return {n: p.grad.detach().clone() for n, p in self.module.named_parameters() if p.grad is not None}

    def global_batch(self):
        return self._last

    def solo(self):
        """A callable doing one fwd+bwd of an unwrapped replica on a local batch (no comm), or None."""
        return None


def gather_cat(t: torch.Tensor, world: int) -> torch.Tensor:
    out = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(out, t.contiguous())
    return torch.cat(out)


def mean_loss_all_ranks(t: torch.Tensor) -> float:
    t = t.detach().clone().float()
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


def reference_check(trainer: Trainer, got_loss: float, got_grads: dict, batch=None) -> dict:
    """Compare one step with the single-process reference on the same global mini-batch
    (`batch`: trainer.global_batch(), which is collective; call it on every rank)."""
    ctx = trainer.ctx
    x, y = batch if batch is not None else trainer.global_batch()
    ref = build_model(ctx.spec, ctx.seed).to(ctx.device)
    loss = loss_fn(ctx.spec)(ref(x.to(ctx.device)), y.to(ctx.device))
    loss.backward()
    ref_loss = float(loss.item())
    wrong, worst, missing = 0, 0.0, []
    if not math.isclose(got_loss, ref_loss, rel_tol=RTOL, abs_tol=ATOL):
        wrong += 1
    worst = abs(got_loss - ref_loss)
    for name, p in ref.named_parameters():
        g = got_grads.get(name)
        if g is None:
            missing.append(name)
            wrong += 1
            continue
        g = g.to(p.grad.device, p.grad.dtype).reshape(p.grad.shape)
        diff = (g - p.grad).abs()
        worst = max(worst, float(diff.max()))
        if not torch.allclose(g, p.grad, rtol=RTOL, atol=ATOL):
            wrong += 1
    return {"wrong": wrong, "max_abs_diff": worst, "ref_loss": ref_loss, "loss": got_loss,
            "checked_tensors": len(list(ref.parameters())) + 1, "missing": missing}


def live_groups() -> list:
    """The process groups this process belongs to, in the order they were created (torch's
    registry: the default group and every new_group / split_group / DeviceMesh dimension)."""
    return list(dist.distributed_c10d._world.pg_map)


def destroy_groups_since(before) -> int:
    """Destroy every process group created since `before` (live_groups() then), newest first;
    returns how many. Every rank of a case calls it at the same point with the same groups (they
    were created collectively, in one order), after its devices are synchronized: a DeviceMesh's
    communicators (NCCL's buffers live outside the caching allocator) do not outlive the case."""
    old = set(before)
    mine = [g for g in live_groups() if g not in old]
    if mine:
        _forget_meshes()
    for g in reversed(mine):
        dist.destroy_process_group(g)
    return len(mine)


def end_case_groups(before, failing: bool = False) -> int:
    """A case's end, passed or failed: gc first (a trainer's modules, stages and schedule hold its
    groups), then destroy_groups_since(before). On a failing case a teardown error is said on
    stderr, not raised: the case's own error is the one to report."""
    gc.collect()
    try:
        return destroy_groups_since(before)
    except Exception as e:  # noqa: BLE001 - a failing case's own error goes on
        if not failing:
            raise
        print(f"distbench: process groups of the failed case not all destroyed: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        return 0


def _forget_meshes():
    """Clear DTensor's sharding-propagation caches. They keep each op's output spec keyed by its
    inputs' DeviceMesh, which compares equal by ranks, layout and dimension names, not by process
    group: the next case's mesh over the same ranks would be a hit, and its DTensors would carry
    the previous case's mesh, whose groups are destroyed ("Could not resolve the process group").
    Nothing to do when DTensor was never imported."""
    if "torch.distributed.tensor" not in sys.modules and "torch.distributed._tensor" not in sys.modules:
        return
    try:  # the Python cache and the C++ fast path's (torch 2.13: both)
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache  # lazy: DTensor only when a case used it
    except ImportError:  # older torch (2.4): the Python cache is the only one
        from torch.distributed._tensor.api import DTensor  # lazy: DTensor only when a case used it; torch < 2.6

        cached = DTensor._op_dispatcher.sharding_propagator.propagate_op_sharding  # a LocalLRUCache
        clear = getattr(cached, "cache_clear", None) or cached.cache.cache_clear
        clear()
    else:
        _clear_sharding_prop_cache()


def no_check(spec: ModelSpec, case) -> str | None:
    return None


@dataclass(frozen=True, kw_only=True)
class Strategy:
    name: str
    doc: str  # first line: what `distbench list` shows
    single_process: bool  # runs in one process at world 1 (dp, layer)
    setup: Callable[[Ctx], "Trainer"]
    memory: Callable[[Footprint], float]  # per-rank peak bytes of a case (bench.training.footprint)
    # every rank's bytes (rank order) on the case's mesh, where ranks differ (pipeline stages, TP):
    # (Footprint, ParallelDims, check) -> bytes, the reference check on rank 0; None: every rank needs memory(f)
    ranks: Callable[..., list[int]] | None = None
    dims: Callable[[int], ParallelDims] = lambda world: ParallelDims(world=world, dp_replicate=world)
    composed: bool = False  # a layout of several parallelisms (bench.training.layout.LAYOUTS)
    min_world: int = 2  # the smallest world it runs at (single-process strategies: 1)
    check: Callable[[ModelSpec, object], str | None] = no_check  # skip note, None, or BenchError


REGISTRY: Registry[Strategy] = Registry("strategy")
