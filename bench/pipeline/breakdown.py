"""Per-rank breakdown of one measured step from timelines on a shared clock.

Inputs per rank (seconds on one monotonic clock, e.g. perf_counter on one host): the rank's own
step span, its compute intervals (forward, backward, recompute of the local module only) and
the intervals it spent blocked in communication waits. The step wall W runs from the earliest
start to the latest end over ranks. Then, per rank,

  compute       = union of its compute intervals
  idle          = W - own span (waiting for the other ranks before/after its own work)
                  + wait time during which some *other* rank was computing (waiting for a
                    producer: the pipeline bubble)
  exposed_comm  = wait time during which no other rank was computing (data in flight)
  overhead      = own span - compute - waits (host scheduling, loss, bookkeeping)

and compute + idle + exposed_comm + overhead = W. Bubble (measured) = idle / W.
"""

from dataclasses import dataclass


def union(intervals) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in intervals if b > a):
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
    total, j = 0.0, 0
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

    @property
    def bubble(self) -> float:
        return self.idle_s / self.step_wall_s if self.step_wall_s > 0 else 0.0


def breakdown(spans: dict, compute: dict, waits: dict) -> dict:
    """spans {rank: (start, end)}, compute/waits {rank: [(a, b), ...]} -> {rank: RankBreakdown}."""
    t0 = min(s for s, _ in spans.values())
    t1 = max(e for _, e in spans.values())
    wall = t1 - t0
    out = {}
    for r, (s, e) in spans.items():
        comp = length(compute.get(r, []))
        w = union(waits.get(r, []))
        wait_s = length(w)
        others = [iv for q, ivs in compute.items() if q != r for iv in ivs]
        waiting_on_peer = overlap(w, others)
        out[r] = RankBreakdown(rank=r, step_wall_s=wall, own_span_s=e - s, compute_s=comp,
                               idle_s=(wall - (e - s)) + waiting_on_peer,
                               exposed_comm_s=wait_s - waiting_on_peer,
                               overhead_s=max(0.0, (e - s) - comp - wait_s))
    return out
