"""Measures strategy and pipeline cases on every rank (shared by the `strategies` and `pipeline`
kinds): build, check against the single-process reference, warm up, time steps, gather per-rank
timelines, derive rows.

Per timed step every rank passes a barrier, then runs one training step; its compute spans
(fwd / bwd / recompute of the local module), its communication waits and its own step span are
kept. Rank 0 turns them into the per-rank breakdown (bench.training.breakdown), the pipeline
bubble next to the textbook forms and the calibrated replay (bench.training.replay).
"""

import time

import numpy as np

from bench.distributed.comm import Comm
from bench.results.rundir import RunDir
from bench.training import REGISTRY
from bench.training.breakdown import breakdown
from bench.training.peaks import peak_columns
from bench.training.replay import balanced, exact_durations, replay
from bench.training.schedules import get as get_schedule
from bench.training.theory import gpipe_bubble, megatron_bubble
from bench.training.throttle import timed_throttle, timed_windows
from bench.training.base import (COMPUTE_KINDS, TOLERANCE, Ctx, end_case_groups, kind_totals, live_groups,
                                   peak_bytes, read_peak, reference_check, release_cached, reset_peak)
from bench.timing.profile import profile_steps, relative, trace_file
from bench.timing.stats import summarize
from bench.timing.timers import sync
from bench.training.case import CaseSpec
from bench.training.pp import validate
from bench.workloads import Batches, build_model, get_spec, loss_fn, spin
from bench.workloads.models import param_count, split_pieces

_ACTION = {"bwd": "B", "bwd_input": "I", "bwd_weight": "W"}  # span kind -> replay action kind
_PARTS = ("fwd", "bwd", "bwd_input", "bwd_weight", "recompute")  # per-rank / per-step seconds columns


def _timed_steps(trainer, comm: Comm, steps: int) -> list[dict]:
    recs = []
    for _ in range(steps):
        trainer.prefetch()  # data loading stays outside the timed step
        trainer.sync()
        trainer.clock.reset()
        comm.barrier()
        w0, t0 = time.time(), time.perf_counter()  # wall: the telemetry sampler's clock (bench.training.throttle)
        trainer.step()
        trainer.sync()  # every device this process drives (dp, layer: several)
        t1, w1 = time.perf_counter(), time.time()
        recs.append({"span": (t0, t1), "wall": (w0, w1), "spans": list(trainer.clock.resolve()),
                     "waits": list(trainer.clock.waits)})
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
        trainer.sync()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


# The pipeline rows' `degraded` on CUDA until a GPU run has checked the CUDA-event wait timing.
CUDA_WAITS_UNVERIFIED = "bubble on CUDA: waits timed with CUDA events, not yet verified on a GPU"


# The pipeline rows' `degraded` when stages sit on several nodes: host clocks of different nodes
# are not comparable, so each rank's timeline is placed at its own exit from the step's barrier.
MULTI_NODE_ALIGNED = ("bubble across nodes: each rank's timeline aligned at its exit from the step barrier "
                      "(barrier exit skew between nodes not measured)")


def aligned(rec: dict) -> tuple[tuple, list, list]:
    """One rank's step on its own clock, shifted so that its step starts (barrier exit) at 0:
    (span, compute intervals, waits)."""
    t0 = rec["span"][0]
    comp = [(a - t0, b - t0) for kind, _, _, a, b in rec["spans"] if kind in COMPUTE_KINDS]
    waits = [(w[0] - t0, w[1] - t0, *w[2:]) for w in rec["waits"]]
    return (0.0, rec["span"][1] - t0), comp, waits


def with_note(degraded: str, note: str) -> str:
    """`degraded` text with one more reason ("; " between reasons)."""
    return "; ".join(x for x in (degraded, note) if x)


def _profile(trainer, comm: Comm, case: CaseSpec, run_dir) -> str:
    """Every rank: 5 more steps under torch.profiler, after the timed ones (their timings are
    already taken); each labelled '<case_id>@step<k>'. Returns rank 0's trace path, relative."""
    rank = comm.info.rank

    def before(_k):
        trainer.prefetch()
        trainer.sync()
        trainer.clock.reset()
        comm.barrier()

    path = profile_steps(lambda _k: trainer.step(), lambda k: f"{case.case_id}@step{k}",
                         trace_file(run_dir, case.case_id, rank), comm.info.device, sync=trainer.sync, before=before)
    return relative(path, run_dir).replace(f".rank{rank}.json", ".rank0.json")


