"""The overlap kind's units on every rank (torch); rows on rank 0. bench.overlap.kind calls it only
when a launch measures.

pair: a collective at one size against the compute action. Per repetition the three parts run
in a rotating order (comm, compute, both; then compute, both, comm; ...), each after a barrier
(outside every timed span), so a drift of the host hits every part alike. Every rank's seconds
are kept (table overlap_samples); a repetition's figure is the max over ranks.
"""

import math

import numpy as np
import torch

from bench.distributed.comm import collective_op
from bench.overlap.compute import HostCompute, cuda_part, host_part, make_action
from bench.overlap.figures import pair_columns
from bench.timing.busbw import bus_factor
from bench.timing.stats import summarize

PARTS = ("comm", "compute", "both")
PLACEMENT = "out-of-place"
NAMES = {"all_to_all": "alltoall"}  # bench.timing.busbw's names


def rotation(rep: int, parts: tuple[str, ...] = PARTS) -> tuple[str, ...]:
    """The parts' order in repetition `rep`: rotated by one each time (A B C, B C A, C A B)."""
    k = rep % len(parts)
    return parts[k:] + parts[:k]


def _dtype(name: str):
    return getattr(torch, name)


class Tracks:
    """The compute action and where it runs (a thread on CPU, a side stream on CUDA)."""

    def __init__(self, cfg, device):
        self.device = device
        self.action = make_action(cfg.compute, device, cfg.gemm_n, cfg.gemm_iters, cfg.compute_s, _dtype(cfg.dtype))
        if device.type == "cuda":
            self.side, self.host = torch.cuda.Stream(device=device), None
        else:
            self.side, self.host = None, HostCompute(self.action, cfg.compute_threads)

    def part(self, part: str, comm) -> dict:
        if self.host is not None:
            return host_part(part, comm, self.host)
        return cuda_part(part, comm, self.action, self.side)

    def close(self):
        if self.host is not None:
            self.host.close()


def pair_row_stats(per_rank: dict) -> dict:
    """{part: median over repetitions of the max over ranks} from {part: [world, reps] array}."""
    return {p: float(np.median(np.max(a, axis=0))) for p, a in per_rank.items()}


def measure_pair(unit, launch) -> dict:
    cfg, info, comm = launch.job.config, launch.info, launch.comm
    size = unit.size
    op = collective_op(unit.collective, size, info.world, info.device, _dtype(cfg.dtype))  # one group: every rank
    tracks = Tracks(cfg, info.device)
    mine: dict[str, list[float]] = {}
    try:
        with launch.tel.case(unit.case_id, size_bytes=size, placement=PLACEMENT) as tc:
            for rep in range(cfg.warmup + cfg.reps):
                if rep == cfg.warmup:  # the energy span: every timed repetition, its three parts (no count: J only)
                    tc.energy.start([info.device])
                for part in rotation(rep):
                    comm.barrier()
                    got = tracks.part(part, op)
                    if rep >= cfg.warmup:
                        for k, v in got.items():
                            mine.setdefault(k, []).append(v)
            tc.energy.stop()
    finally:
        tracks.close()
    parts = sorted(mine)
    per_rank = {p: comm.gather_samples(mine[p]) for p in parts}  # same parts, same counts on every rank
    if info.rank != 0:
        return {"results": []}
    med = pair_row_stats(per_rank)
    both = summarize(np.max(per_rank["both"], axis=0))
    n = info.world
    factor = bus_factor(NAMES.get(unit.collective, unit.collective), n)
    algbw = size / med["comm"] / 1e9 if med["comm"] > 0 else math.nan
    row = {**launch.base_row(), "case_id": unit.key, "size_bytes": size, "placement": PLACEMENT,
           "collective": unit.collective, "algorithm": "native", "dtype": cfg.dtype,
           "op": "sum" if unit.collective in ("all_reduce", "reduce_scatter") else "", "root": -1,
           "mode": "overlap", "rank_reduce": "max", "warmup_iters": cfg.warmup, "iters": cfg.reps,
           **both.columns(), "samples": both.n, "algbw_gbps": algbw, "busbw_gbps": algbw * factor, "bus_factor": factor,
           "overlap_test": "pair", "overlap_compute": cfg.compute, "gemm_n": cfg.gemm_n if cfg.compute == "gemm" else None,
           "gemm_iters": cfg.gemm_iters if cfg.compute == "gemm" else None,
           "compute_threads": cfg.compute_threads if info.device.type == "cpu" else None,
           "compute_target_s": cfg.compute_s if cfg.compute == "sleep" else None,
           **pair_columns(med["comm"], med["compute"], med["both"], med["both.comm"], med["both.compute"]),
           **tc.summary, "wrong": 0, "checks": 0, "nccl_ctas": cfg.nccl_ctas[0] if len(cfg.nccl_ctas) == 1 else None}
    samples = [{"run_id": launch.run_id, "case_id": unit.key, "size_bytes": size, "placement": PLACEMENT,
                "rank": r, "iteration": i, "part": p, "seconds": float(v)}
               for p in parts for r, row_ in enumerate(per_rank[p]) for i, v in enumerate(row_)]
    return {"results": [row], "overlap_samples": samples}
