"""pp: torch.distributed.pipelining, every schedule it ships (bench.training.schedules: GPipe,
1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV) with the stage
placement each needs (one stage per rank; two per rank looped, r and r + p; or V-shaped, r and
2p-1-r); `chunks` micro-batches per mini-batch; `balance` blocks per stage; activation
checkpointing per stage in torchgpipe's modes: always (every micro-batch), except_last (all but
the last micro-batch), never.

Timing is per action of the local stages: the forward (forward_maybe_with_nosync, plus the loss
on the last stage), the full backward (backward_one_chunk, "bwd"), and for the zero-bubble
schedules the input-gradient backward (backward_one_chunk(full_backward=False), "bwd_input") and
the weight-gradient backward (backward_weight_one_chunk, "bwd_weight") apart; recompute is timed
inside the checkpointed blocks while the stage is in a backward. Time blocked in the schedule's
p2p waits is recorded separately (schedules._wait_batch_p2p), with the peers waited on.
"""

import inspect
import weakref

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from bench.errors import BenchError
from bench.training import schedules as scheds
from bench.training.base import REGISTRY, Ctx, Strategy, Trainer
from bench.training.dims import SHORT, ParallelDims
from bench.training.footprint import layout_ranks, pipeline_memory
from bench.training.layout import check_dims, full_grads, global_batch, parallelize
from bench.training.replay import from_pipeline_order, gpipe_order, one_f_one_b_order
from bench.workloads import Batches, build_model
from bench.workloads.models import even_balance, split_pieces

SCHEDULES = scheds.SCHEDULES
CHECKPOINTS = scheds.CHECKPOINTS


def stages_per_rank(schedule: str) -> int:
    return scheds.get(schedule).per_rank


def validate(*, schedule: str, stages: int, chunks: int, batch: int, depth: int, balance=(), strict=True,
             preset: str = "") -> tuple[int, ...]:
    """Raise BenchError for an impossible pipeline; returns the balance (blocks per stage)."""
    sch = scheds.get(schedule)  # unknown names raise with did-you-mean
    if stages < 1:
        raise BenchError(f"stages {stages} must be >= 1")
    if chunks < 1:
        raise BenchError(f"chunks {chunks} must be >= 1")
    if batch % chunks:
        raise BenchError(f"batch {batch} is not divisible by chunks {chunks}; choose chunks dividing {batch}")
    why = sch.rule(stages, chunks)
    if why and (strict or sch.name != "1f1b"):
        hint = f"; use --chunks >= {stages} or --schedule gpipe" if sch.name == "1f1b" else ""
        raise BenchError(f"schedule {sch.name} {why}{hint}")
    n = stages * sch.per_rank
    if balance:
        if len(balance) != n:
            raise BenchError(f"balance {','.join(map(str, balance))} has {len(balance)} entries; "
                             f"schedule {schedule} with {stages} stages needs {n}")
        if sum(balance) != depth or min(balance) < 1:
            raise BenchError(f"balance {','.join(map(str, balance))} sums to {sum(balance)}; {preset or 'the model'} "
                             f"has {depth} layers (each stage needs >= 1)")
        return tuple(balance)
    if depth < n:
        raise BenchError(f"{preset or 'the model'} has {depth} layers, fewer than the {n} pipeline stages")
    return even_balance(depth, n)


class StageModule(nn.Module):
    """A contiguous slice of the model's pieces, with per-micro-batch activation checkpointing."""

    def __init__(self, pieces: nn.Sequential, lo: int, mode: str, chunks: int, clock, stage: int):
        super().__init__()
        self.pieces, self.lo, self.mode, self.chunks = pieces, lo, mode, chunks
        self.clock, self.stage = clock, stage
        self.mb = 0  # set by the stage wrapper before every forward

    def _run(self, i: int, x):
        if self.clock.phase == "bwd":  # re-run of the forward by checkpoint: recompute
            with self.clock.span("recompute", self.stage, self.mb):
                return self.pieces[i](x)
        return self.pieces[i](x)

    def forward(self, x):
        ckpt = self.mode == "always" or (self.mode == "except_last" and self.mb != self.chunks - 1)
        for i in range(len(self.pieces)):
            x = checkpoint(self._run, i, x, use_reentrant=False) if ckpt and torch.is_grad_enabled() \
                else self.pieces[i](x)
        return x


