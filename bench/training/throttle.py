"""A training case's `throttled` and `throttle_reasons` over its timed steps only.

The telemetry window (bench.telemetry: `launch.tel.case`) spans the whole case: set-up, the
correctness check, warm-up, the timed steps, the comm-free solo steps and any profiled steps.
The step times come from the timed steps alone, so the throttle share that judges them is taken
over the sampling instants inside those steps: on each node, from the earliest start of a first
timed step to the latest end of a last timed step over that node's ranks. Each rank stamps its
steps with time.time(), the clock the node's sampler stamps its samples with (sampler.py), so a
node's window and its samples are on the same host clock (clocks of different nodes are never
compared). The share and what counts as a cut are bench.telemetry.summary's (`throttled_share`,
THROTTLED_SHARE, nvml.throttled), applied to those instants; the other telemetry columns keep
the whole window.
"""

from collections import defaultdict

from bench.telemetry.summary import THROTTLED_SHARE, reason_names, throttled_share

_READ_TOGETHER = ("clock_event_reasons", "sm_clock_mhz", "app_sm_clock_mhz")  # what nvml.throttled reads


def timed_windows(facts: list[dict], node_ranks: list[int]) -> dict[int, tuple[float, float]]:
    """{node_rank: (first timed step's start, last timed step's end)} in Unix seconds on that
    node's clock: the earliest start and the latest end over the node's ranks (facts[r]["recs"],
    each step's "wall")."""
    out: dict[int, tuple[float, float]] = {}
    for f, node in zip(facts, node_ranks):
        walls = [rec["wall"] for rec in f["recs"] if "wall" in rec]
        if not walls:
            continue
        a, b = min(w[0] for w in walls), max(w[1] for w in walls)
        lo, hi = out.get(node, (a, b))
        out[node] = (min(lo, a), max(hi, b))
    return out


def _instants(times: list[float], start: float, end: float) -> set[float]:
    """The sampling instants in [start, end]; none inside (steps shorter than the interval): the
    instants on either side of it, the last before and the first after."""
    inside = {t for t in times if start <= t <= end}
    if inside:
        return inside
    return set([t for t in times if t < start][-1:] + [t for t in times if t > end][:1])


def timed_throttle(rows: list[dict], windows: dict[int, tuple[float, float]]) -> dict:
    """`throttled` and `throttle_reasons` over the timed steps, from the case's telemetry rows
    (bench.telemetry.summary.long_rows: time_s, node_rank, host, device_uuid, metric, value) and
    timed_windows(). Empty when no clock-event reasons were read or no window is known (the
    telemetry summary's values stand: null without NVML)."""
    per_node: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))  # node -> (host, uuid) -> metric -> [(t, v)]
    for r in rows:
        if r.get("metric") in _READ_TOGETHER and r.get("device_uuid") is not None and r.get("value") is not None:
            per_node[r["node_rank"]][(r["host"], r["device_uuid"])][r["metric"]].append((r["time_s"], r["value"]))
    kept: dict = {}
    for node, devs in per_node.items():
        if node not in windows:
            continue
        times = sorted({t for d in devs.values() for t, _ in d.get("clock_event_reasons", [])})
        keep = _instants(times, *windows[node])
        for dev, d in devs.items():
            kept[dev] = {m: [(t, v) for t, v in pts if t in keep] for m, pts in d.items()}
    masks = [int(v) for d in kept.values() for _, v in d.get("clock_event_reasons", [])]
    if not masks:
        return {}
    seen = 0
    for m in masks:
        seen |= m
    return {"throttled": throttled_share(kept) > THROTTLED_SHARE, "throttle_reasons": ",".join(reason_names(seen))}
