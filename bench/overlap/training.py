"""The overlap kind's training units on every rank (torch); rows on rank 0.

ddp (one bucket_cap_mb): DDP over the reference model, one fixed batch per rank (no data loading
in any timed span). Parts, interleaved per repetition in a rotating order, each after a barrier:
- step: forward + backward of the DDP model (its bucket all-reduces run during the backward and
  the backward returns once they are done), device synchronised: what a step costs;
- step.nocomm: the same under `no_sync()` (the compute alone: no all-reduce);
- comm: the step's bucket all-reduces alone (the bucket sizes DDP rebuilt after its first step,
  issued back to back with async_op and waited for together, as DDP issues them).
Exposed communication = step - step.nocomm; hidden share = 1 - exposed / comm.

fsdp (prefetch explicit or implicit): FSDP2 `fully_shard` on every block, then the root. Parts:
- step: forward + backward of the sharded model (explicit: each block prefetches the next
  block's all-gather in forward and the previous one's in backward, set_modules_to_forward_prefetch
  / set_modules_to_backward_prefetch; implicit: FSDP2's default);
- step.nocomm: forward + backward of the same model unsharded on this rank (no collective);
- comm: the step's collectives alone: each block's parameter all-gather (forward and backward:
  FSDP2 reshards after forward) and its gradient reduce-scatter, in the step's order, back to back.
"""

import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from bench.overlap.figures import exposed_share
from bench.overlap.measure import rotation
from bench.timing.stats import summarize
from bench.timing.timers import sync
from bench.workloads import Batches, build_model, get_spec, loss_fn
from bench.workloads.models import blocks

PARTS = ("step", "step.nocomm", "comm")


def _batch(cfg, spec, info):
    return Batches(spec, cfg.batch, 1, seed=1234, replicas=info.world, rank=info.rank).next(info.device)


def _timed(fn, device) -> float:
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def _bucket_bytes(ddp: DDP) -> list[int]:
    """DDP's bucket sizes in bytes after its rebuild, in bucket order (bucket 0 is all-reduced
    first): the reducer's own buckets (Reducer._get_zeros_like_grad_buckets); its logging data's
    `bucket_sizes` where that is missing (it keeps the sizes before the rebuild)."""
    reducer = ddp.reducer
    if hasattr(reducer, "_get_zeros_like_grad_buckets"):
        return [b.buffer().numel() * b.buffer().element_size() for b in reducer._get_zeros_like_grad_buckets()]
    text = str(ddp._get_ddp_logging_data().get("bucket_sizes", ""))
    return [int(x) for x in text.replace(" ", "").split(",") if x]


