"""dp: torch.nn.DataParallel in one process over the visible GPUs (scatter the batch,
replicate the module, gather outputs, loss.mean() before backward).

Without at least 2 CUDA devices DataParallel silently runs the plain module; the row then says
so and the number is not a parallel one.
"""

import torch
import torch.nn as nn

from bench.training.base import REGISTRY, Ctx, Strategy, Trainer
from bench.training.dims import ParallelDims
from bench.training.footprint import replicated
from bench.workloads import Batches, build_model

PASS_THROUGH = "no CUDA: DataParallel is a pass-through"


class DPTrainer(Trainer):
    role = "process"

    def device_list(self) -> list[torch.device]:
        n = torch.cuda.device_count()
        return [torch.device("cuda", i) for i in range(n)] if n else [torch.device("cpu")]

    def step_loss(self, out, y):
        return self.loss_of(out, y).mean()  # mean over replicas' outputs

    def grads(self) -> dict:
        return {n.removeprefix("module."): p.grad.detach().clone()
                for n, p in self.module.named_parameters() if p.grad is not None}


def setup(ctx: Ctx) -> Trainer:
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", 0) if gpus else torch.device("cpu")
    model = build_model(ctx.spec, ctx.seed).to(device)
    dp = nn.DataParallel(model)  # device_ids: all visible GPUs; none on CPU -> plain module
    ctx = type(ctx)(**{**ctx.__dict__, "device": device})
    t = DPTrainer(ctx, dp, Batches(ctx.spec, ctx.batch, ctx.steps, ctx.seed), dp.parameters())
    t.devices = max(gpus, 1)
    t.degraded = "" if gpus >= 2 else (PASS_THROUGH if gpus == 0 else
                                       "1 CUDA device: DataParallel is a pass-through")
    return t


STRATEGY = REGISTRY.register(Strategy(name="dp", doc=__doc__, memory=replicated, single_process=True, setup=setup,
                                      dims=lambda world: ParallelDims(world=world)))
