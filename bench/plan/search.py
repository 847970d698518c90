"""The planner's search: every candidate layout (pipeline ranks x data-parallel replicas x FSDP
shards x tensor-parallel degree, schedule, micro-batch count, checkpoint mode) that can run a
mini-batch, each predicted (bench.plan.model for a calibrated pp x dp layout,
bench.plan.compose for tp or fsdp inside the stages), ranked under a memory limit, and why
the best won."""

from dataclasses import dataclass, field

from bench.errors import BenchError
from bench.plan import model as pl
from bench.plan import comm as plan_comm
from bench.plan.compose import compose, measured_at
from bench.plan.fit import Spread
from bench.training import schedules as scheds
from bench.training.dims import check_tp as tp_validate
from bench.workloads.specs import get_spec


@dataclass(frozen=True, kw_only=True)
class Where:
    """What a composed prediction needs beside the calibration: the target machine's communication
    (plan_comm), its ranks per node (0: one node) and whether tp may cross nodes."""

    comm: plan_comm.Comm = field(default_factory=plan_comm.none)
    ranks_per_node: int = 0
    tp_across: bool = False
    measured: dict = field(default_factory=dict)  # (dp, fsdp, tp) -> Calibration of a measured composed layout
    host: dict = field(default_factory=dict)  # (tp, fsdp) -> plan_compose.HostCost fitted on measured ones


def _layouts(dps, tps, fsdps) -> list[tuple[int, int, int]]:
    """(dp, fsdp, tp) to consider: dp x fsdp (HSDP) is not a candidate; nor fsdp with dp."""
    return [(dp, f, tp) for dp in dps for f in fsdps for tp in tps if dp == 1 or f == 1]


def _why_not(spec, sch, p: int, m: int, batch: int, dp: int, fsdp: int, tp: int) -> str | None:
    if fsdp > 1 and sch.split_backward:
        return "fsdp inside the stages is refused with split-backward schedules (bench.training.layout.check_dims)"
    if sch.rule(p, m):
        return sch.rule(p, m)
    if batch % (dp * fsdp * m):
        return f"batch {batch} is not divisible by dp x fsdp x chunks {dp * fsdp * m}"
    if tp > 1 and spec is not None:
        try:
            tp_validate(spec, tp)
        except BenchError as e:
            return str(e)
    return None


