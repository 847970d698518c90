"""Calibrated replay: run a schedule's own action order on a simulated clock with measured
per-stage forward/backward times and zero communication.

`order` is {rank: [(stage, kind, microbatch), ...]} with kind in F (forward), B (full
backward), I (backward for inputs), W (backward for weights) -- what
torch.distributed.pipelining's `schedule.pipeline_order` holds once None slots and
communication actions are dropped. Each rank runs its list in order; an action starts when its
rank is free and its inputs exist (as-soon-as-possible, no reordering):
  F(s, i) needs F(s-1, i);  B/I(s, i) need F(s, i) and B/I(s+1, i);  W(s, i) needs I(s, i).
The last stage's backward needs only its own forward (the loss is part of it).

Replaying with each stage's own times gives schedule bubble + stage imbalance; replaying with
every stage at the mean time gives the schedule's bubble alone. What the real run shows beyond
the replay is communication and per-micro-batch overhead.
"""

from dataclasses import dataclass

COMPUTE_KINDS = ("F", "B", "I", "W")


@dataclass(frozen=True, kw_only=True)
class Replay:
    step_s: float  # simulated step (makespan)
    busy_s: dict  # rank -> seconds of compute
    idle_s: dict  # rank -> step_s - busy_s
    bubble: dict  # rank -> idle_s / step_s
    timeline: dict  # (stage, kind, mb) -> (rank, start_s, end_s)

    @property
    def mean_bubble(self) -> float:
        return sum(self.bubble.values()) / len(self.bubble)


def _deps(stage: int, kind: str, mb: int, n_stages: int) -> list[tuple]:
    if kind == "F":
        return [(stage - 1, "F", mb)] if stage > 0 else []
    if kind in ("B", "I"):
        d = [(stage, "F", mb)]
        if stage < n_stages - 1:
            d.append((stage + 1, "B?", mb))  # full or input backward of the next stage
        return d
    if kind == "W":
        return [(stage, "I", mb)]
    raise ValueError(f"unknown action kind {kind!r}; allowed: {', '.join(COMPUTE_KINDS)}")


def replay(order: dict, durations: dict, n_stages: int | None = None) -> Replay:
    """durations: {(stage, kind): seconds per micro-batch}, and {(stage, kind, micro-batch): seconds}
    where one action differs from its kind (an FSDP gather); returns the simulated step."""
    n_stages = n_stages or 1 + max(a[0] for acts in order.values() for a in acts)
    done: dict = {}  # (stage, kind, mb) -> end time
    where: dict = {}
    free = {r: 0.0 for r in order}
    pos = {r: 0 for r in order}
    busy = {r: 0.0 for r in order}

    late = getattr(order, "sent_with", {})  # overlapped action -> its partner (Order.sent_with)

    def ready(dep, rank):
        s, k, i = dep
        if k == "B?":
            dep = (s, "B", i) if (s, "B", i) in done else (s, "I", i)
        end = done.get(dep)
        if end is not None and dep in late and where[dep][0] != rank:  # sent after the pair
            end = done.get(late[dep])
        return end

    remaining = sum(len(a) for a in order.values())
    while remaining:
        progressed = False
        for r, acts in order.items():
            while pos[r] < len(acts):
                s, k, i = acts[pos[r]]
                ends = [ready(d, r) for d in _deps(s, k, i, n_stages)]
                if any(e is None for e in ends):
                    break
                start = max([free[r], *ends])
                dur = float(durations[(s, k, i)] if (s, k, i) in durations else durations[(s, k)])
                done[(s, k, i)] = start + dur
                where[(s, k, i)] = (r, start, start + dur)
                free[r], busy[r] = start + dur, busy[r] + dur
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {r: acts[pos[r]] for r, acts in order.items() if pos[r] < len(acts)}
            raise ValueError(f"schedule cannot progress (dependency cycle or missing action): {stuck}")
    step = max(free.values()) if free else 0.0
    idle = {r: step - busy[r] for r in order}
    bubble = {r: (idle[r] / step if step > 0 else 0.0) for r in order}
    return Replay(step_s=step, busy_s=busy, idle_s=idle, bubble=bubble, timeline=where)


