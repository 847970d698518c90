"""layer: naive model parallelism in one process (the ToyModel pattern of the seed article on model parallelism): consecutive
block groups on different devices, activations moved between them with .to(); `balance` gives
blocks per device. Only one device works at a time. On a CPU-only host every group is on cpu.
"""

import torch
import torch.nn as nn

from bench.errors import BenchError
from bench.training.base import REGISTRY, Ctx, Strategy, Trainer
from bench.training.dims import ParallelDims
from bench.training.footprint import replicated
from bench.workloads import Batches, build_model
from bench.workloads.models import even_balance, split_pieces

DEFAULT_GROUPS = 2


class LayerModel(nn.Module):
    """Groups in sequence; group i on devices[i]; parameter names stay those of the reference."""

    def __init__(self, full: nn.Sequential, bounds, devices):
        super().__init__()
        self.full, self.bounds, self.devices = full, bounds, devices
        for (lo, hi), d in zip(bounds, devices):
            for i in range(lo, hi):
                full[i].to(d)

    def forward(self, x):
        for (lo, hi), d in zip(self.bounds, self.devices):
            x = x.to(d)
            for i in range(lo, hi):
                x = self.full[i](x)
        return x


class LayerTrainer(Trainer):
    role = "process"

    def input_device(self):
        return self.module.devices[0]

    def device_list(self) -> list[torch.device]:
        return list(dict.fromkeys(self.module.devices))

    def step_loss(self, out, y):
        return self.loss_of(out, y.to(out.device))  # labels follow the last group's device

    def grads(self) -> dict:
        return {n.removeprefix("full."): p.grad.detach().to("cpu").clone()
                for n, p in self.module.named_parameters() if p.grad is not None}


def setup(ctx: Ctx) -> Trainer:
    balance = ctx.balance or even_balance(ctx.spec.depth, min(DEFAULT_GROUPS, ctx.spec.depth))
    if sum(balance) != ctx.spec.depth:
        raise BenchError(f"balance {','.join(map(str, balance))} sums to {sum(balance)}, "
                         f"{ctx.spec.preset} has {ctx.spec.depth} layers")
    gpus = torch.cuda.device_count()
    n = len(balance)
    devices = [torch.device("cuda", i) for i in range(n)] if gpus >= n else [torch.device("cpu")] * n
    model = LayerModel(build_model(ctx.spec, ctx.seed), split_pieces(ctx.spec, balance), devices)
    t = LayerTrainer(ctx, model, Batches(ctx.spec, ctx.batch, ctx.steps, ctx.seed), model.parameters())
    t.devices = len(set(devices))
    if gpus < n:
        t.degraded = f"no {n} CUDA devices: all {n} layer groups on cpu (no model parallelism)"
    return t


STRATEGY = REGISTRY.register(Strategy(name="layer", doc=__doc__, memory=replicated, single_process=True, setup=setup,
                                      dims=lambda world: ParallelDims(world=world)))
