"""The function every rank runs (under elastic_launch, torchrun or srun): the launch skeleton.

Set up the rank (device, threads, process group with a finite timeout), warm the group up,
record the launch in meta.json, then for every unit of the kind: measure it (every rank),
write its tables as one part and show it (rank 0). Telemetry samples every unit's window.
"""

import time
import warnings

import torch.distributed as dist

from bench import telemetry
from bench.distributed.env import init_rank
from bench.distributed.session import Job, finish_meta, open_launch, start_meta
from bench.results.store import RunWriter


def worker_main(job: Job) -> dict:
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch")
    t0 = time.perf_counter()
    info = init_rank(job.backend, job.config.timeout_s)
    init_s = time.perf_counter() - t0
    try:
        return run_launch(job, info, init_s)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_launch(job: Job, info, init_s: float) -> dict:
    """Every unit of one launch (one world size, one process group). Returns
    {"run_id", "wrong" (summed over ranks), "dir" (rank 0; None elsewhere)}."""
    kind, cfg = job.kind, job.config
    launch = open_launch(job, info, init_s)
    units, notes = kind.units(cfg, info.world, job.meta)
    if launch.oversubscribed:
        notes = [*notes, launch.oversubscribed_note]
    key = job.launch_key or str(info.world)
    writer = live = None
    if info.rank == 0:
        writer = RunWriter(cfg.out, cfg.name, launch.run_id, part_prefix=job.part_prefix or f"w{info.world}-")
        start_meta(writer, launch, key, {"cases": len(units), "notes": notes})
        live = kind.live()
        live.start(launch, units)
    launch.tel = telemetry.start(job, info, writer)
    rows = wrong = 0

    def keep(tables: dict):
        nonlocal rows, wrong
        writer.write_case(tables)
        live.done(tables)
        results = tables.get("results", [])
        rows += len(results)
        wrong += sum(int(r.get("wrong") or 0) for r in results)

    try:
        for i, unit in enumerate(units, 1):
            if live:
                live.unit(unit, i, len(units))
            tables = kind.measure(unit, launch)
            if writer:
                keep(tables)
        extra = kind.after_units(cfg, launch) if kind.after_units else None
        if writer and extra:
            keep(extra)
    finally:
        launch.tel.close()
    if writer:
        finish_meta(writer, key, rows=rows, wrong=wrong, units_done=len(units))
    wrong = launch.comm.reduce_sum(wrong)
    return {"run_id": launch.run_id, "wrong": wrong, "dir": str(writer.dir) if writer else None}
