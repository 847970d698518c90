"""Runs allreduce algorithm cases on every rank: inputs, timing loop, cross-rank gather, check, rows.

Sizes are the outer loop and algorithms the inner one, so each size's line of the side-by-side
table finishes together and every algorithm meets the machine in the same state. Rank 0 builds
the rows and writes one part per size; the other ranks only compute. The cost model is fitted
after the last launch (by the CLI, or here when torchrun/srun started the ranks).
"""

import json
import os
import re

import numpy as np
import torch

from bench.allreduce import REGISTRY, Plan
from bench.allreduce.config import AllreduceConfig, CaseSpec, expand, variant_label
from bench.collectives.base import Ctx, arange, reduce_expected, reduce_values
from bench.collectives.runner import Comm
from bench.timing.loop import LoopSpec, measure
from bench.timing.stats import algbw_gbps, busbw_gbps, completion_times, summarize
from bench.timing.timers import sync
from bench.units import parse_dtype


def bus_factor(n: int) -> float:
    """nccl-tests' all_reduce factor 2(n-1)/n, for every algorithm: a normalisation, not a
    count of the bytes an algorithm moves (doc/PERFORMANCE.md)."""
    return 2 * (n - 1) / n


def check(alg, plan: Plan, inputs: torch.Tensor, want: torch.Tensor, times: int) -> int:
    """Wrong elements on this rank over `times` runs on fresh copies of the inputs, outside any timer."""
    wrong = 0
    for _ in range(times):
        x = inputs.clone()
        alg.allreduce(x, plan)
        sync(x.device)
        wrong += int((x != want).sum().item())
    return wrong


def _blocks(cases: list[CaseSpec]) -> list[list[CaseSpec]]:
    """Consecutive cases sharing dtype/op/mode (they share sizes)."""
    out: dict[tuple, list[CaseSpec]] = {}
    for c in cases:
        out.setdefault((c.dtype, c.op, c.mode), []).append(c)
    return list(out.values())


