"""The collectives kind's launch side (bench.collectives.kind registers it through bench.kind.later,
so that a command that only reads runs never imports torch): the cases of a launch (one unit per
case and size), the probe of refused dtype/op pairs before any launch, and the measuring of one
unit on every rank."""

from dataclasses import dataclass

import torch
import torch.distributed as dist

from bench.collectives import REGISTRY, Ctx
from bench.collectives import probe
from bench.sweep.energy import TimedSpan
from bench.sweep.values import wrong_elements
from bench.collectives.config import CaseSpec, CollectivesConfig, expand
from bench.errors import BenchError
from bench.harness.rows import timed_tables
from bench.kind import LaunchPlan, Plan
from bench.results.rundir import RunDir
from bench.timing.loop import LoopSpec, measure as timed_loop
from bench.timing.profile import profile_ops, relative, size_note, size_profiled, trace_file
from bench.timing.stats import rank_reduce_for
from bench.timing.timers import sync
from bench.units import parse_dtype


@dataclass(frozen=True)
class Unit:
    case: CaseSpec
    size: int  # bytes

    @property
    def key(self) -> str:
        return f"{self.case.case_id}@{self.size}B"


def members(rank: int, world: int, size: int) -> list[int]:
    """The world ranks of `rank`'s communicator: the block of `size` consecutive ranks holding it
    (nccl-tests' NCCL_TESTS_SPLIT="DIV size"; a tensor-parallel group of a DeviceMesh, tp innermost)."""
    first = rank // size * size
    return list(range(first, first + size))


def group_scope(node_ranks: list[int], size: int) -> str:
    """Where the groups of `size` consecutive ranks sit (node_ranks: each world rank's node):
    'intra' when every group is inside one node, 'inter' when every group spans nodes, 'mixed'
    when some do. Stored per row at measure time: the planner prices a group's collective with
    the fit of its own scope, not the launch's."""
    world = len(node_ranks)
    size = size or world
    spans = {len({node_ranks[r] for r in range(first, min(first + size, world))}) > 1 for first in range(0, world, size)}
    return "mixed" if len(spans) > 1 else ("inter" if spans.pop() else "intra")


_GROUPS: dict = {}


def split_groups(rank: int, world: int, size: int):
    """(communicator, rank in it, its size) for groups of `size`; (None, rank, world) for one group.
    dist.new_group is collective over the world: every rank creates every group, in one order, once
    per process group."""
    if not size or size == world:
        return None, rank, world
    key = (dist.group.WORLD, size)  # the group object itself: a later process group never reads these
    if key not in _GROUPS:
        _GROUPS[key] = {first: dist.new_group(list(range(first, first + size))) for first in range(0, world, size)}
    mine = members(rank, world, size)
    return _GROUPS[key][mine[0]], rank - mine[0], size


def estimate_s(cfg: CollectivesConfig, unit: Unit) -> float:
    """Per placement: the timed budget plus about as much for warm-up, calibration and the check."""
    return len(unit.case.placements) * 2 * cfg.budget_s


def plan(cfg: CollectivesConfig, backend: str, worlds) -> Plan:
    """Probe (in its own process) the dtype/op pairs the backend may refuse, before any launch."""
    combos = set()
    for w in worlds:
        for c in expand(cfg, w)[0]:
            if REGISTRY.get(c.collective).min_world == 1:  # the probe runs at world 1
                combos.add((c.collective, c.dtype, c.op))
    refused = probe.unsupported(backend, sorted(combos))
    if refused and not cfg.skip_unsupported:
        (coll, dt, op), why = sorted(refused.items())[0]
        what = f"op '{op}' on {dt}" if op else f"dtype {dt}"
        raise BenchError(f"backend {backend} cannot do {what} for {coll} ({why}); choose another --op/--dtype, "
                         f"or pass --skip-unsupported ({len(refused)} combination(s) refused)")
    meta = {"skipped": [list(k) for k in refused], "skipped_why": [[*k, v] for k, v in refused.items()]}
    return Plan(launches=[LaunchPlan(world=w, config=cfg) for w in worlds], meta=meta)


