"""The rows of one nccl-tests results table -> one dict per size and placement (bench.imports.
nccl_text reads the log around them).

Columns, from the header the log prints (src/util.cu writeResultHeader at NVIDIA/nccl-tests
a0b82b2): `size count type redop root`, then per placement (out-of-place, in-place) `time algbw
busbw #wrong` (`cputime` with -C 1; `error`, the largest deviation, before 2.13) and with -I 1
`i_min i_max i_p99 i_cv%` (writePerIterReport: the per-iteration CUDA-event times, max over every
GPU, after -K skipped iterations: min, max, nearest-rank p99 in us, stdev over n / mean in %);
with -S 1 a `timestamp` column after the in-place block, printed `%21s` from strftime("%Y-%m-%d
%H:%M:%S"): two words, the host's local time (writeTimestamp). Rows map to header columns in
order, or by position where a value is blank or a block missing (every value is right-aligned
under its label: writeBenchmarkLinePreamble `%12li  %12li  %8s  %6s  %6s`, writeBenchmarkLineBody
`  %7s  %6s  %6s  %6g`).
"""

import re

from bench.errors import BenchError
from bench.imports import Parsed
from bench.imports.nccl_names import number

STAMP = re.compile(r"\s+(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\s*$")
OOP_TOLERANCE = {"half": 1e-2, "bfloat16": 1e-2, "float": 1e-5, "double": 1e-12}  # src/common.cu DeltaMaxValue
# (before 2.13, e.g. f773748): a size is "out of bounds" when error > DeltaMaxValue(type) x (ranks - 1);
# integer types 1e-200, i.e. any deviation
PER_ITER = {"i_min": ("time_min_s", 1e-6), "i_max": ("time_max_s", 1e-6), "i_cv%": ("time_cv", 0.01)}


def tokens(line: str) -> list[tuple[int, str]]:
    """(end column, token) of each whitespace-separated token."""
    return [(m.end(), m.group()) for m in re.finditer(r"\S+", line)]


def layout(header: list[tuple[int, str]], path: str):
    """(lead columns, figures per placement, whether a trailing timestamp is printed)."""
    labels = [t for _, t in header]
    lead = labels[:next(i for i, t in enumerate(labels) if t in ("time", "cputime"))]
    stamp = labels[-1] == "timestamp"
    per = (len(labels) - len(lead) - stamp) // 2
    if per < 4 or not {"size", "count", "type"} <= set(lead):
        raise BenchError(f"'{path}': unknown nccl-tests column layout: {' '.join(labels)}")
    return lead, per, stamp


def _cells(tok: list[tuple[int, str]], header: list[tuple[int, str]], full: int) -> dict[int, str] | None:
    """Header column index -> this row's text. A row with every column maps in order; a row that
    leaves a column blank (alltoall before 2.13 prints a `redop` header but no value), prints only
    in-place figures (trace replay: src/util.cu writeBenchMarkLineNullBody) or is cut short maps by
    position. None: it does not align."""
    if len(tok) == full:
        return {i: t for i, (_, t) in enumerate(tok)}
    ends = [e for e, _ in header]
    cells: dict[int, str] = {}
    for end, t in tok:
        j = min(range(len(ends)), key=lambda k: abs(ends[k] - end))
        if abs(ends[j] - end) > 2 or j in cells:
            return None
        cells[j] = t
    return cells


def last_row(header, data, path: str) -> tuple[int, bool] | None:
    """(size, whether every column printed) of a table's last row; None when it has none."""
    if not data:
        return None
    lead, per, stamp = layout(header, path)
    ln = STAMP.sub("", data[-1][1]) if stamp else data[-1][1]
    tok = tokens(ln)
    return int(tok[0][1]), len(tok) == len(lead) + 2 * per


