"""Terminal output for humans (rank 0 or the launcher only): nccl-tests-style tables."""

import math
import sys

from bench.units import format_size

_TYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double",
         "int32": "int32", "int64": "int64", "int8": "int8", "uint8": "uint8"}


def say(*parts, file=None):
    print(*parts, file=file or sys.stdout, flush=True)


def _num(x, fmt):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


class CollectivesTable:
    """Mirrors nccl-tests: size count type redop root | time algbw busbw #wrong, for out-of-place
    then in-place. Time is the median over iterations of the max over ranks, in microseconds;
    a '*' marks a noisy row (IQR/median > 0.1)."""

    def __init__(self, out=None):
        self.out = out or sys.stdout

    def _p(self, line=""):
        print(line, file=self.out, flush=True)

    def case_header(self, index: int, total: int, case, info_line: str):
        op = case.op or "none"
        self._p(f"# [{index}/{total}] {case.collective}  dtype={case.dtype} op={op} "
                f"root={case.root} mode={case.mode}  {len(case.sizes)} size(s)  {info_line}")
        self._p("#                                                       out-of-place                        in-place")
        self._p("#       size         count      type   redop    root      time   algbw   busbw #wrong      time   algbw   busbw #wrong")
        self._p("#        (B)    (elements)                                 (us)  (GB/s)  (GB/s)              (us)  (GB/s)  (GB/s)")

    def size_row(self, rows: list[dict]):
        if not rows:
            return
        r0 = rows[0]
        by_place = {r["placement"]: r for r in rows}
        cells = []
        for place in ("out-of-place", "in-place"):
            r = by_place.get(place)
            if r is None:
                cells.append(f"{'-':>10} {'-':>7} {'-':>7} {'-':>6}")
                continue
            t = r["time_median_s"] * 1e6
            mark = "*" if r["noisy"] else " "
            cells.append(f"{t:>9.2f}{mark} {_num(r['algbw_gbps'], '7.2f'):>7} "
                         f"{_num(r['busbw_gbps'], '7.2f'):>7} {r['wrong']:>6}")
        op = r0["op"] or "none"
        self._p(f"{r0['size_bytes']:>12} {r0['count']:>13} {_TYPE.get(r0['dtype'], r0['dtype']):>9} "
                f"{op:>7} {r0['root']:>7}  {cells[0]}  {cells[1]}")

    def summary(self, rows: list[dict], notes: list[str]):
        self._p("#")
        self._p("# Summary (time = median over iterations of the slowest rank; busbw per nccl-tests PERFORMANCE.md)")
        cases: dict[str, list[dict]] = {}
        for r in rows:
            cases.setdefault(r["case_id"], []).append(r)
        for cid, rs in cases.items():
            sized = [r for r in rs if r["size_bytes"] > 0]
            smallest = min(rs, key=lambda r: (r["size_bytes"], r["time_median_s"]))
            lat = f"latency at {format_size(smallest['size_bytes'])}B {smallest['time_median_s'] * 1e6:.1f} us"
            if sized:
                peak = max(sized, key=lambda r: r["busbw_gbps"])
                self._p(f"#   {cid:<48} peak busbw {peak['busbw_gbps']:7.3f} GB/s at "
                        f"{format_size(peak['size_bytes']):>5}B ({peak['placement']}); {lat}")
            else:
                self._p(f"#   {cid:<48} {lat}")
        wrong = sum(int(r["wrong"]) for r in rows)
        noisy = sum(bool(r["noisy"]) for r in rows)
        self._p(f"#  Wrong elements: {wrong} {'OK' if wrong == 0 else 'FAILED'}; noisy rows: {noisy}/{len(rows)}")
        for n in notes:
            self._p(f"#  Note: {n}")