_WAIT_CLOCK: list = [None]


def _patch_waits():
    """Record the schedules' p2p waits on the active clock (once per process): host time on CPU,
    CUDA events around the wait on CUDA (Clock.wait), with the peers waited on."""
    from torch.distributed.pipelining import schedules  # lazy: torch.distributed.pipelining (~1.4 s) only when pp runs

    if getattr(schedules, "_distbench_patched", False) or not hasattr(schedules, "_wait_batch_p2p"):
        return
    orig = schedules._wait_batch_p2p
    orig_batch = getattr(schedules, "_batch_p2p", None)

    class _Works(list):  # the works of one batch, tagged with the peers they talk to
        peers: tuple = ()

    def batch(p2p_ops, *a, **k):
        works = _Works(orig_batch(p2p_ops, *a, **k) or [])
        works.peers = tuple(sorted({int(op.peer) for op in p2p_ops}))
        return works

    def timed(work):
        c = _WAIT_CLOCK[0]
        if c is None:
            return orig(work)
        with c.wait(getattr(work, "peers", None) or None):  # (start, end, peers): breakdown attributes it to them
            return orig(work)

    if orig_batch is not None:
        schedules._batch_p2p = batch
    schedules._wait_batch_p2p = timed
    schedules._distbench_patched = True


def _instrument(stage, mod: StageModule, clock):
    """Wrap the stage's actions in the clock: the forward of one micro-batch, and its backward as
    one action (B: "bwd") or, under the zero-bubble schedules, as the input-gradient action (I:
    "bwd_input") and the weight-gradient action (W: "bwd_weight"), each with its micro-batch.
    (torch runs no I compute on the first stage, whose input needs no gradient: its W runs the
    whole backward.) The wrappers live on the stage and reach it through a weak reference and the
    class's functions (a bound method of the stage inside its own attribute would be a reference
    cycle: the stage, its module and its activations would outlive the case until the cycle
    collector ran, and count in the next case's memory peak)."""
    cls, me = type(stage), weakref.ref(stage)
    f_one, f_run = cls.forward_one_chunk, cls.forward_maybe_with_nosync
    b_one, w_one = cls.backward_one_chunk, getattr(cls, "backward_weight_one_chunk", None)

    def forward_one_chunk(fwd_chunk_id, *a, **k):
        mod.mb = fwd_chunk_id
        return f_one(me(), fwd_chunk_id, *a, **k)

    def forward_maybe_with_nosync(*a, **k):
        with clock.span("fwd", mod.stage, mod.mb):
            return f_run(me(), *a, **k)

    def backward(kind, run, chunk, *a, **k):
        clock.phase = "bwd"
        try:
            with clock.span(kind, mod.stage, chunk):
                return run(me(), chunk, *a, **k)
        finally:
            clock.phase = "fwd"

    def backward_one_chunk(bwd_chunk_id, *a, **k):
        full = k.get("full_backward", a[1] if len(a) > 1 else True)
        return backward("bwd" if full else "bwd_input", b_one, bwd_chunk_id, *a, **k)

    stage.forward_one_chunk = forward_one_chunk
    stage.forward_maybe_with_nosync = forward_maybe_with_nosync
    stage.backward_one_chunk = backward_one_chunk
    if w_one is not None:
        stage.backward_weight_one_chunk = lambda bwd_chunk_id, *a, **k: backward("bwd_weight", w_one, bwd_chunk_id,
                                                                                 *a, **k)


