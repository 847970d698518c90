"""Composed layouts, predicted: pipeline ranks x dp x fsdp x tp (the mesh of bench.training.layout)
from a calibrated pipeline (bench.plan.model) and the communication of the target machine
(bench.plan.comm). Every term below is a prediction; the sizes come from the model's
shapes (bench.training.footprint), the times from the calibration and the collectives fits.

For a candidate (p pipeline ranks, dp replicas, fsdp shards, tp degree, schedule, m micro-batches of
b samples each, b = batch / (dp x fsdp x m)):

  base        the calibration with dp x fsdp x tp ranks per pipeline rank (on a shared host its
              stage times carry that many ranks computing at once), else the nearest (marked)
  action      t(s, k, b) / tp + o                        (stage compute split over the tp group)
    + tp      F: rows(s) x all_reduce(tp, b x boundary)   (a Rowwise layer's output, Megatron's g)
              B, I: cols(s) x all_reduce(tp, b x boundary) (a Colwise layer's input gradient, f)
    + fsdp    F, B, I where the stage is sharded: sum over its pieces of all_gather(fsdp, p x 4 B)
              (FSDP2 shards each piece on its own; torch's pipelining reshards after every forward
              and keeps the parameters between backward micro-batches: fsdp_gathers)
    + p2p     the calibration's link (or its overhead), as for a pipeline alone
  step        replay(torch's order) + c
    + dp      all_reduce(dp, P_r / tp x 4 B)              (gradients, once after the last backward)
    + fsdp    sum over pieces of reduce_scatter(fsdp, p x 4 B) (gradients, once: after the last backward)
    - the base's own dp all-reduce, which its c holds (floored at c = 0)
  memory      base[r] - states(base layout) + states(candidate) + q x held x b x A_tp / A_1
              states: P x (4 B params + 4 B grads + optimizer) / fsdp, + 4 B x P gradient buckets
              (dp alone), + 8 B x the largest piece (fsdp: one piece gathered with its gradient)

rows(s) / cols(s): the Rowwise / Colwise modules of the stage's TP plan (bench.training.tp.plan:
an MLP pair has one of each, a GPT block 2 and 4; the timed family's tp plan one of each per
block), less the first stage's first backward one (the model's input needs no gradient). P_s: the stage's parameters as one tp rank holds them; P_r: the pipeline rank's stages'.
"""

from dataclasses import dataclass

import numpy as np

from bench.errors import BenchError
from bench.plan import model as pl
from bench.plan.comm import Comm, scopes
from bench.training import schedules as scheds
from bench.training.footprint import OPTIMIZER, OPTIMIZER_STATE_BYTES, PARAM_BYTES, stage_acts_per_sample, stage_pieces
from bench.training.replay import replay
from bench.workloads.specs import ModelSpec, even_balance, split_pieces


def tp_counts(spec: ModelSpec, lo: int, hi: int) -> tuple[int, int]:
    """(all-reduces in a forward, in a backward) of pieces [lo, hi) under tp (bench.training.tp.plan).
    The model's input needs no gradient: on the first stage of the MLP and timed families the first
    piece's backward all-reduce (of the input gradient) is never run."""
    first = 1 if lo == 0 else 0
    if spec.family == "timed":
        return hi - lo, hi - lo - first
    if spec.family == "mlp":
        return (hi - lo) // 2, max(0, (hi - lo) // 2 - first)
    blocks = len([i for i in range(lo, hi) if 1 <= i <= spec.depth])
    return 2 * blocks, 4 * blocks


def states(params: float, pieces: list[float], dp: int, fsdp: int) -> float:
    """Bytes of parameters, gradients and optimizer state a rank holds (bench.training.footprint.layout_ranks)."""
    out = params * (2 * PARAM_BYTES + OPTIMIZER_STATE_BYTES[OPTIMIZER]) / fsdp
    if dp > 1 and fsdp == 1:
        out += PARAM_BYTES * params
    if fsdp > 1:
        out += 2 * PARAM_BYTES * max(pieces)
    return out


