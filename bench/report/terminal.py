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
