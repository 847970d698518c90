"""Composed layouts (bench.training.layout): fsdp+tp and ddp+tp (TP inside every data-parallel
replica or shard group), pp+tp, pp+ddp, pp+fsdp (the pipeline outermost, each stage TP-sharded
or data-parallel) and pp+ddp+tp (3D) on one DeviceMesh (pp, dp_replicate, dp_shard, tp).

In the `strategies` kind tp and pp get degree 2 and the data-parallel dimension the rest of the
world (layout_dims); the `pipeline` kind takes any degrees (--stages, --tp, --dp, --fsdp).
"""

from bench.training import pp
from bench.training.base import REGISTRY, Ctx, Strategy, mean_loss_all_ranks
from bench.training.ddp import DataParallelTrainer
from bench.training.footprint import layout_memory, layout_ranks
from bench.training.layout import LAYOUTS, check_dims, describe, global_batch, layout_dims, minimum_world, parallelize
from bench.workloads import Batches, build_model


class ComposedTrainer(DataParallelTrainer):
    """Data parallelism (DDP or FSDP2) over TP-sharded replicas of the whole model."""

    def __init__(self, ctx: Ctx, par, batches):
        super().__init__(ctx, par.module, batches, par.module.parameters())
        self.par = par
        me = ctx.dims.coords(ctx.rank)
        self.role = " ".join(f"{n}{me[n]}" for n in ctx.dims.enabled)

    def loss(self) -> float:  # tp peers hold the same loss: the mean over all ranks is the mean over replicas
        return mean_loss_all_ranks(self._loss_t)

    def global_batch(self):
        return global_batch(self.ctx.dims, self._last)

    def grads(self) -> dict:
        return self.par.full_grads(self.par.inner)

    def solo(self):  # a whole unsharded replica is not what a TP shard computes: no comm-free estimate
        return None


def setup_dp_tp(ctx: Ctx) -> ComposedTrainer:
    dims = ctx.dims
    mesh = dims.build_mesh(ctx.device.type)
    model = build_model(ctx.spec, ctx.seed).to(ctx.device)
    par = parallelize(model, model, ctx.spec, dims, mesh)
    batches = Batches(ctx.spec, dims.local_batch(ctx.batch), ctx.steps, ctx.seed, replicas=dims.dp,
                      rank=dims.dp_rank(ctx.rank))
    return ComposedTrainer(ctx, par, batches)


def _register(name: str) -> Strategy:
    uses_pp = "pp" in LAYOUTS[name]

    def dims(world: int):
        return layout_dims(name, world)

    def check(spec, case) -> str | None:
        need = minimum_world(name)
        if case.world < need or case.world % need:
            return f"{name} skipped at world {case.world}: needs a multiple of {need} (each of its dimensions >= 2)"
        d = case.dims
        if uses_pp:
            return pp.check(spec, case)
        check_dims(spec, d, case.batch)
        return None

    doc = (f"{name}: {' x '.join(LAYOUTS[name])} on one DeviceMesh (e.g. {describe(layout_dims(name, minimum_world(name)))}"
           f" at world {minimum_world(name)}).\n\n" + __doc__)
    return REGISTRY.register(Strategy(
        name=name, doc=doc, single_process=False, setup=pp.setup if uses_pp else setup_dp_tp,
        memory=lambda f, _n=name: layout_memory(f, layout_dims(_n, f.world)) if f.world >= minimum_world(_n)
        else layout_memory(f, layout_dims(_n, minimum_world(_n))),
        ranks=layout_ranks, dims=dims, check=check, composed=True, min_world=minimum_world(name)))


STRATEGIES = {name: _register(name) for name in LAYOUTS}
