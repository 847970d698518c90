"""The calibration of the pipeline model (bench.plan.model): fitted on stored pipeline runs of
one model on one machine (runs of several machines are refused: every prediction names the machine
it was calibrated on and the one it is for).

  per stage s and action kind k, the median time per micro-batch as a line in the micro-batch
  size b:  t(s, k, b) = a[s,k] + c[s,k] * b (least squares over the calibration cases at that
  model depth and checkpoint mode; numpy.polyfit): a mode's recompute is inside its measured B
  (or I);
  the schedule runtime's overhead per action, o (F, B and I: the actions that send or receive):
  for each calibration case the o at which the replay of the schedule's own action order, every
  such action lasting its fitted time + o, takes the measured step (scipy.optimize.brentq: the
  makespan grows monotonically with o); per schedule and pipeline ranks the median over its
  cases, and per placement the median over the placement's cases, for schedules that were not
  calibrated. The fitted times are compute only: what a run takes beyond them is p2p, Python
  dispatch and the wait machinery. Measured on 2 CPU cores o is not one constant (about 1.3 ms
  with one stage per rank at 2 ranks, 0.5 ms with two, 2-4 ms at 4 ranks oversubscribed; 1F1B,
  whose runtime batches a forward's send with a backward's receive, runs about 8% faster than
  GPipe at 2 ranks with the same actions), so it is calibrated per schedule;
  the per-step cost c (what a step pays once: optimizer step, chunk split and merge, the
  runtime's setup), one per pipeline depth, shared by that depth's schedules: when some schedule
  was measured at two or more micro-batch counts, c and every schedule's o are fitted jointly by
  least squares on the relative step error (scipy.optimize.least_squares, c >= 0; the o solved per
  case alone fell as micro-batches grew, pp4 about 2.8 ms per action at 4 micro-batches and 1.9 ms
  at 16: a per-step cost spread over more actions); otherwise c = 0 and o is the median above;
  memory per rank: peak = base[depth, r] + q[checkpoint mode] * (samples of the micro-batches
  rank r holds at once), least squares over calibration cases: the base (parameters, gradients,
  optimizer state) is the same in every mode, the slope is the mode's (checkpointing keeps only
  each in-flight micro-batch's stage input; q absorbs the allocator's rounding);
  the p2p link, where a sendrecv run is given: alpha-beta of one message (fit_link,
  bench.timing.alphabeta); the overhead is then what is left beside the transfers.
"""

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from bench.errors import BenchError
from bench.plan.model import (Calibration, Line, Link, Observation, busiest, durations, inflight, layout_label,
                                 model_stages, placement, transfers)
from bench.timing import alphabeta
from bench.training.replay import replay