def _check(trainer, rank: int) -> dict | None:
    """Every rank: one step compared with the single-process reference (rank 0 runs it). The
    gathered gradients and global batch and the reference model are this function's locals: they
    are freed when it returns, before the measured steps (their blocks stay reserved in the CUDA
    caching allocator until release_cached)."""
    trainer.step(check=True)
    loss, grads, batch = trainer.loss(), trainer.grads(), trainer.global_batch()  # collectives
    chk = reference_check(trainer, loss, grads, batch) if rank == 0 else None
    trainer.opt.zero_grad(set_to_none=True)
    return chk


def measure_case(case: CaseSpec, cfg, comm: Comm, run_dir=None, energy=None) -> dict:
    """Every rank: one case. Returns the gathered per-rank facts (on every rank); with
    cfg.profile (and a run_dir), 5 profiled steps after everything timed."""
    info = comm.info
    spec = get_spec(case.model)
    ctx = Ctx(spec=spec, rank=info.rank, world=info.world, device=info.device, batch=case.batch, seed=cfg.seed,
              steps=cfg.warmup + cfg.steps + 1, chunks=case.chunks, schedule=case.schedule or "gpipe",
              checkpoint=case.checkpoint, balance=case.balance, bucket_cap_mb=case.bucket_cap_mb or 25.0,
              dims=case.dims if case.composed else None)
    groups = live_groups()  # the case's own groups (a composed layout's DeviceMesh) are destroyed at its end
    trainer, done = None, False
    try:  # a case that raises destroys its groups too: the next case in this process must not inherit them
        trainer = REGISTRY.get(case.strategy).setup(ctx)
        chk = _check(trainer, info.rank) if cfg.check else None
        for _ in range(cfg.warmup):
            trainer.step()
        trainer.sync()  # every device it drives (layer, dp: several)
        comm.barrier()
        devices = trainer.device_list()
        release_cached(devices)  # what the check left in the caching allocator is not the steps' memory
        host_reset = all([reset_peak(d) for d in devices])
        with spin.case_spins(devices, spec.times_known) as spins:  # the spin follows the clock (bench.workloads.spin)
            if energy is not None:  # the timed steps' energy span (bench.telemetry.energy): every device it drives,
                energy.start(devices)  # after the spin's re-check (not in the span)
            recs = _timed_steps(trainer, comm, cfg.steps)
        if energy is not None:
            energy.stop(steps=cfg.steps, samples=cfg.steps * case.batch)  # batch: global, samples per step
        mem = max((read_peak(d, host_reset) for d in devices), key=peak_bytes)  # max over the devices it drives
        solo = _solo_s(trainer, cfg.steps)
        loss = trainer.loss()
        trace = _profile(trainer, comm, case, run_dir) if getattr(cfg, "profile", 0) and run_dir is not None else None
        mine = {"recs": recs, "mem": mem, "solo_s": solo, "spin": spins, "role": trainer.role, "degraded": trainer.degraded,
                "devices": trainer.devices, "comm_in_compute": trainer.comm_in_compute,
                "order": trainer.pipeline_order() if _pipelined(case) and info.rank == 0 else None,
                "params": param_count(build_model(spec, cfg.seed)) if info.rank == 0 else 0}
        trainer.sync()
        facts = comm.gather_object(mine)  # on the default group: every rank is done with the case's groups
        done = True
    finally:
        trainer = None  # the trainer's modules, stages and schedule hold the groups
        end_case_groups(groups, failing=not done)
    return {"facts": facts, "check": chk, "loss": loss, "trace": trace}


def _pipelined(case: CaseSpec) -> bool:
    """A pipeline case (pp alone or a composed layout with pp, one rank holding every stage of a
    multi-stage schedule included): it gets the bubble and per-stage columns."""
    return case.dims.pp > 1 or bool(case.schedule) and get_schedule(case.schedule).per_rank > 1


