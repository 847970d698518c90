"""`distbench plan`: a calibrated pipeline model. Every number it prints is a PREDICTION.

Calibrate (from stored pipeline runs of one model on one machine: runs of several machines are
refused, and every prediction names the machine it was calibrated on and the one it is for):
  per stage s and action kind k (F forward with the loss on the last stage, B full backward
  with recompute, I / W input / weight backward where measured), the median time per
  micro-batch as a line in the micro-batch size b:  t(s, k, b) = a[s,k] + c[s,k] * b
  (least squares over the calibration cases at that pipeline depth; numpy.polyfit);
  the schedule runtime's overhead per action, o (F, B and I: the actions that send or receive;
  W sends nothing and gets none): for each calibration case the o at which the replay of the
  schedule's own action order, every such action lasting its fitted time + o, takes the measured
  step (scipy.optimize.brentq: the makespan grows monotonically with o); per schedule and
  pipeline ranks the median over its cases, and per placement (ranks, stages per rank, loop or
  V: bench.training.schedules) the median over the placement's cases, for schedules that were
  not calibrated. The fitted times are compute only: what a run takes beyond them is p2p, Python
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
  each in-flight micro-batch's stage input; q absorbs the allocator's rounding).
  Activation checkpointing (torchgpipe's modes always / except_last / never): the stage times
  are fitted per (model depth, mode), so a mode's recompute is in its measured B (or I); a mode
  the calibration never ran is refused, not guessed.

Predict (for a candidate: stages, schedule, chunks m, micro-batch b): replay torch's own action
order for that schedule (bench.training.replay, orders from torch.distributed.pipelining)
with every action lasting t(s, k, b) (+ o for F, B, I); step time = the replay's makespan + c; bubble = the
replay's mean idle share with the fitted compute times alone; memory = base + q * in-flight.

Layouts pp x dp: each data-parallel degree is calibrated from its own cases (fit_layouts, one
Calibration per dp); a replica runs the pipeline on batch / dp, its gradient all-reduce lands in
the per-step cost c. A candidate outside what was measured (another pipeline depth or dp, a
micro-batch size outside the calibrated range) is predicted anyway and marked `extrapolated` with
the reason.
"""

import types
from dataclasses import dataclass, field

import numpy as np
import torch.nn as nn

from bench.allreduce import model as hockney
from bench.errors import BenchError
from bench.training import schedules as scheds
from bench.training.replay import from_pipeline_order, gpipe_order, one_f_one_b_order, replay

ACTION_KINDS = ("F", "B", "I", "W")
SENDING = ("F", "B", "I")  # the actions that receive their input from, or send it to, another stage


@dataclass(frozen=True, kw_only=True)
class Observation:
    """One measured pipeline case, as calibration or validation sees it."""

    model: str
    stages: int  # pipeline ranks
    schedule: str  # bench.training.schedules name
    chunks: int
    micro_batch: int
    step_s: float  # measured median step
    stage_s: dict  # (model stage, kind) -> seconds per micro-batch (median)
    peak_bytes: dict = field(default_factory=dict)  # rank -> peak bytes (CPU: RSS; CUDA: allocated)
    case_id: str = ""
    run_id: str = ""
    run_dir: str = ""
    bubble: float = float("nan")  # measured mean bubble, where the run has it
    checkpoint: str = "never"  # activation checkpointing: always | except_last | never (bench.training.pp)
    dp: int = 1  # data-parallel replicas of the pipeline (pp x dp); micro_batch and stage times are one replica's
    machine: str = ""  # the machine the run measured (plan_cli.machine_of: device, backend, nodes)


def placement(schedule: str, ranks: int) -> tuple[int, int, str]:
    """(pipeline ranks, stages per rank, loop | v): what the per-action overhead depends on."""
    sch = scheds.get(schedule)
    return ranks, sch.per_rank, sch.placement


def layout_label(ranks: int, dp: int = 1) -> str:
    """'pp2', 'pp2 dp2': pipeline ranks, then data-parallel replicas where more than one."""
    return f"pp{ranks}" + (f" dp{dp}" if dp > 1 else "")


def placement_label(where: tuple) -> str:
    ranks, per_rank, shape = where
    return f"{ranks} rank(s) x {per_rank} stage(s)" + (f" {shape}" if per_rank > 1 else "")


def model_stages(schedule: str, ranks: int) -> int:
    """How many pieces the model is cut into: ranks x the schedule's stages per rank."""
    return ranks * scheds.get(schedule).per_rank


