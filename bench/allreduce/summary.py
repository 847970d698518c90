"""What the allreduce kind prints: one line per algorithm and size while a launch runs (rank 0),
and the closing summary of a stored run: peak busbw, the fitted alpha-beta model, tree vs ring
crossover, predictions and NCCL's tuning choices."""

import math

from bench.report.format import nbytes, nccl_type, num, row_label
from bench.report.summaries import footer, rows_of
from bench.report.terminal import Printer

class AllreduceLive(Printer):
    """Allreduce algorithms side by side, one line per size (one time/busbw pair per algorithm);
    time is the median over iterations reduced over ranks as the rows say (rank_reduce; max: the slowest
    rank), in microseconds; '*' a noisy cell."""

    CELL = 19

    def start(self, launch, units):
        self.block = None
        variant = next((c.variant for u in units for c in u.cases if c.variant), "")
        self.communicator(launch, f"allreduce algorithms{' ' + variant if variant else ''}: ")

    def unit(self, unit, index: int, total: int):
        if unit.cases == self.block:
            return
        self.block, c = unit.cases, unit.cases[0]
        self.labels = [x.label for x in unit.cases]
        ring = next((x for x in unit.cases if x.algorithm == "ring" and x.chunk_bytes), None)
        self.p(f"# dtype={c.dtype} op={c.op} mode={c.mode}  {len(c.sizes)} size(s)  world={c.world}"
               + (f"  ring chunk={nbytes(ring.chunk_bytes)}B" if ring else ""))
        names = "".join(f"{lb[:self.CELL - 1]:>{self.CELL}}" for lb in self.labels)
        units = "".join(f"{'time(us)':>{self.CELL - 8}}{'busbw':>8}" for _ in self.labels)
        self.p(f"#{'size':>11} {'count':>12} {'type':>8} {'redop':>6}{names} {'#wrong':>7}")
        self.p(f"#{'(B)':>11} {'(elements)':>12} {'':>8} {'':>6}{units} {'':>7}")

    def done(self, tables: dict):
        rows = tables.get("results", [])
        if not rows:
            return
        by, cells = {row_label(r): r for r in rows}, []
        for lb in self.labels:
            r = by.get(lb)
            if r is None:
                cells.append(f"{'-':>{self.CELL - 8}}{'-':>8}")
                continue
            cells.append(f"{r['time_median_s'] * 1e6:>{self.CELL - 9}.1f}{'*' if r['noisy'] else ' '}"
                         f"{num(r['busbw_gbps'], '8.3f'):>8}")
        r0 = rows[0]
        self.p(f"{r0['size_bytes']:>12} {r0['count']:>12} {nccl_type(r0['dtype']):>8} {r0['op']:>6}{''.join(cells)} "
               f"{sum(int(r['wrong']) for r in rows):>7}")

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
    rows = rows_of(run)
    worlds = sorted({int(r["world"]) for r in rows})
    out = ["#", "# busbw = algbw x 2(n-1)/n for EVERY algorithm (nccl-tests' all_reduce factor; "
           + ", ".join(f"{2 * (w - 1) / w:.3f} at world {w}" for w in worlds)
           + "): a normalisation, not the bytes each algorithm moves."]
    out += footer(rows, run, "cells")
    out += nccl_tuning_lines(rows, rows_of(run, "nccl_tuning"))
    tables = {t: rows_of(run, t) for t in ("model", "crossover", "predictions")}
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
