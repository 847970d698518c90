"""What the collectives kind prints: the nccl-tests-style table while a launch runs (rank 0) and the
closing summary of a stored run (the terminal, `distbench show`, the report)."""

from bench.report.format import nbytes, nccl_type, num
from bench.report.summaries import footer, rows_of
from bench.report.terminal import Printer
from bench.timing.stats import figure_text

class CollectivesLive(Printer):
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
               f"root={c.root} mode={c.mode}  {len(c.sizes)} size(s)"
               + (f"  {c.world // c.group} groups of {c.group} ranks at once" if c.group else ""))
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

def collectives_summary(run) -> str:
    rows = rows_of(run)
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
    return "\n".join(out + footer(rows, run))
