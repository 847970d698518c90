"""Closing summaries, each a function of a loaded run (bench.results.store.Run): what the
terminal prints after the last launch, what `distbench show` re-prints, what the HTML report
and the gate quote. Never reads anything but the run."""

import math

from bench.report.format import mib, nbytes, num, pct
from bench.timing.stats import figure_text


def _rows(run, table: str = "results") -> list[dict]:
    if table not in run.tables or run[table].empty:
        return []
    df = run[table]
    return df.astype(object).where(df.notna(), None).to_dict("records")


def notes(run) -> list[str]:
    """Every launch's notes (oversubscription, skips), once each, then the run's own."""
    out = []
    for launch in run.meta.get("launches", {}).values():
        out += launch.get("notes", [])
    out += run.meta.get("notes", [])
    return list(dict.fromkeys(out))


def _footer(rows: list[dict], run, what: str = "rows") -> list[str]:
    wrong = sum(int(r["wrong"] or 0) for r in rows)
    noisy = sum(bool(r.get("noisy")) for r in rows)
    # rows an imported tool judged wrong without counting elements (nccl-tests before 2.13: max_error)
    judged = sum(str(r.get("degraded") or "").startswith("wrong results") for r in rows)
    unchecked = bool(rows) and all(r.get("wrong") is None for r in rows) and not judged
    verdict = ("not checked (the rows hold no count)" if unchecked else
               f"{wrong} {'OK' if wrong == 0 and not judged else 'FAILED'}"
               + (f", {judged} {what} wrong by the tool's own check (their `degraded` says why)" if judged else ""))
    return ([f"#  Wrong elements: {verdict}; noisy {what}: {noisy}/{len(rows)}"]
            + [f"#  Note: {n}" for n in notes(run)])


def collectives_summary(run) -> str:
    rows = _rows(run)
    figures = sorted({figure_text(r["mode"], r.get("rank_reduce") or "max") for r in rows})
    src = run.meta.get("source") if isinstance(run.meta.get("source"), dict) else None
    if src:  # an imported run: the tool's own figures (meta.json source.definitions says what each is)
        figures = [f"{src.get('tool')}'s own time as it defines it (meta.json source.definitions)"]
    out = ["#", "# Summary (busbw per nccl-tests PERFORMANCE.md; time = " + "; ".join(figures) + ")"]
    if src:
        out.append(f"# Imported from {src.get('tool')} {src.get('version', '')}: {src.get('command') or '(no command line)'}")
    cases: dict[str, list[dict]] = {}
    for r in rows:
        cases.setdefault(r["case_id"], []).append(r)
    for cid, rs in cases.items():
        sized = [r for r in rs if r["size_bytes"] > 0]
        small = min(rs, key=lambda r: (r["size_bytes"], r["time_median_s"]))
        lat = f"latency at {nbytes(small['size_bytes'])}B {small['time_median_s'] * 1e6:.1f} us"
        if sized:
            peak = max(sized, key=lambda r: r["busbw_gbps"])
            out.append(f"#   {cid:<48} peak busbw {peak['busbw_gbps']:7.3f} GB/s at {nbytes(peak['size_bytes']):>5}B "
                       f"({peak['placement']}); {lat}")
        else:
            out.append(f"#   {cid:<48} {lat}")
    return "\n".join(out + _footer(rows, run))


def _crossing(kind, size) -> str:
    if kind is None or (isinstance(kind, float) and math.isnan(kind)):
        return "-"
    if kind == "crossover":
        return f"{nbytes(size)}B"
    if kind == "inverted":
        return f"inverted at {nbytes(size)}B (ring faster below, tree above)"
    if kind == "mixed":
        return f"mixed (ring and tree trade places more than once; ring first faster from {nbytes(size)}B)"
    return {"ring_always": "none, ring faster at every size", "tree_always": "none, tree faster at every size"}[kind]


def allreduce_summary(run) -> str:
    rows = _rows(run)
    worlds = sorted({int(r["world"]) for r in rows})
    out = ["#", "# busbw = algbw x 2(n-1)/n for EVERY algorithm (nccl-tests' all_reduce factor; "
           + ", ".join(f"{2 * (w - 1) / w:.3f} at world {w}" for w in worlds)
           + "): a normalisation, not the bytes each algorithm moves."]
    out += _footer(rows, run, "cells")
    out += nccl_tuning_lines(rows, _rows(run, "nccl_tuning"))
    tables = {t: _rows(run, t) for t in ("model", "crossover", "predictions")}
    blocks = list(dict.fromkeys((m["dtype"], m["op"], m["mode"]) for m in tables["model"]))
    for key in blocks:
        part = {n: [r for r in t if (r["dtype"], r["op"], r["mode"]) == key] for n, t in tables.items()}
        if len(blocks) > 1:
            out += ["#", f"# ===== dtype={key[0]} op={key[1]} mode={key[2]} ====="]
        figures = sorted({m.get("figure") or "" for m in part["model"]} - {""})
        if figures:  # what the fit, the crossover and the predictions below are made from
            out += ["#", f"# Fit, crossover and predictions below use: {'; '.join(figures)}"]
        out += _model_block(part)
    return "\n".join(out)