def _replay_columns(case: CaseSpec, facts: list[dict]) -> dict:
    """Per-stage median action times from the measured spans: F per micro-batch (loss included),
    B, or I and W under the split-backward schedules (recompute included); then the replay of the
    schedule's own order with those times and with balanced times."""
    fwd, acts = {}, {}
    for f in facts:
        for rec in f["recs"]:
            per_mb: dict = {}
            for kind, s, mb, a, b in rec["spans"]:
                if kind == "fwd":
                    per_mb[(s, mb)] = per_mb.get((s, mb), 0.0) + (b - a)
                elif kind in _ACTION:
                    acts.setdefault((s, _ACTION[kind]), []).append(b - a)
            for (s, _), t in per_mb.items():
                fwd.setdefault(s, []).append(t)
    order = facts[0]["order"]
    dur = {(s, k): 0.0 for s in fwd for k in "BIW"}
    for s in fwd:
        dur[(s, "F")] = float(np.median(fwd[s]))
    for key, ts in acts.items():
        dur[key] = float(np.median(ts))
    n_stages = len(fwd)
    rp = replay(order, dur, n_stages)
    rb = replay(order, balanced(dur), n_stages)
    split = get_schedule(case.schedule).split_backward
    bwd = {s: dur[(s, "I")] + dur[(s, "W")] if split else dur[(s, "B")] for s in fwd}
    return {"replay_step_s": rp.step_s, "replay_bubble": rp.mean_bubble, "replay_schedule_bubble": rb.mean_bubble,
            "replay_imbalance": rp.mean_bubble - rb.mean_bubble,
            "stage_fwd_s": ",".join(f"{dur[(s, 'F')] * 1e3:.3f}" for s in sorted(fwd)),
            "stage_bwd_s": ",".join(f"{bwd[s] * 1e3:.3f}" for s in sorted(fwd)),
            **({f"stage_bwd_{n}_s": ",".join(f"{dur[(s, k)] * 1e3:.3f}" for s in sorted(fwd))
                for n, k in (("input", "I"), ("weight", "W"))} if split else {}),
            "_replay_rank": rp.bubble, "_dur": dur, "_n_stages": n_stages}


def _chunk_times(dur: dict, n_stages: int, split: bool) -> tuple[float, float, float]:
    """One chunk's F, I and W for the theory formulas: means over stages (I over the stages that
    have input-gradient work: the first has none); a full backward B counts as I = W = B / 2 (the
    fill-drain formulas of the schedules that do not split it do not depend on the times)."""
    stages = range(n_stages)
    f = float(np.mean([dur[(s, "F")] for s in stages]))
    if not split:
        b = float(np.mean([dur[(s, "B")] for s in stages]))
        return f, b / 2, b / 2
    ins = [dur[(s, "I")] for s in stages if dur[(s, "I")] > 0]
    return f, float(np.mean(ins)) if ins else 0.0, float(np.mean([dur[(s, "W")] for s in stages]))


def exact_columns(case: CaseSpec, order: dict, world: int) -> dict:
    """The timed workload: the schedule's own order replayed with the known action times (the
    exact bubble, per rank and mean). Empty for the other models."""
    spec = get_spec(case.model)
    if not spec.times_known:
        return {}
    balance = validate(schedule=case.schedule, stages=world, chunks=case.chunks, batch=case.batch, depth=spec.depth,
                       balance=case.balance, strict=False, preset=spec.preset)
    dur = exact_durations(spec, split_pieces(spec, balance), get_schedule(case.schedule).split_backward, case.tp)
    rx = replay(order, dur, len(balance))
    return {"bubble_exact": rx.mean_bubble, "exact_step_s": rx.step_s, "_exact_rank": rx.bubble, "_dur": dur}


def _per_step(facts: list[dict], nodes: int) -> list:
    """Each timed step's per-rank breakdown (bench.training.breakdown)."""
    per_step = []
    for k in range(len(facts[0]["recs"])):
        spans = {r: f["recs"][k]["span"] for r, f in enumerate(facts)}
        comp = {r: [(a, b) for kind, _, _, a, b in f["recs"][k]["spans"] if kind in COMPUTE_KINDS]
                for r, f in enumerate(facts)}
        waits = {r: f["recs"][k]["waits"] for r, f in enumerate(facts)}
        if nodes > 1:  # clocks of different hosts are not comparable: align each rank at its barrier exit
            al = {r: aligned(f["recs"][k]) for r, f in enumerate(facts)}
            spans, comp, waits = ({r: a[i] for r, a in al.items()} for i in range(3))
        per_step.append(breakdown(spans, comp, waits))
    return per_step


