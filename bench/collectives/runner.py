"""Runs collective cases on every rank: buffers, timing loop, cross-rank gather, check, rows.

Rank 0 builds the rows and hands each finished size to `sink` (store + terminal); the other
ranks only compute. One process group serves every case of a launch.
"""

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from bench.collectives import REGISTRY, Ctx
from bench.collectives.config import CaseSpec, CollectivesConfig
from bench.distributed.env import RankInfo
from bench.timing.loop import LoopSpec, measure
from bench.timing.stats import algbw_gbps, busbw_gbps, completion_times, summarize
from bench.timing.timers import sync
from bench.units import parse_dtype


@dataclass
class Comm:
    """Small helpers on the default group, on the backend's device."""

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
    import time

    t0 = time.perf_counter()
    comm.barrier()
    comm.reduce_max(0.0)
    sync(comm.info.device)
    return time.perf_counter() - t0


def check(coll, ctx: Ctx, times: int) -> int:
    """Wrong elements on this rank over `times` checks, on fresh inputs, outside any timer."""
    wrong = 0
    for _ in range(times):
        b = coll.setup(ctx)
        work = coll.call(ctx, b, async_op=True)
        if work is not None:
            work.wait()
        sync(ctx.device)
        got, want = coll.result(ctx, b), coll.expected(ctx)
        if want is not None:
            wrong += int((got.reshape(-1) != want.reshape(-1)).sum().item())
    return wrong


def run_case(case: CaseSpec, cfg: CollectivesConfig, comm: Comm, hosts: list[str], node_ranks: list[int],
             base_row: dict, sink: Callable[[dict], None], tel=None):
    """Sweep one case over its sizes and placements; call sink(tables) for every finished size."""
    from bench import telemetry

    info = comm.info
    tel = tel or telemetry.Telemetry()  # no-op when not given
    coll = REGISTRY.get(case.collective)
    dtype = parse_dtype(case.dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    loop = LoopSpec(mode=case.mode, warmup=cfg.warmup, iters=cfg.iters, budget_s=cfg.budget_s)
    for size in case.sizes:
        tables = {"results": [], "samples": [], "ranks": []}
        for placement in case.placements:
            ctx = Ctx(rank=info.rank, world=info.world, count=size // esize if size else 0, dtype=dtype,
                      device=info.device, op=case.op or None, root=max(case.root, 0),
                      inplace=placement == "in-place")
            bufs = coll.setup(ctx)
            with tel.case(case.case_id, size_bytes=size, placement=placement) as tc:
                res = measure(lambda a: coll.call(ctx, bufs, a), spec=loop, device=info.device,
                              barrier=comm.barrier, agree_max=comm.reduce_max)
            del bufs
            per_rank = comm.gather_samples(res.samples_s)
            wrong = comm.reduce_sum(check(coll, ctx, cfg.check) if coll.sized else 0)
            warm = comm.reduce_max(res.warmup_s)
            if info.rank != 0:
                continue
            done = completion_times(per_rank)
            st = summarize(done)
            rank_medians = np.median(per_rank, axis=1)
            factor = coll.bus_factor(info.world)
            tables["results"].append({
                **base_row, "case_id": case.case_id, "collective": case.collective, "algorithm": "native",
                "size_bytes": size, "count": ctx.count, "dtype": case.dtype, "op": case.op,
                "root": case.root, "placement": placement, "mode": case.mode, "warmup_iters": loop.warmup,
                "iters": res.ops, "samples": st.n, "warmup_op_s": warm, **st.columns(),
                "algbw_gbps": algbw_gbps(size, st.median_s), "busbw_gbps": busbw_gbps(size, st.median_s, factor),
                "bus_factor": factor, "rank_median_min_s": float(rank_medians.min()),
                "rank_median_max_s": float(rank_medians.max()),
                "rank_skew_s": float(rank_medians.max() - rank_medians.min()),
                "slowest_rank": int(rank_medians.argmax()), "checks": cfg.check if coll.sized else 0,
                "wrong": wrong, **tc.summary,
            })
            key = {"run_id": base_row["run_id"], "case_id": case.case_id, "size_bytes": size, "placement": placement}
            for r in range(info.world):
                tables["ranks"].append({**key, "rank": r, "node_rank": node_ranks[r], "host": hosts[r],
                                        "median_s": float(rank_medians[r])})
                tables["samples"].extend({**key, "rank": r, "iteration": i, "seconds": float(s)}
                                         for i, s in enumerate(per_rank[r]))
        if info.rank == 0:
            sink(tables)


def run_all(job, info: RankInfo, init_s: float) -> dict:
    """Every case of one launch (one world size, one process group)."""
    from bench import telemetry
    from bench.collectives.config import expand
    from bench.report.terminal import CollectivesTable
    from bench.results.store import RunWriter
    from bench.worker import open_launch, start_meta

    cfg: CollectivesConfig = job.config
    launch = open_launch(job, info)
    comm, first_s, run_id, facts = launch.comm, launch.first_s, launch.run_id, launch.facts
    hosts, node_ranks, nodes, oversub = launch.hosts, launch.node_ranks, launch.nodes, launch.oversubscribed
    cases, notes = expand(cfg, info.world)
    skipped = {tuple(s) for s in job.meta.get("skipped", [])}
    cases = [c for c in cases if (c.collective, c.dtype, c.op) not in skipped]
    notes += [f"skipped {c}/{d}/{o}: {why}" for c, d, o, why in job.meta.get("skipped_why", [])]
    if oversub:
        notes.append(f"oversubscribed: {info.local_world} ranks x {info.threads} thread(s) on "
                     f"{info.cores} cores; times include time-sharing")
    base_row = launch.base_row(info, cfg.name, "collective")
    table = CollectivesTable()
    writer = None
    all_rows: list[dict] = []
    if info.rank == 0:
        writer = RunWriter(cfg.out, cfg.name, run_id, part_prefix=f"w{info.world}-")
        start_meta(writer, job, info, facts, {"init_process_group_s": init_s, "first_collective_s": first_s,
                                              "cases": len(cases), "notes": notes})

    def sink(tables):
        writer.write_case(tables)
        table.size_row(tables["results"])
        all_rows.extend(tables["results"])

    line = (f"world={info.world} nodes={nodes} backend={info.backend} device={info.device.type} "
            f"threads/rank={info.threads}{' OVERSUBSCRIBED' if oversub else ''}")
    if info.rank == 0:
        table._p(f"# communicator: init_process_group {init_s:.3f} s, first collective {first_s * 1e3:.1f} ms "
                 "(excluded from every case)")
    tel = telemetry.start(job, info, writer)
    try:
        for i, case in enumerate(cases, 1):
            if info.rank == 0:
                table.case_header(i, len(cases), case, line)
            run_case(case, cfg, comm, hosts, node_ranks, base_row, sink, tel)
    finally:
        tel.close()
    wrong = 0
    if info.rank == 0:
        table.summary(all_rows, notes)
        wrong = sum(int(r["wrong"]) for r in all_rows)
        writer.finish_launch(info.world, rows=len(all_rows), wrong=wrong)
    wrong = comm.reduce_sum(wrong)
    return {"run_id": run_id, "wrong": wrong, "dir": str(writer.dir) if writer else None}
