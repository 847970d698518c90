"""`distbench plan`: a calibrated pipeline model. Every number it prints is a PREDICTION.

This module is the model's vocabulary and its prediction; the calibration that fits it is
bench.plan.fit (docs/plan.md, "The model").

A calibration (Calibration), from stored pipeline runs of one model on one machine, holds per
model depth and checkpoint mode a line per stage and action kind (F forward with the loss on the
last stage, B full backward with recompute, I / W input / weight backward where measured),
t(s, k, b) = a + c * b in the micro-batch size b; the schedule runtime's overhead per sending
action o (F, B and I; W sends nothing and gets none), per schedule and pipeline ranks and per
placement (ranks, stages per rank, loop or V: bench.training.schedules); the per-step cost c, one
per pipeline depth; memory per rank, base[depth, r] + q[checkpoint mode] * (samples of the
micro-batches rank r holds at once); and, with a sendrecv run, the p2p link between stages
(alpha-beta, Link).

Predict (for a candidate: stages, schedule, chunks m, micro-batch b): replay torch's own action
order for that schedule (bench.training.replay, orders from torch.distributed.pipelining)
with every action lasting t(s, k, b) (+ o for F, B, I; + the link's transfer for an action that
sends to another rank); step time = the replay's makespan + c; bubble = the replay's mean idle
share with the fitted compute times alone; memory = base + q * in-flight.

Layouts pp x dp: each data-parallel degree has a Calibration of its own (layout_for picks it); a
replica runs the pipeline on batch / dp, its gradient all-reduce lands in the per-step cost c. A
candidate outside what was measured (another pipeline depth, dp or machine, a micro-batch size
outside the calibrated range, an uncalibrated schedule's overhead) is predicted anyway and marked
`extrapolated` with the reason; a checkpoint mode never calibrated is refused, not guessed.
"""

import types
from dataclasses import dataclass, field

import numpy as np

from bench.errors import BenchError
from bench.timing import alphabeta
from bench.timing.stats import GB
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
    peak_bytes: dict = field(default_factory=dict)  # stage -> strategy_ranks.peak_bytes (CPU: peak RSS; CUDA: reserved)
    case_id: str = ""
    run_id: str = ""
    run_dir: str = ""
    bubble: float = float("nan")  # measured mean bubble, where the run has it
    checkpoint: str = "never"  # activation checkpointing: always | except_last | never (bench.training.pp)
    dp: int = 1  # data-parallel replicas of the pipeline (pp x dp); micro_batch and stage times are one replica's
    tp: int = 1  # tensor-parallel degree inside the stages (validation only: predicted by composition)
    fsdp: int = 1  # FSDP2 shards of every stage (validation only)
    oversubscribed: bool = False  # the run put more ranks than cores on a host (results `oversubscribed`)
    machine: str = ""  # the machine the run measured (plan_runs.machine_of: device, backend, nodes)


def placement(schedule: str, ranks: int) -> tuple[int, int, str]:
    """(pipeline ranks, stages per rank, loop | v): what the per-action overhead depends on."""
    sch = scheds.get(schedule)
    return ranks, sch.per_rank, sch.placement


def layout_label(ranks: int, dp: int = 1, tp: int = 1, fsdp: int = 1) -> str:
    """'pp2', 'pp2 dp2', 'pp2 tp2', 'pp2 fsdp2': pipeline ranks, then each other degree above one
    (the mesh's order: dp, fsdp, tp)."""
    return f"pp{ranks}" + "".join(f" {n}{d}" for n, d in (("dp", dp), ("fsdp", fsdp), ("tp", tp)) if d > 1)


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


@dataclass(frozen=True, kw_only=True)
class Link:
    """p2p between two pipeline ranks, alpha-beta (bench.timing.alphabeta: Hockney's model, beta in
    seconds per byte): moving n bytes takes alpha_s + n * beta_s_per_byte seconds, fitted on a
    sendrecv run (each rank sends and receives at once, as a pipeline's batched p2p does)."""

    alpha_s: float  # seconds per message
    beta_s_per_byte: float  # seconds per byte (1 / bandwidth)
    source: str  # the run it was fitted on
    sizes: tuple[int, int]  # the measured range of message sizes

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return 1.0 / self.beta_s_per_byte

    def seconds(self, n: float) -> float:
        return alphabeta.predict(alphabeta.one_message, 2, n, self.alpha_s, self.beta_s_per_byte)

    def label(self) -> str:  # "beta" here names the bandwidth, 1 / beta, as the plan has always printed it
        return f"alpha {self.alpha_s * 1e6:.1f} us, beta {self.bandwidth_bytes_per_s / GB:.2f} GB/s ({self.source})"


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
    tp: int = 1  # the tp degree inside the stages of every calibration case (a measured composed layout)
    fsdp: int = 1  # the FSDP2 shards of every calibration case
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


def durations(costs: dict, order: dict, b: float, extra: float = 0.0, comm: dict | None = None) -> dict:
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


def layout_for(cals: dict, dp: int) -> "Calibration":
    """The calibration of data-parallel degree `dp`, else the nearest calibrated one's (predict
    marks the candidate extrapolated)."""
    return cals.get(dp) or cals[min(cals, key=lambda d: (abs(d - dp), d))]


@dataclass(frozen=True, kw_only=True)
class Candidate:
    stages: int
    schedule: str
    chunks: int
    micro_batch: int  # samples per micro-batch of one data-parallel replica
    checkpoint: str = "never"
    dp: int = 1  # data-parallel replicas of the pipeline (DDP semantics)
    tp: int = 1  # tensor-parallel degree inside every stage
    fsdp: int = 1  # FSDP2 shards of every stage: world = stages x dp x fsdp x tp

    @property
    def batch(self) -> int:
        return self.dp * self.fsdp * self.chunks * self.micro_batch

    @property
    def world(self) -> int:
        return self.stages * self.dp * self.fsdp * self.tp

    @property
    def composed(self) -> bool:
        """tp or fsdp inside the stages: predicted by composition (bench.plan.compose)."""
        return self.tp > 1 or self.fsdp > 1

    @property
    def layout(self) -> str:
        return layout_label(self.stages, self.dp, self.tp, self.fsdp)

    @property
    def label(self) -> str:
        return (f"{self.layout} {self.schedule} m={self.chunks} b={self.micro_batch}"
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
    comm_source: str = ""  # where its communication terms came from (plan_comm), or the calibrated layout
    comm_s: dict = field(default_factory=dict)  # term -> seconds per step on the busiest rank (composed layouts)


def scaled_costs(cal: Calibration, n_stages: int, checkpoint: str = "never") -> dict:
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
    costs = scaled_costs(cal, n, cand.checkpoint)
    o, o_why = cal.overhead_for(cand.stages, cand.schedule)
    once, once_why = cal.step_overhead_for(cand.stages)
    wire = link or cal.link
    if link is not None and cal.link is None:
        raise BenchError("a target p2p link needs a calibration with its own (--p2p): without, the calibrated "
                         "overhead already holds the calibration machine's transfers")
    comm = transfers(cand.schedule, cand.stages, order, cand.micro_batch, wire, cal.boundary_bytes)
    with_overhead = replay(order, durations(costs, order, cand.micro_batch, o, comm))
    compute = replay(order, durations(costs, order, cand.micro_batch))
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
                      comm_source=f"measured in the {layout_label(cand.stages, cal.dp, cal.tp, cal.fsdp)} calibration" + (
                          f" (p2p {wire.source})" if wire else ""),
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
    import torch.nn as nn  # lazy: torch, for multi-stage schedules only (`distbench --help` imports this module)

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
