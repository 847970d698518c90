"""Runs strategy and pipeline cases on every rank: build, check against the single-process
reference, warm up, time steps, gather per-rank timelines, derive rows.

Per timed step every rank passes a barrier, then runs one training step; its compute spans
(fwd / bwd / recompute of the local module), its communication waits and its own step span are
kept. Rank 0 turns them into the per-rank breakdown (bench.pipeline.breakdown), the pipeline
bubble next to the textbook forms and the calibrated replay (bench.pipeline.replay).
"""

import time

import numpy as np
import torch

from bench.collectives.runner import Comm
from bench.pipeline.breakdown import breakdown
from bench.pipeline.replay import balanced, replay
from bench.pipeline.theory import gpipe_bubble, megatron_bubble
from bench.strategies import get
from bench.strategies.base import TOLERANCE, Ctx, peak_bytes, read_peak, reference_check, reset_peak
from bench.strategies.config import CaseSpec, expand_pipeline, expand_strategies
from bench.strategies.pp import stages_per_rank
from bench.timing.stats import summarize
from bench.timing.timers import sync
from bench.workloads import Batches, build_model, get_spec, loss_fn
from bench.workloads.models import param_count


def _timed_steps(trainer, comm: Comm, steps: int) -> list[dict]:
    dev = comm.info.device
    recs = []
    for _ in range(steps):
        trainer.clock.reset()
        comm.barrier()
        t0 = time.perf_counter()
        trainer.step()
        sync(dev)
        t1 = time.perf_counter()
        recs.append({"span": (t0, t1), "spans": list(trainer.clock.resolve()), "waits": list(trainer.clock.waits)})
    return recs


def _solo_s(trainer, steps: int) -> float:
    run = trainer.solo()
    if run is None:
        return float("nan")
    run()
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        run()
        sync(trainer.ctx.device)
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def measure_case(case: CaseSpec, cfg, comm: Comm) -> dict:
    """Every rank: one case. Returns the gathered per-rank facts (on every rank)."""
    info = comm.info
    spec = get_spec(case.model)
    ctx = Ctx(spec=spec, rank=info.rank, world=info.world, device=info.device, batch=case.batch, seed=cfg.seed,
              steps=cfg.warmup + cfg.steps + 1, chunks=case.chunks, schedule=case.schedule or "gpipe",
              checkpoint=case.checkpoint, balance=case.balance, bucket_cap_mb=case.bucket_cap_mb or 25.0)
    trainer = get(case.strategy).setup(ctx)
    chk = None
    if cfg.check:
        trainer.step(check=True)
        loss, grads, batch = trainer.loss(), trainer.grads(), trainer.global_batch()  # collectives
        chk = reference_check(trainer, loss, grads, batch) if info.rank == 0 else None
        trainer.opt.zero_grad(set_to_none=True)
    for _ in range(cfg.warmup):
        trainer.step()
    sync(info.device)
    comm.barrier()
    host_reset = reset_peak(info.device)
    recs = _timed_steps(trainer, comm, cfg.steps)
    mem = read_peak(info.device, host_reset)
    solo = _solo_s(trainer, cfg.steps)
    loss = trainer.loss()
    mine = {"recs": recs, "mem": mem, "solo_s": solo, "role": trainer.role, "degraded": trainer.degraded,
            "devices": trainer.devices, "comm_in_compute": trainer.comm_in_compute,
            "order": trainer.pipeline_order() if case.strategy == "pp" and info.rank == 0 else None,
            "params": param_count(build_model(spec, cfg.seed)) if info.rank == 0 else 0}
    facts = comm.gather_object(mine)
    del trainer
    return {"facts": facts, "check": chk, "loss": loss}


