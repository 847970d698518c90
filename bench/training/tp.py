"""tp: Megatron-style tensor parallelism with torch.distributed.tensor.parallel over
init_device_mesh; world size = TP degree.

MLP: consecutive block pairs (2k, 2k+1) become Colwise (up) / Rowwise (down); an odd last
block stays replicated. GPT: attention q/k/v Colwise and out Rowwise, MLP up Colwise and down
Rowwise; embedding, norms and head replicated. Every rank sees the whole mini-batch.
"""

from torch.distributed.device_mesh import init_device_mesh

from bench.training.base import REGISTRY, Ctx, Strategy, Trainer
from bench.training.dims import ParallelDims, check_tp as validate
from bench.training.footprint import layout_ranks, tp_memory
from bench.workloads import Batches, build_model
from bench.workloads.models import ModelSpec



def plan(spec: ModelSpec, pieces=None) -> dict:
    """The TP plan of the model's pieces `pieces` (indices into build_model's Sequential; all by
    default), keyed by those indices. A pipeline stage holds a slice: MLP blocks pair up inside
    the slice (a Rowwise block needs its Colwise partner's sharded output), GPT blocks are whole."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel  # lazy: torch.distributed.tensor.parallel (~0.6 s) only when tp runs

    if spec.family == "timed":  # the timed tp plan is its blocks' own (TimedBlock.tp_shard), no DTensor
        return {}
    idx = list(range(spec.depth if spec.family == "mlp" else spec.depth + 2)) if pieces is None else list(pieces)
    out = {}
    if spec.family == "mlp":
        for a, b in zip(idx[0:len(idx) - 1:2], idx[1::2]):
            out[f"{a}.0"], out[f"{b}.0"] = ColwiseParallel(), RowwiseParallel()
        return out
    for j in (i for i in idx if 1 <= i <= spec.depth):
        for m in ("q", "k", "v"):
            out[f"{j}.attn.{m}"] = ColwiseParallel()
        out[f"{j}.attn.out"] = RowwiseParallel()
        out[f"{j}.mlp.up"], out[f"{j}.mlp.down"] = ColwiseParallel(), RowwiseParallel()
    return out


class TPTrainer(Trainer):
    role = "tp shard"
    comm_in_compute = True

    def grads(self) -> dict:
        out = {}
        for n, p in self.module.named_parameters():
            if p.grad is not None:
                g = p.grad
                out[n] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
        return out


def setup(ctx: Ctx) -> Trainer:
    from torch.distributed.tensor.parallel import parallelize_module  # lazy: torch.distributed.tensor.parallel (~0.6 s) only when tp runs

    validate(ctx.spec, ctx.world)
    mesh = init_device_mesh(ctx.device.type, (ctx.world,))
    model = build_model(ctx.spec, ctx.seed).to(ctx.device)
    parallelize_module(model, mesh, plan(ctx.spec))
    if ctx.spec.family == "timed":  # known times / tp, one all-reduce each way (bench.workloads.models.TimedBlock)
        for block in model:
            block.tp_shard(mesh.get_group(), ctx.world)
    batches = Batches(ctx.spec, ctx.batch, ctx.steps, ctx.seed)  # same batch on every rank
    return TPTrainer(ctx, model, batches, model.parameters())


def check(spec: ModelSpec, case) -> None:
    validate(spec, STRATEGY.dims(case.world).tp)


STRATEGY = REGISTRY.register(Strategy(name="tp", doc=__doc__, memory=tp_memory, ranks=layout_ranks, single_process=False, setup=setup, check=check,
                                      dims=lambda world: ParallelDims(world=world, tp=world)))