@dataclass(frozen=True, kw_only=True)
class Line:
    a: float  # seconds at b = 0 (per-micro-batch fixed cost of the kernels)
    c: float  # seconds per sample

    def at(self, b: float) -> float:
        return max(0.0, self.a + self.c * b)


def fit_line(xs, ys) -> Line:
    """Least squares; one distinct x gives a line through the origin and that point."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    if len(set(xs.tolist())) < 2:
        return Line(a=0.0, c=float(np.mean(ys / xs)))
    c, a = np.polyfit(xs, ys, 1)
    return Line(a=float(a), c=float(c))


@dataclass(frozen=True, kw_only=True)
class Link:
    """p2p between two pipeline ranks, alpha-beta: moving n bytes takes alpha + n / beta seconds
    (Hockney's model), fitted on a sendrecv run (each rank sends and receives at once, as a
    pipeline's batched p2p does)."""

    alpha: float  # seconds
    beta: float  # bytes per second
    source: str  # the run it was fitted on
    sizes: tuple[int, int]  # the measured range of message sizes

    def seconds(self, n: float) -> float:
        return self.alpha + n / self.beta

    def label(self) -> str:
        return f"alpha {self.alpha * 1e6:.1f} us, beta {self.beta / 1e9:.2f} GB/s ({self.source})"


def fit_link(sizes, times, source: str) -> Link:
    """alpha-beta of one message of n bytes, by bench.allreduce.model's Hockney fit (non-negative
    least squares on the relative error: a small message's latency counts as much as a large one's
    bandwidth)."""
    got = hockney.fit(lambda _: (1.0, 1.0), [2] * len(sizes), sizes, times)
    if got is None:
        raise BenchError(f"p2p run '{source}' has one message size; alpha-beta needs two or more (--sizes)")
    if got.beta_s_per_byte <= 0:
        raise BenchError(f"p2p run '{source}': time does not grow with the message size; no bandwidth to fit")
    return Link(alpha=got.alpha_s, beta=1.0 / got.beta_s_per_byte, source=source,
                sizes=(int(min(sizes)), int(max(sizes))))


@dataclass(frozen=True, kw_only=True)
class Calibration:
    model: str
    costs: dict  # (model stages, checkpoint mode) -> {(stage, kind): Line}
    overhead: dict  # (pipeline ranks, schedule) -> seconds per sending action
    step_overhead: dict  # pipeline ranks -> seconds paid once per step (every schedule at that depth)
    placement_overhead: dict  # placement(schedule, ranks) -> seconds per sending action
    base_bytes: dict  # model stages -> {rank: bytes} (parameters, gradients, optimizer state, runtime)
    bytes_per_inflight_sample: dict  # checkpoint mode -> bytes a rank holds per in-flight sample
    micro_batches: tuple[int, int]  # calibrated range (min, max)
    ranks: tuple[int, ...]  # pipeline ranks of the calibration cases
    configs: frozenset = frozenset()  # (ranks, schedule, chunks, micro-batch, checkpoint) measured for calibration
    runs: tuple[str, ...]
    cases: int
    link: Link | None = None  # p2p between pipeline ranks; None: the overhead holds the transfers
    boundary_bytes: float = 0.0  # activation bytes per sample crossing a stage boundary (the model's)
    dp: int = 1  # the data-parallel degree of every calibration case (one Calibration per layout)
    machine: str = ""  # the one machine every calibration case was measured on

    @property
    def checkpoints(self) -> tuple[str, ...]:
        return tuple(sorted({mode for _, mode in self.costs}))

    def check_mode(self, checkpoint: str):
        """A mode the calibration never ran is refused: its recompute and memory are not known."""
        if checkpoint not in self.checkpoints:
            raise BenchError(f"checkpoint mode {checkpoint} was not calibrated (have {', '.join(self.checkpoints)}); "
                             f"calibrate with runs of it (distbench pipeline --checkpoint {checkpoint})")

    def overhead_for(self, ranks: int, schedule: str) -> tuple[float, str]:
        """The per-action overhead of a schedule at `ranks`: its own where calibrated; else its
        placement's (ranks, stages per rank, loop | v), else the nearest calibrated placement's
        (same stages per rank and shape first, then the nearest rank count), saying so."""
        if (ranks, schedule) in self.overhead:
            return self.overhead[(ranks, schedule)], ""
        where = placement(schedule, ranks)
        ranks, per_rank, shape = where
        near = min(self.placement_overhead,
                   key=lambda k: (k[1:] != (per_rank, shape), k[1] != per_rank, abs(k[0] - ranks)))
        return self.placement_overhead[near], (f"overhead of {schedule} at {ranks} rank(s) not calibrated "
                                               f"(used placement {placement_label(near)})")

    def step_overhead_for(self, ranks: int) -> tuple[float, str]:
        """The per-step cost at `ranks`, else the nearest calibrated depth's, saying so."""
        if ranks in self.step_overhead or not self.step_overhead:
            return self.step_overhead.get(ranks, 0.0), ""
        near = min(self.step_overhead, key=lambda r: (abs(r - ranks), r))
        return self.step_overhead[near], f"per-step cost at {ranks} rank(s) not calibrated (used {near} rank(s)'s)"

    def extrapolation(self, n_stages: int, micro_batch: int, checkpoint: str = "never") -> str:
        why = []
        if (n_stages, checkpoint) not in self.costs:
            have = sorted(n for n, mode in self.costs if mode == checkpoint)
            why.append(f"{n_stages} model stages not calibrated" + (f" with checkpoint {checkpoint}"
                                                                   if checkpoint != "never" else "")
                       + f" (have {','.join(map(str, have))})")
        lo, hi = self.micro_batches
        if not lo <= micro_batch <= hi:
            why.append(f"micro-batch {micro_batch} outside the calibrated {lo}..{hi}")
        return "; ".join(why)


def inflight(order: dict) -> dict:
    """rank -> the most micro-batches whose activations it holds at once (forwards done whose
    backward (B or I) is not yet), counted along its own action order."""
    out = {}
    for r, acts in order.items():
        held, most = 0, 0
        for _, kind, _ in acts:
            held += 1 if kind == "F" else -1 if kind in ("B", "I") else 0
            most = max(most, held)
        out[r] = most
    return out


def busiest(order: dict) -> int:
    return max(len(acts) for acts in order.values())


def transfers(schedule: str, ranks: int, order: dict, b: float, link: "Link | None", boundary_bytes: float) -> dict:
    """(stage, kind) -> seconds of the p2p transfer the action sends to another rank: a forward
    sends its output to the next stage, a backward (B or I) its input gradient to the previous one,
    each b x boundary_bytes, when that stage is on another rank (the V placement keeps its turn,
    stages p-1 and p, on one rank). None without a link."""
    if link is None:
        return {}
    sch = scheds.get(schedule)
    n, out = ranks * sch.per_rank, {}
    for s, k in {(s, k) for acts in order.values() for s, k, _ in acts}:
        peer = s + 1 if k == "F" else s - 1 if k in ("B", "I") else -1
        if 0 <= peer < n and sch.rank_of(peer, ranks) != sch.rank_of(s, ranks):
            out[(s, k)] = link.seconds(b * boundary_bytes)
    return out


def _durations(costs: dict, order: dict, b: float, extra: float = 0.0, comm: dict | None = None) -> dict:
    kinds = {(s, k) for acts in order.values() for s, k, _ in acts}
    comm = comm or {}
    out = {}
    for s, k in kinds:
        if (s, k) in costs:
            t = costs[(s, k)].at(b)
        elif k in ("I", "W") and (s, "B") in costs:  # split backward not measured: half each (assumed)
            t = costs[(s, "B")].at(b) / 2
        else:
            raise BenchError(f"no calibrated time for stage {s} action {k}; calibrate with a run of this schedule")
        out[(s, k)] = t + (extra if k in SENDING else 0.0) + comm.get((s, k), 0.0)
    return out


def fit(obs: list[Observation], order_of, link: Link | None = None, boundary_bytes: float = 0.0) -> Calibration:
    """order_of(schedule, stages, chunks) -> {rank: [(stage, kind, mb), ...]} (torch's order).
    With a link (and the model's activation bytes per sample at a stage boundary) the transfers
    are a term of their own and the overhead is what is left; without, the overhead holds them."""
    model, machine = _one_model(obs), _one_machine(obs)
    dps = sorted({o.dp for o in obs})
    if len(dps) > 1:
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
                       link=link, boundary_bytes=boundary_bytes, dp=dps[0], machine=machine)