def _replay_columns(case: CaseSpec, facts: list[dict]) -> dict:
    """Per-stage median fwd (per micro-batch, loss included) and bwd (recompute included) times,
    then the replay of the schedule's own order with those times and with balanced times."""
    fwd, bwd = {}, {}
    for f in facts:
        for rec in f["recs"]:
            per_mb: dict = {}
            for kind, s, mb, a, b in rec["spans"]:
                if kind == "fwd":
                    per_mb[(s, mb)] = per_mb.get((s, mb), 0.0) + (b - a)
                elif kind == "bwd":
                    bwd.setdefault(s, []).append(b - a)
            for (s, _), t in per_mb.items():
                fwd.setdefault(s, []).append(t)
    order = facts[0]["order"]
    dur = {}
    for s in fwd:
        dur[(s, "F")] = float(np.median(fwd[s]))
        dur[(s, "B")] = float(np.median(bwd.get(s, [0.0])))
    n_stages = len(fwd)
    rp = replay(order, dur, n_stages)
    rb = replay(order, balanced(dur), n_stages)
    return {"replay_step_s": rp.step_s, "replay_bubble": rp.mean_bubble, "replay_schedule_bubble": rb.mean_bubble,
            "replay_imbalance": rp.mean_bubble - rb.mean_bubble,
            "stage_fwd_s": ",".join(f"{dur[(s, 'F')] * 1e3:.3f}" for s in sorted(fwd)),
            "stage_bwd_s": ",".join(f"{dur[(s, 'B')] * 1e3:.3f}" for s in sorted(fwd)),
            "_replay_rank": rp.bubble}