def _rank_rows(key: dict, facts: list[dict], per_step: list, hosts: list[str], step_s: float) -> tuple[list, list]:
    """(strategy_ranks rows: each rank's medians over the steps, strategy_steps rows: each step)."""
    kinds = {r: [kind_totals(rec["spans"]) for rec in f["recs"]] for r, f in enumerate(facts)}
    ranks, steps_rows = [], []
    for r in range(len(facts)):
        col = {n: float(np.median([getattr(bd[r], n) for bd in per_step]))
               for n in ("compute_s", "idle_s", "exposed_comm_s", "overhead_s", "own_span_s")}
        parts = {f"{n}_s": float(np.median([t[n] for t in kinds[r]])) for n in _PARTS}
        stalls: dict = {}  # seconds of waiting charged to each rank, summed over the timed steps
        for bd in per_step:
            for q, sec in bd[r].stalled_by:
                stalls[q] = stalls.get(q, 0.0) + sec
        mem = facts[r]["mem"]
        ranks.append({**key, "rank": r, "host": hosts[r], "role": facts[r]["role"], "step_wall_s": step_s,
                      **col, **parts, "bubble": float(np.median([bd[r].bubble for bd in per_step])),
                      "nocompute_frac": 1.0 - col["compute_s"] / step_s if step_s > 0 else float("nan"),
                      "solo_compute_s": facts[r]["solo_s"], **mem, "peak_bytes": peak_bytes(mem),
                      "stalled_by": ",".join(f"{q}:{sec / len(per_step):.6f}" for q, sec in sorted(stalls.items()))})
        for k, bd in enumerate(per_step):
            b = bd[r]
            steps_rows.append({**key, "step": k, "rank": r, "step_wall_s": b.step_wall_s, "own_span_s": b.own_span_s,
                               "compute_s": b.compute_s, "idle_s": b.idle_s, "exposed_comm_s": b.exposed_comm_s,
                               "overhead_s": b.overhead_s, **{f"{n}_s": kinds[r][k][n] for n in _PARTS}})
    return ranks, steps_rows


