"""The sampler's own cost: the same all_reduce case timed with sampling on and off, interleaved
in one process group (ABBA order per repeat, same buffers), several repeats per size.

For each size: median over repeats of the case median (slowest-rank completion time) with
sampling on, the same with it off, and their ratio; also the median of the per-repeat paired
ratios. A ratio of 1.02 is a 2% shift of the median.
"""

import statistics
from types import SimpleNamespace


def rank_main(info, sizes: list[int], repeats: int, interval_s: float, budget_s: float, mode: str) -> dict:
    """Runs on every rank (under bench.dist.launch.run_in_group); rank 0 returns the numbers."""
    import numpy as np
    import torch

    from bench.collectives import REGISTRY, Ctx
    from bench.collectives.runner import Comm, warm_communicator
    from bench.telemetry import Telemetry
    from bench.timing.loop import LoopSpec, measure
    from bench.timing.stats import completion_times

    comm = Comm(info)
    warm_communicator(comm)
    on = Telemetry(SimpleNamespace(config=SimpleNamespace(telemetry=True, telemetry_interval_s=interval_s)),
                   info, None)
    off = Telemetry()
    coll = REGISTRY.get("all_reduce")
    loop = LoopSpec(mode=mode, warmup=5, iters=20, budget_s=budget_s)
    rows, samples_per_case = [], []
    try:
        for size in sizes:
            ctx = Ctx(rank=info.rank, world=info.world, count=max(size // 4, 1), dtype=torch.float32,
                      device=info.device, op="sum", inplace=True)
            bufs = coll.setup(ctx)

            def once(tel):
                with tel.case(f"overhead.all_reduce.{size}", size_bytes=size, placement="in-place") as tc:
                    res = measure(lambda a: coll.call(ctx, bufs, a), spec=loop, device=info.device,
                                  barrier=comm.barrier, agree_max=comm.reduce_max)
                per_rank = comm.gather_samples(res.samples_s)
                return float(np.median(completion_times(per_rank))), tc.summary

            once(off)  # warm this size up, not counted
            for rep in range(repeats):
                for which in (("on", "off") if rep % 2 == 0 else ("off", "on")):
                    med, summary = once(on if which == "on" else off)
                    rows.append({"size_bytes": size, "repeat": rep, "telemetry": which, "median_s": med})
                    if which == "on" and summary:
                        samples_per_case.append(summary.get("telemetry_samples") or 0)
            del bufs
    finally:
        on.close()
    if info.rank != 0:
        return {}
    return {"rows": rows, "samples_per_case": samples_per_case, "gpu_status": on.node.get("gpu_status", ""),
            "world": info.world, "backend": info.backend, "device": str(info.device)}


def analyse(rows: list[dict]) -> list[dict]:
    """Per size: median on, median off, ratio of medians, median paired ratio."""
    out = []
    for size in sorted({r["size_bytes"] for r in rows}):
        mine = [r for r in rows if r["size_bytes"] == size]
        on = {r["repeat"]: r["median_s"] for r in mine if r["telemetry"] == "on"}
        off = {r["repeat"]: r["median_s"] for r in mine if r["telemetry"] == "off"}
        med_on, med_off = statistics.median(on.values()), statistics.median(off.values())
        paired = [on[k] / off[k] for k in on if k in off and off[k] > 0]
        out.append({"size_bytes": size, "repeats": len(paired), "median_on_s": med_on, "median_off_s": med_off,
                    "ratio": med_on / med_off if med_off > 0 else float("nan"),
                    "paired_ratio_median": statistics.median(paired) if paired else float("nan"),
                    "off_spread": (max(off.values()) - min(off.values())) / med_off if med_off > 0 else float("nan")})
    return out
