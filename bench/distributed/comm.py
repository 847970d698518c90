"""Small collective helpers on the default process group, on the backend's device, and the
warm-up that forces lazy communicator creation before anything is timed."""

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from bench.distributed.env import RankInfo
from bench.timing.timers import sync


@dataclass
class Comm:
    info: RankInfo

    def barrier(self):
        if self.info.device.type == "cuda":
            dist.barrier(device_ids=[self.info.device.index])
        else:
            dist.barrier()

    def reduce_max(self, x: float) -> float:
        t = torch.tensor([x], dtype=torch.float64, device=self.info.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def reduce_sum(self, x: int) -> int:
        t = torch.tensor([x], dtype=torch.int64, device=self.info.device)
        dist.all_reduce(t)
        return int(t.item())

    def gather_samples(self, samples: list[float]) -> np.ndarray:
        """[world, n] of every rank's samples (every rank has the same n)."""
        t = torch.tensor(samples, dtype=torch.float64, device=self.info.device)
        out = [torch.empty_like(t) for _ in range(self.info.world)]
        dist.all_gather(out, t)
        return torch.stack(out).cpu().numpy()

    def gather_object(self, obj) -> list:
        out = [None] * self.info.world
        dist.all_gather_object(out, obj)
        return out


def warm_communicator(comm: Comm) -> float:
    """Force lazy communicator creation (first collective) and return its seconds."""
    t0 = time.perf_counter()
    comm.barrier()
    comm.reduce_max(0.0)
    sync(comm.info.device)
    return time.perf_counter() - t0


def collective_op(name: str, size: int, n: int, device, dtype=torch.float32, group=None):
    """op(async_op) -> Work: one `name` collective of `size` total bytes over a group of `n` ranks
    (nccl-tests' S: the whole array for all_gather, reduce_scatter and all_to_all, as the collectives
    kind counts it), its buffers made once. all_reduce | broadcast (from the group's first rank) |
    all_gather | reduce_scatter | all_to_all."""
    esize = torch.empty((), dtype=dtype).element_size()
    count = max(n, size // esize // n * n)
    whole = torch.ones(count, device=device, dtype=dtype)
    if name == "all_reduce":
        return lambda a: dist.all_reduce(whole, group=group, async_op=a)
    if name == "broadcast":
        src = dist.get_global_rank(group, 0) if group is not None else 0
        return lambda a: dist.broadcast(whole, src=src, group=group, async_op=a)
    part = torch.ones(count // n, device=device, dtype=dtype)
    if name == "all_gather":
        return lambda a: dist.all_gather_into_tensor(whole, part, group=group, async_op=a)
    if name == "reduce_scatter":
        return lambda a: dist.reduce_scatter_tensor(part, whole, group=group, async_op=a)
    if name == "all_to_all":
        out = torch.empty_like(whole)
        return lambda a: dist.all_to_all_single(out, whole, group=group, async_op=a)
    raise ValueError(f"collective_op: no collective '{name}'")