class PPTrainer(Trainer):
    def __init__(self, ctx: Ctx):
        from torch.distributed.pipelining import PipelineStage  # lazy: torch.distributed.pipelining (~1.4 s) only when pp runs

        # A composed layout (ctx.dims: pp x dp x tp, bench.training.layout) runs one pipeline per
        # data-parallel slice on one DeviceMesh; each stage is TP-sharded / FSDP- or DDP-wrapped there.
        self.dims = dims = ctx.dims or ParallelDims(world=ctx.world, pp=ctx.world)
        # a mesh wherever other dimensions share the world, a pp of 1 included (its pp group is this rank alone)
        mesh = dims.build_mesh(ctx.device.type, keep=("pp",)) if dims.pp < dims.world else None
        sch = scheds.get(ctx.schedule)
        p, v = dims.pp, sch.per_rank
        self.p, self.n_stages = p, p * v
        local = dims.local_batch(ctx.batch)
        self.balance = validate(schedule=ctx.schedule, stages=p, chunks=ctx.chunks, batch=local,
                                depth=ctx.spec.depth, balance=ctx.balance, preset=ctx.spec.preset)
        bounds = split_pieces(ctx.spec, self.balance)
        full = build_model(ctx.spec, ctx.seed)
        me = dims.coords(ctx.rank)
        self.stage_ids = sch.stage_ids(me["pp"], p)  # looped (r, r+p) or V-shaped (r, 2p-1-r), r the pipeline rank
        batches = Batches(ctx.spec, local, ctx.steps, ctx.seed, replicas=dims.dp, rank=dims.dp_rank(ctx.rank))
        super().__init__(ctx, None, batches, None)
        self.mods, self.bounds, stages = [], {}, []
        group = mesh["pp"].get_group() if mesh is not None else None
        for s in self.stage_ids:
            lo, hi = bounds[s]
            mod = StageModule(full[lo:hi], lo, ctx.checkpoint, ctx.chunks, self.clock, s).to(ctx.device)
            run = mod
            if mesh is not None:  # TP, then (the module's own) checkpointing, then FSDP2 / DDP
                run = parallelize(mod, mod.pieces, ctx.spec, dims, mesh).module
            st = PipelineStage(run, s, self.n_stages, ctx.device, group=group)
            _instrument(st, mod, self.clock)
            self.mods.append(mod)
            self.bounds[s] = (lo, hi)
            stages.append(st)
        params = [q for m in self.mods for q in m.parameters()]
        self.opt = torch.optim.SGD(params, lr=ctx.lr)
        cls = scheds.torch_class(ctx.schedule)
        kw = {"n_microbatches": ctx.chunks, "loss_fn": self.loss_of}
        self.scaled = "scale_grads" in inspect.signature(cls.__init__).parameters
        if self.scaled:
            kw["scale_grads"] = True  # mean loss per micro-batch, grads / chunks = mean over the batch
        else:  # torch < 2.6 sums micro-batch grads: pre-scale the loss instead
            loss_of, chunks = self.loss_of, ctx.chunks  # not self: the schedule must not hold the trainer
            kw["loss_fn"] = lambda out, y: loss_of(out, y) / chunks
        self.schedule = cls(stages if v > 1 else stages[0], **kw)
        self._time_loss()
        self.first, self.last = 0 in self.stage_ids, self.n_stages - 1 in self.stage_ids
        self.last_rank = sch.rank_of(self.n_stages - 1, p)  # a pipeline rank (pp coordinate)
        self.role = "stages " + "+".join(map(str, self.stage_ids))
        if dims.composed:
            self.role += "".join(f" {SHORT[n]}{me[n]}" for n in dims.enabled if n != "pp")
        self._loss_t = torch.zeros((), device=ctx.device)

    def _time_loss(self):
        orig = getattr(type(self.schedule), "_maybe_compute_loss", None)
        if orig is None:
            return
        clock, sched = self.clock, weakref.ref(self.schedule)  # weak: no cycle through the schedule (_instrument)

        def timed(stage, output, target_mbs, mb_index, *a, **k):
            if not stage.is_last:
                return orig(sched(), stage, output, target_mbs, mb_index, *a, **k)
            with clock.span("fwd", stage.stage_index, mb_index):  # the loss is part of the last forward
                return orig(sched(), stage, output, target_mbs, mb_index, *a, **k)

        self.schedule._maybe_compute_loss = timed

    def prefetch(self):
        """Only the first stage (inputs) and the last (targets) load the mini-batch (the same on
        every rank: same seed); the first also keeps the targets for the reference check."""
        load = self.first or self.last or self.dims.dp > 1  # dp: every rank, for the reference's global batch
        self._next = self.batches.next(self.ctx.device) if load else (None, None)

    def step(self, check: bool = False):
        x, y = self.next_batch()
        self._last = (x, y)
        args, kw, losses = ((x,) if self.first else ()), {}, []
        if self.last:
            kw = {"target": y, "losses": losses}
        _WAIT_CLOCK[0] = self.clock
        try:
            self.schedule.step(*args, **kw)
        finally:
            _WAIT_CLOCK[0] = None
        if self.last:
            total = torch.stack([t.detach().float() for t in losses]).sum()
            self._loss_t = total if not self.scaled else total / self.ctx.chunks
        if not check:
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def loss(self) -> float:
        """Mean over the data-parallel pipelines of their last stage's loss (one tp rank each)."""
        mine = self.last and self.dims.coords(self.ctx.rank)["tp"] == 0
        t = self._loss_t.detach().clone().float().reshape(()) if mine else torch.zeros((), device=self.ctx.device)
        dist.all_reduce(t)
        return float(t.item()) / self.dims.dp

    def global_batch(self):
        return global_batch(self.dims, self._last) if self.dims.dp > 1 else self._last

    def grads(self) -> dict:
        mine = {}
        for mod in self.mods:
            mine.update(full_grads(mod.pieces))  # a Sequential slice keeps the full model's keys; DTensors gathered
        out = [None] * self.ctx.world
        dist.all_gather_object(out, mine)
        return {k: v for d in out for k, v in d.items()}

    def pipeline_order(self):
        # Single-stage schedules: the order their _step_microbatches executes (torch 2.13's
        # Schedule1F1B.pipeline_order is the visualiser's and skips micro-batch 0 on the last
        # stage). Multi-stage schedules execute pipeline_order_with_comms (their compute actions
        # in pipeline_order's order, communication added), or pipeline_order on older torch.
        if stages_per_rank(self.ctx.schedule) > 1:
            return from_pipeline_order(getattr(self.schedule, "pipeline_order_with_comms", None)
                                       or self.schedule.pipeline_order)
        if self.ctx.schedule == "gpipe":
            return gpipe_order(self.p, self.ctx.chunks)
        return one_f_one_b_order(self.p, self.ctx.chunks)