def fit_line(xs, ys) -> Line:
    """Least squares; one distinct x gives a line through the origin and that point."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    if len(set(xs.tolist())) < 2:
        return Line(a=0.0, c=float(np.mean(ys / xs)))
    c, a = np.polyfit(xs, ys, 1)
    return Line(a=float(a), c=float(c))


def fit_link(sizes, times, source: str) -> Link:
    """alpha-beta of one message of n bytes, by the shared Hockney fit (bench.timing.alphabeta:
    non-negative least squares on the relative error, a small message's latency counts as much as
    a large one's bandwidth)."""
    got = alphabeta.fit(alphabeta.one_message, [2] * len(sizes), sizes, times)
    if got is None:
        raise BenchError(f"p2p run '{source}' has one message size; alpha-beta needs two or more (--sizes)")
    if got.beta_s_per_byte <= 0:
        raise BenchError(f"p2p run '{source}': time does not grow with the message size; no bandwidth to fit")
    return Link(alpha_s=got.alpha_s, beta_s_per_byte=got.beta_s_per_byte, source=source,
                sizes=(int(min(sizes)), int(max(sizes))))


def fit(obs: list[Observation], order_of, link: Link | None = None, boundary_bytes: float = 0.0) -> Calibration:
    """order_of(schedule, stages, chunks) -> {rank: [(stage, kind, mb), ...]} (torch's order).
    With a link (and the model's activation bytes per sample at a stage boundary) the transfers
    are a term of their own and the overhead is what is left; without, the overhead holds them."""
    model, machine = one_model(obs), one_machine(obs)
    dps = sorted({o.dp for o in obs})
    inner = sorted({(o.tp, o.fsdp) for o in obs})
    if len(dps) > 1 or len(inner) > 1:
        raise BenchError(f"calibration cases mix data-parallel degrees {', '.join(map(str, dps))}: one Calibration "
                         "per layout (fit_layouts)")
    costs, depth = {}, {id(o): (model_stages(o.schedule, o.stages), o.checkpoint) for o in obs}
    for n in sorted(set(depth.values())):
        pts: dict = {}
        for o in obs:
            if depth[id(o)] == n:
                for key, t in o.stage_s.items():
                    pts.setdefault(key, []).append((o.micro_batch, t))
        costs[n] = {key: fit_line(*zip(*v)) for key, v in pts.items()}
    cases: dict = {}  # pipeline ranks -> [(observation, order, costs, transfers)]
    rows, ys = [], []
    for o in obs:
        order = order_of(o.schedule, o.stages, o.chunks)
        cases.setdefault(o.stages, []).append((o, order, costs[depth[id(o)]], transfers(
            o.schedule, o.stages, order, o.micro_batch, link, boundary_bytes)))
        held = inflight(order)
        for r, peak in o.peak_bytes.items():
            rows.append((depth[id(o)][0], r, o.checkpoint, held.get(r, 0) * o.micro_batch))
            ys.append(peak)
    overhead, step = {}, {}
    for ranks, mine in sorted(cases.items()):
        per_action, step[ranks] = _fit_overheads(mine)
        overhead.update({(ranks, name): x for name, x in per_action.items()})
    per_place: dict = {}
    for (ranks, name), x in sorted(overhead.items()):
        per_place.setdefault(placement(name, ranks), []).append(x)
    base, q = _fit_memory(rows, ys)
    mbs = [o.micro_batch for o in obs]
    return Calibration(model=model, costs=costs, base_bytes=base, overhead=overhead, step_overhead=step,
                       placement_overhead={k: float(np.median(v)) for k, v in sorted(per_place.items())},
                       bytes_per_inflight_sample=q, micro_batches=(min(mbs), max(mbs)),
                       ranks=tuple(sorted({o.stages for o in obs})),
                       configs=frozenset((o.stages, o.schedule, o.chunks, o.micro_batch, o.checkpoint) for o in obs),
                       runs=tuple(sorted({o.run_id for o in obs})), cases=len(obs),
                       link=link, boundary_bytes=boundary_bytes, dp=dps[0], tp=inner[0][0], fsdp=inner[0][1],
                       machine=machine)


def fit_layouts(obs: list[Observation], order_of, link: Link | None = None, boundary_bytes: float = 0.0) -> dict:
    """{data-parallel degree: Calibration}: every layout pp x dp is fitted from its own cases alone.
    A replica runs the same pipeline on its share of the mini-batch, but what it pays beside that
    differs by layout: the gradient all-reduce between replicas after the last backward (in the
    per-step cost c of its depth) and, on a shared host, the cores its ranks time-share (in the
    stage times). The model is one (every piece above), its numbers per layout."""
    one_model(obs)
    one_machine(obs)
    composed = sorted({pl_label(o) for o in obs if o.tp > 1 or o.fsdp > 1})
    if composed:
        raise BenchError(f"calibration runs hold composed layouts ({', '.join(composed)}) and no pipeline: the planner "
                         "calibrates on pipelines and pp x dp (and predicts tp and fsdp inside the stages from them and "
                         "a communication run, --comm); add a pipeline run, or pass those runs to --validate")
    return {dp: fit([o for o in obs if o.dp == dp], order_of, link, boundary_bytes)
            for dp in sorted({o.dp for o in obs})}


def fit_measured(obs: list[Observation], order_of, link: Link | None = None, boundary_bytes: float = 0.0) -> dict:
    """{(dp, fsdp, tp): Calibration} of the composed layouts measured among `obs` (tp or fsdp inside
    the stages): their stage lines (which hold the tp and fsdp collectives run inside the actions),
    overheads and memory, fitted as a pipeline's are. A candidate of such a layout is predicted with
    it, as measured, instead of by composition."""
    groups: dict = {}
    for o in obs:
        if o.tp > 1 or o.fsdp > 1:
            groups.setdefault((o.dp, o.fsdp, o.tp), []).append(o)
    return {k: fit(v, order_of, link, boundary_bytes) for k, v in sorted(groups.items())}


@dataclass(frozen=True)
class Spread:
    """How far two launches of one calibration configuration differ, each launch's factor taken out."""

    difference: float  # median relative difference between two launches of one configuration
    configs: int  # configurations measured in two or more launches
    launches: int  # the most launches one configuration was measured in


def launch_spread(obs: list[Observation]) -> Spread | None:
    """The calibration's launch-to-launch spread, as it bears on the order of two configurations.
    For every configuration (layout, schedule, chunks, micro-batch, checkpoint mode) measured in two
    or more launches (runs): each launch's step over the launch's factor, and for every pair of its
    launches the relative difference of those; `difference` is the median over every such pair.
    A launch's factor is the geometric mean, over the configurations it measured that other
    launches measured too, of step / that configuration's median over launches: a launch fast or
    slow as a whole moves every configuration in it alike and reorders none. A launch of one such
    configuration keeps factor 1 (its factor cannot be told from that configuration's spread). Two
    launches of one configuration, once factored, differ as much as two configurations measured in
    one launch may be swapped by chance. None when every configuration was measured in one launch."""
    steps: dict = {}
    for o in obs:
        if np.isfinite(o.step_s) and o.step_s > 0:
            key = (o.stages, o.dp, o.tp, o.fsdp, o.schedule, o.chunks, o.micro_batch, o.checkpoint)
            steps.setdefault(key, {}).setdefault(o.run_id, []).append(o.step_s)
    many = [{run: float(np.log(np.median(v))) for run, v in runs.items()} for runs in steps.values() if len(runs) > 1]
    if not many:
        return None
    logs: dict = {}  # launch -> log(step / the configuration's median over launches), per configuration
    for runs in many:
        mid = float(np.median(list(runs.values())))
        for run, x in runs.items():
            logs.setdefault(run, []).append(x - mid)
    factor = {run: float(np.mean(v)) if len(v) > 1 else 0.0 for run, v in logs.items()}
    pairs = [abs(runs[i] - factor[i] - runs[j] + factor[j]) for runs in many for i, j in combinations(sorted(runs), 2)]
    return Spread(difference=float(np.expm1(np.median(pairs))), configs=len(many), launches=max(map(len, many)))


def pl_label(o: Observation) -> str:
    return layout_label(o.stages, o.dp, o.tp, o.fsdp)


def one_model(obs: list[Observation]) -> str:
    """The one model the cases measured; none, or several, is refused."""
    if not obs:
        raise BenchError("no pipeline cases to calibrate from; pass pipeline run directories (distbench pipeline ...)")
    models = sorted({o.model for o in obs})
    if len(models) > 1:
        raise BenchError(f"calibration runs mix models {', '.join(models)}; pass runs of one model (--model)")
    return models[0]


def one_machine(obs: list[Observation]) -> str:
    """The one machine the cases were measured on. Runs of several are refused: a stage time of one
    machine and an overhead of another fit nothing (a CPU calibration would rank GPU layouts)."""
    runs: dict = {}
    for o in obs:
        runs.setdefault(o.machine, set()).add(o.run_id)
    if len(runs) > 1:
        raise BenchError("calibration runs were measured on different machines: "
                         + "; ".join(f"{m or 'machine not recorded'} ({', '.join(sorted(r))})"
                                     for m, r in sorted(runs.items()))
                         + "; calibrate on runs of one machine")
    return next(iter(runs))


def _overhead(costs: dict, order: dict, o: Observation, comm: dict | None = None, step: float = 0.0) -> float:
    """The per-action overhead at which the replay, plus `step` once, takes the measured step
    (negative when the fitted compute (and transfers) alone already exceed it: the fit is then too
    slow for this case)."""
    from scipy.optimize import brentq  # lazy: scipy only when a plan is calibrated

    def gap(x):
        return replay(order, durations(costs, order, o.micro_batch, x, comm)).step_s + step - o.step_s

    lo = -min(durations(costs, order, o.micro_batch).values())
    hi = max(o.step_s / busiest(order), 1e-9)
    if gap(lo) >= 0:
        return lo
    return float(brentq(gap, lo, hi, xtol=1e-12)) if gap(hi) > 0 else hi


def _fit_overheads(cases: list) -> tuple[dict, float]:
    """One pipeline depth's cases [(observation, order, costs, transfers)] -> ({schedule: seconds
    per sending action}, seconds per step): the step is the replay with every F, B and I lasting
    its fitted time + the schedule's o, plus one per-step cost c shared by the depth's schedules
    (what a step pays once: optimizer step, chunk split and merge, the runtime's setup), fitted
    jointly by least squares on the relative error (scipy.optimize.least_squares, c >= 0).
    c needs some schedule measured at two or more micro-batch counts to be told apart from o;
    without, c = 0 and each o is its cases' median (solved per case with scipy brentq)."""
    names = sorted({o.schedule for o, *_ in cases})
    alone = {n: float(np.median([_overhead(c, od, o, comm) for o, od, c, comm in cases if o.schedule == n]))
             for n in names}
    if not any(len({o.chunks for o, *_ in cases if o.schedule == n}) > 1 for n in names):
        return alone, 0.0
    from scipy.optimize import least_squares  # lazy: scipy only when a plan is calibrated

    idx = [names.index(o.schedule) for o, *_ in cases]

    def residual(v):
        return [(replay(od, durations(c, od, o.micro_batch, v[i], comm)).step_s + v[-1]) / o.step_s - 1
                for i, (o, od, c, comm) in zip(idx, cases)]

    lo = [min(-min(durations(c, od, o.micro_batch).values()) for o, od, c, _ in cases if o.schedule == n)
          for n in names] + [0.0]
    hi = [max(o.step_s for o, *_ in cases)] * (len(names) + 1)
    x0 = np.clip([alone[n] for n in names] + [0.0], lo, hi)
    got = least_squares(residual, x0, bounds=(lo, hi), x_scale="jac", ftol=1e-14, xtol=1e-14, gtol=1e-14)
    return {n: float(x) for n, x in zip(names, got.x[:-1])}, float(got.x[-1])


def _fit_memory(rows, ys) -> tuple[dict, dict]:
    """peak = base[(model stages, rank)] + q[checkpoint mode] * samples in flight: one intercept per
    (depth, rank) (parameters, gradients, optimizer state: the same in every mode), one slope per mode."""
    if not rows:
        return {}, {}
    keys = sorted({(p, r) for p, r, _, _ in rows})
    modes = sorted({c for _, _, c, _ in rows})
    x = np.zeros((len(rows), len(keys) + len(modes)))
    for i, (p, r, c, n) in enumerate(rows):
        x[i, keys.index((p, r))] = 1.0
        x[i, len(keys) + modes.index(c)] = n
    coef, *_ = np.linalg.lstsq(x, np.asarray(ys, float), rcond=None)
    base: dict = {}
    for (p, r), v in zip(keys, coef[:len(keys)]):
        base.setdefault(p, {})[r] = float(v)
    return base, {c: max(0.0, float(v)) for c, v in zip(modes, coef[len(keys):])}


