"""Minimal standalone all_reduce timing loop, independent of distbench's harness, used to
cross-check its numbers: `torchrun --nproc-per-node 2 tools/standalone_allreduce.py 1M 16M 64M`.
Prints, per size, the median over iterations of the max over ranks of one blocking all_reduce."""

import datetime
import statistics
import sys
import time

import torch
import torch.distributed as dist

SUFFIX = {"K": 1024, "M": 1024**2, "G": 1024**3}


def parse(s):
    return int(s[:-1]) * SUFFIX[s[-1]] if s[-1] in SUFFIX else int(s)


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    for size in map(parse, sys.argv[1:] or ["1M", "16M", "64M"]):
        x = torch.ones(size // 4)
        iters = max(20, int(2.0 / max(size / 1e9, 1e-4) / 100))
        iters = min(iters, 200)
        for _ in range(5):
            dist.all_reduce(x)
        times = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - t0)
        t = torch.tensor(times, dtype=torch.float64)
        out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(out, t)
        worst = torch.stack(out).max(0).values.tolist()
        if rank == 0:
            print(f"{size:>10} B  median {statistics.median(worst) * 1e6:10.1f} us  "
                  f"min {min(worst) * 1e6:10.1f} us  iters {iters}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