class AllreduceTable:
    """Allreduce algorithms side by side, one line per size (nccl-tests' columns, one time/busbw
    pair per algorithm). Time is the median over iterations of the slowest rank, in microseconds;
    '*' marks a noisy cell (IQR/median > 0.1)."""

    CELL = 19

    def __init__(self, out=None):
        self.out = out or sys.stdout
        self.labels: list[str] = []

    def _p(self, line=""):
        print(line, file=self.out, flush=True)

    def launch_line(self, text: str):
        self._p(f"# allreduce algorithms: {text}")

    def header(self, case, labels: list[str]):
        self.labels = list(labels)
        self._p(f"# dtype={case.dtype} op={case.op} mode={case.mode}  {len(case.sizes)} size(s)  world={case.world}"
                + (f"  ring chunk={format_size(case.chunk_bytes)}B" if any(lb == "ring" for lb in labels)
                   and case.chunk_bytes else ""))
        names = "".join(f"{lb[:self.CELL - 1]:>{self.CELL}}" for lb in self.labels)
        units = "".join(f"{'time(us)':>{self.CELL - 8}}{'busbw':>8}" for _ in self.labels)
        self._p(f"#{'size':>11} {'count':>12} {'type':>8} {'redop':>6}{names} {'#wrong':>7}")
        self._p(f"#{'(B)':>11} {'(elements)':>12} {'':>8} {'':>6}{units} {'':>7}")

    def size_row(self, rows: list[dict]):
        if not rows:
            return
        by = {_label(r): r for r in rows}
        cells = []
        for lb in self.labels:
            r = by.get(lb)
            if r is None:
                cells.append(f"{'-':>{self.CELL - 8}}{'-':>8}")
                continue
            mark = "*" if r["noisy"] else " "
            cells.append(f"{r['time_median_s'] * 1e6:>{self.CELL - 9}.1f}{mark}{_num(r['busbw_gbps'], '8.3f'):>8}")
        r0 = rows[0]
        wrong = sum(int(r["wrong"]) for r in rows)
        self._p(f"{r0['size_bytes']:>12} {r0['count']:>12} {_TYPE.get(r0['dtype'], r0['dtype']):>8} "
                f"{r0['op']:>6}{''.join(cells)} {wrong:>7}")

    def footer(self, rows: list[dict], world: int, notes: list[str]):
        wrong = sum(int(r["wrong"]) for r in rows)
        noisy = sum(bool(r["noisy"]) for r in rows)
        self._p(f"# busbw = algbw x 2(n-1)/n = algbw x {2 * (world - 1) / world:.3f} for EVERY algorithm (nccl-tests' "
                "all_reduce factor): a normalisation, not the bytes each algorithm moves.")
        self._p(f"#  Wrong elements: {wrong} {'OK' if wrong == 0 else 'FAILED'}; noisy cells: {noisy}/{len(rows)}")
        for n in notes:
            self._p(f"#  Note: {n}")


def _label(r: dict) -> str:
    v = r.get("variant") or ""
    return f"{r['algorithm']}[{v}]" if v else r["algorithm"]


def _bytes(n) -> str:
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return "-"
    for unit, f in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= f:
            return f"{n / f:.3g}{unit}"
    return f"{n:.3g}"


def _crossing(kind, size) -> str:
    if kind is None:
        return "-"
    if kind == "crossover":
        return f"{_bytes(size)}B"
    if kind == "inverted":
        return f"inverted at {_bytes(size)}B (ring faster below, tree above)"
    if kind == "mixed":
        return f"mixed (ring and tree trade places more than once; ring first faster from {_bytes(size)}B)"
    return {"ring_always": "none, ring faster at every size", "tree_always": "none, tree faster at every size"}[kind]