def build_tables(case: CaseSpec, res: dict, base_row: dict, hosts: list[str], nodes: int) -> dict:
    """Rank 0: results row, per-rank rows, per-step rows."""
    facts, world = res["facts"], len(res["facts"])
    spec = get_spec(case.model)
    per_step = _per_step(facts, nodes)
    walls = [bd[0].step_wall_s for bd in per_step]
    st = summarize(walls)
    key = {"run_id": base_row["run_id"], "case_id": case.case_id}
    ranks, steps_rows = _rank_rows(key, facts, per_step, hosts, st.median_s)
    devices = world * facts[0]["devices"]
    sps = case.batch / st.median_s
    tps = sps * spec.tokens_per_sample
    degraded = facts[0]["degraded"] or base_row["degraded"]
    if _pipelined(case) and base_row.get("device_type") == "cuda":
        degraded = with_note(degraded, CUDA_WAITS_UNVERIFIED)
    if _pipelined(case) and nodes > 1:
        degraded = with_note(degraded, MULTI_NODE_ALIGNED)
    spin_cols, drifted = spin.columns([f.get("spin") for f in facts])
    degraded = with_note(degraded, drifted)
    mean = lambda n: float(np.mean([x[n] for x in ranks]))  # noqa: E731
    dims = case.dims
    row = {**base_row, "case_id": case.case_id, "world": world, "degraded": degraded, "strategy": case.strategy,
           "layout": dims.layout, "pp_degree": dims.pp, "dp_degree": dims.dp_replicate, "fsdp_degree": dims.dp_shard,
           "tp_degree": dims.tp,
           "model": case.model, "family": spec.family, "params": facts[0]["params"], "devices": devices,
           "chunks": case.chunks, "schedule": case.schedule, "checkpoint": case.checkpoint, "batch": case.batch,
           "micro_batch": case.samples_per_micro_batch, "sweep_mode": case.sweep_mode,
           "balance": ",".join(map(str, case.balance)), "bucket_cap_mb": case.bucket_cap_mb,
           "steps": st.n, **st.columns("step_"), **spin_cols, "samples_per_s": sps, "samples_per_s_per_device": sps / devices,
           "tokens_per_s": tps if spec.family == "gpt" else float("nan"),
           "tokens_per_s_per_device": tps / devices if spec.family == "gpt" else float("nan"),
           "fwd_s": mean("fwd_s"), "bwd_s": mean("bwd_s"), "recompute_s": mean("recompute_s"),
           "bwd_input_s": mean("bwd_input_s"), "bwd_weight_s": mean("bwd_weight_s"),
           "compute_s": mean("compute_s"), "exposed_comm_s": mean("exposed_comm_s"), "idle_s": mean("idle_s"),
           "overhead_s": mean("overhead_s"), "comm_in_compute": bool(facts[0]["comm_in_compute"]),
           "solo_compute_s": mean("solo_compute_s"),
           # ddp/fsdp: forward+backward spans minus the same compute alone (no comm) = exposed comm
           "exposed_comm_est_s": max(0.0, mean("compute_s") - mean("solo_compute_s"))
           if facts[0]["comm_in_compute"] and np.isfinite(mean("solo_compute_s")) else float("nan"),
           "memory_kind": ranks[0]["memory_kind"], **peak_columns(ranks),
           "loss": res["loss"], "tolerance": TOLERANCE, "profile_trace": res.get("trace")}
    est = row["exposed_comm_est_s"] if np.isfinite(row["exposed_comm_est_s"]) else 0.0
    row["comm_share"] = (row["exposed_comm_s"] + est) / st.median_s if st.median_s > 0 else float("nan")
    chk = res["check"]
    row.update({"checks": 1 if chk else 0, "wrong": chk["wrong"] if chk else 0,
                "max_abs_diff": chk["max_abs_diff"] if chk else float("nan")})
    if _pipelined(case):
        row.update(_pipeline_columns(case, facts, ranks, dims.pp, mean))
    k_med = int(np.argsort(walls)[len(walls) // 2])
    spans = [] if nodes > 1 else step_spans(key, facts, k_med, per_step[k_med])
    return {"results": [row], "strategy_ranks": ranks, "strategy_steps": steps_rows, "strategy_spans": spans}


def _pipeline_columns(case: CaseSpec, facts: list[dict], ranks: list[dict], world: int, mean) -> dict:
    """The pipeline row's bubble columns: measured, theory (GPipe, Megatron, the schedule's own),
    replay, and on the timed workload the exact bubble; per-rank replay and exact into `ranks`.
    `world`: the pipeline ranks (the pp degree of a composed layout, whose dp / tp peers of a
    pipeline rank share its replayed and exact bubble)."""
    sch = get_schedule(case.schedule)
    p, v = world, sch.per_rank
    dims = case.dims
    rc = _replay_columns(case, facts)
    per_rank_replay, dur, n_stages = rc.pop("_replay_rank"), rc.pop("_dur"), rc.pop("_n_stages")
    ex = exact_columns(case, facts[0]["order"], world)
    per_rank_exact = ex.pop("_exact_rank", {})
    times = _chunk_times(ex.pop("_dur", dur), n_stages, sch.split_backward)  # known times (timed workload) or measured
    for x in ranks:
        pr = dims.coords(x["rank"])["pp"]  # the replay's and the exact bubble's ranks are pipeline ranks
        x["replay_bubble"] = float(per_rank_replay.get(pr, float("nan")))
        x["bubble_exact"] = float(per_rank_exact.get(pr, float("nan")))
    out = {"stages": p * v, "stage_placement": sch.placement, "bubble_measured": mean("bubble"),
           "bubble_max": max(x["bubble"] for x in ranks), "nocompute_frac": mean("nocompute_frac"),
           "bubble_gpipe_theory": gpipe_bubble(p, case.chunks, v), "bubble_megatron_theory": megatron_bubble(p, case.chunks, v),
           "bubble_theory": sch.theory(p, case.chunks, v, *times), "bubble_theory_formula": sch.formula,
           "bubble_exact": float("nan"), "exact_step_s": float("nan"), **rc, **ex}
    out["comm_overhead_frac"] = out["nocompute_frac"] - out["replay_bubble"]
    return out


def _minus(a: float, b: float, holes) -> list[tuple[float, float]]:
    """[a, b) without the intervals `holes` (sorted, disjoint)."""
    out, t = [], a
    for c, d in holes:
        if d <= t or c >= b:
            continue
        if c > t:
            out.append((t, c))
        t = max(t, d)
    if t < b:
        out.append((t, b))
    return out


def step_spans(key: dict, facts: list[dict], k: int, bd: dict | None = None) -> list[dict]:
    """Every rank's actions in timed step k (the median-wall step), in seconds from the step's
    earliest start over ranks: compute (fwd / bwd / bwd_input / bwd_weight / recompute, with stage
    and micro-batch) and its p2p waits split by the step's breakdown `bd` into waiting for a peer
    (wait: bubble) and the transfer (comm). One host's clock only (the caller skips multi-node launches)."""
    t0 = min(f["recs"][k]["span"][0] for f in facts)
    out = []
    for r, f in enumerate(facts):
        rec = f["recs"][k]
        for kind, stage, mb, a, b in rec["spans"]:
            out.append({**key, "step": k, "rank": r, "stage": int(stage), "micro_batch": int(mb), "action": kind,
                        "start_s": a - t0, "end_s": b - t0})
        idle = list(bd[r].wait_pieces) if bd is not None else []
        for a, b in idle:
            out.append({**key, "step": k, "rank": r, "stage": -1, "micro_batch": -1, "action": "wait",
                        "start_s": a - t0, "end_s": b - t0})
        for w in rec["waits"]:
            for a, b in _minus(float(w[0]), float(w[1]), idle):
                out.append({**key, "step": k, "rank": r, "stage": -1, "micro_batch": -1, "action": "comm",
                            "start_s": a - t0, "end_s": b - t0})
        out.append({**key, "step": k, "rank": r, "stage": -1, "micro_batch": -1, "action": "step",
                    "start_s": rec["span"][0] - t0, "end_s": rec["span"][1] - t0})
    return out


def efficiency_curve(cfg, device, run_id: str, world: int) -> list[dict]:
    """One process, the whole model, one pipeline's mini-batch run as m sequential chunks: how much
    per-sample speed small micro-batches cost on this device (no pipeline, no communication).
    At the launch's `world` (a pipeline config: stages x dp x fsdp x tp) a pipeline has
    world / (dp x fsdp x tp) stages and gets batch / (dp x fsdp) samples: the curve's batch, its
    micro-batches (batch / m) and the ideal p-stage step use those."""
    dims = cfg.dims(world, world // cfg.inner)
    stages, batch = dims.pp, dims.local_batch(cfg.batch)
    spec = get_spec(cfg.model)
    model = build_model(spec, cfg.seed).to(device)
    lf = loss_fn(spec)
    x, y = Batches(spec, batch, 1, cfg.seed).next(device)
    rows, base = [], None
    for m in sorted(set(cfg.chunks)):
        if batch % m:
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
        sps = batch / st.median_s
        base = base or (sps if m == min(cfg.chunks) else None)
        rows.append({"run_id": run_id, "case_id": f"efficiency.{cfg.model}.b{batch}.m{m}", "model": cfg.model,
                     "batch": batch, "chunks": m, "micro_batch": batch // m, **st.columns("step_"),
                     "samples_per_s": sps, "relative_throughput": sps / base if base else float("nan"),
                     # what an ideal p-stage GPipe would take with these chunk times (no comm):
                     "ideal_pipeline_step_s": st.median_s * (m + stages - 1) / (m * stages), "stages": stages})
    return rows


def measure(case: CaseSpec, launch) -> dict:
    """Every rank: one strategy / pipeline case inside its telemetry window; tables on rank 0."""
    with launch.tel.case(case.case_id, strategy=case.strategy, model=case.model) as tc:
        cfg = launch.job.config
        res = measure_case(case, cfg, launch.comm, RunDir.of(cfg, launch.run_id).path, energy=tc.energy)
    if launch.info.rank != 0:
        return {}
    tables = build_tables(case, res, launch.base_row(), launch.hosts, launch.nodes)
    tables["results"][0].update(tc.summary)
    tables["results"][0].update(timed_throttle(tc.rows, timed_windows(res["facts"], launch.node_ranks)))  # timed steps only
    return tables
