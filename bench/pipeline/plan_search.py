"""The planner's search: every candidate layout (pipeline ranks x data-parallel replicas,
schedule, micro-batch count, checkpoint mode) that can run a mini-batch, each predicted with its
layout's calibration (bench.pipeline.plan), ranked under a memory limit, and why the best won."""

from dataclasses import dataclass

from bench.errors import BenchError
from bench.pipeline import plan as pl
from bench.training import schedules as scheds


def candidates(cals: dict, stages, schedules, chunks, batch, checkpoints=None,
               dps=None) -> tuple[list[pl.Candidate], list[str]]:
    """Every (pipeline ranks, data-parallel replicas, schedule, chunks, checkpoint mode) that can run
    the mini-batch: each replica takes batch / dp samples in `chunks` micro-batches."""
    out, skipped = [], []
    for dp in dps or sorted(cals):
        modes = checkpoints or pl.layout_for(cals, dp).checkpoints
        for p in stages:
            where = pl.layout_label(p, dp)
            for name in schedules:
                sch = scheds.get(name)
                for m in chunks:
                    why = sch.rule(p, m) or (f"batch {batch} is not divisible by dp x chunks {dp * m}"
                                             if batch % (dp * m) else None)
                    if why:
                        skipped.append(f"{where} {sch.name} m={m}: {why}")
                        continue
                    try:
                        scheds.torch_class(sch.name)
                    except BenchError as e:
                        skipped.append(f"{sch.name}: {e}")
                        break
                    out += [pl.Candidate(stages=p, dp=dp, schedule=sch.name, chunks=m, micro_batch=batch // (dp * m),
                                         checkpoint=c) for c in modes]
    return out, skipped


def predict(cals: dict, cand: pl.Candidate, link: pl.Link | None = None, to: str = "", how: str = "") -> pl.Prediction:
    """A candidate predicted with its layout's calibration (else the nearest layout's, marked), for
    the machine `to` (default the calibration's; `how` the option that mapped it)."""
    return pl.predict(pl.layout_for(cals, cand.dp), cand, pl.torch_order, link=link, target=to, mapped_by=how)


@dataclass(frozen=True, kw_only=True)
class Ranked:
    """A search's outcome: the fitting candidates best first, those over the memory limit, the
    combinations that are no candidate (and why), and every prediction."""

    best: list
    over: list
    skipped: list
    preds: list


def search(cals: dict, *, stages, schedules, chunks, batch, checkpoints=None, dps=None, worlds=None,
           link: pl.Link | None = None, to: str = "", how: str = "", memory_limit: float | None = None) -> Ranked:
    """Every candidate (at `worlds` only, where given), predicted and ranked by throughput."""
    cands, skipped = candidates(cals, stages, schedules, chunks, batch, checkpoints, dps)
    if worlds:
        cands = [c for c in cands if c.world in worlds]
    preds = [predict(cals, c, link=link, to=to, how=how) for c in cands]
    best, over = pl.recommend(preds, memory_limit)
    return Ranked(best=best, over=over, skipped=skipped, preds=preds)


def mib(b: float) -> str:
    return f"{b / 2**20:.0f} MiB"


def why(best: pl.Prediction, preds: list[pl.Prediction]) -> str:
    """The trade-off behind the pick: the best other micro-batch count of the same schedule, depth
    and checkpoint mode (bubble against per-micro-batch cost), the other checkpoint modes of the
    same configuration (throughput against memory), and the best other schedule."""
    c = best.candidate
    same = [p for p in preds if p is not best and (p.candidate.stages, p.candidate.dp, p.candidate.schedule,
                                                    p.candidate.checkpoint) == (c.stages, c.dp, c.schedule, c.checkpoint)]
    modes = [p for p in preds if p.candidate.checkpoint != c.checkpoint and (p.candidate.stages, p.candidate.dp,
                                                                             p.candidate.schedule, p.candidate.chunks)
             == (c.stages, c.dp, c.schedule, c.chunks)]
    other = [p for p in preds if p.candidate.schedule != c.schedule]
    out = [f"why {c.label}: predicted bubble {best.bubble:.0%}"]
    if same:
        s = max(same, key=lambda p: p.samples_per_s)
        trade = ("a smaller bubble does not pay for the smaller, more numerous micro-batches"
                 if s.candidate.chunks > c.chunks else "a larger bubble")
        out.append(f"m={s.candidate.chunks}: bubble {s.bubble:.0%}, {best.samples_per_s / s.samples_per_s:.2f}x slower "
                   f"({trade})")
    for p in modes:  # the memory / recompute trade-off of activation checkpointing
        out.append(f"checkpoint {p.candidate.checkpoint}: {p.samples_per_s / best.samples_per_s:.2f}x the throughput, "
                   f"peak {mib(p.peak_bytes)} against {mib(best.peak_bytes)}")
    if other:
        o = max(other, key=lambda p: p.samples_per_s)
        out.append(f"best other schedule {o.candidate.label}: {best.samples_per_s / o.samples_per_s:.2f}x slower")
    return "; ".join(out)


def as_dict(p: pl.Prediction) -> dict:
    """A prediction as a row (the JSON output, the stored predictions)."""
    return {"stages": p.candidate.stages, "dp": p.candidate.dp, "schedule": p.candidate.schedule, "chunks": p.candidate.chunks,
            "micro_batch": p.candidate.micro_batch, "checkpoint": p.candidate.checkpoint, "predicted_step_s": p.step_s,
            "predicted_samples_per_s": p.samples_per_s, "predicted_bubble": p.bubble,
            "predicted_peak_bytes": p.peak_bytes, "extrapolated": p.extrapolated, "calibrated_on": p.calibrated_on,
            "predicted_for": p.predicted_for}


def calibration_runs(cals: dict) -> list[str]:
    """The calibration runs of every layout."""
    return sorted({r for c in cals.values() for r in c.runs})
