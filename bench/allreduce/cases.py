"""The allreduce kind's launch side (bench.allreduce.kind registers it through bench.kind.later, so
that a command that only reads runs never imports torch): the launches (one per world, and on nccl
one per NCCL setting), the cases of a launch (one unit per (dtype, op, mode) block and size), the
measuring of one unit on every rank, and the cost model fitted after the last launch."""


import dataclasses
import json
import sys
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.allreduce import REGISTRY, Plan as AlgPlan
from bench.allreduce.analysis import bus_factor, write_model
from bench.allreduce.config import AllreduceConfig, CaseSpec, expand, variant_label
from bench.allreduce.nccl_log import PROBE, log_env, write_nccl_tuning
from bench.sweep.energy import TimedSpan
from bench.sweep.values import Ctx, arange, reduce_expected, reduce_values
from bench.distributed.launch import launched_externally
from bench.errors import BenchError
from bench.harness.rows import timed_tables
from bench.kind import LaunchPlan, Plan, first_doc_line
from bench.results.metadata import nccl_env
from bench.timing.loop import LoopSpec, measure as timed_loop
from bench.timing.profile import profile_ops, relative, size_note, size_profiled, trace_file
from bench.timing.stats import rank_reduce_for
from bench.timing.timers import sync
from bench.units import parse_dtype


@dataclass(frozen=True)
class Unit:
    cases: tuple[CaseSpec, ...]  # one (dtype, op, mode) block: every algorithm
    size: int  # bytes

    @property
    def key(self) -> str:
        c = self.cases[0]
        labels = "+".join(x.label for x in self.cases)
        return f"allreduce.{labels}.{c.dtype}.{c.op}.{c.mode}.w{c.world}@{self.size}B"


def estimate_s(cfg: AllreduceConfig, unit: Unit) -> float:
    """Per algorithm: the timed budget plus about as much for warm-up, calibration and the check."""
    return len(unit.cases) * 2 * cfg.budget_s


def launch_key(world: int, variant: str) -> str:
    """meta.json `launches` key: '4', or '4:NCCL_ALGO=Tree' for an NCCL variant launch."""
    return f"{world}:{variant}" if variant else str(world)


def plan(cfg: AllreduceConfig, backend: str, worlds) -> Plan:
    """One launch per world, and on nccl one native-only launch per NCCL setting."""
    if cfg.nccl_asked() and backend != "nccl":
        raise BenchError(f"NCCL_ALGO / NCCL_PROTO settings (nccl_algos={list(cfg.nccl_algos)}, "
                         f"nccl_protos={list(cfg.nccl_protos)}) apply to the nccl backend only, and this run uses "
                         f"{backend}; drop them or use --backend nccl")
    native = "native" in cfg.algorithm_names()
    if cfg.nccl_asked() and not native:
        raise BenchError("NCCL_ALGO / NCCL_PROTO settings change only the native all_reduce, and 'native' is not "
                         "among the algorithms; add it (-a ...,native) or drop the NCCL settings")
    cfg = dataclasses.replace(cfg, world=tuple(worlds), backend=backend)  # the ring's default chunk is per backend
    variants = cfg.nccl_variants() if backend == "nccl" and native else []
    meta = {"allreduce_launches": [{"world": w, "env": env} for w in worlds for env in [{}, *variants]]}
    if launched_externally():
        if variants:
            meta["notes"] = ["under torchrun/srun the ranks are already started: no fresh launch per "
                             "NCCL_ALGO/NCCL_PROTO setting; set them in the environment of the job instead"]
        key = launch_key(worlds[0], variant_label(os.environ))
        return Plan(launches=[LaunchPlan(world=worlds[0], config=cfg, key=key)], meta=meta)
    launches = []
    for w in worlds:
        launches.append(LaunchPlan(world=w, config=cfg))
        for env in variants:
            v = variant_label(env)
            key = launch_key(w, v)
            native = dataclasses.replace(cfg, algorithms=("native",))
            prefix = f"w{w}-{re.sub(r'[^A-Za-z0-9]+', '_', v)}-"
            # NCCL_DEBUG is read once per process, and its logging must not run in timed calls: a
            # short probe launch logs what NCCL chooses (bench.allreduce.nccl_log, under the timed
            # launch's key: checked in finish), then a fresh launch with the same setting is timed.
            launches.append(LaunchPlan(world=w, config=dataclasses.replace(native, nccl_probe=True),
                                       env={**env, **log_env(key, os.environ)}, key=key + PROBE,
                                       part_prefix=prefix + "probe-"))
            launches.append(LaunchPlan(world=w, config=native, env=dict(env), key=key, part_prefix=prefix))
    return Plan(launches=launches, meta=meta)


def units(cfg: AllreduceConfig, world: int, meta: dict) -> tuple[list[Unit], list[str]]:
    """Sizes are the outer loop within a block, algorithms the inner one (inside a unit)."""
    blocks: dict[tuple, list[CaseSpec]] = {}
    variant = variant_label(os.environ) + (PROBE if cfg.nccl_probe else "")  # a probe's units are its own (resume)
    for c in expand(cfg, world, variant):  # the launch's own NCCL setting labels native
        blocks.setdefault((c.dtype, c.op, c.mode), []).append(c)
    notes = size_note(cfg.profile, [s for b in blocks.values() for s in b[0].sizes])
    return [Unit(cases=tuple(b), size=s) for b in blocks.values() for s in b[0].sizes], notes


