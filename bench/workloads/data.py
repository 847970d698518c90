"""Synthetic data generated in process (nothing downloaded), fed through a real DataLoader.

A seeded tensor dataset: MLP samples are (x, y) with x, y ~ N(0, 1) of the model width; GPT
samples are (tokens, next tokens) of `seq` random ids. Under data parallelism the loader uses a
DistributedSampler and `set_epoch` every epoch, as users write it.
"""

import torch
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, TensorDataset

from bench.workloads.models import ModelSpec


def dataset(spec: ModelSpec, samples: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed + 1)
    if spec.family != "gpt":  # mlp, timed
        x = torch.randn(samples, spec.width, generator=g)
        y = torch.randn(samples, spec.width, generator=g)
        return TensorDataset(x, y)
    toks = torch.randint(0, spec.vocab, (samples, spec.seq + 1), generator=g)
    return TensorDataset(toks[:, :-1].contiguous(), toks[:, 1:].contiguous())


class Batches:
    """Endless (x, y) batches of `local_batch` samples; the sampler reshuffles every epoch."""

    def __init__(self, spec: ModelSpec, local_batch: int, steps: int, seed: int, replicas: int = 1, rank: int = 0):
        ds = dataset(spec, local_batch * replicas * max(steps, 1), seed)
        if replicas > 1:
            self.sampler = DistributedSampler(ds, num_replicas=replicas, rank=rank, shuffle=True, seed=seed,
                                              drop_last=True)
        else:
            self.sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
        self.loader = DataLoader(ds, batch_size=local_batch, sampler=self.sampler, drop_last=True, num_workers=0,
                                 pin_memory=torch.cuda.is_available())  # pinned: async host-to-device copies
        self.epoch = 0
        self._it = None

    def next(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        while True:
            if self._it is None:
                if isinstance(self.sampler, DistributedSampler):
                    self.sampler.set_epoch(self.epoch)
                self._it = iter(self.loader)
            try:
                x, y = next(self._it)
                return x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            except StopIteration:
                self._it, self.epoch = None, self.epoch + 1
