"""ddp: DistributedDataParallel, one process per device (gloo on CPU, nccl on GPU).

The mini-batch is split across ranks by a DistributedSampler (set_epoch every epoch); DDP
averages gradients, so the step equals one process on the whole mini-batch. `bucket_cap_mb`
is DDP's gradient bucket size. The timed backward includes the all-reduces DDP overlaps with it.
"""

from torch.nn.parallel import DistributedDataParallel as DDP

from bench.training.base import REGISTRY, Ctx, Strategy, Trainer, gather_cat, mean_loss_all_ranks
from bench.training.footprint import ddp_memory
from bench.workloads import Batches, build_model, loss_fn

def local_batch(ctx: Ctx) -> int:
    return STRATEGY.dims(ctx.world).local_batch(ctx.batch)


class DataParallelTrainer(Trainer):
    comm_in_compute = True

    def loss(self) -> float:
        return mean_loss_all_ranks(self._loss_t)

    def global_batch(self):
        x, y = self._last
        return gather_cat(x, self.ctx.world), gather_cat(y, self.ctx.world)

    def solo(self):
        ctx = self.ctx
        model = build_model(ctx.spec, ctx.seed).to(ctx.device)
        x, y = self._last
        lf = loss_fn(ctx.spec)

        def run():
            lf(model(x), y).backward()
            model.zero_grad(set_to_none=True)
        return run


class DDPTrainer(DataParallelTrainer):
    role = "replica"

    def grads(self) -> dict:
        return {n.removeprefix("module."): p.grad.detach().clone()
                for n, p in self.module.named_parameters() if p.grad is not None}


def setup(ctx: Ctx) -> Trainer:
    model = build_model(ctx.spec, ctx.seed).to(ctx.device)
    kw = {"device_ids": [ctx.device.index]} if ctx.device.type == "cuda" else {}
    ddp = DDP(model, bucket_cap_mb=ctx.bucket_cap_mb, **kw)
    batches = Batches(ctx.spec, local_batch(ctx), ctx.steps, ctx.seed, replicas=ctx.world, rank=ctx.rank)
    return DDPTrainer(ctx, ddp, batches, ddp.parameters())


def check(spec, case) -> None:
    STRATEGY.dims(case.world).local_batch(case.batch)  # raises when batch does not split


STRATEGY = REGISTRY.register(Strategy(name="ddp", doc=__doc__, memory=ddp_memory, single_process=False, setup=setup, check=check))
