"""The energy check of `make gpu-smoke`: are a step's energy columns right? (docs/telemetry.md,
"Energy"). A pure function of the stored results rows; tools/gpu_smoke.py calls it per step.

Fails on: a row with no figure and no reason; on a GPU that has the counter (the case window's
`gpu_energy_j` was read), no figure over a span of at least the minimum; a figure over a shorter
span; a non-positive figure; J/GB outside [GB_MIN, GB_MAX]; J/GB x one op's bus bytes that is not
J/op (the two are one measurement); more energy in the timed span than in the whole case window
(the same counter, read around it); a mean power per GPU outside [W_MIN, W_MAX].
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.telemetry.energy import COUNTER_PERIOD_S, MIN_SPAN_S  # noqa: E402 - after the path; imports no torch

GB_MIN, GB_MAX = 0.01, 1e5  # J per 1e9 bus bytes: ~30 W / 900 GB/s (NVLink 4) is 0.03; a 4 KiB op ~ 1e3
W_MIN, W_MAX = 5.0, 1500.0  # mean W per GPU over a span: a T4 idles at ~10 W, an H100 / H200 SXM peaks at 700 W
PER_UNIT = (("energy_per_op_j", "J/op"), ("energy_per_gb_j", "J/GB"), ("energy_per_step_j", "J/step"),
            ("energy_per_sample_j", "J/sample"))


def _f(r, col) -> float:
    v = r.get(col)
    try:
        v = float(v)
    except (TypeError, ValueError):
        return math.nan
    return v


def _where(r) -> str:
    size = _f(r, "size_bytes")
    if math.isfinite(size):
        from bench.report.format import nbytes  # lazy: only for a sized row's label

        return f"{nbytes(size)}B {r.get('placement') or ''}".strip()
    return str(r.get("case_id"))


def _note(r) -> str:
    n = r.get("energy_note")
    return n if isinstance(n, str) else ""


def _row_problems(r, gpu: bool) -> list[str]:
    where, span, e = _where(r), _f(r, "energy_span_s"), _f(r, "energy_j")
    if not math.isfinite(e):
        if not _note(r):
            return [f"energy absent without a reason ({where})"]
        if gpu and math.isfinite(_f(r, "gpu_energy_j")) and span >= MIN_SPAN_S:
            return [f"energy absent on a GPU with the counter over a {span:.3g} s span ({where}): {_note(r)}"]
        return []
    out = []
    if not span >= MIN_SPAN_S:
        out.append(f"energy_j given for a {span:.3g} s span, under the {MIN_SPAN_S:.3g} s minimum ({where})")
    for col in ("energy_j", *(c for c, _ in PER_UNIT)):
        v = _f(r, col)
        if math.isfinite(v) and v <= 0:
            out.append(f"{col} {v:.3g} <= 0 ({where})")
    per_gb, per_op = _f(r, "energy_per_gb_j"), _f(r, "energy_per_op_j")
    if math.isfinite(per_gb) and not GB_MIN <= per_gb <= GB_MAX:
        out.append(f"energy_per_gb_j {per_gb:.3g} J/GB outside [{GB_MIN:.3g}, {GB_MAX:.3g}] ({where})")
    bus = _f(r, "size_bytes") * _f(r, "bus_factor") * _f(r, "world") / 1e9  # one op's bus bytes, every rank, GB
    if math.isfinite(per_gb) and math.isfinite(per_op) and math.isfinite(bus) and \
            not math.isclose(per_gb * bus, per_op, rel_tol=1e-6):
        out.append(f"energy_per_gb_j x bus bytes per op {per_gb * bus:.3g} J != energy_per_op_j {per_op:.3g} J ({where})")
    window = _f(r, "gpu_energy_j")
    # a rank's span may end after the window's last reading (local rank 0's sampler stops as it
    # leaves the case): one counter update period at the span's mean power, per GPU, is allowed
    slack = e / span * COUNTER_PERIOD_S if math.isfinite(span) and span > 0 else 0.0
    if math.isfinite(window) and e > window * (1 + 1e-9) + 1e-3 + slack:
        out.append(f"energy_j {e:.3g} J > the case window's gpu_energy_j {window:.3g} J + one counter period "
                   f"({slack:.3g} J) ({where})")
    gpus = _f(r, "gpus_sampled")
    if math.isfinite(gpus) and gpus > 0 and span > 0:
        watts = e / span / gpus
        if not W_MIN <= watts <= W_MAX:
            out.append(f"mean power {watts:.3g} W per GPU outside [{W_MIN:.3g}, {W_MAX:.3g}] W ({where})")
    return out


def _reason(note: str) -> str:
    return f"span shorter than {MIN_SPAN_S:.3g} s" if note.endswith("counter too coarse") else note


def check_energy(res, gpu: bool, need_figure: bool = False) -> tuple[list[str], list[str]]:
    """(problems, facts verified) of one step's results rows (a DataFrame). gpu: the step ran on
    CUDA; need_figure: the step was sized to give one (a span of at least MIN_SPAN_S), so at least
    one row on a GPU with the counter must have it."""
    if res is None or len(res) == 0 or "energy_note" not in res.columns:
        return ["rows carry no energy columns"], []
    rows = res.astype(object).where(res.notna(), None).to_dict("records")
    problems = [p for r in rows for p in _row_problems(r, gpu)]
    given = [r for r in rows if math.isfinite(_f(r, "energy_j"))]
    absent = [r for r in rows if not math.isfinite(_f(r, "energy_j"))]
    if need_figure and not given:
        counted = [r for r in absent if math.isfinite(_f(r, "gpu_energy_j"))]
        problems.append("no row with an energy figure on a GPU with the counter: "
                        + ("; ".join(dict.fromkeys(_note(r) for r in counted)) or "no GPU had the counter"))
    fact = f"energy: {len(given)} of {len(rows)} rows with figures"
    if given:
        top = max(given, key=lambda r: _f(r, "size_bytes") if math.isfinite(_f(r, "size_bytes")) else 0)
        shown = [f"{_f(top, c):.3g} {u}" for c, u in PER_UNIT if math.isfinite(_f(top, c))]
        at = f" at {_where(top).split()[0]}" if math.isfinite(_f(top, "size_bytes")) else ""
        fact += f" ({', '.join(shown)}{at})"
    if absent:
        fact += f"; {len(absent)} without: " + "; ".join(dict.fromkeys(_reason(_note(r)) for r in absent))
    return problems, [fact]
