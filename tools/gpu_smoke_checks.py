"""What parts A and B of `make gpu-smoke` (tools/gpu_smoke.py) decide, as pure functions over the
numbers a check gathered, so that each can be fed wrong data in tests (tests/test_gpu_smoke.py).

A verdict is (problems, facts, unjudged): problems make the check FAILED; with none, anything the
check could not judge (no data to judge it on) makes it `not run`, which is not a pass; otherwise
it is `ok`. Stdlib only at import, and the verdicts take lists of dicts (a table's rows), never
frames: `python tools/gpu_smoke.py --help` stays instant.
"""

import re

from bench.telemetry.nvml import IDLE_BIT, throttled
from bench.telemetry.summary import THROTTLED_SHARE, reason_names

OK, FAILED, NOT_RUN = "ok", "FAILED", "not run"
STATUSES = (OK, FAILED, NOT_RUN)
MiB = 1 << 20


def status_of(problems: list, unjudged: list) -> str:
    return FAILED if problems else NOT_RUN if unjudged else OK


def line_of(problems: list, facts: list, unjudged: list) -> str:
    return "; ".join(problems + [f"NOT judged: {u}" for u in unjudged] + facts)


def _num(v) -> float | None:
    """A table cell as a float; None for null / NaN / missing."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


# ---- part A: nccl-variant ----------------------------------------------------------------------

def variant_verdict(*, envs: list[dict], probes: list[str], logs: int, tuning: list[dict], world: int,
                    debug_in_env: bool) -> tuple[list, list, list]:
    """The native all_reduce with NCCL_ALGO=Ring: a probe launch logged NCCL's choice (NCCL_DEBUG on
    for it alone), the timed rows ran without NCCL_DEBUG, and every TUNING line NCCL logged chose
    what was asked. envs: each timed row's NCCL environment; probes: meta.json's probe launches;
    logs: NCCL log files the probe wrote; tuning: the run's nccl_tuning rows (variant,
    algorithm_chosen, protocol_chosen, size_bytes, matches_asked)."""
    problems, facts, unjudged = [], [], []
    if debug_in_env:  # the smoke test's own environment sets it: every launch inherits it
        unjudged.append("NCCL_DEBUG is set in this environment, so whether the timed rows ran without it says nothing")
    elif not envs:
        problems.append("the rows carry no nccl_env")
    elif any("NCCL_DEBUG" in e for e in envs):
        problems.append("a timed row ran with NCCL_DEBUG set")
    else:
        facts.append("timed rows without NCCL_DEBUG (" + ", ".join(sorted({e.get("NCCL_ALGO", "-") for e in envs})) + ")")
    if not probes:
        problems.append("no probe launch in meta.json")
    else:
        facts.append(f"probe launch {probes[0]} wrote {logs} NCCL log file(s)")
    if not tuning:
        unjudged.append("NCCL's choice: no TUNING line (one rank: NCCL's one-rank path chooses no algorithm)"
                        if world == 1 else "NCCL's choice: no TUNING line in the probe's log")
    for t in tuning:
        ok = bool(t["matches_asked"])
        (facts if ok else problems).append(f"asked {t['variant']}, NCCL chose {t['algorithm_chosen']}/"
                                           f"{t['protocol_chosen']} at {int(t['size_bytes'])} B" + ("" if ok else ": FALLBACK"))
    return problems, facts, unjudged


# ---- part A: the strategies' per-GPU peaks -----------------------------------------------------

SAME_ROLE_SPREAD = 0.10  # ranks of one role (ddp's replicas) run the same code on the same shapes
# The footprint model (bench/training/footprint.py: states, DDP buckets, activations) against the
# measured peak allocated of the timed steps: at least FOOTPRINT_LOW of it (the states must be
# there), at most FOOTPRINT_HIGH of it plus FOOTPRINT_EXTRA_BYTES (cuBLAS workspaces, 32 MiB per
# handle and stream on Hopper, and the allocator's rounding, which the model leaves out).
FOOTPRINT_LOW, FOOTPRINT_HIGH, FOOTPRINT_EXTRA_BYTES = 0.75, 1.5, 128 * MiB


def peaks_verdict(ranks: list[dict], estimates: dict) -> tuple[list, list, list]:
    """Each case's per-rank peaks (strategy_ranks rows: case_id, rank, role, memory_kind,
    peak_allocated_bytes) against each other (same role within SAME_ROLE_SPREAD of the largest)
    and against the footprint estimate of each rank (estimates: {case_id: [bytes per rank]},
    bench.training.memory.rank_bytes without the check). Host ranks: not judged (their RSS holds
    the Python runtime, not the case)."""
    problems, facts, unjudged = [], [], []
    cases: dict = {}
    for r in ranks:
        cases.setdefault(r["case_id"], []).append(r)
    if not cases:
        return ["no per-rank rows (strategy_ranks)"], [], []
    for cid, rows in sorted(cases.items()):
        name = cid.split(".")[0]
        if any(r["memory_kind"] != "cuda" for r in rows):
            unjudged.append(f"{name}: host ranks have no allocator peaks")
            continue
        alloc = {int(r["rank"]): _num(r["peak_allocated_bytes"]) for r in rows}
        if any(v is None or v <= 0 for v in alloc.values()):
            problems.append(f"{name}: peak allocated missing or zero on ranks {sorted(k for k, v in alloc.items() if not v)}")
            continue
        roles: dict = {}
        for r in rows:
            roles.setdefault(r["role"], []).append(alloc[int(r["rank"])])
        for role, vals in roles.items():
            if len(vals) > 1 and (max(vals) - min(vals)) > SAME_ROLE_SPREAD * max(vals):
                problems.append(f"{name}: ranks of role {role!r} peak {min(vals) / MiB:.0f}..{max(vals) / MiB:.0f} MiB, "
                                f"more than {SAME_ROLE_SPREAD:.0%} apart")
        est = estimates.get(cid)
        if est is None:
            unjudged.append(f"{name}: no footprint estimate")
            continue
        for rank, got in sorted(alloc.items()):
            want = est[rank]
            lo, hi = FOOTPRINT_LOW * want, FOOTPRINT_HIGH * want + FOOTPRINT_EXTRA_BYTES
            if not lo <= got <= hi:
                problems.append(f"{name} rank {rank}: peak allocated {got / MiB:.0f} MiB outside {lo / MiB:.0f}..{hi / MiB:.0f} "
                                f"MiB (footprint {want / MiB:.0f} MiB)")
        facts.append(f"{name} peaks " + ", ".join(f"r{k} {v / MiB:.0f}" for k, v in sorted(alloc.items()))
                     + f" MiB vs footprint {max(est) / MiB:.0f} MiB")
    return problems, facts, unjudged


# ---- part A: barrier and the collectives-full subset ---------------------------------------------

BARRIER_MAX_S = 0.05  # a barrier on one node takes microseconds: 50 ms is a hold, a retry or a hang, not it


def barrier_verdict(rows: list[dict], modes: list[str]) -> tuple[list, list, list]:
    """`distbench collectives -c barrier`: one row per mode asked, size 0, no bandwidth, a time
    under BARRIER_MAX_S (the median over samples, max over ranks)."""
    problems, facts = [], []
    got = sorted(r["mode"] for r in rows)
    if got != sorted(modes):
        problems.append(f"rows for modes {got}, asked {sorted(modes)}")
    for r in rows:
        t = _num(r.get("time_median_s"))
        if r.get("collective") != "barrier" or int(r.get("size_bytes", -1)) != 0:
            problems.append(f"a row of {r.get('collective')} at {r.get('size_bytes')} B")
        if _num(r.get("busbw_gbps")) is not None:
            problems.append(f"{r['mode']}: a bandwidth for a barrier ({r['busbw_gbps']} GB/s)")
        if t is None or not 0 < t < BARRIER_MAX_S:
            problems.append(f"{r['mode']}: barrier {t} s (want > 0 and < {BARRIER_MAX_S:g} s)")
        else:
            facts.append(f"{r['mode']} {t * 1e6:.1f} us")
        if r.get("mode") == "latency" and r.get("device_type") == "cuda":  # its wait blocks the host: never held
            if r.get("latency_hold") != "none" or _num(r.get("samples_with_dispatch")) != _num(r.get("iters")):
                problems.append(f"latency: barrier timed with hold {r.get('latency_hold')!r}, "
                                f"{r.get('samples_with_dispatch')} of {r.get('iters')} samples with their dispatch "
                                "(want 'none', every one)")
            else:
                facts.append("latency: no hold (the barrier's wait blocks the host), as declared")
    return problems, facts, []


DRY_RUN_CASE = re.compile(r"^\s+(\S+)@(\d+)B\s", re.M)


def planned_cases(dry_run_stdout: str) -> set[tuple[str, int]]:
    """(case_id, size_bytes) of every case `distbench collectives ... --dry-run` lists."""
    return {(c, int(s)) for c, s in DRY_RUN_CASE.findall(dry_run_stdout)}


def suite_verdict(planned: set, rows: list[dict]) -> tuple[list, list, list]:
    """A subset of suites/collectives-full.toml: every case the dry run planned has a row, no row
    was not planned, and every sized row was checked (checks >= 1) with no wrong element."""
    if not planned:
        return ["the dry run planned no case"], [], []
    problems = []
    stored = {(r["case_id"], int(r["size_bytes"])) for r in rows}
    missing, extra = sorted(planned - stored), sorted(stored - planned)
    if missing:
        problems.append(f"{len(missing)} planned case(s) without a row, e.g. {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} row(s) not planned, e.g. {extra[:3]}")
    unchecked = sorted({(r["case_id"], int(r["size_bytes"])) for r in rows
                        if int(r["size_bytes"]) > 0 and not (_num(r.get("checks")) or 0) >= 1})
    if unchecked:
        problems.append(f"{len(unchecked)} sized case(s) never checked, e.g. {unchecked[:3]}")
    colls = sorted({r["collective"] for r in rows})
    facts = [f"{len(planned)} planned cases, {len(rows)} rows, every sized one checked: {len(colls)} collectives ({', '.join(colls)})"]
    return problems, facts, []


# ---- part B: the throttle flag ------------------------------------------------------------------

def overlap_verdict(rows: list[dict], gpu: bool) -> tuple[list, list, list]:
    """`distbench overlap` (bench/overlap): its figures are the formulas of its stored medians; a
    part's "both" time is never below either side's own time in it (each repetition's both is the
    later of the two ends, per rank, then the max over ranks: the medians keep that order); on a
    GPU the collective and the compute ran on two streams, so some communication was hidden
    (hidden_share > 0: one stream for both would read about 0); DDP's row has buckets and a step
    without communication shorter than the step."""
    problems, facts = [], []
    pairs = [r for r in rows if r.get("overlap_test") == "pair"]
    ddp = [r for r in rows if r.get("overlap_test") == "ddp"]
    if not pairs:
        problems.append("no collective-against-compute row")
    for r in pairs:
        c, k, b = (_num(r.get(x)) for x in ("overlap_comm_s", "overlap_compute_s", "overlap_both_s"))
        cu, ku, h = (_num(r.get(x)) for x in ("overlap_comm_under_s", "overlap_compute_under_s", "hidden_share"))
        where = f"{r.get('collective')} {r.get('size_bytes')} B"
        if None in (c, k, b, cu, ku, h) or min(c, k, b) <= 0:
            problems.append(f"{where}: a figure missing or not positive")
            continue
        if abs(h - (c + k - b) / c) > 1e-9:
            problems.append(f"{where}: hidden_share {h:.4f} is not (comm + compute - both) / comm = {(c + k - b) / c:.4f}")
        if b < max(cu, ku) - 1e-12:
            problems.append(f"{where}: both {b * 1e3:.3f} ms below a side's own time in it "
                            f"({cu * 1e3:.3f} / {ku * 1e3:.3f} ms)")
        if gpu and not h > 0:
            problems.append(f"{where}: hidden_share {h:.3f} <= 0 on a GPU: the two streams did not overlap")
        facts.append(f"{where}: hidden {h:.2f}, comm x{_num(r.get('comm_slowdown')) or float('nan'):.2f}")
    for r in ddp:
        step, nocomm = _num(r.get("overlap_both_s")), _num(r.get("overlap_compute_s"))
        if not _num(r.get("buckets")) or step is None or nocomm is None or not 0 < nocomm < step:
            problems.append(f"ddp: buckets {r.get('buckets')}, step {step}, no_sync step {nocomm} "
                            "(want buckets and 0 < no_sync step < step)")
        else:
            facts.append(f"ddp: {int(r['buckets'])} bucket(s), exposed {(step - nocomm) * 1e3:.2f} ms")
    return problems, facts, []


def throttle_verdict(samples: list[tuple], loaded: set, summary: dict, missing: dict) -> tuple[list, list, list]:
    """NVML's clock-event reasons on the GPU that ran the load, and the case's `throttled` and
    `throttle_reasons` as docs/telemetry.md defines them. samples: the probe's (t, uuid, rank,
    core, metric, value); loaded: the instants read while the GPU ran queued work (after the
    first: utilization is a trailing average); summary: bench.telemetry.summary.summarize over
    them; missing: the probe's unread metrics. Fails when the reasons were not read, when the GPU
    read says `gpu_idle` or a zero SM clock under load (the probe read another GPU than the one
    loaded), or when the summary disagrees with its own samples (the share recomputed here from
    every instant's reasons and clocks with nvml.throttled, the one definition of a cut)."""
    by = {}
    for t, _uuid, _rank, _core, metric, v in samples:
        by.setdefault(metric, {})[t] = v
    reasons, sm, app = by.get("clock_event_reasons", {}), by.get("sm_clock_mhz", {}), by.get("app_sm_clock_mhz", {})
    if not reasons:
        return [f"clock-event reasons not read: {missing.get('clock_event_reasons', missing) or 'no sample'}"], [], []
    problems, facts, unjudged = [], [], []
    idle = sorted(t for t in loaded if int(reasons.get(t, 0)) & IDLE_BIT)
    if idle:
        problems.append(f"gpu_idle set under load at {len(idle)} of {len(loaded)} instant(s): the probe reads another GPU")
    if any(not (sm.get(t) or 0) > 0 for t in loaded):
        problems.append(f"SM clock not read or 0 under load: {[sm.get(t) for t in sorted(loaded)]}")
    cuts = [throttled(int(m), sm.get(t), app.get(t)) for t, m in sorted(reasons.items())]
    want = sum(cuts) / len(cuts) > THROTTLED_SHARE
    seen = 0
    for m in reasons.values():
        seen |= int(m)
    names = ",".join(reason_names(seen))
    if summary.get("throttled") is not want or summary.get("throttle_reasons") != names:
        problems.append(f"the case's throttled={summary.get('throttled')} ({summary.get('throttle_reasons')!r}) but its "
                        f"samples say {want} ({names!r}: {sum(cuts)} of {len(cuts)} instants cut)")
    if not app:
        unjudged.append(f"sw_power_cap as a cut: application clock not read ({missing.get('app_sm_clock_mhz', '?')})")
    last = max(reasons)
    facts.append(f"reasons {reason_names(int(reasons[last])) or ['none']} (0x{int(reasons[last]):x}) at the last of "
                 f"{len(reasons)} instants, SM {sm.get(last)} MHz, application clock {app.get(last, 'not read')} MHz; "
                 f"{sum(cuts)} of {len(cuts)} instants cut, case throttled={summary.get('throttled')}")
    return problems, facts, unjudged


# ---- the run's outcome --------------------------------------------------------------------------

def outcome(results: list[tuple[str, str, str]]) -> tuple[str, int]:
    """The summary's last line and the exit code over every (status, check, line) reported:
    1 when a check FAILED; else 3 when a check was not run (or not judged): nothing failed, but
    not everything asked was proved; 0 only when every check passed."""
    failed = [c for s, c, _ in results if s == FAILED]
    not_run = [c for s, c, _ in results if s == NOT_RUN]
    passed = sum(s == OK for s, _, _ in results)
    if failed:
        return f"FAILED: {', '.join(failed)}" + (f"; not run: {', '.join(not_run)}" if not_run else ""), 1
    if not_run:
        return f"{passed} passed, NOT RUN (not proved): {', '.join(not_run)}", 3
    return f"all {passed} checks passed", 0