class AllreduceSummary:
    """The cost-model summary after the last launch: fits, measured latency / peak / n_half,
    tree-ring crossover (measured vs model), and model predictions for larger worlds."""

    def __init__(self, out=None):
        self.out = out or sys.stdout

    def _p(self, line=""):
        print(line, file=self.out, flush=True)

    def print(self, tables: dict, rows: list[dict]):
        """One summary per (dtype, op, mode) block, headed by the block when there are several."""
        blocks = list(dict.fromkeys((m["dtype"], m["op"], m["mode"]) for m in tables.get("model", [])))
        for key in blocks:
            part = {name: [r for r in t if (r["dtype"], r["op"], r["mode"]) == key] for name, t in tables.items()
                    if name in ("model", "crossover", "predictions")}
            if len(blocks) > 1:
                self._p("#")
                self._p(f"# ===== dtype={key[0]} op={key[1]} mode={key[2]} =====")
            self._block(part)

    def _block(self, tables: dict):
        model = tables.get("model", [])
        if not model:
            return
        self._p("#")
        self._p("# Cost model t = a(n)*alpha + b(n)*S*beta (Hockney; a, b from Thakur, Rabenseifner & Gropp 2005),")
        self._p("#   fitted per algorithm on relative residuals; native uses ring's a, b (effective values).")
        self._p("#   '*' = the fit includes an OVERSUBSCRIBED launch; 'P' = the fit used for predictions")
        self._p(f"#   {'algorithm':<24} {'worlds':>6} {'pts':>4} {'alpha(us)':>10} {'1/beta(GB/s)':>13} "
                f"{'rms resid':>10} {'max resid':>10}")
        for m in model:
            mark = ("*" if m["oversubscribed"] else " ") + ("P" if m["used_for_predictions"] else " ")
            if m.get("alpha_us") is None:
                why = "world 1 moves nothing" if m["fit_worlds"] == "1" else "too few points"
                self._p(f"#   {m['label']:<24} {m['fit_worlds']:>6} {m['points']:>4}   (no fit: {why})")
                continue
            self._p(f"#   {m['label']:<24} {m['fit_worlds']:>6}{mark} {m['points']:>2} {m['alpha_us']:>10.1f} "
                    f"{_num(m['bandwidth_gbps'], '13.3f'):>13} {m['rms_rel_residual'] * 100:>9.1f}% "
                    f"{m['max_abs_rel_residual'] * 100:>9.1f}%")
        self._p("# Measured per world: latency at the smallest size, peak busbw and where, "
                "n1/2 (size reaching half the peak)")
        self._p(f"#   {'algorithm':<24} {'world':>5} {'latency(us)':>12} {'at':>6} {'peak busbw':>11} {'at':>6} "
                f"{'n1/2':>8}")
        for m in model:
            if m.get("latency_s") is None:
                continue
            nh = ("<=" if m.get("n_half_at_or_below") else "") + f"{_bytes(m.get('n_half_bytes'))}B" \
                if m.get("n_half_bytes") is not None else "-"
            self._p(f"#   {m['label']:<24} {m['fit_worlds']:>5}{'*' if m['oversubscribed'] else ' '}"
                    f"{m['latency_s'] * 1e6:>11.1f} {_bytes(m['latency_size_bytes']) + 'B':>6} "
                    f"{m['peak_busbw_gbps']:>11.3f} {_bytes(m['peak_size_bytes']) + 'B':>6} {nh:>8}")
        for c in tables.get("crossover", []):
            self._p(f"# Tree/ring crossover at world {c['world']}{' (OVERSUBSCRIBED)' if c['oversubscribed'] else ''} "
                    "(size from which ring is faster):")
            measured = _crossing(c.get("measured_kind"), c.get("measured_bytes"))
            self._p(f"#   measured:                                {measured}")
            self._p(f"#   model, each algorithm's own alpha, beta: {_crossing(c.get('model_kind'), c.get('model_bytes'))}")
            self._p(f"#   model, ring's alpha, beta for both:      "
                    f"{_crossing(c.get('textbook_kind'), c.get('textbook_bytes'))}")
        self._predictions(tables.get("predictions", []))

    def _predictions(self, preds: list[dict]):
        if not preds:
            return
        labels = list(dict.fromkeys(p["label"] for p in preds))
        basis = {p["label"]: p["fit_worlds"] + (" OVERSUBSCRIBED" if p["fit_oversubscribed"] else "") for p in preds}
        bases = sorted(set(basis.values()))
        self._p("#")
        self._p("# MODEL PREDICTIONS -- model output, NOT measurements: predicted time (us) from the fit on world(s) "
                + "; ".join(bases))
        w = max(10, *(len(lb) + 1 for lb in labels))
        for size in sorted({p["size_bytes"] for p in preds}):
            at = {(p["label"], p["world"]): p for p in preds if p["size_bytes"] == size}
            self._p(f"#   size {_bytes(size)}B{'':<4}" + "".join(f"{lb:>{w}}" for lb in labels) + f"{'fastest':>{w}}")
            for n in sorted({p["world"] for p in at.values()}):
                ts = {lb: at[(lb, n)]["predicted_time_s"] for lb in labels if (lb, n) in at}
                best = min(ts, key=ts.get) if ts else "-"
                cells = "".join(f"{ts[lb] * 1e6:>{w}.1f}" if lb in ts else f"{'-':>{w}}" for lb in labels)
                self._p(f"#   {'world ' + str(n):<14}{cells}{best:>{w}}")


def _mib(b):
    return "-" if b is None or (isinstance(b, float) and math.isnan(b)) else f"{b / 2**20:.0f}"


def _pct(x):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.0f}%"


