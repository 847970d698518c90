"""Composed layouts on one DeviceMesh, torchtitan's way (torchtitan/models/llama3/infra/parallelize.py).

The mesh (bench.training.dims.ParallelDims.build_mesh) has dimensions (pp, dp_replicate,
dp_shard, tp), pipeline outermost. The pipeline splits the model into stages first
(bench.training.pp); inside a stage (or on the whole model without a pipeline) `parallelize`
applies, in this one order:

1. TP: torch.distributed.tensor.parallel.parallelize_module over mesh["tp"] with tp.plan of the
   pieces the module holds (Colwise / Rowwise pairs inside the stage).
2. Activation checkpointing: the stage module's own per-micro-batch torch.utils.checkpoint around
   each (TP-sharded) piece (pp.StageModule: always / except_last / never), so recompute re-runs the
   TP collectives of the piece, and FSDP below re-gathers the piece's parameters for it.
3. Data parallelism over the dp dimensions:
   - dp_shard > 1: FSDP2 fully_shard on every piece, then on the module, over mesh["dp_shard"]
     (HSDP, mesh["dp_replicate", "dp_shard"], when both are > 1);
   - dp_replicate > 1 alone: DDP semantics (replicated parameters, gradients all-reduced and
     averaged) through torch's FSDP2-based `replicate` (torch.distributed._composable.replicate_with_fsdp)
     over mesh["dp_replicate"], not nn.parallel.DistributedDataParallel: DDP takes no DTensor
     parameters (torchtitan refuses DDP beyond 1-D for that reason), and under a pipeline schedule
     its reducer fails on the second step (torch 2.13: "rebuilt parameter indices size is not same
     as original model parameters size", 4 vs 8, after a 2-micro-batch first step). The plain `ddp`
     strategy stays torch DDP.
   torch.distributed.pipelining's PipelineStage knows FSDPModule / ReplicateModule
   (stage.backward_maybe_with_nosync: gradient sync only after the last micro-batch).

`full_grads` turns the result's gradients back into full tensors for the reference check:
DTensor.full_tensor() (a collective over the parameter's mesh: every peer of the stage calls it in
the same order).
"""

import logging
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from bench.errors import BenchError
from bench.training import tp as tp_mod
from bench.training.dims import SHORT, ParallelDims
from bench.workloads.models import ModelSpec

# Composed strategies of the `strategies` kind: name -> the mesh dimensions it uses. The degrees at
# a world: tp and pp get TP_DEGREE and PP_DEGREE, the data-parallel dimension the rest.
LAYOUTS = {"pp+tp": ("pp", "tp"), "pp+ddp": ("pp", "dp_replicate"), "pp+fsdp": ("pp", "dp_shard"),
           "fsdp+tp": ("dp_shard", "tp"), "ddp+tp": ("dp_replicate", "tp"),
           "pp+ddp+tp": ("pp", "dp_replicate", "tp")}
TP_DEGREE = PP_DEGREE = 2