def fit_layouts(obs: list[Observation], order_of, link: Link | None = None, boundary_bytes: float = 0.0) -> dict:
    """{data-parallel degree: Calibration}: every layout pp x dp is fitted from its own cases alone.
    A replica runs the same pipeline on its share of the mini-batch, but what it pays beside that
    differs by layout: the gradient all-reduce between replicas after the last backward (in the
    per-step cost c of its depth) and, on a shared host, the cores its ranks time-share (in the
    stage times). The model is one (every piece above), its numbers per layout."""
    _one_model(obs)
    _one_machine(obs)
    return {dp: fit([o for o in obs if o.dp == dp], order_of, link, boundary_bytes)
            for dp in sorted({o.dp for o in obs})}


def _one_model(obs: list[Observation]) -> str:
    """The one model the cases measured; none, or several, is refused."""
    if not obs:
        raise BenchError("no pipeline cases to calibrate from; pass pipeline run directories (distbench pipeline ...)")
    models = sorted({o.model for o in obs})
    if len(models) > 1:
        raise BenchError(f"calibration runs mix models {', '.join(models)}; pass runs of one model (--model)")
    return models[0]


def _one_machine(obs: list[Observation]) -> str:
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


def layout_for(cals: dict, dp: int) -> "Calibration":
    """The calibration of data-parallel degree `dp`, else the nearest calibrated one's (predict
    marks the candidate extrapolated)."""
    return cals.get(dp) or cals[min(cals, key=lambda d: (abs(d - dp), d))]


