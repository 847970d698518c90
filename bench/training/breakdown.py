"""Per-rank breakdown of one measured step from timelines on a shared clock.

Inputs per rank (seconds on one monotonic clock, e.g. perf_counter on one host): the rank's own
step span, its compute intervals (forward, backward, recompute of the local module only) and
the intervals it spent blocked in communication waits. A wait is (start, end) or
(start, end, peers): peers are the global ranks the blocked transfer goes to or comes from (the
pipeline neighbour a receive waits on, or a send waits for). The step wall W runs from the
earliest start to the latest end over ranks. Then, per rank,

  compute       = union of its compute intervals
  idle          = W - own span (waiting for the other ranks before/after its own work)
                  + wait time during which the rank waited on a peer that was busy (the
                    pipeline bubble: the producer or consumer was computing, or doing host work,
                    or had not started its step yet, or was itself blocked on such a peer)
  exposed_comm  = wait time during which the chain of peers it waited on ended in a mutual wait
                  (both ends of a transfer blocked: data in flight) or at a peer that had
                  already finished its step
  overhead      = own span - compute - waits (host scheduling, loss, bookkeeping)

and compute + idle + exposed_comm + overhead = W. Bubble (measured) = idle / W.

Waiting is not communication: each wait is split into the pieces spent waiting for a peer that
was not ready (`wait_pieces`, counted as bubble, drawn as "wait" in the Gantt) and the rest (the
transfer, exposed communication). `stalled_by` gives, per rank, the seconds of its waiting
charged to the rank at the end of the chain of waits (the one computing, busy on the host, or not
yet in the step): with one slow stage, the ranks' stalls point at it.

Waits are attributed against the neighbour they wait on, following that neighbour's own wait at
the same instant (stage 2 waiting on stage 1 while stage 1 waits on stage 0, which computes, is
bubble, not communication). A wait recorded without peers falls back to the old rule: idle while
any other rank computes, exposed communication otherwise (with 3+ stages that rule counts a
transfer in flight as idle whenever an unrelated stage computes).
"""

import bisect
from dataclasses import dataclass


def union(intervals) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted((float(iv[0]), float(iv[1])) for iv in intervals if iv[1] > iv[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def length(intervals) -> float:
    return sum(b - a for a, b in union(intervals))


def overlap(intervals, others) -> float:
    """Length of union(intervals) that lies inside union(others)."""
    u, o = union(intervals), union(others)
    total = 0.0
    for a, b in u:
        for c, d in o:
            lo, hi = max(a, c), min(b, d)
            if hi > lo:
                total += hi - lo
    return total


@dataclass(frozen=True, kw_only=True)
class RankBreakdown:
    rank: int
    step_wall_s: float
    own_span_s: float
    compute_s: float
    idle_s: float
    exposed_comm_s: float
    overhead_s: float
    wait_pieces: tuple = ()  # (start, end) of the waits counted as idle (waiting for a peer)
    stalled_by: tuple = ()  # ((rank, seconds), ...): who those waits waited on, at the chain's end

    @property
    def bubble(self) -> float:
        return self.idle_s / self.step_wall_s if self.step_wall_s > 0 else 0.0


def _peers(w) -> tuple[int, ...] | None:
    if len(w) < 3 or w[2] is None:
        return None
    p = w[2]
    return tuple(int(x) for x in (p if isinstance(p, (list, tuple, set, frozenset)) else (p,)))


def _disjoint_waits(ws) -> list[tuple[float, float, tuple | None]]:
    """Waits sorted and clipped so they do not overlap (a rank's waits are sequential; a
    rounding overlap is given to the earlier one)."""
    out, end = [], float("-inf")
    for w in sorted(ws, key=lambda w: (float(w[0]), float(w[1]))):
        a, b = max(float(w[0]), end), float(w[1])
        if b > a:
            out.append((a, b, _peers(w)))
            end = b
    return out


class _Find:
    """Which interval of a sorted disjoint list holds time t."""

    def __init__(self, ivs):
        self.ivs = ivs
        self.starts = [iv[0] for iv in ivs]

    def at(self, t):
        i = bisect.bisect_right(self.starts, t) - 1
        if i >= 0 and self.ivs[i][0] <= t < self.ivs[i][1]:
            return self.ivs[i]
        return None


def breakdown(spans: dict, compute: dict, waits: dict) -> dict:
    """spans {rank: (start, end)}, compute {rank: [(a, b), ...]}, waits {rank: [(a, b) or
    (a, b, peers), ...]} -> {rank: RankBreakdown}."""
    t0 = min(s for s, _ in spans.values())
    t1 = max(e for _, e in spans.values())
    wall = t1 - t0
    comp = {r: _Find(union(compute.get(r, []))) for r in spans}
    wl = {r: _disjoint_waits(waits.get(r, [])) for r in spans}
    wf = {r: _Find(wl[r]) for r in spans}

    def busy(q, t) -> bool:
        return q in comp and comp[q].at(t) is not None

    def idle_at(r, t, seen):
        """Is rank r, blocked in a wait at t, waiting on a busy peer (directly or through the
        peer's own wait)? Returns that peer (the end of the chain), or None."""
        w = wf[r].at(t)
        peers = w[2] if w else None
        if peers is None:  # not recorded: any other rank computing makes it idle (old rule)
            return next((q for q in spans if q != r and busy(q, t)), None)
        for p in peers:
            if p not in spans or p in seen:
                continue  # unknown peer, or a cycle: a mutual wait is a transfer in flight
            s, e = spans[p]
            if busy(p, t) or t < s:
                return p  # the peer computes, or has not reached this step yet
            if t >= e:
                continue  # the peer is done: what is left is the transfer
            if wf[p].at(t) is None:
                return p  # host work on the peer (loss, scheduling, optimizer)
            root = idle_at(p, t, seen | {p})
            if root is not None:
                return root
        return None

    cuts = sorted({float(x) for r in spans for x in spans[r]}
                  | {float(x) for r in spans for iv in comp[r].ivs for x in iv}
                  | {float(x) for r in spans for w in wl[r] for x in w[:2]})
    idle_w = {r: 0.0 for r in spans}
    pieces: dict = {r: [] for r in spans}
    blame: dict = {r: {} for r in spans}
    for a, b in zip(cuts, cuts[1:]):
        if b <= a:
            continue
        m = (a + b) / 2
        for r in spans:
            if wf[r].at(m) is None:
                continue
            root = idle_at(r, m, frozenset({r}))
            if root is not None:
                idle_w[r] += b - a
                blame[r][root] = blame[r].get(root, 0.0) + (b - a)
                if pieces[r] and pieces[r][-1][1] == a:
                    pieces[r][-1] = (pieces[r][-1][0], b)
                else:
                    pieces[r].append((a, b))
    out = {}
    for r, (s, e) in spans.items():
        c = sum(b - a for a, b in comp[r].ivs)
        wait_s = sum(b - a for a, b, _ in wl[r])
        out[r] = RankBreakdown(rank=r, step_wall_s=wall, own_span_s=e - s, compute_s=c,
                               idle_s=(wall - (e - s)) + idle_w[r],
                               exposed_comm_s=wait_s - idle_w[r],
                               overhead_s=max(0.0, (e - s) - c - wait_s),
                               wait_pieces=tuple(pieces[r]), stalled_by=tuple(sorted(blame[r].items())))
    return out