def build_tables(case: CaseSpec, res: dict, base_row: dict, hosts: list[str], nodes: int) -> dict:
    """Rank 0: results row, per-rank rows, per-step rows."""
    facts, world = res["facts"], len(res["facts"])
    spec = get_spec(case.model)
    steps = len(facts[0]["recs"])
    per_step = []
    for k in range(steps):
        spans = {r: f["recs"][k]["span"] for r, f in enumerate(facts)}
        comp = {r: [(a, b) for kind, _, _, a, b in f["recs"][k]["spans"] if kind in ("fwd", "bwd")]
                for r, f in enumerate(facts)}
        waits = {r: f["recs"][k]["waits"] for r, f in enumerate(facts)}
        if nodes > 1:  # clocks of different hosts are not comparable: own spans only
            spans = {r: (0.0, e - s) for r, (s, e) in spans.items()}
            waits = {r: [] for r in spans}
        per_step.append(breakdown(spans, comp, waits))
    walls = [bd[0].step_wall_s for bd in per_step]
    st = summarize(walls)
    key = {"run_id": base_row["run_id"], "case_id": case.case_id}
    kinds = {r: [] for r in range(world)}
    for r, f in enumerate(facts):
        for rec in f["recs"]:
            tot = {"fwd": 0.0, "bwd": 0.0, "recompute": 0.0}
            for kind, _, _, a, b in rec["spans"]:
                tot[kind] += b - a
            tot["bwd"] -= tot["recompute"]
            kinds[r].append(tot)
    ranks, steps_rows = [], []
    for r in range(world):
        col = {n: float(np.median([getattr(bd[r], n) for bd in per_step]))
               for n in ("compute_s", "idle_s", "exposed_comm_s", "overhead_s", "own_span_s")}
        parts = {f"{n}_s": float(np.median([t[n] for t in kinds[r]])) for n in ("fwd", "bwd", "recompute")}
        mem = facts[r]["mem"]
        ranks.append({**key, "rank": r, "host": hosts[r], "role": facts[r]["role"], "step_wall_s": st.median_s,
                      **col, **parts, "bubble": float(np.median([bd[r].bubble for bd in per_step])),
                      "nocompute_frac": 1.0 - col["compute_s"] / st.median_s if st.median_s > 0 else float("nan"),
                      "solo_compute_s": facts[r]["solo_s"], **mem, "peak_bytes": peak_bytes(mem)})
        for k, bd in enumerate(per_step):
            b = bd[r]
            steps_rows.append({**key, "step": k, "rank": r, "step_wall_s": b.step_wall_s, "own_span_s": b.own_span_s,
                               "compute_s": b.compute_s, "idle_s": b.idle_s, "exposed_comm_s": b.exposed_comm_s,
                               "overhead_s": b.overhead_s, **{f"{n}_s": kinds[r][k][n] for n in ("fwd", "bwd", "recompute")}})
    devices = world * facts[0]["devices"]
    sps = case.batch / st.median_s
    tps = sps * spec.tokens_per_sample
    degraded = facts[0]["degraded"] or base_row["degraded"]
    mean = lambda n: float(np.mean([x[n] for x in ranks]))  # noqa: E731
    row = {**base_row, "case_id": case.case_id, "world": world, "degraded": degraded, "strategy": case.strategy,
           "model": case.model, "family": spec.family, "params": facts[0]["params"], "devices": devices,
           "chunks": case.chunks, "schedule": case.schedule, "checkpoint": case.checkpoint, "batch": case.batch,
           "micro_batch": case.micro_batch or case.batch // case.chunks, "sweep_mode": case.sweep_mode,
           "balance": ",".join(map(str, case.balance)), "bucket_cap_mb": case.bucket_cap_mb,
           "steps": st.n, **st.columns("step_"), "samples_per_s": sps, "samples_per_s_per_device": sps / devices,
           "tokens_per_s": tps if spec.family == "gpt" else float("nan"),
           "tokens_per_s_per_device": tps / devices if spec.family == "gpt" else float("nan"),
           "fwd_s": mean("fwd_s"), "bwd_s": mean("bwd_s"), "recompute_s": mean("recompute_s"),
           "compute_s": mean("compute_s"), "exposed_comm_s": mean("exposed_comm_s"), "idle_s": mean("idle_s"),
           "overhead_s": mean("overhead_s"), "comm_in_compute": bool(facts[0]["comm_in_compute"]),
           "solo_compute_s": mean("solo_compute_s"),
           # ddp/fsdp: forward+backward spans minus the same compute alone (no comm) = exposed comm
           "exposed_comm_est_s": max(0.0, mean("compute_s") - mean("solo_compute_s"))
           if facts[0]["comm_in_compute"] and np.isfinite(mean("solo_compute_s")) else float("nan"),
           "memory_kind": ranks[0]["memory_kind"], "peak_memory_bytes": max(x["peak_bytes"] for x in ranks),
           "host_peak_rss_bytes": max(x["host_peak_rss_bytes"] for x in ranks),
           "loss": res["loss"], "tolerance": TOLERANCE}
    chk = res["check"]
    row.update({"checks": 1 if chk else 0, "wrong": chk["wrong"] if chk else 0,
                "max_abs_diff": chk["max_abs_diff"] if chk else float("nan")})
    if case.strategy == "pp":
        p, v = world, stages_per_rank(case.schedule)
        rc = _replay_columns(case, facts)
        per_rank_replay = rc.pop("_replay_rank")
        for x in ranks:
            x["replay_bubble"] = float(per_rank_replay.get(x["rank"], float("nan")))
        row.update({"stages": p * v, "bubble_measured": mean("bubble"), "bubble_max": max(x["bubble"] for x in ranks),
                    "nocompute_frac": mean("nocompute_frac"), "bubble_gpipe_theory": gpipe_bubble(p, case.chunks, v),
                    "bubble_megatron_theory": megatron_bubble(p, case.chunks, v), **rc})
        row["comm_overhead_frac"] = row["nocompute_frac"] - row["replay_bubble"]
    return {"results": [row], "strategy_ranks": ranks, "strategy_steps": steps_rows}