def _overhead(costs: dict, order: dict, o: Observation, comm: dict | None = None, step: float = 0.0) -> float:
    """The per-action overhead at which the replay, plus `step` once, takes the measured step
    (negative when the fitted compute (and transfers) alone already exceed it: the fit is then too
    slow for this case)."""
    from scipy.optimize import brentq  # lazy: scipy only when a plan is calibrated

    def gap(x):
        return replay(order, _durations(costs, order, o.micro_batch, x, comm)).step_s + step - o.step_s

    lo = -min(_durations(costs, order, o.micro_batch).values())
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
        return [(replay(od, _durations(c, od, o.micro_batch, v[i], comm)).step_s + v[-1]) / o.step_s - 1
                for i, (o, od, c, comm) in zip(idx, cases)]

    lo = [min(-min(_durations(c, od, o.micro_batch).values()) for o, od, c, _ in cases if o.schedule == n)
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


@dataclass(frozen=True, kw_only=True)
class Candidate:
    stages: int
    schedule: str
    chunks: int
    micro_batch: int  # samples per micro-batch of one data-parallel replica
    checkpoint: str = "never"
    dp: int = 1  # data-parallel replicas of the pipeline: world = stages x dp

    @property
    def batch(self) -> int:
        return self.dp * self.chunks * self.micro_batch

    @property
    def world(self) -> int:
        return self.stages * self.dp

    @property
    def label(self) -> str:
        return (f"{layout_label(self.stages, self.dp)} {self.schedule} m={self.chunks} b={self.micro_batch}"
                + (f" ckpt={self.checkpoint}" if self.checkpoint != "never" else ""))


@dataclass(frozen=True, kw_only=True)
class Prediction:
    candidate: Candidate
    step_s: float
    samples_per_s: float
    bubble: float  # mean idle share of the step, compute-only replay
    peak_bytes: float  # max over ranks
    extrapolated: str  # why, or ""
    calibrated_on: str = ""  # the machine of the calibration runs
    predicted_for: str = ""  # the machine predicted for: the calibration's, unless the user mapped another


def _scaled_costs(cal: Calibration, n_stages: int, checkpoint: str = "never") -> dict:
    """Costs at a model depth that was not calibrated in this checkpoint mode: the nearest
    calibrated depth's whole-model time per kind, split evenly over `n_stages` (an even balance
    is assumed). A mode never calibrated is refused: its recompute and memory are not known."""
    if (n_stages, checkpoint) in cal.costs:
        return cal.costs[(n_stages, checkpoint)]
    cal.check_mode(checkpoint)
    depths = [n for n, mode in cal.costs if mode == checkpoint]
    near = min(depths, key=lambda p: abs(p - n_stages))
    have = cal.costs[(near, checkpoint)]
    out = {}
    for k in {k for _, k in have}:
        lines = [ln for (_, kk), ln in have.items() if kk == k]
        a, c = sum(ln.a for ln in lines) / n_stages, sum(ln.c for ln in lines) / n_stages
        for s in range(n_stages):
            out[(s, k)] = Line(a=a, c=c)
    return out


def predict(cal: Calibration, cand: Candidate, order_of, link: Link | None = None, target: str = "",
            mapped_by: str = "") -> Prediction:
    """`link`: the p2p of the machine predicted for (e.g. between nodes); default the calibration's.
    `target`: the machine predicted for, when the user mapped the calibration onto another
    (`mapped_by` says how: --target-machine, --target-p2p); marked extrapolated."""
    order = order_of(cand.schedule, cand.stages, cand.chunks)
    n = model_stages(cand.schedule, cand.stages)
    costs = _scaled_costs(cal, n, cand.checkpoint)
    o, o_why = cal.overhead_for(cand.stages, cand.schedule)
    once, once_why = cal.step_overhead_for(cand.stages)
    wire = link or cal.link
    if link is not None and cal.link is None:
        raise BenchError("a target p2p link needs a calibration with its own (--p2p): without, the calibrated "
                         "overhead already holds the calibration machine's transfers")
    comm = transfers(cand.schedule, cand.stages, order, cand.micro_batch, wire, cal.boundary_bytes)
    with_overhead = replay(order, _durations(costs, order, cand.micro_batch, o, comm))
    compute = replay(order, _durations(costs, order, cand.micro_batch))
    held = inflight(order)
    base = cal.base_bytes.get(n) or (next(iter(cal.base_bytes.values()), {}) if cal.base_bytes else {})
    fallback = max(base.values()) if base else 0.0
    q = cal.bytes_per_inflight_sample[cand.checkpoint]
    peak = max(base.get(r, fallback) + q * held[r] * cand.micro_batch for r in held)
    step = with_overhead.step_s + once
    target = target or cal.machine
    moved = f"calibrated on {cal.machine}, predicted for {target} ({mapped_by})" if target != cal.machine else ""
    layout = (f"dp {cand.dp} not calibrated (dp {cal.dp}'s pipeline per replica; what dp {cand.dp} adds, the "
              "gradient all-reduce and the sharing of the host, is not in it)" if cand.dp != cal.dp else "")
    return Prediction(candidate=cand, step_s=step, samples_per_s=cand.batch / step,
                      bubble=compute.mean_bubble, peak_bytes=peak, calibrated_on=cal.machine, predicted_for=target,
                      extrapolated="; ".join(filter(None, [moved, layout,
                                                           cal.extrapolation(n, cand.micro_batch, cand.checkpoint),
                                                           o_why, once_why, _link_note(cal.link, link)])))


def _link_note(calibrated: Link | None, target: Link | None) -> str:
    if target is None or target == calibrated:
        return ""
    return f"p2p from {target.source}, not the calibration's link ({calibrated.source})"


def recommend(preds: list[Prediction], memory_limit: float | None = None) -> tuple[list[Prediction], list[Prediction]]:
    """(fitting candidates best first by throughput, those over the memory limit)."""
    over = [p for p in preds if memory_limit is not None and p.peak_bytes > memory_limit]
    fit_ = [p for p in preds if p not in over]
    return sorted(fit_, key=lambda p: -p.samples_per_s), over


def mape(pairs) -> float:
    """Mean absolute percentage error over (predicted, measured) pairs, in percent."""
    pairs = list(pairs)
    return 100.0 * float(np.mean([abs(p - m) / m for p, m in pairs])) if pairs else float("nan")


def torch_order(schedule: str, stages: int, chunks: int) -> dict:
    """The action order torch.distributed.pipelining runs for `schedule` on `stages` ranks with
    `chunks` micro-batches, built without a process group: the multi-stage schedules compute
    their pipeline_order in __init__ from the stages' indices alone, so placeholder stages
    (index, count, rank; an nn.Identity as submodule) suffice. GPipe and 1F1B use the order
    their _step_microbatches executes (bench.training.replay), as the trainer does."""
    sch = scheds.get(schedule)
    why = sch.rule(stages, chunks)
    if why:
        raise BenchError(f"schedule {sch.name} {why}")
    if sch.per_rank == 1:
        return (gpipe_order if sch.name == "gpipe" else one_f_one_b_order)(stages, chunks)
    cls, n = scheds.torch_class(sch.name), stages * sch.per_rank
    order = {}
    for r in range(stages):
        placeholders = [types.SimpleNamespace(stage_index=i, num_stages=n, group_size=stages, group_rank=r,
                                              is_first=i == 0, is_last=i == n - 1, submod=nn.Identity())
                        for i in sch.stage_ids(r, stages)]
        order[r] = cls(placeholders, n_microbatches=chunks, loss_fn=_no_loss).pipeline_order[r]
    return from_pipeline_order(order)


def _no_loss(out, target):  # the placeholder schedules never run
    return out
