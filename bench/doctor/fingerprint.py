"""The doctor's fingerprint unit (`distbench doctor --cluster-fingerprint`): what the planner prices, on the
cluster itself. Every collective the layouts use (all_reduce, all_gather, reduce_scatter) at the
group placements they need, at two sizes or more (an alpha-beta fit per placement):

  node   one group per node, the node's ranks (tp and fsdp inside a node): every group at once
  cross  one group per local rank index, a rank of every node (dp across nodes when tp fills each
         node): every group at once
  world  every rank (dp over the whole world)

A placement that would repeat another (one node: cross = single ranks, world = node) is left out.
Each repetition: a barrier, then `fingerprint_ops` ops back to back in one timer, waited for at
the end (the planner's preferred mode: a step issues its collectives back to back, no barrier
before each); its seconds / ops, reduced over the group's ranks by max. Rows carry `collective`,
`group_size`, `groups` (at once), `group_scope` and `mode` = throughput, as a collectives run's do,
so the planner reads them the same way (bench.plan.comm). The pair matrix's p2p and the compute
probe are the doctor's own units."""

import numpy as np
import torch.distributed as dist

from bench.distributed.comm import collective_op
from bench.timing.busbw import bus_factor
from bench.timing.timers import make_timer
from bench.units import parse_size

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def placements(nodes: list[list[int]]) -> dict[str, list[list[int]]]:
    """{placement: its groups (world ranks)} for these nodes (each node's ranks in order)."""
    per = min(len(n) for n in nodes)
    out = {"node": [list(n) for n in nodes]}
    if len(nodes) > 1:
        out["cross"] = [[n[i] for n in nodes] for i in range(per)]
        if per > 1:
            out["world"] = [sorted(r for n in nodes for r in n)]
    return {k: [g for g in v if len(g) > 1] for k, v in out.items() if any(len(g) > 1 for g in v)}


def time_placement(groups: list[list[int]], name: str, size: int, cfg, device, barrier) -> list[float]:
    """This rank's seconds per op of each timed repetition ([] where it is in no group); every rank
    creates every group (new_group is collective) and passes the same barriers."""
    rank = dist.get_rank()
    mine = None
    for g in groups:
        pg = dist.new_group(g)
        if rank in g:
            mine = (pg, len(g))
    op = collective_op(name, size, mine[1], device, group=mine[0]) if mine else None
    timer, out = make_timer(device), []
    for rep in range(cfg.warmup + cfg.reps):
        barrier()
        if op is None:
            continue
        timer.start()
        works = [op(True) for _ in range(cfg.fingerprint_ops)]
        for w in works:
            w.wait()
        t = timer.stop() / cfg.fingerprint_ops
        if rep >= cfg.warmup:
            out.append(t)
    barrier()
    return out


def measure(launch, nodes, stats_row) -> dict:
    """Every rank: every collective at every placement and size; rows on rank 0."""
    cfg, info = launch.job.config, launch.info
    places = placements(nodes)
    sizes = [parse_size(s) for s in cfg.fingerprint_sizes]
    mine = {(p, c, s): time_placement(g, c, s, cfg, info.device, launch.comm.barrier)
            for p, g in places.items() for c in COLLECTIVES for s in sizes}
    every = launch.comm.gather_object(mine)
    if info.rank != 0:
        return {}
    results = []
    node_of = {r: i for i, n in enumerate(nodes) for r in n}
    for (p, c, s) in mine:
        groups = places[p]
        n = len(groups[0])
        per_rep = np.max([every[r][(p, c, s)] for g in groups for r in g], axis=0)  # the slowest rank of any group
        spans = {len({node_of[r] for r in g}) > 1 for g in groups}
        scope = "mixed" if len(spans) > 1 else ("inter" if True in spans else "intra")
        row = stats_row(launch, f"doctor.fingerprint.{c}.{p}", s, list(per_rep))
        row.update(doctor_test="collective", collective=c, group_size=n, groups=len(groups), group_name=p,
                   group_scope=scope,
                   group_ranks=";".join(",".join(map(str, g)) for g in groups), src_rank=-1, dst_rank=-1,
                   dtype="float32", op="sum" if c != "all_gather" else "", mode="throughput", rank_reduce="max",
                   bus_factor=bus_factor(c, n), busbw_gbps=row["algbw_gbps"] * bus_factor(c, n),
                   link_class="inter" if True in spans else "intra")
        results.append(row)
    return {"results": results}

