"""Live terminal output on rank 0 while a launch runs: one printer per kind, fed by the harness's
events (start, unit, done). Tables mirror nccl-tests; the closing summary comes from the stored
run (bench.report.summaries), so it is the same under every launcher and in `distbench show`."""

import sys

from bench.report.format import nbytes, nccl_type, num, row_label
from bench.report.summaries import STRATEGY_COLS, strategy_line


class _Printer:
    def __init__(self, out=None):
        self.out = out or sys.stdout

    def p(self, line: str = ""):
        print(line, file=self.out, flush=True)

    def communicator(self, launch, prefix: str):
        self.p(f"# {prefix}{launch.describe()}; communicator: init_process_group {launch.init_s:.3f} s, "
               f"first collective {launch.first_s * 1e3:.1f} ms (excluded from every case)")


class CollectivesLive(_Printer):
    """size count type redop root | time algbw busbw #wrong, for out-of-place then in-place. Time is
    the median over iterations reduced over ranks as the row says (rank_reduce; max: the slowest rank),
    in microseconds; '*' marks a noisy row."""

    def start(self, launch, units):
        self.cases = list(dict.fromkeys(u.case for u in units))
        self.current = None
        self.communicator(launch, "collectives: ")

    def unit(self, unit, index: int, total: int):
        if unit.case == self.current:
            return
        self.current = c = unit.case
        self.p(f"# [{self.cases.index(c) + 1}/{len(self.cases)}] {c.collective}  dtype={c.dtype} op={c.op or 'none'} "
               f"root={c.root} mode={c.mode}  {len(c.sizes)} size(s)")
        self.p("#                                                       out-of-place                        in-place")
        self.p("#       size         count      type   redop    root      time   algbw   busbw #wrong      time   algbw   busbw #wrong")
        self.p("#        (B)    (elements)                                 (us)  (GB/s)  (GB/s)              (us)  (GB/s)  (GB/s)")

    def done(self, tables: dict):
        rows = tables.get("results", [])
        if not rows:
            return
        r0, by_place, cells = rows[0], {r["placement"]: r for r in rows}, []
        for place in ("out-of-place", "in-place"):
            r = by_place.get(place)
            if r is None:
                cells.append(f"{'-':>10} {'-':>7} {'-':>7} {'-':>6}")
                continue
            cells.append(f"{r['time_median_s'] * 1e6:>9.2f}{'*' if r['noisy'] else ' '} "
                         f"{num(r['algbw_gbps'], '7.2f'):>7} {num(r['busbw_gbps'], '7.2f'):>7} {r['wrong']:>6}")
        self.p(f"{r0['size_bytes']:>12} {r0['count']:>13} {nccl_type(r0['dtype']):>9} {r0['op'] or 'none':>7} "
               f"{r0['root']:>7}  {cells[0]}  {cells[1]}")


class AllreduceLive(_Printer):
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


class StrategiesLive(_Printer):
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
