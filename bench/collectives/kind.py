"""The `collectives` kind: every collective primitive across message sizes, nccl-tests style.

One unit = one case (collective, dtype, op, root, mode) at one size, both placements; its
tables are the results rows (one per placement), every rank's raw samples and per-rank medians.
"""

from dataclasses import dataclass

import torch

from bench.collectives import REGISTRY, Ctx
from bench.collectives import probe
from bench.sweep.values import wrong_elements
from bench.collectives.columns import COLUMNS
from bench.collectives.config import CaseSpec, CollectivesConfig, expand
from bench.collectives.memory import MEMORY
from bench.sweep.reading import COMM_METRICS, COMM_SETTINGS, narrow_sized
from bench.collectives.summary import CollectivesLive, collectives_summary
from bench.errors import BenchError
from bench.harness.rows import timed_tables
from bench.kind import KINDS, Kind, LaunchPlan, Plan, Reading, Report, drawn_by
from bench.options import overrides
from bench.collectives.acceptance import min_busbw_failures, parse_min_busbw
from bench.results.rundir import RunDir
from bench.suite import int_list
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


def estimate_s(cfg: CollectivesConfig, unit: Unit) -> float:
    """Per placement: the timed budget plus about as much for warm-up, calibration and the check."""
    return len(unit.case.placements) * 2 * cfg.budget_s


def add_options(p):
    p.add_argument("-c", "--collective", "--collectives", dest="collectives", default=None,
                   help="comma list of collectives or 'all' (see `distbench list`)")
    p.add_argument("--dtype", "--dtypes", dest="dtypes", default=None, help="comma list, e.g. float32,bfloat16")
    p.add_argument("--op", "--ops", dest="ops", default=None, help="sum | avg | max | min | product (comma list)")
    p.add_argument("--root", "--roots", dest="roots", default=None, help="comma list of root ranks")
    p.add_argument("--placement", dest="placements", default=None, help="out-of-place,in-place")
    p.add_argument("--mode", "--modes", dest="modes", default=None, help="latency,throughput,nccl-tests")
    p.add_argument("--rank-reduce", dest="rank_reduce", default=None,
                   help="figure from the ranks' times: max | avg | min | rank0 (nccl-tests -a 3/1/2/0); "
                        "default auto: avg in the nccl-tests mode, max otherwise")
    p.add_argument("--sizes", default=None, help="explicit sizes, e.g. 4K,1M,64M (overrides the sweep)")
    p.add_argument("-b", "--min-bytes", dest="min_bytes", default=None, help="sweep start, e.g. 1K")
    p.add_argument("-e", "--max-bytes", dest="max_bytes", default=None, help="sweep end, e.g. 64M")
    p.add_argument("-f", "--step-factor", dest="step_factor", type=float, default=None, help="sweep factor (> 1)")
    p.add_argument("-w", "--warmup", type=int, default=None, help="warm-up ops per size (floor)")
    p.add_argument("-n", "--iters", type=int, default=None, help="timed ops per size (floor)")
    p.add_argument("--budget-s", type=float, default=None, help="timed seconds to aim for per size")
    p.add_argument("--check", type=int, default=None, help="correctness checks per size (0: none)")
    p.add_argument("--min-busbw", dest="min_busbw", default=None,
                   help="GB/s, or per collective 'all_reduce=40,*=10': exit 1 when the average busbw over the large "
                        "sizes is below it (nccl-tests' NCCL_TESTS_MIN_BW)")
    p.add_argument("--blocking", type=int, default=None,
                   help="throughput mode: 1 waits for each op (default), 0 keeps a block's ops in flight (PARAM --z 0)")
    p.add_argument("--profile", default=None, metavar="SIZE",
                   help="trace SIZE (e.g. 1M) of every case with torch.profiler after its timed measurement: "
                        "<run dir>/traces/<case>.rank<r>.json (Perfetto, HTA); timings unchanged")
    p.add_argument("--skip-unsupported", action="store_const", const=True, default=None,
                   help="skip dtype/op pairs the backend refuses instead of failing")


def options(args) -> dict:
    ov = overrides(args, ("rank_reduce", "collectives", "dtypes", "ops", "placements", "modes", "sizes", "min_bytes", "max_bytes",
                          "step_factor", "warmup", "iters", "budget_s", "check", "skip_unsupported", "blocking", "min_busbw"))
    if args.roots is not None:
        ov["roots"] = int_list(args.roots, "root")
    if args.profile is not None:
        ov["profile"] = args.profile
    return ov


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
    for placement in case.placements:
        ctx = Ctx(rank=info.rank, world=info.world, count=size // esize if size else 0, dtype=dtype,
                  device=info.device, op=case.op or None, root=max(case.root, 0), inplace=placement == "in-place")
        bufs = coll.setup(ctx)
        with launch.tel.case(case.case_id, size_bytes=size, placement=placement) as tc:
            res = timed_loop(lambda a: coll.call(ctx, bufs, a), spec=loop, device=info.device,
                             barrier=comm.barrier, agree_max=comm.reduce_max, case=case.case_id, size_bytes=size)
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
        cols, ranks, samples = timed_tables(key, per_rank, size, coll.bus_factor(info.world), launch.hosts,
                                            launch.node_ranks, rank_reduce_for(cfg.rank_reduce, loop.mode))
        tables["results"].append({
            **launch.base_row(), **key, "collective": case.collective, "algorithm": "native", "count": ctx.count,
            "dtype": case.dtype, "op": case.op, "root": case.root, "mode": case.mode, "blocking": loop.blocking, "warmup_iters": loop.warmup,
            "iters": res.ops, "warmup_op_s": warm, **cols, "checks": cfg.check if coll.sized else 0, "wrong": wrong,
            "profile_trace": trace, **tc.summary,
        })
        tables["ranks"] += ranks
        tables["samples"] += samples
    return tables


def acceptance(run, cfg: CollectivesConfig) -> list[str]:
    """--min-busbw: collectives whose average busbw over the large sizes is below the threshold."""
    if not cfg.min_busbw or "results" not in run.tables:
        return []
    return [str(f) for f in min_busbw_failures(run["results"], parse_min_busbw(cfg.min_busbw))]


def listing() -> list[str]:
    return [f"collective  {c.name:<24} busbw factor at n=8: {c.bus_factor(8):.3f}  placements: {', '.join(c.placements)}"
            for c in REGISTRY]


KIND = KINDS.register(Kind(
    module=__name__, name="collectives", help="time every collective primitive across message sizes", config=CollectivesConfig,
    columns=COLUMNS, tables=("results", "samples", "ranks", "telemetry"), add_options=add_options, options=options,
    units=units,
    measure=measure, plan=plan, estimate_s=estimate_s, acceptance=acceptance, memory=MEMORY, listing=listing,
    # gate groups: one per case_id (a collective at one dtype, op, root and mode; shown by its collective)
    read=Reading(metrics=COMM_METRICS, group="case_id", narrow=narrow_sized("-c", "collective"),
                 aliases=("collective",), settings=COMM_SETTINGS, sized=True),
    report=Report(title="Collectives", section=drawn_by("bench.collectives.plots", "section"),
                  summary=collectives_summary, live=CollectivesLive,
                  headline=drawn_by("bench.collectives.plots", "headline")),
))