def balanced(durations: dict) -> dict:
    """Every stage at the mean time of its kind: removes stage imbalance, keeps the schedule."""
    kinds: dict = {}
    for (s, k), t in durations.items():
        kinds.setdefault(k, []).append(t)
    mean = {k: sum(v) / len(v) for k, v in kinds.items()}
    return {(s, k): mean[k] for (s, k) in durations}


def exact_durations(spec, bounds: list[tuple[int, int]], split: bool, tp: int = 1) -> dict:
    """The timed workload's action times per stage, {(stage, kind): seconds}: a stage's F, I and W
    are the sums over its blocks (bench.workloads.models.TimedBlock), B = I + W. The model's input
    needs no gradient, so block 0 has no input-gradient work; and torch runs no I on the first
    stage under the split-backward schedules (its input needs no gradient) but its whole backward
    as W: there I = 0 and W = B. Under the timed tp plan every time is / tp (its all-reduces, whose
    time is the machine's, are not in these known times)."""
    out = {}
    for s, (lo, hi) in enumerate(bounds):
        f, i, w = (sum(t) / tp for t in zip(*(spec.block_times(b) for b in range(lo, hi))))
        if s == 0:
            i -= spec.block_times(0)[1] / tp
            if split:
                i, w = 0.0, i + w
        out.update({(s, "F"): f, (s, "I"): i, (s, "W"): w, (s, "B"): i + w})
    return out


def gpipe_order(p: int, m: int) -> dict:
    """GPipe's order (all forwards, then all backwards), one stage per rank."""
    return {r: [(r, "F", i) for i in range(m)] + [(r, "B", i) for i in range(m)] for r in range(p)}


def one_f_one_b_order(p: int, m: int) -> dict:
    """1F1B as torch.distributed.pipelining's Schedule1F1B runs it (_step_microbatches): stage r
    does min(m, p - r) warm-up forwards, then alternates backward, forward ("1B1F") until the
    forwards run out, then the remaining backwards."""
    out = {}
    for r in range(p):
        warm = min(m, p - r)
        acts = [(r, "F", i) for i in range(warm)]
        f = warm
        for b in range(m):
            acts.append((r, "B", b))
            if f < m:
                acts.append((r, "F", f))
                f += 1
        out[r] = acts
    return out


class Order(dict):
    """{rank: [(stage, kind, microbatch), ...]}, plus `sent_with`: for the sub-actions of torch's
    OVERLAP_F_B (DualPipeV), each one -> the pair's last sub-action. torch's runtime runs the pair's
    sub-actions one after the other and only then their sends (`_add_send_recv` appends the sends
    after the whole action), so another rank gets the forward's output when the pair ends."""

    def __init__(self, actions: dict, sent_with: dict | None = None):
        super().__init__(actions)
        self.sent_with = sent_with or {}


def from_pipeline_order(pipeline_order: dict) -> Order:
    """torch's schedule.pipeline_order -> our order: compute actions only, in order."""
    sent_with: dict = {}

    def flat(a):
        if a is None:
            return []
        subs = getattr(a, "sub_actions", None)
        if subs:  # OVERLAP_F_B: a forward and a backward issued together, in this order
            pair = [x for s in subs for x in flat(s)]
            sent_with.update({x: pair[-1] for x in pair[:-1]})
            return pair
        kind = getattr(a.computation_type, "value", str(a.computation_type))
        return [(int(a.stage_index), kind, int(a.microbatch_index))] if kind in COMPUTE_KINDS else []

    return Order({int(r): [x for a in acts for x in flat(a)] for r, acts in pipeline_order.items()}, sent_with)