def units(cfg: CollectivesConfig, world: int, meta: dict) -> tuple[list[Unit], list[str]]:
    cases, notes = expand(cfg, world)
    skipped = {tuple(s) for s in meta.get("skipped", [])}
    cases = [c for c in cases if (c.collective, c.dtype, c.op) not in skipped]
    notes += [f"skipped {c}/{d}/{o}: {why}" for c, d, o, why in meta.get("skipped_why", [])]
    notes += size_note(cfg.profile, [s for c in cases for s in c.sizes])
    return [Unit(case=c, size=s) for c in cases for s in c.sizes], notes


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
            wrong += wrong_elements(got, want, ctx.op, ctx.dtype, ctx.world)  # in bounded chunks
        del b, got, want  # before the next setup(): one set of buffers + expected at a time (preflight)
    return wrong


def measure(unit: Unit, launch) -> dict:
    """Every rank: one case at one size, each placement; rows on rank 0."""
    case, size, info, comm = unit.case, unit.size, launch.info, launch.comm
    cfg: CollectivesConfig = launch.job.config
    coll = REGISTRY.get(case.collective)
    dtype = parse_dtype(case.dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    loop = LoopSpec(mode=case.mode, warmup=cfg.warmup, iters=cfg.iters, budget_s=cfg.budget_s,
                    blocking=bool(cfg.blocking))
    tables = {"results": [], "samples": [], "ranks": []}
    group, rank, n = split_groups(info.rank, info.world, case.group)
    for placement in case.placements:
        ctx = Ctx(rank=rank, world=n, count=size // esize if size else 0, dtype=dtype, device=info.device,
                  op=case.op or None, root=max(case.root, 0), inplace=placement == "in-place", group=group)
        bufs = coll.setup(ctx)
        with launch.tel.case(case.case_id, size_bytes=size, placement=placement) as tc:
            span = TimedSpan(tc.energy, lambda a: coll.call(ctx, bufs, a), comm.reduce_max, [info.device])
            res = timed_loop(span.op, spec=loop, device=info.device,
                             barrier=comm.barrier, agree_max=span.agree_max, case=case.case_id, size_bytes=size,
                             blocks_host=coll.wait_blocks_host(ctx))
            span.stop(bus_bytes_per_op=size * coll.bus_factor(n) * info.world)
        trace = None
        if size_profiled(cfg.profile, size):  # after the timed loop, outside it: timings unchanged
            run_dir = RunDir.of(cfg, launch.run_id).path
            comm.barrier()
            path = profile_ops(lambda: coll.call(ctx, bufs, True), f"{case.case_id}@{size}B",
                               trace_file(run_dir, f"{case.case_id}.{placement}@{size}B", info.rank), info.device,
                               sync=lambda: sync(info.device))
            trace = relative(path, run_dir).replace(f".rank{info.rank}.json", ".rank0.json")
        del bufs
        per_rank = comm.gather_samples(res.samples_s)
        wrong = comm.reduce_sum(check(coll, ctx, cfg.check) if coll.sized else 0)
        warm = comm.reduce_max(res.warmup_s)
        if info.rank != 0:
            continue
        key = {"run_id": launch.run_id, "case_id": case.case_id, "size_bytes": size, "placement": placement}
        cols, ranks, samples = timed_tables(key, per_rank, size, coll.bus_factor(n), launch.hosts,
                                            launch.node_ranks, rank_reduce_for(cfg.rank_reduce, loop.mode))
        tables["results"].append({
            **launch.base_row(), **key, "collective": case.collective, "algorithm": "native", "count": ctx.count,
            "group_size": n, "groups": info.world // n, "group_scope": group_scope(launch.node_ranks, n),
            "dtype": case.dtype, "op": case.op, "root": case.root, "mode": case.mode, "blocking": loop.blocking, "warmup_iters": loop.warmup,
            "iters": res.ops, "warmup_op_s": warm, "latency_hold": res.hold,
            "samples_with_dispatch": res.dispatch_in if res.hold else None, **cols, "checks": cfg.check if coll.sized else 0, "wrong": wrong,
            "profile_trace": trace, **tc.summary,
        })
        tables["ranks"] += ranks
        tables["samples"] += samples
    return tables


def listing() -> list[str]:
    return [f"collective  {c.name:<24} busbw factor at n=8: {c.bus_factor(8):.3f}  placements: {', '.join(c.placements)}"
            for c in REGISTRY]
