"""fsdp: FSDP2 `fully_shard` on every block, then on the root (beyond the seed articles).

Parameters, gradients and optimizer state are sharded over the ranks; each block's parameters
are all-gathered for its forward and backward and its gradients reduce-scattered. Data is split
as under DDP. The timed forward/backward include those collectives.
"""

from torch.distributed.device_mesh import init_device_mesh

from bench.training.base import REGISTRY, Ctx, Strategy, Trainer
from bench.training.ddp import DataParallelTrainer, check, local_batch
from bench.training.dims import ParallelDims
from bench.training.footprint import fsdp_memory
from bench.workloads import Batches, build_model
from bench.workloads.models import blocks

def _fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard  # lazy: FSDP (~0.8 s) only when fsdp runs; torch >= 2.6
    except ImportError:  # torch 2.4 / 2.5
        from torch.distributed._composable.fsdp import fully_shard  # lazy: FSDP only when fsdp runs; torch 2.4/2.5
    return fully_shard


class FSDPTrainer(DataParallelTrainer):
    role = "shard"

    def grads(self) -> dict:  # DTensor shards -> full gradients (collective, same order everywhere)
        return {n: p.grad.full_tensor().detach().clone() for n, p in self.module.named_parameters()
                if p.grad is not None}


def setup(ctx: Ctx) -> Trainer:
    fully_shard = _fully_shard()
    mesh = init_device_mesh(ctx.device.type, (ctx.world,))
    model = build_model(ctx.spec, ctx.seed).to(ctx.device)
    for b in blocks(model, ctx.spec):
        fully_shard(b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    batches = Batches(ctx.spec, local_batch(ctx), ctx.steps, ctx.seed, replicas=ctx.world, rank=ctx.rank)
    return FSDPTrainer(ctx, model, batches, model.parameters())


STRATEGY = REGISTRY.register(Strategy(name="fsdp", doc=__doc__, memory=fsdp_memory, single_process=False, setup=setup, check=check,
                                      dims=lambda world: ParallelDims(world=world, dp_shard=world)))