def _all_reduces(sizes: list[int], device):
    bufs = [torch.ones(max(1, b // 4), device=device) for b in sizes]

    def run():
        works = [dist.all_reduce(b, async_op=True) for b in bufs]
        for w in works:
            w.wait()

    return run


def _loop(parts: dict, unit, launch) -> tuple[dict[str, list[float]], dict]:
    """Every part, interleaved, inside the case's telemetry window; (this rank's seconds per part,
    rank 0's telemetry summary). The energy span: every timed repetition (its three parts)."""
    cfg, comm, device = launch.job.config, launch.comm, launch.info.device
    mine: dict[str, list[float]] = {p: [] for p in PARTS}
    with launch.tel.case(unit.case_id, size_bytes=0, placement=unit.test) as tc:
        for rep in range(cfg.warmup + cfg.steps):
            if rep == cfg.warmup:
                tc.energy.start([device])
            for name in rotation(rep, PARTS):
                comm.barrier()
                t = parts[name]()
                if rep >= cfg.warmup:
                    mine[name].append(t)
        tc.energy.stop()
    return mine, tc.summary


def measure_ddp(unit, launch) -> dict:
    cfg, info = launch.job.config, launch.info
    spec = get_spec(cfg.model)
    model = build_model(spec, 0).to(info.device)
    ddp = DDP(model, bucket_cap_mb=unit.bucket_mb, device_ids=[info.device.index] if info.device.type == "cuda" else None)
    x, y = _batch(cfg, spec, info)
    loss = loss_fn(spec)

    def step():
        ddp.zero_grad(set_to_none=True)
        loss(ddp(x), y).backward()

    def nocomm():
        with ddp.no_sync():
            step()

    for _ in range(2):  # DDP rebuilds its buckets in the order gradients arrived after the first step
        _timed(step, info.device)
    sizes = _bucket_bytes(ddp)
    parts = {"step": lambda: _timed(step, info.device), "step.nocomm": lambda: _timed(nocomm, info.device),
             "comm": (lambda run=_all_reduces(sizes, info.device): _timed(run, info.device))}
    mine, summary = _loop(parts, unit, launch)
    extra = {"buckets": len(sizes), "bucket_bytes": ",".join(map(str, sizes)), "bucket_cap_mb": unit.bucket_mb}
    return _rows(unit, launch, mine, {**summary, **extra})


def _fsdp_parts(unit, cfg, info, spec, x, y):
    from bench.training.fsdp import _fully_shard  # lazy: FSDP (~0.8 s) only when an fsdp unit runs

    fully_shard = _fully_shard()
    loss = loss_fn(spec)
    plain = build_model(spec, 0).to(info.device)
    sharded = build_model(spec, 0).to(info.device)
    pieces = blocks(sharded, spec)
    for b in pieces:
        fully_shard(b)
    fully_shard(sharded)
    if unit.prefetch == "explicit":
        for i, b in enumerate(pieces):
            if i + 1 < len(pieces):
                b.set_modules_to_forward_prefetch([pieces[i + 1]])
            if i > 0:
                b.set_modules_to_backward_prefetch([pieces[i - 1]])
    numels = [sum(p.numel() for p in b.parameters()) * info.world for b in blocks(plain, spec)]  # unsharded sizes

    def step(model):
        model.zero_grad(set_to_none=True)
        loss(model(x), y).backward()

    wholes = [torch.ones(n, device=info.device) for n in numels]
    shards = [torch.ones(n // info.world, device=info.device) for n in numels]

    def collectives():
        works = [dist.all_gather_into_tensor(w, s, async_op=True) for w, s in zip(wholes, shards)]  # forward
        works += [dist.all_gather_into_tensor(w, s, async_op=True) for w, s in zip(wholes[::-1], shards[::-1])]
        works += [dist.reduce_scatter_tensor(s, w, async_op=True) for w, s in zip(wholes[::-1], shards[::-1])]
        for w in works:
            w.wait()

    return {"step": lambda: _timed(lambda: step(sharded), info.device),
            "step.nocomm": lambda: _timed(lambda: step(plain), info.device),
            "comm": lambda: _timed(collectives, info.device)}


def measure_fsdp(unit, launch) -> dict:
    cfg, info = launch.job.config, launch.info
    spec = get_spec(cfg.model)
    x, y = _batch(cfg, spec, info)
    parts = _fsdp_parts(unit, cfg, info, spec, x, y)
    parts["step"]()  # FSDP2's lazy init
    mine, summary = _loop(parts, unit, launch)
    return _rows(unit, launch, mine, {**summary, "prefetch": unit.prefetch})


def _rows(unit, launch, mine: dict, extra: dict) -> dict:
    cfg, info, comm = launch.job.config, launch.info, launch.comm
    per_rank = {p: comm.gather_samples(mine[p]) for p in PARTS}
    if info.rank != 0:
        return {"results": []}
    med = {p: float(np.median(np.max(a, axis=0))) for p, a in per_rank.items()}
    st = summarize(np.max(per_rank["step"], axis=0))
    exposed, hidden = exposed_share(med["step"], med["step.nocomm"], med["comm"])
    row = {**launch.base_row(), "case_id": unit.key, "size_bytes": 0, "placement": unit.test,
           "model": cfg.model, "dtype": "float32", "mode": "overlap", "rank_reduce": "max",
           "warmup_iters": cfg.warmup, "iters": cfg.steps, **st.columns(), "samples": st.n,
           "overlap_test": unit.test, "overlap_both_s": med["step"], "overlap_compute_s": med["step.nocomm"],
           "overlap_comm_s": med["comm"], "overlap_exposed_s": exposed, "hidden_share": hidden,
           "batch": cfg.batch, **extra, "wrong": 0, "checks": 0, "nccl_ctas": cfg.nccl_ctas[0] if len(cfg.nccl_ctas) == 1 else None}
    samples = [{"run_id": launch.run_id, "case_id": unit.key, "size_bytes": 0, "placement": unit.test,
                "rank": r, "iteration": i, "part": p, "seconds": float(v)}
               for p in PARTS for r, vals in enumerate(per_rank[p]) for i, v in enumerate(vals)]
    return {"results": [row], "overlap_samples": samples}