def candidates(cals: dict, stages, schedules, chunks, batch, checkpoints=None,
               dps=None, tps=(1,), fsdps=(1,), worlds=None) -> tuple[list[pl.Candidate], list[str]]:
    """Every (pipeline ranks, dp, fsdp, tp, schedule, chunks, checkpoint mode) that can run the
    mini-batch (at `worlds` only, where given): each data-parallel slice (dp x fsdp of them) takes
    batch / (dp x fsdp) samples in `chunks` micro-batches; the tp ranks of a stage share theirs."""
    spec = get_spec(next(iter(cals.values())).model) if any(t > 1 for t in tps) else None
    out, skipped = [], []
    for dp, fsdp, tp in _layouts(dps or sorted(cals), tps, fsdps):
        modes = checkpoints or pl.layout_for(cals, dp * fsdp * tp).checkpoints
        for p in (p for p in stages if not worlds or p * dp * fsdp * tp in worlds):
            where = pl.layout_label(p, dp, tp, fsdp)
            for name in schedules:
                sch = scheds.get(name)
                if fsdp > 1 and sch.split_backward:  # once per schedule, not per chunk count
                    skipped.append(f"{where} {sch.name}: {_why_not(None, sch, p, chunks[0], batch, 1, fsdp, 1)}")
                    continue
                for m in chunks:
                    why = _why_not(spec, sch, p, m, batch, dp, fsdp, tp)
                    if why:
                        skipped.append(f"{where} {sch.name} m={m}: {why}")
                        continue
                    try:
                        scheds.torch_class(sch.name)
                    except BenchError as e:
                        skipped.append(f"{sch.name}: {e}")
                        break
                    out += [pl.Candidate(stages=p, dp=dp, fsdp=fsdp, tp=tp, schedule=sch.name, chunks=m,
                                         micro_batch=batch // (dp * fsdp * m), checkpoint=c) for c in modes]
    return out, skipped


def predict(cals: dict, cand: pl.Candidate, link: pl.Link | None = None, to: str = "", how: str = "",
            where: Where | None = None) -> pl.Prediction:
    """A candidate predicted with its layout's calibration (else the nearest layout's, marked), for
    the machine `to` (default the calibration's; `how` the option that mapped it). tp or fsdp inside
    the stages, or a dp degree not calibrated when a communication calibration is given, is composed
    (bench.plan.compose) with `where`'s communication and the layout's fitted host cost; a
    composed layout the calibration measured at the candidate's pipeline depth is predicted as measured."""
    where = where or Where()
    mine = where.measured.get((cand.dp, cand.fsdp, cand.tp)) if cand.composed else None
    if mine is not None and cand.stages in mine.ranks:  # a composed layout the calibration measured: as measured
        return pl.predict(mine, cand, pl.torch_order, link=link, target=to, mapped_by=how)
    if cand.composed or (where.comm.fits and _elsewhere(cals, cand)):
        return compose(cals, cand, where.comm, get_spec(next(iter(cals.values())).model), pl.torch_order,
                       ranks_per_node=where.ranks_per_node, tp_across=where.tp_across, to=to, how=how, link=link,
                       host=where.host.get((cand.tp, cand.fsdp)))
    return pl.predict(pl.layout_for(cals, cand.dp), cand, pl.torch_order, link=link, target=to, mapped_by=how)


def _elsewhere(cals: dict, cand: pl.Candidate) -> bool:
    """A pp x dp candidate to compose rather than predict with its degree's calibration: that degree
    was not calibrated, or it was at other worlds only while another calibration measured the
    candidate's world and model depth (on a shared host a stage time carries as many ranks computing
    at once as its run had: pp1 x dp2 at world 2 is pp2's stage times plus the all-reduce, not pp2 x
    dp2's at world 4)."""
    mine = cals.get(cand.dp)
    return mine is None or (not measured_at(mine, cand) and any(measured_at(c, cand) for c in cals.values()))


@dataclass(frozen=True, kw_only=True)
class Ranked:
    """A search's outcome: the fitting candidates best first, those over the memory limit, the
    combinations that are no candidate (and why), and every prediction."""

    best: list
    over: list
    skipped: list
    preds: list


def search(cals: dict, *, stages, schedules, chunks, batch, checkpoints=None, dps=None, tps=(1,), fsdps=(1,),
           worlds=None, link: pl.Link | None = None, to: str = "", how: str = "", memory_limit: float | None = None,
           where: Where | None = None) -> Ranked:
    """Every candidate (at `worlds` only, where given), predicted and ranked by throughput."""
    cands, skipped = candidates(cals, stages, schedules, chunks, batch, checkpoints, dps, tps, fsdps, worlds)
    preds = [predict(cals, c, link=link, to=to, how=how, where=where) for c in cands]
    best, over = pl.recommend(preds, memory_limit)
    return Ranked(best=best, over=over, skipped=skipped, preds=preds)


def mib(b: float) -> str:
    return f"{b / 2**20:.0f} MiB"


def why(best: pl.Prediction, preds: list[pl.Prediction], spread: Spread | None = None) -> str:
    """The trade-off behind the pick: the best other micro-batch count of the same schedule, depth
    and checkpoint mode (bubble against per-micro-batch cost), the other checkpoint modes of the
    same configuration (throughput against memory), the best other schedule and the best of each
    other layout. A runner-up predicted less far behind the pick than two launches of one
    calibration configuration differ (plan_fit.launch_spread) is marked: launches may order the two
    either way."""

    def near(slower: float) -> str:
        return (" (within the calibration's launch-to-launch spread)"
                if spread is not None and slower - 1 < spread.difference else "")

    c = best.candidate
    same = [p for p in preds if p is not best and (p.candidate.layout, p.candidate.schedule,
                                                    p.candidate.checkpoint) == (c.layout, c.schedule, c.checkpoint)]
    modes = [p for p in preds if p.candidate.checkpoint != c.checkpoint and (p.candidate.layout,
                                                                             p.candidate.schedule, p.candidate.chunks)
             == (c.layout, c.schedule, c.chunks)]
    other = [p for p in preds if p.candidate.schedule != c.schedule]
    out = [f"why {c.label}: predicted bubble {best.bubble:.0%}"]
    if same:
        s = max(same, key=lambda p: p.samples_per_s)
        trade = ("a smaller bubble does not pay for the smaller, more numerous micro-batches"
                 if s.candidate.chunks > c.chunks else "a larger bubble")
        out.append(f"m={s.candidate.chunks}: bubble {s.bubble:.0%}, {best.samples_per_s / s.samples_per_s:.2f}x slower "
                   f"({trade})" + near(best.samples_per_s / s.samples_per_s))
    for p in modes:  # the memory / recompute trade-off of activation checkpointing
        out.append(f"checkpoint {p.candidate.checkpoint}: {p.samples_per_s / best.samples_per_s:.2f}x the throughput, "
                   f"peak {mib(p.peak_bytes)} against {mib(best.peak_bytes)}")
    if other:
        o = max(other, key=lambda p: p.samples_per_s)
        out.append(f"best other schedule {o.candidate.label}: {best.samples_per_s / o.samples_per_s:.2f}x slower"
                   + near(best.samples_per_s / o.samples_per_s))
    for lay in sorted({p.candidate.layout for p in preds} - {c.layout}):  # the layout question
        o = max((p for p in preds if p.candidate.layout == lay), key=lambda p: p.samples_per_s)
        out.append(f"best {lay}: {o.candidate.label} {best.samples_per_s / o.samples_per_s:.2f}x slower"
                   + near(best.samples_per_s / o.samples_per_s) + (f" ({_terms(o)})" if o.comm_s else ""))
    return "; ".join(out)


def _terms(p: pl.Prediction) -> str:
    """A composed prediction's communication per step, and where it came from."""
    names = {"tp_fsdp_per_action_s": "tp/fsdp in actions", "dp_all_reduce_s": "dp all-reduce",
             "fsdp_reduce_scatter_s": "fsdp reduce-scatter"}
    got = [f"{names[k]} {v * 1e3:.2f} ms" for k, v in p.comm_s.items() if v > 0]
    return ", ".join(got or ["no communication term"]) + f"; comm from {p.comm_source}"


def as_dict(p: pl.Prediction) -> dict:
    """A prediction as a row (the JSON output, the stored predictions)."""
    return {"stages": p.candidate.stages, "dp": p.candidate.dp, "fsdp": p.candidate.fsdp, "tp": p.candidate.tp,
            "layout": p.candidate.layout, "comm_source": p.comm_source, "comm_s": p.comm_s, "schedule": p.candidate.schedule, "chunks": p.candidate.chunks,
            "micro_batch": p.candidate.micro_batch, "checkpoint": p.candidate.checkpoint, "predicted_step_s": p.step_s,
            "predicted_samples_per_s": p.samples_per_s, "predicted_bubble": p.bubble,
            "predicted_peak_bytes": p.peak_bytes, "extrapolated": p.extrapolated, "calibrated_on": p.calibrated_on,
            "predicted_for": p.predicted_for}


def calibration_runs(cals: dict, where: Where | None = None) -> list[str]:
    """The calibration runs of every layout (and of the measured composed ones)."""
    more = list(where.measured.values()) if where else []
    return sorted({r for c in [*cals.values(), *more] for r in c.runs})