def check(alg, plan: AlgPlan, inputs: torch.Tensor, want: torch.Tensor, times: int) -> int:
    """Wrong elements on this rank over `times` runs on fresh copies of the inputs, outside any timer."""
    wrong = 0
    for _ in range(times):
        x = inputs.clone()
        alg.allreduce(x, plan)
        sync(x.device)
        wrong += int((x != want).sum().item())
    return wrong


def measure(unit: Unit, launch) -> dict:
    """Every rank: every algorithm of one block at one size; rows on rank 0."""
    info, comm, size = launch.info, launch.comm, unit.size
    cfg: AllreduceConfig = launch.job.config
    tables: dict[str, list] = {"results": [], "samples": [], "ranks": []}
    c0 = unit.cases[0]
    dtype = parse_dtype(c0.dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    ctx = Ctx(rank=info.rank, world=info.world, count=size // esize, dtype=dtype, device=info.device, op=c0.op)
    idx = arange(0, ctx.count, info.device)
    inputs = reduce_values(info.rank, idx, ctx)  # one exact pattern per size, copied per algorithm
    want = reduce_expected(idx, ctx) if cfg.check else None
    del idx
    if cfg.nccl_probe:  # each call once, untimed, no rows: NCCL logs its choice at every size
        for case in unit.cases:
            plan_ = AlgPlan(rank=info.rank, world=info.world, op=case.op, chunk_numel=case.chunk_numel(esize))
            x = inputs.clone()
            REGISTRY.get(case.algorithm).allreduce(x, plan_)
            sync(info.device)
            del x
        return {}
    loop = LoopSpec(mode=c0.mode, warmup=cfg.warmup, iters=cfg.iters, budget_s=cfg.budget_s)
    env = json.dumps(nccl_env(), sort_keys=True)
    for case in unit.cases:
        alg = REGISTRY.get(case.algorithm)
        plan_ = AlgPlan(rank=info.rank, world=info.world, op=case.op, chunk_numel=case.chunk_numel(esize))
        x = inputs.clone()
        with launch.tel.case(case.case_id, size_bytes=size, placement="in-place", algorithm=case.label) as tc:
            span = TimedSpan(tc.energy, lambda _async: alg.allreduce(x, plan_), comm.reduce_max, [info.device])
            res = timed_loop(span.op, spec=loop, device=info.device,
                             barrier=comm.barrier, agree_max=span.agree_max, case=case.case_id, size_bytes=size)
            span.stop(bus_bytes_per_op=size * bus_factor(info.world) * info.world)
        trace = None
        if size_profiled(cfg.profile, size):  # after the timed loop, outside it: timings unchanged
            run_dir = Path(cfg.out) / cfg.name / launch.run_id
            comm.barrier()
            path = profile_ops(lambda: alg.allreduce(x, plan_), f"{case.case_id}@{size}B",
                               trace_file(run_dir, f"{case.case_id}@{size}B", info.rank), info.device,
                               sync=lambda: sync(info.device))
            trace = relative(path, run_dir).replace(f".rank{info.rank}.json", ".rank0.json")
        del x
        per_rank = comm.gather_samples(res.samples_s)
        wrong = comm.reduce_sum(check(alg, plan_, inputs, want, cfg.check) if cfg.check else 0)
        warm = comm.reduce_max(res.warmup_s)
        if info.rank != 0:
            continue
        key = {"run_id": launch.run_id, "case_id": case.case_id, "size_bytes": size, "placement": "in-place"}
        cols, ranks, samples = timed_tables(key, per_rank, size, bus_factor(info.world), launch.hosts,
                                            launch.node_ranks, rank_reduce_for(cfg.rank_reduce, loop.mode))
        a, b = alg.cost(info.world)
        tables["results"].append({
            **launch.base_row(), "nccl_env": env, **key, "collective": "all_reduce", "algorithm": case.algorithm,
            "variant": case.variant, "chunk_bytes": case.chunk_bytes, "count": ctx.count, "dtype": case.dtype,
            "op": case.op, "root": -1, "mode": case.mode, "blocking": True, "warmup_iters": loop.warmup, "iters": res.ops,
            "warmup_op_s": warm, "latency_hold": res.hold,
            "samples_with_dispatch": res.dispatch_in if res.hold else None, **cols, "checks": cfg.check, "wrong": wrong, "model_steps": float(a),
            "model_bytes_factor": float(b), "messages": alg.messages(info.world, ctx.count, plan_.chunk_numel),
            "profile_trace": trace, **tc.summary,
        })
        tables["ranks"] += ranks
        tables["samples"] += samples
    return tables


def finish(run_dir, cfg):
    """After the last launch: the cost model, then what NCCL chose in the variant launches."""
    write_model(run_dir, cfg)
    write_nccl_tuning(run_dir)


def listing() -> list[str]:
    return [f"algorithm   {a.name:<24} {first_doc_line(sys.modules[type(a).__module__].__doc__)}" for a in REGISTRY]