def nccl_tuning_lines(rows: list[dict], tuning: list[dict]) -> list[str]:
    """What NCCL chose in the NCCL_ALGO / NCCL_PROTO variant launches (table nccl_tuning, read from
    NCCL's TUNING log): one FALLBACK line per size where it ran something else than asked."""
    if not tuning:
        nccl = any(r.get("backend") == "nccl" for r in rows)
        variants = sorted({r["variant"] for r in rows if r.get("variant")})
        if not nccl:
            return ["#  NCCL: no NCCL tuning log (not nccl)"]
        if not variants:
            return ["#  NCCL: no NCCL tuning log (no NCCL_ALGO / NCCL_PROTO variant launch)"]
        return [f"#  NCCL: no NCCL tuning log for {', '.join(variants)}: what NCCL ran is NOT verified "
                "(NCCL_DEBUG_FILE or NCCL_DEBUG set by the user, or an NCCL without TUNING lines)"]
    out = []
    for t in tuning:
        if t["matches_asked"]:
            continue
        asked = t["variant"] or "nothing"
        chose = t["algorithm_chosen"] if t["algorithm_asked"] else t["protocol_chosen"]
        if t["algorithm_asked"] and t["protocol_asked"]:
            chose = f"{t['algorithm_chosen']}/{t['protocol_chosen']}"
        out.append(f"#  asked {asked}, NCCL chose {chose} at {nbytes(t['size_bytes'])}: FALLBACK (launch {t['launch']})")
    if not out:
        launches = sorted({t["launch"] for t in tuning})
        out.append(f"#  NCCL: every variant ran as asked ({len(launches)} launch(es), "
                   f"{len({(t['launch'], t['size_bytes']) for t in tuning})} size(s) checked in NCCL's TUNING log)")
    return out


def _model_block(tables: dict) -> list[str]:
    model, out = tables["model"], []
    if not model:
        return out
    out += ["#", "# Cost model t = a(n)*alpha + b(n)*S*beta (Hockney; a, b from Thakur, Rabenseifner & Gropp 2005),",
            "#   fitted per algorithm on relative residuals; native uses ring's a, b (effective values).",
            "#   '*' = the fit includes an OVERSUBSCRIBED launch; 'P' = the fit used for predictions",
            f"#   {'algorithm':<24} {'worlds':>6} {'pts':>4} {'alpha(us)':>10} {'1/beta(GB/s)':>13} "
            f"{'rms resid':>10} {'max resid':>10}"]
    for m in model:
        mark = ("*" if m["oversubscribed"] else " ") + ("P" if m["used_for_predictions"] else " ")
        if m.get("alpha_us") is None:
            why = "world 1 moves nothing" if m["fit_worlds"] == "1" else "too few points"
            out.append(f"#   {m['label']:<24} {m['fit_worlds']:>6} {m['points']:>4}   (no fit: {why})")
            continue
        out.append(f"#   {m['label']:<24} {m['fit_worlds']:>6}{mark} {m['points']:>2} {m['alpha_us']:>10.1f} "
                   f"{num(m['bandwidth_gbps'], '13.3f'):>13} {m['rms_rel_residual'] * 100:>9.1f}% "
                   f"{m['max_abs_rel_residual'] * 100:>9.1f}%")
    out += ["# Measured per world: latency at the smallest size, peak busbw and where, n1/2 (size reaching half the peak)",
            f"#   {'algorithm':<24} {'world':>5} {'latency(us)':>12} {'at':>6} {'peak busbw':>11} {'at':>6} {'n1/2':>8}"]
    for m in model:
        if m.get("latency_s") is None:
            continue
        nh = (("<=" if m.get("n_half_at_or_below") else "") + f"{nbytes(m.get('n_half_bytes'))}B"
              if m.get("n_half_bytes") is not None else "-")
        out.append(f"#   {m['label']:<24} {m['fit_worlds']:>5}{'*' if m['oversubscribed'] else ' '}"
                   f"{m['latency_s'] * 1e6:>11.1f} {nbytes(m['latency_size_bytes']) + 'B':>6} "
                   f"{m['peak_busbw_gbps']:>11.3f} {nbytes(m['peak_size_bytes']) + 'B':>6} {nh:>8}")
    for c in tables["crossover"]:
        out += [f"# Tree/ring crossover at world {c['world']}{' (OVERSUBSCRIBED)' if c['oversubscribed'] else ''} "
                "(size from which ring is faster):",
                f"#   measured:                                {_crossing(c.get('measured_kind'), c.get('measured_bytes'))}",
                f"#   model, each algorithm's own alpha, beta: {_crossing(c.get('model_kind'), c.get('model_bytes'))}",
                f"#   model, ring's alpha, beta for both:      {_crossing(c.get('textbook_kind'), c.get('textbook_bytes'))}"]
    return out + _predictions(tables["predictions"])


def _predictions(preds: list[dict]) -> list[str]:
    if not preds:
        return []
    labels = list(dict.fromkeys(p["label"] for p in preds))
    bases = sorted({p["fit_worlds"] + (" OVERSUBSCRIBED" if p["fit_oversubscribed"] else "") for p in preds})
    out = ["#", "# MODEL PREDICTIONS -- model output, NOT measurements: predicted time (us) from the fit on world(s) "
           + "; ".join(bases)]
    w = max(10, *(len(lb) + 1 for lb in labels))
    for size in sorted({p["size_bytes"] for p in preds}):
        at = {(p["label"], p["world"]): p for p in preds if p["size_bytes"] == size}
        out.append(f"#   size {nbytes(size)}B{'':<4}" + "".join(f"{lb:>{w}}" for lb in labels) + f"{'fastest':>{w}}")
        for n in sorted({p["world"] for p in at.values()}):
            ts = {lb: at[(lb, n)]["predicted_time_s"] for lb in labels if (lb, n) in at}
            best = min(ts, key=ts.get) if ts else "-"
            cells = "".join(f"{ts[lb] * 1e6:>{w}.1f}" if lb in ts else f"{'-':>{w}}" for lb in labels)
            out.append(f"#   {'world ' + str(n):<14}{cells}{best:>{w}}")
    return out


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
    rows, out = _rows(run), []
    eff = _rows(run, "microbatch_efficiency")
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
    return "\n".join(out + [f"#  Note: {n}" for n in notes(run)])

