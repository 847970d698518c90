"""The sampler's own cost: the same all_reduce case timed with sampling on and off, interleaved
in one process group (same buffers), several repeats per size.

Each repeat runs three arms in a rotating order: sampling on, off, and off again ("off2", an
A/A control: its ratio to "off" is what noise alone does on this machine). For each size:
the median over repeats of the case median (slowest-rank completion time) per arm, the ratio
on/off of those medians, the median of the per-repeat paired ratios, and the same for
off2/off. A ratio of 1.02 is a 2% shift of the median.
"""

ARMS = ("on", "off", "off2")

import statistics
from types import SimpleNamespace


def rank_main(info, sizes: list[int], repeats: int, interval_s: float, budget_s: float, mode: str) -> dict:
    """Runs on every rank (under bench.distributed.launch.run_in_group); rank 0 returns the numbers."""
    import numpy as np  # lazy: only in the spawned rank processes (rank_main)
    import torch  # lazy: only in the spawned rank processes (rank_main)

    from bench.collectives import REGISTRY, Ctx  # lazy: only in the spawned rank processes (rank_main)
    from bench.distributed.comm import Comm, warm_communicator  # lazy: only in the spawned rank processes (rank_main)
    from bench.telemetry import Telemetry  # lazy: only in the spawned rank processes (rank_main)
    from bench.timing.loop import LoopSpec, measure  # lazy: only in the spawned rank processes (rank_main)
    from bench.timing.stats import completion_times  # lazy: only in the spawned rank processes (rank_main)

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
                for which in ARMS[rep % 3:] + ARMS[:rep % 3]:  # each arm first, second, third in turn
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


def _ratios(by_arm: dict, a: str, b: str) -> tuple[float, float]:
    """(ratio of the medians, median of the paired per-repeat ratios) of arm a over arm b."""
    ra, rb = by_arm[a], by_arm[b]
    med_a, med_b = statistics.median(ra.values()), statistics.median(rb.values())
    paired = [ra[k] / rb[k] for k in ra if k in rb and rb[k] > 0]
    return (med_a / med_b if med_b > 0 else float("nan"), statistics.median(paired) if paired else float("nan"))


def analyse(rows: list[dict]) -> list[dict]:
    """Per size: median per arm, on/off and off2/off ratios (of medians, and paired)."""
    out = []
    for size in sorted({r["size_bytes"] for r in rows}):
        by_arm = {a: {r["repeat"]: r["median_s"] for r in rows if r["size_bytes"] == size and r["telemetry"] == a}
                  for a in ARMS}
        ratio, paired = _ratios(by_arm, "on", "off")
        aa, aa_paired = _ratios(by_arm, "off2", "off")
        out.append({"size_bytes": size, "repeats": len(by_arm["on"]),
                    "median_on_s": statistics.median(by_arm["on"].values()),
                    "median_off_s": statistics.median(by_arm["off"].values()),
                    "ratio": ratio, "paired_ratio_median": paired, "aa_ratio": aa, "aa_paired_ratio_median": aa_paired})
    return out
