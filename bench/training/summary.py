"""What the training kinds (strategies, pipeline) print: one line per case while a launch runs
(rank 0), and the closing summary of a stored run with its bubble table."""

import math

from bench.report.format import mib, num, pct
from bench.report.summaries import energy_lines, notes, rows_of
from bench.report.terminal import Printer

STRATEGY_COLS = (f"{'strategy':<8} {'model':<10} {'world':>5} {'chunks':>6} {'schedule':<11} {'ckpt':<11} {'batch':>5} "
                 f"{'mbatch':>6} {'step ms':>9} {'±iqr':>6} {'samples/s':>10} {'/device':>9} {'tokens/s':>9} "
                 f"{'bubble meas/gpipe/replay':>24} {'peak MiB/dev':>12} {'wrong':>5}")


def _has_bubble(r: dict) -> bool:
    """A pipeline row (pp alone or a composed layout with a pipeline): it has the bubble columns."""
    try:
        return math.isfinite(float(r.get("bubble_measured")))
    except (TypeError, ValueError):  # None, pd.NA: not a pipeline row
        return False


def _pp(r: dict) -> int:
    """Pipeline ranks of a row: pp_degree (composed layouts), else the world (pp alone; older runs)."""
    try:
        return int(r.get("pp_degree"))
    except (TypeError, ValueError):
        return int(r["world"])


def _layout(r: dict) -> str:
    """A composed layout's degrees and a space ('pp2.dp2.tp2 '), '' for one parallelism."""
    lay = str(r.get("layout") or "")
    return f"{lay} " if "." in lay else ""


def strategy_line(r: dict) -> str:
    """One case: step time is the median over timed steps of the step wall (earliest start to
    latest end over ranks); bubbles: measured idle/step, GPipe (p-1)/(m+p-1), calibrated replay."""
    bub = "-"
    if _has_bubble(r):
        bub = f"{pct(r.get('bubble_measured'))}/{pct(r.get('bubble_gpipe_theory'))}/{pct(r.get('replay_bubble'))}"
    name = f"{r['strategy']} {_layout(r)}".strip()  # composed: its degrees
    return (f"  {name:<8} {r['model']:<10} {r['world']:>5} {r['chunks']:>6} {r['schedule'] or '-':<11} "
            f"{r['checkpoint']:<11} {r['batch']:>5} {r['micro_batch']:>6} {r['step_median_s'] * 1e3:>8.1f}"
            f"{'*' if r.get('noisy') else ' '} {r['step_iqr_s'] * 1e3:>6.1f} {r['samples_per_s']:>10.1f} "
            f"{r['samples_per_s_per_device']:>9.1f} {num(r.get('tokens_per_s'), '9.0f'):>9} {bub:>24} "
            f"{mib(r['peak_memory_bytes']):>12} {r['wrong']:>5}{' [degraded]' if r.get('degraded') else ''}")


def _finite(x) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _bubble_table(pp: list[dict]) -> list[str]:
    """Per schedule: the measured bubble beside the exact one (timed workload: the schedule's own
    order replayed with the known action times) and the schedule's formula."""
    have = [r for r in pp if "bubble_theory" in r]
    if not have:
        return []
    out = ["#", "# Bubble per schedule: measured | exact (timed workload) | measured - exact | theory (formula)"]
    order = lambda r: (r["model"], r["world"], str(r.get("layout") or ""), r["chunks"], r["schedule"], r["checkpoint"])  # noqa: E731
    for r in sorted(have, key=order):
        ex = r.get("bubble_exact")
        diff = f"{(r['bubble_measured'] - ex) * 100:+5.1f} pp" if _finite(ex) else "     -  "
        out.append(f"#   {r['model']:<10} {_layout(r)}p={_pp(r):<2} m={r['chunks']:<3} {r['schedule']:<14} "
                   f"measured {pct(r['bubble_measured']):>4}  exact {pct(ex) if _finite(ex) else '-':>4}  {diff}  "
                   f"theory {pct(r.get('bubble_theory')):>4} {r.get('bubble_theory_formula') or ''}")
    return out