def setup(ctx: Ctx) -> Trainer:
    if (ctx.dims.pp if ctx.dims else ctx.world) < 2 and stages_per_rank(ctx.schedule) < 2:
        raise BenchError(f"pp needs world >= 2 (one stage per rank), got {ctx.world}")
    # Import torch.distributed.pipelining (and patch its waits) here, not inside PPTrainer.__init__:
    # the first import of it keeps a traceback whose frames reach back to the importing frame, and
    # an __init__ frame would keep the first trainer (its modules, activations) alive for good.
    if ctx.dims is not None:
        check_dims(ctx.spec, ctx.dims, ctx.batch, ctx.schedule)
    _patch_waits()
    return PPTrainer(ctx)


def check(spec, case) -> str | None:
    """A pipeline needs >= 2 ranks (a skip note at world 1); the rest is validate()'s (on the
    data-parallel slice of the batch, for a composed layout)."""
    dims = case.dims
    if dims.pp < 2:
        return f"pp skipped at world {case.world}: needs >= 2 stages"
    check_dims(spec, dims, case.batch, case.schedule)
    validate(schedule=case.schedule, stages=dims.pp, chunks=case.chunks, batch=dims.local_batch(case.batch),
             depth=spec.depth, balance=case.balance, strict=True, preset=spec.preset)
    return None


STRATEGY = REGISTRY.register(Strategy(name="pp", doc=__doc__, memory=pipeline_memory, ranks=layout_ranks, single_process=False, setup=setup, check=check,
                                      dims=lambda world: ParallelDims(world=world, pp=world)))