def read_rows(header, data, path: str, out: Parsed) -> tuple[list[dict], bool, list[str]]:
    """Each printed row -> one dict per placement it holds; (rows, whether a cut-off row was noted,
    the -S timestamps printed)."""
    lead, per, stamp = layout(header, path)
    labels, full = [t for _, t in header], len(lead) + 2 * per
    old = "error" in labels
    if old and any(tokens(ln)[-1][1] != "N/A" for _, ln in data):
        out.notes.append("older nccl-tests layout: its 'error' column is the largest deviation from the expected "
                         "value, not a count of wrong elements: stored as max_error, wrong is null")
    rows, empty, blank, approx, cut, stamps = [], 0, set(), [], False, []
    for k, (no, ln) in enumerate(data):
        if stamp and (m := STAMP.search(ln)):
            stamps.append(m.group(1))
            ln = ln[:m.start()]
        tok = tokens(ln)
        cells = _cells(tok, header, full)
        if cells is None:
            raise BenchError(f"'{path}' line {no}: {len(tok)} columns, expected {full} ({' '.join(labels)})")
        f = {c: cells.get(i, "") for i, c in enumerate(lead)}
        blocks = [(pl, [cells.get(len(lead) + b * per + j) for j in range(per)])
                  for b, pl in enumerate(("out-of-place", "in-place"))]
        whole = [(pl, cols) for pl, cols in blocks if None not in cols]
        partial = any(None in cols and any(c is not None for c in cols) for _, cols in blocks)
        if not whole or partial or all(c is None for c in blocks[1][1]):  # in-place alone is trace replay
            if k != len(data) - 1:
                raise BenchError(f"'{path}' line {no}: {len(tok)} columns, expected {full} ({' '.join(labels)})")
            cut = True
            if not whole:
                out.notes.append(f"cut off: the last row (line {no}) is incomplete and was left out")
                break
            missing = [pl for pl, cols in blocks if None in cols]
            out.notes.append(f"cut off: the last row (line {no}) holds only its {whole[0][0]} figures; "
                             f"its {missing[0]} figures are missing")
        size, count = int(number(f["size"], "size", path, no)), int(number(f["count"], "count", path, no))
        if size == 0:  # count 0: nothing moved (sizes below one element per rank print as 0)
            empty += 1
            continue
        blank |= {c for c in ("redop", "root") if c in f and not f[c]}  # of the rows kept only
        root = int(f["root"]) if f.get("root", "").lstrip("-").isdigit() else -1
        for placement, cols in whole:
            rows.append(_figures(cols, labels[len(lead):len(lead) + per], f, size, count, root, placement, old,
                                 approx, path, no))
    if empty:
        out.notes.append(f"left out {empty} row(s) of size 0 (count 0: nothing moved; nccl-tests prints them when a "
                         "size is below one element per rank)")
    if blank:
        out.notes.append(f"the rows leave {' and '.join(sorted(blank))} blank under its header: read as none / -1")
    if approx:
        out.notes.append(f"#wrong printed in %g form (6 significant digits), stored rounded, approximate: "
                         f"{'; '.join(approx)}")
    return rows, cut, stamps


def _figures(cols, names, f, size, count, root, placement, old, approx, path, no) -> dict:
    """One placement's figures: time, algbw, busbw, #wrong (or the older error), -I's i_* columns."""
    t, alg, bus, wr = cols[:4]
    wrong, error = None, None
    if old and wr != "N/A":
        error = number(wr, "error", path, no)
    elif wr != "N/A":
        wrong = int(round(number(wr, "#wrong", path, no)))
        if "e" in wr.lower():  # %6g: 6 significant digits from 1e6 on
            approx.append(f"{wr} at {size} B {placement}")
    extra = {PER_ITER[n][0]: number(v, n, path, no) * PER_ITER[n][1]
             for n, v in zip(names[4:], cols[4:]) if n in PER_ITER}
    return {"size": size, "count": count, "type": f["type"], "redop": f.get("redop", "") or "none", "root": root,
            "placement": placement, "time_us": number(t, "time", path, no), "algbw": number(alg, "algbw", path, no),
            "busbw": number(bus, "busbw", path, no), "wrong": wrong, "error": error, "error_text": wr, "degraded": "",
            "extra": extra}


def judge_errors(rows: list[dict], world: int, out: Parsed) -> None:
    """Before 2.13: a row whose `error` exceeds nccl-tests' own tolerance is degraded 'wrong results'."""
    for x in rows:
        if x["error"] is None:
            continue
        tol = OOP_TOLERANCE.get(x["type"], 1e-200) * (world - 1)
        if x["error"] > tol:
            x["degraded"] = (f"wrong results: nccl-tests' error {x['error_text']} > its tolerance {tol:g} "
                             f"(DeltaMaxValue({x['type']}) x (ranks - 1), src/common.cu before 2.13)")
    bad = [x for x in rows if x["degraded"]]
    if bad:
        out.notes.append(f"wrong results at {len(bad)} size x placement(s) by nccl-tests' own rule: "
                         + ", ".join(f"{x['size']} B {x['placement']}" for x in bad))


def pre_2020_gather_algbw(program: str, rows: list[dict], world: int, header, out: Parsed) -> None:
    """all_gather and reduce_scatter before NVIDIA/nccl-tests ec1b5e2 (2020-06) printed algbw = S x
    (n - 1) / n / time with a bus factor of 1 (src/all_gather.cu at cbe7f65): busbw is today's, algbw
    is (n - 1) / n of it. Such a table (the older `error` layout, busbw = algbw) gets algbw = S / time
    (printed x n / (n - 1)), as distbench and later nccl-tests define it."""
    if program not in ("all_gather", "reduce_scatter") or world < 2 or "error" not in [t for _, t in header]:
        return
    big = max(rows, key=lambda r: r["algbw"], default=None)
    if big is None or big["algbw"] < 1.0 or abs(big["busbw"] - big["algbw"]) > 0.01:
        return
    for x in rows:
        x["algbw"] = x["algbw"] * world / (world - 1)
    out.notes.append(f"{program} of nccl-tests before 2020 (ec1b5e2): its algbw was S x (n - 1) / n / time with "
                     "busbw = algbw; stored algbw = S / time (printed x n / (n - 1)), busbw as printed (the same "
                     "quantity nccl-tests prints today)")