def strategies_summary(run) -> str:
    rows, out = rows_of(run), []
    eff = rows_of(run, "microbatch_efficiency")
    if eff:
        out += ["#", "# Micro-batch efficiency (one process, whole model, the same mini-batch in m sequential chunks)",
                f"#   {'chunks':>6} {'mbatch':>6} {'step ms':>9} {'samples/s':>10} {'rel':>6} {'ideal p-stage GPipe ms':>22}"]
        out += [f"    {r['chunks']:>6} {r['micro_batch']:>6} {r['step_median_s'] * 1e3:>9.1f} {r['samples_per_s']:>10.1f} "
                f"{r['relative_throughput']:>6.2f} {r['ideal_pipeline_step_s'] * 1e3:>22.1f}" for r in eff]
    memory = "CUDA peak reserved" if rows and rows[0].get("memory_kind") == "cuda" else "host peak RSS per rank"
    out += ["#", f"# Summary (step = median step wall over ranks; '*' noisy: IQR/median > 0.1; memory: {memory})",
            "# " + STRATEGY_COLS]
    key = lambda r: (r["strategy"], r["model"], r["world"], r["schedule"] or "", r["chunks"], r["checkpoint"], r["batch"])  # noqa: E731
    out += [strategy_line(r) for r in sorted(rows, key=key)]
    pp = [r for r in rows if _has_bubble(r)]
    if pp:
        out += ["#", "# Pipeline bubble: measured idle/step | GPipe (p-1)/(m+p-1) | Megatron (p-1)/(v m) | replay: "
                "schedule + imbalance | comm+overhead = (1 - compute/step) - replay"]
        order = lambda r: (r["model"], r["world"], str(r.get("layout") or ""), r["schedule"],  # noqa: E731
                           r["micro_batch"] if r["sweep_mode"] == "micro-batch" else 0, r["chunks"], r["checkpoint"])
        out += [f"#   {r['model']:<10} {_layout(r)}p={_pp(r):<2} {r['schedule']:<14} m={r['chunks']:<3} mb={r['micro_batch']:<4} "
                f"{r['checkpoint']:<11} measured {pct(r['bubble_measured']):>4}  gpipe {pct(r['bubble_gpipe_theory']):>4}  "
                f"megatron {pct(r['bubble_megatron_theory']):>5}  replay {pct(r['replay_bubble']):>4} = "
                f"schedule {pct(r['replay_schedule_bubble']):>4} + imbalance {pct(r['replay_imbalance']):>4}  "
                f"comm+overhead {pct(r['comm_overhead_frac']):>4}" for r in sorted(pp, key=order)]
        out += _bubble_table(pp)
    wrong = sum(int(r["wrong"] or 0) for r in rows)
    out.append(f"#  Correctness vs single-process reference ({rows[0]['tolerance'] if rows else ''}): "
               f"{wrong} wrong tensor(s) {'OK' if wrong == 0 else 'FAILED'}")
    out += [f"#  Degraded: {s}: {d}" for s, d in sorted({(r["strategy"], r["degraded"]) for r in rows if r.get("degraded")})]
    return "\n".join(out + energy_lines(rows) + [f"#  Note: {n}" for n in notes(run)])

class StrategiesLive(Printer):
    """Strategy / pipeline cases: one line per finished case (columns: bench.report.summaries)."""

    def start(self, launch, units):
        self.communicator(launch, "")
        self.p("# " + STRATEGY_COLS)

    def unit(self, unit, index: int, total: int):
        pass

    def done(self, tables: dict):
        for r in tables.get("results", []):
            self.p(strategy_line(r))
        if tables.get("microbatch_efficiency"):
            self.p("# micro-batch efficiency curve measured (one process; shown in the summary)")