def layout_dims(name: str, world: int) -> ParallelDims:
    """A composed strategy's degrees at `world`: tp = pp = 2 where used, the data-parallel
    dimension gets the rest (pp gets it when there is none). Raises (showing the arithmetic)
    when `world` does not split."""
    used = LAYOUTS[name]
    deg = {n: (TP_DEGREE if n == "tp" else PP_DEGREE if n == "pp" else 1) for n in used}
    rest = next((n for n in used if n.startswith("dp")), "pp")
    fixed = 1
    for n in used:
        fixed *= deg[n] if n != rest else 1
    deg[rest] = max(world // fixed, 1)
    return ParallelDims(world=world, **deg)


def minimum_world(name: str) -> int:
    """The smallest world where every dimension of the layout is >= 2."""
    return 2 ** len(LAYOUTS[name])


def check_dims(spec: ModelSpec, dims: ParallelDims, batch: int, schedule: str = ""):
    """Raise BenchError for a layout the model, batch or schedule cannot take."""
    if dims.tp > 1:
        tp_mod.validate(spec, dims.tp)
    dims.local_batch(batch)
    if dims.pp > 1 and dims.dp_shard > 1 and schedule:
        from bench.training import schedules  # lazy: the schedules registry imports pp, which imports this module

        if schedules.get(schedule).split_backward:
            raise BenchError(f"schedule {schedule} with fsdp({dims.dp_shard}) inside the stages gives wrong gradients "
                             f"with torch's pipelining (seen on torch 2.13, CPU: the last stage's weight gradients "
                             f"missing, others off by ~1e-2 from the single-process reference); "
                             f"use a schedule without split backward (gpipe, 1f1b, interleaved, looped_bfs) or "
                             f"--dp instead of --fsdp")


@dataclass
class Parallelized:
    module: nn.Module  # what the trainer calls (a DDP wrapper, or the module itself)
    inner: nn.Module  # the module holding the pieces (names as in the full model)

    def full_grads(self, pieces: nn.Module) -> dict:
        """{full-model parameter name: full gradient} of `pieces` (collective on DTensor grads)."""
        return full_grads(pieces)


def full_grads(pieces: nn.Module) -> dict:
    """{parameter name: full gradient, on the CPU}: DTensor gradients (TP, FSDP2, replicate) gathered
    with full_tensor(), a collective over the parameter's mesh that every peer calls in the same order.
    torch warns that a gradient sharded over (dp_shard, tp) takes two all-gathers: silenced here
    (this is the untimed check, not the measured step)."""
    quiet = logging.getLogger("torch.distributed.tensor._redistribute")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        out = {}
        for n, p in pieces.named_parameters():
            if p.grad is not None:
                g = p.grad
                out[n] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().cpu().clone()
        return out
    finally:
        quiet.setLevel(level)


def parallelize(module: nn.Module, pieces: nn.Sequential, spec: ModelSpec, dims: ParallelDims, mesh) -> Parallelized:
    """Apply TP, then (activation checkpointing lives in the module), then FSDP2 / DDP to
    `module`, whose `pieces` are the model's pieces keyed by their index in the full model."""
    if dims.tp > 1 and spec.family == "timed":  # the timed tp plan: known times / tp, one all-reduce each way
        for piece in pieces:
            piece.tp_shard(mesh["tp"].get_group(), dims.tp)
    elif dims.tp > 1:
        from torch.distributed.tensor.parallel import parallelize_module  # lazy: torch.distributed.tensor.parallel (~0.6 s) only when a layout uses TP

        parallelize_module(pieces, mesh["tp"], tp_mod.plan(spec, [int(k) for k in pieces._modules]))
    if dims.dp_shard > 1:
        from bench.training.fsdp import _fully_shard  # lazy: fsdp registers itself after pp (display order)

        fully_shard = _fully_shard()  # torch's FSDP2 (bench.training.fsdp picks the module by torch version)
        dp_mesh = mesh["dp_replicate", "dp_shard"] if dims.dp_replicate > 1 else mesh["dp_shard"]
        for piece in pieces:
            fully_shard(piece, mesh=dp_mesh)
        fully_shard(module, mesh=dp_mesh)
        return Parallelized(module=module, inner=module)
    if dims.dp_replicate > 1:
        from torch.distributed._composable.replicate_with_fsdp import replicate  # lazy: FSDP2 internals only for composed DDP

        replicate(module, mesh=mesh["dp_replicate"])
        return Parallelized(module=module, inner=module)
    return Parallelized(module=module, inner=module)


def batch_ranks(dims: ParallelDims) -> list[int]:
    """One rank per slice of the mini-batch, in slice order: pp 0 (it holds the inputs), tp 0."""
    ranks = [r for r in range(dims.world) if dims.coords(r)["pp"] == 0 and dims.coords(r)["tp"] == 0]
    return sorted(ranks, key=dims.dp_rank)


def global_batch(dims: ParallelDims, last) -> tuple:
    """The step's global mini-batch from every rank's slice (collective): the slices of
    batch_ranks concatenated (a permutation of the samples does not change a mean loss)."""
    x, y = last
    out = []
    for t in (x, y):
        parts = [torch.empty_like(t) for _ in range(dims.world)]
        dist.all_gather(parts, t.contiguous())
        out.append(torch.cat([parts[r] for r in batch_ranks(dims)]))
    return tuple(out)


def describe(dims: ParallelDims) -> str:
    """'pp(2) x dp(2) x tp(2)' for roles and notes."""
    return " x ".join(f"{SHORT[n]}({getattr(dims, n)})" for n in dims.enabled) or "one process"