class StrategiesTable:
    """Strategy / pipeline cases: one line per finished case, then the summary. Step time is the
    median over timed steps of the step wall (earliest start to latest end over ranks); bubble
    columns are measured idle/step, GPipe's (p-1)/(m+p-1), and the calibrated replay."""

    COLS = (f"{'strategy':<8} {'model':<10} {'world':>5} {'chunks':>6} {'schedule':<11} {'ckpt':<11} {'batch':>5} "
            f"{'mbatch':>6} {'step ms':>9} {'±iqr':>6} {'samples/s':>10} {'/device':>9} {'tokens/s':>9} "
            f"{'bubble meas/gpipe/replay':>24} {'peak MiB/dev':>12} {'wrong':>5}")

    def __init__(self, out=None):
        self.out = out or sys.stdout

    def _p(self, line=""):
        print(line, file=self.out, flush=True)

    def header(self, info_line: str):
        self._p(f"# {info_line}")
        self._p("# " + self.COLS)

    def _line(self, r: dict) -> str:
        bub = "-"
        if r.get("strategy") == "pp":
            bub = (f"{_pct(r.get('bubble_measured'))}/{_pct(r.get('bubble_gpipe_theory'))}/"
                   f"{_pct(r.get('replay_bubble'))}")
        mark = "*" if r.get("noisy") else " "
        flag = " [degraded]" if r.get("degraded") else ""
        return (f"  {r['strategy']:<8} {r['model']:<10} {r['world']:>5} {r['chunks']:>6} {r['schedule'] or '-':<11} "
                f"{r['checkpoint']:<11} {r['batch']:>5} {r['micro_batch']:>6} {r['step_median_s'] * 1e3:>8.1f}{mark} "
                f"{r['step_iqr_s'] * 1e3:>6.1f} {r['samples_per_s']:>10.1f} {r['samples_per_s_per_device']:>9.1f} "
                f"{_num(r.get('tokens_per_s'), '9.0f'):>9} "
                f"{bub:>24} {_mib(r['peak_memory_bytes']):>12} {r['wrong']:>5}{flag}")

    def row(self, r: dict):
        self._p(self._line(r))

    def efficiency(self, rows: list[dict]):
        self._p("#")
        self._p("# Micro-batch efficiency (one process, whole model, the same mini-batch in m sequential chunks)")
        self._p(f"#   {'chunks':>6} {'mbatch':>6} {'step ms':>9} {'samples/s':>10} {'rel':>6} {'ideal p-stage GPipe ms':>22}")
        for r in rows:
            self._p(f"    {r['chunks']:>6} {r['micro_batch']:>6} {r['step_median_s'] * 1e3:>9.1f} "
                    f"{r['samples_per_s']:>10.1f} {r['relative_throughput']:>6.2f} {r['ideal_pipeline_step_s'] * 1e3:>22.1f}")

    def summary(self, rows: list[dict], notes: list[str]):
        self._p("#")
        self._p("# Summary (step = median step wall over ranks; '*' noisy: IQR/median > 0.1; memory: "
                + ("CUDA peak reserved" if rows and rows[0].get("memory_kind") == "cuda" else "host peak RSS per rank")
                + ")")
        self._p("# " + self.COLS)
        for r in sorted(rows, key=lambda r: (r["strategy"], r["model"], r["world"], r["schedule"] or "", r["chunks"],
                                             r["checkpoint"], r["batch"])):
            self._p(self._line(r))
        pp = [r for r in rows if r.get("strategy") == "pp"]
        if pp:
            self._p("#")
            self._p("# Pipeline bubble: measured idle/step | GPipe (p-1)/(m+p-1) | Megatron (p-1)/(v m) | replay: "
                    "schedule + imbalance | comm+overhead = (1 - compute/step) - replay")
            for r in sorted(pp, key=lambda r: (r["model"], r["schedule"], r["micro_batch"] if r["sweep_mode"] == "micro-batch" else 0,
                                               r["chunks"], r["checkpoint"])):
                self._p(f"#   {r['model']:<10} {r['schedule']:<11} m={r['chunks']:<3} mb={r['micro_batch']:<4} {r['checkpoint']:<11} "
                        f"measured {_pct(r['bubble_measured']):>4}  gpipe {_pct(r['bubble_gpipe_theory']):>4}  "
                        f"megatron {_pct(r['bubble_megatron_theory']):>5}  replay {_pct(r['replay_bubble']):>4} = "
                        f"schedule {_pct(r['replay_schedule_bubble']):>4} + imbalance {_pct(r['replay_imbalance']):>4}  "
                        f"comm+overhead {_pct(r['comm_overhead_frac']):>4}")
        wrong = sum(int(r["wrong"]) for r in rows)
        self._p(f"#  Correctness vs single-process reference ({rows[0]['tolerance'] if rows else ''}): "
                f"{wrong} wrong tensor(s) {'OK' if wrong == 0 else 'FAILED'}")
        for d in sorted({(r['strategy'], r['degraded']) for r in rows if r.get("degraded")}):
            self._p(f"#  Degraded: {d[0]}: {d[1]}")
        for n in notes:
            self._p(f"#  Note: {n}")