def efficiency_curve(cfg, device, run_id: str, stages: int) -> list[dict]:
    """One process, the whole model, the same mini-batch run as m sequential chunks: how much
    per-sample speed small micro-batches cost on this device (no pipeline, no communication)."""
    spec = get_spec(cfg.model)
    model = build_model(spec, cfg.seed).to(device)
    lf = loss_fn(spec)
    x, y = Batches(spec, cfg.batch, 1, cfg.seed).next(device)
    rows, base = [], None
    for m in sorted(set(cfg.chunks)):
        if cfg.batch % m:
            continue

        def step():
            for xc, yc in zip(x.chunk(m), y.chunk(m)):
                (lf(model(xc), yc) / m).backward()
            model.zero_grad(set_to_none=True)
            sync(device)

        step()
        times = []
        for _ in range(cfg.steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        st = summarize(times)
        sps = cfg.batch / st.median_s
        base = base or (sps if m == min(cfg.chunks) else None)
        rows.append({"run_id": run_id, "case_id": f"efficiency.{cfg.model}.b{cfg.batch}.m{m}", "model": cfg.model,
                     "batch": cfg.batch, "chunks": m, "micro_batch": cfg.batch // m, **st.columns("step_"),
                     "samples_per_s": sps, "relative_throughput": sps / base if base else float("nan"),
                     # what an ideal p-stage GPipe would take with these chunk times (no comm):
                     "ideal_pipeline_step_s": st.median_s * (m + stages - 1) / (m * stages), "stages": stages})
    return rows


def run_all(job, info, init_s: float) -> dict:
    from bench import telemetry
    from bench.report.terminal import StrategiesTable
    from bench.results.store import RunWriter
    from bench.worker import open_launch, start_meta

    cfg = job.config
    launch = open_launch(job, info)
    comm, first_s, run_id, facts = launch.comm, launch.first_s, launch.run_id, launch.facts
    hosts, nodes, oversub = launch.hosts, launch.nodes, launch.oversubscribed
    cases, notes = expand_pipeline(cfg) if job.kind == "pipeline" else expand_strategies(cfg)
    cases = [c for c in cases if c.world == info.world]
    if oversub:
        notes.append(f"oversubscribed: {info.local_world} ranks x {info.threads} thread(s) on {info.cores} cores")
    base_row = launch.base_row(info, cfg.name, "strategy")
    writer, table = None, StrategiesTable()
    if info.rank == 0:
        writer = RunWriter(cfg.out, cfg.name, run_id, part_prefix=f"w{info.world}-")
        start_meta(writer, job, info, facts, {"init_process_group_s": init_s, "first_collective_s": first_s,
                                              "cases": len(cases), "notes": notes})
        table.header(f"world={info.world} nodes={nodes} backend={info.backend} device={info.device.type} "
                     f"threads/rank={info.threads}{' OVERSUBSCRIBED' if oversub else ''}")
    tel = telemetry.start(job, info, writer)
    rows, wrong = [], 0
    for case in cases:
        with tel.case(case.case_id, strategy=case.strategy, model=case.model) as tc:
            res = measure_case(case, cfg, comm)
        if info.rank == 0:
            tables = build_tables(case, res, base_row, hosts, nodes)
            tables["results"][0].update(tc.summary)
            writer.write_case(tables)
            table.row(tables["results"][0])
            rows.append(tables["results"][0])
    last_launch = info.world == max(cfg.worlds())
    if job.kind == "pipeline" and cfg.efficiency and info.world == min(cfg.worlds()):
        if info.rank == 0:
            eff = efficiency_curve(cfg, info.device, run_id, info.world)
            writer.write_case({"microbatch_efficiency": eff})
            table.efficiency(eff)
        comm.barrier()
    tel.close()
    if info.rank == 0:
        wrong = sum(int(r["wrong"]) for r in rows)
        writer.finish_launch(info.world, rows=len(rows), wrong=wrong)
        if last_launch:
            from bench.results.store import load_run

            run = load_run(writer.dir)
            every = run["results"].to_dict("records") if "results" in run.tables else rows
            table.summary(every, notes)
    wrong = comm.reduce_sum(wrong)
    return {"run_id": run_id, "wrong": wrong, "dir": str(writer.dir) if writer else None}