def at_once(cand: pl.Candidate, degree: int) -> int:
    """How many groups of `degree` ranks the candidate runs at once: every group of a mesh dimension
    works in the same step (the stages overlap in a pipeline's steady state), world / degree."""
    return max(1, cand.world // max(degree, 1))


def fsdp_gathers(order: dict) -> set:
    """The actions (stage, kind, micro-batch) that all-gather their stage's parameters under FSDP2
    in torch.distributed.pipelining: a stage starts the step sharded; a forward gathers if sharded
    and reshards after (reshard_after_forward); a backward (B or I) gathers if sharded and keeps
    them (the stage calls set_reshard_after_backward(False) before every backward micro-batch but
    the last; the gradients are reduced once, after the last). In GPipe: every F and the first B;
    in 1F1B's steady state each B (after an F) and no F (after a B). The multi-stage schedules
    (_PipelineScheduleRuntime) unshard each stage before its first action, outside it: counted
    here as that first action's gather (the same gathers at the same place on the rank's timeline).
    tests/test_fsdp_gathers_torch.py counts what torch gathers, action by action."""
    out = set()
    for acts in order.values():
        sharded: dict = {}
        for s, k, i in acts:
            if k in ("F", "B", "I"):
                if sharded.get(s, True):
                    out.add((s, k, i))
                sharded[s] = k == "F"
    return out


def _stage_comm(spec, cand, comm: Comm, where: dict, bounds, notes: list) -> tuple[dict, dict]:
    """((stage, kind) -> seconds of its tp all-reduces per action, stage -> seconds of one FSDP gather:
    an all-gather per piece)."""
    act = cand.micro_batch * spec.boundary_bytes_per_sample
    out, gather = {}, {}
    for s, (lo, hi) in enumerate(bounds):
        rows, cols = tp_counts(spec, lo, hi)
        ar, n1 = comm.seconds("all_reduce", cand.tp, act, where["tp"], at_once(cand, cand.tp))
        ags = [comm.seconds("all_gather", cand.fsdp, p * PARAM_BYTES, where["fsdp"], at_once(cand, cand.fsdp))
               for p in stage_pieces(spec, lo, hi, cand.tp)]
        notes += [n for n in (n1, *(n for _, n in ags)) if n]
        gather[s] = sum(t for t, _ in ags)
        out.update({(s, "F"): rows * ar, (s, "B"): cols * ar, (s, "I"): cols * ar, (s, "W"): 0.0})
    return out, gather


def _rank_params(spec, sch, r: int, p: int, bounds, tp: int) -> tuple[float, list[float]]:
    pieces = [x for i in sch.stage_ids(r, p) for x in stage_pieces(spec, *bounds[i], tp)]
    return sum(pieces), pieces


def base_for(cals: dict, cand: pl.Candidate) -> pl.Calibration:
    """The pipeline calibration whose stage times a composed candidate starts from: one that measured
    the candidate's model depth at the candidate's world (on a shared host a stage time carries as
    many ranks computing at once as its run had), with dp x fsdp x tp ranks per pipeline rank where
    there is one, else the nearest such degree; with none, the calibration of that many ranks per
    pipeline rank, else the nearest (pl.layout_for)."""
    k = cand.dp * cand.fsdp * cand.tp
    same = [c for c in cals.values() if measured_at(c, cand)]
    return min(same, key=lambda c: (abs(c.dp - k), c.dp)) if same else pl.layout_for(cals, k)


def measured_at(cal: pl.Calibration, cand: pl.Candidate) -> bool:
    """Did the calibration measure the candidate's model depth at the candidate's world?"""
    n = pl.model_stages(cand.schedule, cand.stages)
    return any(r * cal.dp == cand.world and pl.model_stages(name, r) == n for r, name, *_ in cal.configs)


@dataclass(frozen=True, kw_only=True)
class Actions:
    """A composed candidate's actions, term by term (the module's docstring): each (stage, kind)'s
    share of the stage compute, its tp all-reduces, each stage's FSDP gather and the actions that
    gather."""

    cal: pl.Calibration
    order: dict
    n: int
    bounds: list
    compute: dict  # (stage, kind) -> seconds: t(s, k, b) / tp
    comm: dict  # (stage, kind) -> seconds of its tp all-reduces
    gather: dict  # stage -> seconds of one FSDP gather (an all-gather per piece)
    gathers: set  # (stage, kind, micro-batch) that gather


def actions(cals: dict, cand: pl.Candidate, comm: Comm, spec: ModelSpec, order_of, where: dict,
            notes: list) -> Actions:
    """The terms of a composed candidate's actions, priced as compose and fit_host both use them
    (notes: where a collective was not measured as the layout runs it)."""
    cal = base_for(cals, cand)
    order, n = order_of(cand.schedule, cand.stages, cand.chunks), pl.model_stages(cand.schedule, cand.stages)
    bounds = split_pieces(spec, even_balance(spec.depth, n))
    costs = pl.scaled_costs(cal, n, cand.checkpoint)
    comm_act, gather = _stage_comm(spec, cand, comm, where, bounds, notes)
    return Actions(cal=cal, order=order, n=n, bounds=bounds, comm=comm_act, gather=gather,
                   compute={key: t / cand.tp for key, t in pl.durations(costs, order, cand.micro_batch).items()},
                   gathers=fsdp_gathers(order) if cand.fsdp > 1 else set())


@dataclass(frozen=True, kw_only=True)
class HostCost:
    """What actions of a tp / fsdp layout cost beyond their share of the stage compute and their
    collectives as a communication run prices them (DTensor's dispatch per sharded module and its
    narrower GEMMs; FSDP2's hooks, the copies into and out of its gathers), fitted on measured runs
    of that layout at another pipeline depth (fit_host): an action takes compute x its share of
    the stage compute + comm x its priced collectives."""

    tp: int
    fsdp: int
    compute: float  # factor on t(s, k, b) / tp
    comm: float  # factor on the action's priced tp all-reduces and FSDP gathers
    cases: int
    layouts: tuple[str, ...]  # the measured layouts it was fitted on, e.g. ('pp1 tp2',)
    runs: tuple[str, ...]

    @property
    def name(self) -> str:  # 'tp2', 'fsdp2'
        return pl.layout_label(1, 1, self.tp, self.fsdp).removeprefix("pp1 ")

    def label(self) -> str:
        return (f"{self.name} host cost from "
                f"{'/'.join(self.layouts)} ({self.cases} case(s)): compute x{self.compute:.2f}, "
                f"collectives x{self.comm:.2f}")


def fit_host(obs: list[pl.Observation], cals: dict, comm: Comm, spec: ModelSpec, order_of, *,
             ranks_per_node: int = 0, tp_across: bool = False) -> dict:
    """{(tp, fsdp): HostCost} of the composed layouts measured among `obs`: per layout the two
    factors by non-negative least squares on the relative error of each measured (stage, kind)
    median per micro-batch (scipy.optimize.nnls), against the terms the composition prices for the
    same case: y = compute x t(s, k, b) / tp + comm x (its all-reduces + the median over its
    micro-batches of its gathers). With no collective priced the comm factor stays 1. A case the
    composition cannot price (a checkpoint mode the pipelines never ran) is left out of the fit; it
    is still its own layout's measured calibration."""
    from scipy.optimize import nnls  # lazy: scipy only when a plan is calibrated

    rows: dict = {}
    for o in obs:
        if o.tp == o.fsdp == 1:
            continue
        cand = pl.Candidate(stages=o.stages, schedule=o.schedule, chunks=o.chunks, micro_batch=o.micro_batch,
                            checkpoint=o.checkpoint, dp=o.dp, tp=o.tp, fsdp=o.fsdp)
        try:
            got = actions(cals, cand, comm, spec, order_of, scopes(o.tp, o.fsdp, o.dp, ranks_per_node, tp_across),
                          [])
        except BenchError:
            continue
        mbs: dict = {}
        for acts in got.order.values():
            for s, k, i in acts:
                mbs.setdefault((s, k), []).append(got.gather[s] if (s, k, i) in got.gathers else 0.0)
        for key, y in o.stage_s.items():
            if key in got.compute and y > 0:
                priced = got.comm.get(key, 0.0) + float(np.median(mbs.get(key, [0.0])))
                rows.setdefault((o.tp, o.fsdp), []).append((got.compute[key] / y, priced / y, o))
    out = {}
    for (tp, fsdp), mine in sorted(rows.items()):
        a = np.array([[c, x] for c, x, _ in mine])
        if not a[:, 1].any():
            f, h = float(np.sum(a[:, 0]) / np.sum(a[:, 0] ** 2)), 1.0
        else:
            (f, h), _ = nnls(a, np.ones(len(a)))
        out[(tp, fsdp)] = HostCost(tp=tp, fsdp=fsdp, compute=float(f), comm=float(h),
                                   cases=len({id(o) for *_, o in mine}),
                                   layouts=tuple(sorted({pl.layout_label(o.stages, o.dp, o.tp, o.fsdp)
                                                         for *_, o in mine})),
                                   runs=tuple(sorted({o.run_id for *_, o in mine})))
    return out


def compose(cals: dict, cand: pl.Candidate, comm: Comm, spec: ModelSpec, order_of, *, ranks_per_node: int = 0,
            tp_across: bool = False, to: str = "", how: str = "", link: pl.Link | None = None,
            host: HostCost | None = None) -> pl.Prediction:
    """A composed candidate predicted (the module's docstring has every term); `link`: the target's
    p2p between pipeline ranks (--target-p2p), default the calibration's; `host`: the layout's
    fitted host cost (fit_host), else its actions cost their compute share and collectives alone."""
    k = cand.dp * cand.fsdp * cand.tp
    where = scopes(cand.tp, cand.fsdp, cand.dp, ranks_per_node, tp_across)
    notes: list = []
    got = actions(cals, cand, comm, spec, order_of, where, notes)
    cal, order, n, bounds = got.cal, got.order, got.n, got.bounds
    labels = "/".join(pl.layout_label(r, cal.dp) for r in cal.ranks)  # the calibration's own layouts, e.g. pp2/pp4
    if cal.dp != k:
        where_k = f" at world {cand.world}" if k in cals else ""  # calibrated at other worlds only
        notes.insert(0, f"{k} rank(s) per stage not calibrated{where_k} (stage times of the {labels} calibration)")
    sch = scheds.get(cand.schedule)
    o, o_why = cal.overhead_for(cand.stages, cand.schedule)
    once, once_why = cal.step_overhead_for(cand.stages)
    f, h = (host.compute, host.comm) if host else (1.0, 1.0)
    comm_act = {key: h * t for key, t in got.comm.items()}
    gather = {s: h * t for s, t in got.gather.items()}
    if link is not None and cal.link is None:
        raise BenchError("a target p2p link needs a calibration with its own (--p2p): without, the calibrated "
                         "overhead already holds the calibration machine's transfers")
    p2p = pl.transfers(cand.schedule, cand.stages, order, cand.micro_batch, link or cal.link, cal.boundary_bytes)
    if link is not None and link != cal.link:
        notes.append(f"p2p from {link.source}, not the calibration's link ({cal.link.source})")
    alone = {key: f * t for key, t in got.compute.items()}
    dur = {key: t + (o if key[1] in pl.SENDING else 0.0) + p2p.get(key, 0.0) + comm_act.get(key, 0.0)
           for key, t in alone.items()}
    gathers = got.gathers
    dur.update({(s, k, i): dur[(s, k)] + gather[s] for s, k, i in gathers})
    compute = replay(order, alone)
    per_step, memory = {"dp_all_reduce_s": 0.0, "fsdp_reduce_scatter_s": 0.0}, []
    held, base = pl.inflight(order), cal.base_bytes.get(n) or next(iter(cal.base_bytes.values()), {})
    q = cal.bytes_per_inflight_sample.get(cand.checkpoint, 0.0)
    undo = 0.0
    for r in range(cand.stages):
        params, pieces = _rank_params(spec, sch, r, cand.stages, bounds, cand.tp)
        full, full_pieces = _rank_params(spec, sch, r, cand.stages, bounds, 1)
        ar, n1 = comm.seconds("all_reduce", cand.dp, params * PARAM_BYTES, where["dp"], at_once(cand, cand.dp))
        rss = [comm.seconds("reduce_scatter", cand.fsdp, p * PARAM_BYTES, where["fsdp"], at_once(cand, cand.fsdp))
               for p in pieces]
        rs, n2 = sum(t for t, _ in rss), "; ".join(dict.fromkeys(n for _, n in rss if n))
        mine, _ = comm.seconds("all_reduce", cal.dp, full * PARAM_BYTES, "intra", cand.stages)
        notes += [x for x in (n1, n2) if x]
        per_step["dp_all_reduce_s"] = max(per_step["dp_all_reduce_s"], ar)
        per_step["fsdp_reduce_scatter_s"] = max(per_step["fsdp_reduce_scatter_s"], rs)
        undo = max(undo, mine)
        ids = sch.stage_ids(r, cand.stages)
        ratio = (sum(stage_acts_per_sample(spec, *bounds[i], cand.tp) for i in ids)
                 / max(sum(stage_acts_per_sample(spec, *bounds[i], 1) for i in ids), 1e-30))
        memory.append(base.get(r, max(base.values()) if base else 0.0) - states(full, full_pieces, cal.dp, 1)
                      + states(params, pieces, cand.dp, cand.fsdp) + q * held.get(r, 0) * cand.micro_batch * ratio)
    step = replay(order, dur).step_s + max(0.0, once - undo) + sum(per_step.values())
    busiest = max(sum(comm_act.get((s, kk), 0.0) + (gather[s] if (s, kk, i) in gathers else 0.0)
                      for s, kk, i in acts) for acts in order.values())
    target = to or cal.machine
    moved = f"calibrated on {cal.machine}, predicted for {target} ({how})" if target != cal.machine else ""
    off = (f"communication measured on {comm.machine}, predicted for {target}"
           if comm.machine and comm.machine != target else "")
    return pl.Prediction(candidate=cand, step_s=step, samples_per_s=cand.batch / step, bubble=compute.mean_bubble,
                         peak_bytes=max(memory), calibrated_on=cal.machine, predicted_for=target,
                         comm_source=comm.source + (f"; {host.label()}" if host else ""),
                         comm_s={"tp_fsdp_per_action_s": busiest, **per_step},
                         extrapolated="; ".join(dict.fromkeys(filter(None, [
                             moved, off, *notes, cal.extrapolation(n, cand.micro_batch, cand.checkpoint), o_why,
                             once_why, "" if comm.fits else comm.source]))))