def run_size(cases: list[CaseSpec], size: int, cfg: AllreduceConfig, comm: Comm, base_row: dict, tel,
             hosts: list[str], node_ranks: list[int]) -> dict:
    """Every algorithm of one block at one size; returns the tables (rows on rank 0 only)."""
    info = comm.info
    tables: dict[str, list] = {"results": [], "samples": [], "ranks": []}
    c0 = cases[0]
    dtype = parse_dtype(c0.dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    ctx = Ctx(rank=info.rank, world=info.world, count=size // esize, dtype=dtype, device=info.device, op=c0.op)
    idx = arange(0, ctx.count, info.device)
    inputs = reduce_values(info.rank, idx, ctx)  # one exact pattern per size, copied per algorithm
    want = reduce_expected(idx, ctx) if cfg.check else None
    del idx
    loop = LoopSpec(mode=c0.mode, warmup=cfg.warmup, iters=cfg.iters, budget_s=cfg.budget_s)
    for case in cases:
        alg = REGISTRY.get(case.algorithm)
        plan = Plan(rank=info.rank, world=info.world, op=case.op, chunk_numel=case.chunk_numel(esize))
        x = inputs.clone()
        with tel.case(case.case_id, size_bytes=size, placement="in-place", algorithm=case.label) as tc:
            res = measure(lambda _async: alg.allreduce(x, plan), spec=loop, device=info.device,
                          barrier=comm.barrier, agree_max=comm.reduce_max)
        del x
        per_rank = comm.gather_samples(res.samples_s)
        wrong = comm.reduce_sum(check(alg, plan, inputs, want, cfg.check) if cfg.check else 0)
        warm = comm.reduce_max(res.warmup_s)
        if info.rank != 0:
            continue
        st = summarize(completion_times(per_rank))
        medians = np.median(per_rank, axis=1)
        a, b = alg.cost(info.world)
        factor = bus_factor(info.world)
        tables["results"].append({
            **base_row, "case_id": case.case_id, "collective": "all_reduce", "algorithm": case.algorithm,
            "variant": case.variant, "chunk_bytes": case.chunk_bytes, "size_bytes": size, "count": ctx.count,
            "dtype": case.dtype, "op": case.op, "root": -1, "placement": "in-place", "mode": case.mode,
            "warmup_iters": loop.warmup, "iters": res.ops, "samples": st.n, "warmup_op_s": warm, **st.columns(),
            "algbw_gbps": algbw_gbps(size, st.median_s), "busbw_gbps": busbw_gbps(size, st.median_s, factor),
            "bus_factor": factor, "rank_median_min_s": float(medians.min()),
            "rank_median_max_s": float(medians.max()), "rank_skew_s": float(medians.max() - medians.min()),
            "slowest_rank": int(medians.argmax()), "checks": cfg.check, "wrong": wrong,
            "model_steps": float(a), "model_bytes_factor": float(b), **tc.summary,
        })
        key = {"run_id": base_row["run_id"], "case_id": case.case_id, "size_bytes": size, "placement": "in-place"}
        for r in range(info.world):
            tables["ranks"].append({**key, "rank": r, "node_rank": node_ranks[r], "host": hosts[r],
                                    "median_s": float(medians[r])})
            tables["samples"].extend({**key, "rank": r, "iteration": i, "seconds": float(s)}
                                     for i, s in enumerate(per_rank[r]))
    return tables


def launch_key(world: int, variant: str) -> str:
    """meta.json `launches` key: '4', or '4:NCCL_ALGO=Tree' for an NCCL variant launch."""
    return f"{world}:{variant}" if variant else str(world)


def _rekey_launch(writer, world: int, key: str, before):
    """start_meta files a launch under str(world); a variant launch moves it to its own key and
    puts back the entry of the base launch at that world."""
    def change(m):
        launches = dict(m.get("launches", {}))
        launches[key] = launches.pop(str(world))
        if before is not None:
            launches[str(world)] = before
        return {**m, "launches": launches}

    writer.update_meta(change)


def _finish_launch(writer, key: str, **facts):
    from bench.results.metadata import utc_now

    def change(m):
        launches = dict(m.get("launches", {}))
        launches[key] = {**launches.get(key, {}), **facts, "finished_utc": utc_now()}
        return {**m, "launches": launches}

    writer.update_meta(change)


def run_all(job, info, init_s: float) -> dict:
    """Every case of one launch (one world size, one NCCL setting, one process group)."""
    from bench import telemetry
    from bench.report.terminal import AllreduceTable
    from bench.results.metadata import nccl_env
    from bench.results.store import RunWriter
    from bench.worker import open_launch, start_meta

    cfg: AllreduceConfig = job.config
    launch = open_launch(job, info)
    comm, first_s, run_id, facts = launch.comm, launch.first_s, launch.run_id, launch.facts
    hosts, node_ranks, nodes, oversub = launch.hosts, launch.node_ranks, launch.nodes, launch.oversubscribed
    variant = variant_label(os.environ)
    env = nccl_env()
    cases = expand(cfg, info.world, variant)
    notes = []
    if oversub:
        notes.append(f"OVERSUBSCRIBED at world {info.world}: {info.local_world} ranks x {info.threads} thread(s) "
                     f"on {info.cores} cores; times include time-sharing of the cores, not only communication")
    base_row = {**launch.base_row(info, cfg.name, "algorithm"), "nccl_env": json.dumps(env, sort_keys=True)}
    key = launch_key(info.world, variant)
    writer, table, all_rows = None, AllreduceTable(), []
    if info.rank == 0:
        slug = re.sub(r"[^A-Za-z0-9]+", "_", variant)
        writer = RunWriter(cfg.out, cfg.name, run_id, part_prefix=f"w{info.world}-{slug + '-' if slug else ''}")
        before = writer.read_meta().get("launches", {}).get(str(info.world))
        start_meta(writer, job, info, facts, {"init_process_group_s": init_s, "first_collective_s": first_s,
                                              "cases": len(cases), "notes": notes, "variant": variant})
        if key != str(info.world):
            _rekey_launch(writer, info.world, key, before)
        table.launch_line(f"world={info.world} nodes={nodes} backend={info.backend} device={info.device.type} "
                          f"threads/rank={info.threads}{' OVERSUBSCRIBED' if oversub else ''}"
                          f"{' ' + variant if variant else ''}; communicator set-up {init_s:.2f} s "
                          f"+ first collective {first_s * 1e3:.0f} ms (excluded)")
    tel = telemetry.start(job, info, writer)
    try:
        for block in _blocks(cases):
            if info.rank == 0:
                table.header(block[0], [c.label for c in block])
            for size in block[0].sizes:
                tables = run_size(block, size, cfg, comm, base_row, tel, hosts, node_ranks)
                if info.rank == 0:
                    writer.write_case(tables)
                    table.size_row(tables["results"])
                    all_rows.extend(tables["results"])
    finally:
        tel.close()
    wrong = 0
    if info.rank == 0:
        table.footer(all_rows, info.world, notes)
        wrong = sum(int(r["wrong"]) for r in all_rows)
        _finish_launch(writer, key, rows=len(all_rows), wrong=wrong)
        if job.run_id is None:  # torchrun / srun: this is the only launch, so fit the model here
            from bench.allreduce.summary import write_model

            write_model(writer.dir, cfg)
    wrong = comm.reduce_sum(wrong)
    return {"run_id": run_id, "wrong": wrong, "dir": str(writer.dir) if writer else None}
