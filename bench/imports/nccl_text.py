"""nccl-tests / rccl-tests text output as people publish it -> distbench rows (docs/imports.md lists
every variant and the source line it comes from).

A log is read in two passes. `_runs` walks its lines once (launcher prefixes stripped, `\\`-continued
commands joined) and splits it into runs: what precedes a table (a command naming the program, the
version line, `# Collective test starting`, `# nThread`, the header) starts a new run once the one
before printed rows; a `Test ... failure` line marks its run aborted. `_parse_run` then reads each
run's table: rows map to header columns in order or, where a value is blank or a block missing, by
column position (nccl-tests right-aligns every value under its label), and the collective is the
program the log names, else --collective, else what the table's facts allow (bench.collectives.
imports.infer), else the file name.
"""

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from bench.imports import Parsed, infer, result_row
from bench.imports.nccl_names import (OPS, PROGRAMS, TYPES, average_of, collective_of, nccl_version_text,
                                                  number)
from bench.errors import BenchError

# launcher prefixes on every line: OpenMPI --tag-output `[1,0]<stdout>:`; srun -l / --label ` 0: `
_PREFIXES = (re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:"), re.compile(r"^\s*\d+: "))
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$")
# `# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703` (2.13+); rccl-tests: `rccl-library=`
_VERSION = re.compile(r"^#\s*(nccl|rccl)-tests version (\S+)(?:.*[nr]ccl-library=(\d+))?")
# the library's own line: `NCCL version 2.9.9+cuda11.2` (NCCL_DEBUG=VERSION/INFO, bare or after `NCCL INFO`),
# `RCCL version : 2.27.7-HEAD:96a25b5` (rccl-tests)
_LIBRARY = re.compile(r"\b([NR]CCL) version\s*:?\s*(\d[\w.+:-]*)")
_PARAMS = re.compile(r"nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+).*?warmup iters: (\d+) iters: (\d+)"
                     r"(?: agg iters: (\d+))?")
# a program name wherever a command line echoes it: `./build/all_reduce_perf`, `all_gather_perf_mpi`
_PROGRAM = re.compile(r"(?:^|[\s/=:'\"])([a-z0-9]+(?:_[a-z0-9]+)*)_perf(?:_mpi)?(?=$|[\s'\";|&)])")
# what comes before a command: `Running:` (nccl-tests' own scripts), a shell prompt (`user@host:~/dir$ `,
# `[root@host dir]# `, `(env) $ `), `+ ` (sh -x), `$ `
_PROMPT = re.compile(r"^(?:\([^)]*\)\s*)?(?:Running:\s*|\[[^\]]*\][$#]\s*|\S+@\S*?[$#]\s+|[$+]\s+)")
# src/common.h: `HOST: Test NCCL failure common.cu:392 'unhandled system error'`, `Test CUDA failure`,
# ` .. HOST pid P: Test failure common.cu:N` (rccl-tests: `Test HIP failure`)
_FAILURE = re.compile(r"\bTest (?:[A-Z]+ )?failure\b")
OOP_TOLERANCE = {"half": 1e-2, "bfloat16": 1e-2, "float": 1e-5, "double": 1e-12}  # src/common.cu DeltaMaxValue
# (before 2.13, e.g. f773748): a size is "out of bounds" when error > DeltaMaxValue(type) x (ranks - 1);
# integer types 1e-200, i.e. any deviation


@dataclass(kw_only=True)
class _Run:
    """One run's lines as the log printed them (several runs may share a file)."""

    line: int  # where it starts
    program: str = ""  # e.g. all_reduce_perf
    program_from: str = ""  # which line named it
    command: str = ""
    tool: str = "nccl-tests"
    version: str = ""
    library: str = ""
    params: re.Match | None = None
    ranks: list = field(default_factory=list)
    header: list[tuple[int, str]] | None = None  # (end column, label) of each header token
    data: list[tuple[int, str]] = field(default_factory=list)  # (line number, text)
    footer: bool = False
    out_of_bounds: str = ""
    failure: tuple[int, str] | None = None

    def begun(self) -> bool:
        return bool(self.data) or self.footer


def _lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) with launcher prefixes stripped and `\\`-continued command lines joined."""
    out, held = [], None
    for no, raw in enumerate(text.splitlines(), 1):
        ln = raw.rstrip("\r\n")
        for p in _PREFIXES:
            ln = p.sub("", ln, count=1)
        if held is not None:
            no, ln = held[0], held[1] + " " + ln.strip()
        if ln.rstrip().endswith("\\") and not ln.lstrip().startswith("#"):
            held = (no, ln.rstrip()[:-1].rstrip())
            continue
        held = None
        out.append((no, ln))
    if held is not None:
        out.append(held)
    return out


def _tokens(line: str) -> list[tuple[int, str]]:
    """(end column, token) of each whitespace-separated token."""
    return [(m.end(), m.group()) for m in re.finditer(r"\S+", line)]


def _runs(text: str) -> list[_Run]:
    """Split a log into its runs. A run starts at what precedes its table (a command line naming a
    program, the version line, `# Collective test starting`, the `# nThread` line or the header) once
    the run before has printed rows; NCCL INFO lines and other output in between are skipped."""
    runs: list[_Run] = []
    library_ahead = ""  # a library line printed between runs belongs to the next one

    def fresh(no: int, *, unless=lambda r: False) -> _Run:
        nonlocal library_ahead
        cur = runs[-1] if runs else None
        if cur is None or cur.begun() or unless(cur):
            cur = _Run(line=no, library=library_ahead)
            library_ahead = ""
            runs.append(cur)
        return cur

    for no, ln in _lines(text):
        s = ln.strip()
        if not s:
            continue
        if _FAILURE.search(s):
            r = runs[-1] if runs else fresh(no)
            r.failure = r.failure or (no, s)
            continue
        if s.startswith("#"):
            body = s.lstrip("#").strip()
            if m := _VERSION.match(s):
                r = fresh(no)
                r.tool, r.version = f"{m.group(1)}-tests", m.group(2)
                lib = nccl_version_text(m.group(3))
                r.library = (f"RCCL {lib}" if m.group(1) == "rccl" else lib) if lib else r.library
            elif body.startswith("Collective test starting:"):
                r = fresh(no)
                r.program, r.program_from = body.split(":", 1)[1].strip(), f"line {no}: {s}"
            elif body.startswith("Collective test concluded:") and runs:
                if not runs[-1].program:
                    runs[-1].program, runs[-1].program_from = body.split(":", 1)[1].strip(), f"line {no}: {s}"
            elif m := _PARAMS.search(body):
                fresh(no, unless=lambda r: r.params is not None or r.header is not None).params = m
            elif m := _RANK.match(s):
                fresh(no).ranks.append((int(m.group(1)), m.group(2), m.group(4).strip(), int(m.group(3))))
            elif {"size", "count", "type"} <= set(body.split()) and {"time", "cputime"} & set(body.split()):
                head = _tokens(ln)
                head[0] = (head[0][0], head[0][1].lstrip("#"))  # '#' of the comment, or glued: '#size'
                fresh(no, unless=lambda r: r.header is not None).header = [t for t in head if t[1]]
            elif body.startswith("Out of bounds values") and runs:
                runs[-1].out_of_bounds = body.split(":", 1)[-1].strip()
            elif body.startswith("Avg bus bandwidth") and runs:
                runs[-1].footer = True
            continue
        if s.split()[0].isdigit() and runs and runs[-1].header is not None and not runs[-1].footer:
            runs[-1].data.append((no, ln))
            continue
        if m := _LIBRARY.search(s):
            text_ = m.group(2) if m.group(1) == "NCCL" else f"RCCL {m.group(2)}"
            if runs and not runs[-1].begun():
                runs[-1].library = runs[-1].library or text_
            elif not library_ahead:
                library_ahead = text_
            continue
        if m := _PROGRAM.search(s):
            r = fresh(no)
            r.program, r.program_from = m.group(1) + "_perf", f"line {no}: {s[:120]}"
            r.command = _PROMPT.sub("", s, count=1).strip()
    return runs


def parse_text_runs(text: str, path: str, collective: str | None = None, world: int | None = None) -> list[Parsed]:
    """Every run of an nccl-tests / rccl-tests text log, in the order printed."""
    runs = _runs(text)
    for r in runs:
        if r.failure:
            no, what = r.failure
            after = f" after {len(r.data)} size(s)" if r.data else (" before its results table" if r.header is None
                                                                    else " before its first size")
            raise BenchError(f"'{path}' line {no}: the run{(' of ' + r.program) if r.program else ''} aborted"
                             f"{after}: {what}")
    tables = [r for r in runs if r.header is not None]
    if not tables:
        raise BenchError(f"'{path}': not nccl-tests output (no results header '#  size  count  type  redop ...  "
                         "time  algbw  busbw  #wrong' found)")
    out = []
    for i, r in enumerate(tables):
        p = _parse_run(r, path, collective, world)
        if len(tables) > 1:
            p.notes.insert(0, f"run {i + 1} of {len(tables)} in the file (from line {r.line})")
        out.append(p)
    for r in runs:
        if r.header is None and r.program:
            out[-1].notes.append(f"line {r.line}: a run of {r.program} printed no results table: nothing imported "
                                 "from it")
    return out


def parse_text(text: str, path: str, collective: str | None = None, world: int | None = None) -> Parsed:
    """The one run of a text log (a log of several runs: parse_text_runs)."""
    runs = parse_text_runs(text, path, collective, world)
    if len(runs) > 1:
        raise BenchError(f"'{path}' holds {len(runs)} runs; read it with parse_text_runs")
    return runs[0]


def _layout(header: list[tuple[int, str]], path: str):
    """(lead columns, figures per placement, whether a trailing timestamp is printed)."""
    labels = [t for _, t in header]
    lead = labels[:next(i for i, t in enumerate(labels) if t in ("time", "cputime"))]
    stamp = labels[-1] == "timestamp"
    per = (len(labels) - len(lead) - stamp) // 2
    if per < 4 or not {"size", "count", "type"} <= set(lead):
        raise BenchError(f"'{path}': unknown nccl-tests column layout: {' '.join(labels)}")
    return lead, per, stamp


def _cells(tok: list[tuple[int, str]], header: list[tuple[int, str]], lead, per, stamp) -> dict[int, str] | None:
    """Header column index -> this row's text. A row with every column maps in order; a row that
    leaves a column blank (alltoall before 2.13 prints a `redop` header but no value), prints only
    in-place figures (trace replay: src/util.cu writeBenchMarkLineNullBody) or is cut short maps by
    position: nccl-tests right-aligns each value under its header label. None: it does not align."""
    full = len(lead) + 2 * per
    if len(tok) in (full, full + stamp):
        return {i: t for i, (_, t) in enumerate(tok[:full])}
    ends = [e for e, _ in header]
    cells: dict[int, str] = {}
    for end, t in tok:
        j = min(range(len(ends)), key=lambda k: abs(ends[k] - end))
        if abs(ends[j] - end) > 2 or j in cells:
            return None
        cells[j] = t
    return cells


def _parse_run(r: _Run, path: str, collective: str | None, world: int | None) -> Parsed:
    out = Parsed(file=path, format="text")
    out.version = r.version if r.tool == "nccl-tests" or not r.version else f"{r.version} (rccl-tests)"
    out.nccl_version, out.command = r.library, r.command
    if r.tool == "rccl-tests":
        out.notes.append(f"rccl-tests {r.version}: RCCL, which torch names backend 'nccl'")
    argv = _argv(out.command)
    params, ranks = r.params, sorted(r.ranks)
    if world and ranks and world != len(ranks):
        raise BenchError(f"'{path}' lists {len(ranks)} ranks ('#  Rank' lines); --world {world} disagrees")
    out.world = world or (len(ranks) if ranks else None)
    if out.world is None and params:
        out.world = int(params.group(1)) * int(params.group(2))
        out.notes.append(f"world {out.world} from nThread x nGpus (no '#  Rank' lines): one process assumed")
    if not out.world:
        raise BenchError(f"'{path}': does not say how many ranks ran (no '#  Rank' lines); give --world N")
    out.hosts, out.devices, out.device_ids = [x[1] for x in ranks], [x[2] for x in ranks], [x[3] for x in ranks]
    lead, per, stamp = _layout(r.header, path)
    table, last = _read_rows(r, path, lead, per, stamp, out)
    name = _which(r, table, path, collective, out)
    if not out.command:
        out.command = (f"{r.program or name + '_perf'} -b {params.group(3)} -e {params.group(4)} -w {params.group(5)} "
                       f"-n {params.group(6)} -t {params.group(1)} -g {params.group(2)}  (reconstructed from the header)"
                       if params else r.program)
    warmup = int(params.group(5)) if params else None
    iters = int(params.group(6)) * int(params.group(7) or 1) if params else None
    reduce_ = average_of(argv)
    coll = PROGRAMS[name]
    for row in table:
        out.rows.append(result_row(
            collective=coll, size_bytes=row["size"], count=row["count"], dtype=TYPES.get(row["type"], row["type"]),
            op=OPS.get(row["redop"], row["redop"]), root=row["root"], placement=row["placement"], world=out.world,
            mode="nccl-tests", rank_reduce=reduce_, blocking=True, time_s=row["time_us"] * 1e-6,
            algbw_gbps=row["algbw"], busbw_gbps=row["busbw"], wrong=row["wrong"], warmup_iters=warmup, iters=iters,
            extra={"max_error": row["error"], "degraded": row["degraded"]}))
    if not out.rows:
        raise BenchError(f"'{path}': nccl-tests header found but no result row (the run stopped before its first size)")
    if r.out_of_bounds and not r.out_of_bounds.startswith("0"):
        out.notes.append(f"nccl-tests' footer: Out of bounds values : {r.out_of_bounds}")
    if not r.footer and not last:
        out.notes.append(f"cut off: no '# Avg bus bandwidth' footer, the run ended after {len(r.data)} size(s)")
    return out


def _read_rows(r: _Run, path: str, lead, per, stamp, out: Parsed) -> tuple[list[dict], bool]:
    """Each printed row -> one dict per placement it holds; (rows, whether a cut-off row was noted)."""
    labels = [t for _, t in r.header]
    old = "error" in labels
    if old and any(_tokens(ln)[-1][1] != "N/A" for _, ln in r.data):
        out.notes.append("older nccl-tests layout: its 'error' column is the largest deviation from the expected "
                         "value, not a count of wrong elements: stored as max_error, wrong is null")
    rows, empty, blank, approx, cut = [], 0, set(), [], False
    for k, (no, ln) in enumerate(r.data):
        tok = _tokens(ln)
        cells = _cells(tok, r.header, lead, per, stamp)
        if cells is None:
            raise BenchError(f"'{path}' line {no}: {len(tok)} columns, expected {len(lead) + 2 * per} "
                             f"({' '.join(labels)})")
        f = {c: cells.get(i, "") for i, c in enumerate(lead)}
        blank |= {c for c in ("redop", "root") if c in f and not f[c]}
        blocks = [(pl, [cells.get(len(lead) + b * per + j) for j in range(per)])
                  for b, pl in enumerate(("out-of-place", "in-place"))]
        whole = [(pl, cols) for pl, cols in blocks if None not in cols]
        partial = any(None in cols and any(c is not None for c in cols) for _, cols in blocks)
        if not whole or partial or all(c is None for c in blocks[1][1]):  # in-place alone is trace replay
            if k != len(r.data) - 1:
                raise BenchError(f"'{path}' line {no}: {len(tok)} columns, expected {len(lead) + 2 * per} "
                                 f"({' '.join(labels)})")
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
        root = int(f["root"]) if f.get("root", "").lstrip("-").isdigit() else -1
        for placement, cols in whole:
            t, alg, bus, wr = cols[:4]
            wrong, error, degraded = None, None, ""
            if old and wr != "N/A":
                error = number(wr, "error", path, no)
                tol = OOP_TOLERANCE.get(f["type"], 1e-200) * (out.world - 1)
                if error > tol:
                    degraded = (f"wrong results: nccl-tests' error {wr} > its tolerance {tol:g} "
                                f"(DeltaMaxValue({f['type']}) x (ranks - 1), src/common.cu before 2.13)")
            elif wr != "N/A":
                wrong = int(round(number(wr, "#wrong", path, no)))
                if "e" in wr.lower():  # %6g: 6 significant digits from 1e6 on
                    approx.append(f"{wr} at {size} B {placement}")
            rows.append({"size": size, "count": count, "type": f["type"], "redop": f.get("redop", "") or "none",
                         "root": root, "placement": placement, "time_us": number(t, "time", path, no),
                         "algbw": number(alg, "algbw", path, no), "busbw": number(bus, "busbw", path, no),
                         "wrong": wrong, "error": error, "degraded": degraded})
    if empty:
        out.notes.append(f"left out {empty} row(s) of size 0 (count 0: nothing moved; nccl-tests prints them when a "
                         "size is below one element per rank)")
    if blank:
        out.notes.append(f"the rows leave {' and '.join(sorted(blank))} blank under its header: read as none / -1")
    if approx:
        out.notes.append(f"#wrong printed in %g form (6 significant digits), stored rounded, approximate: "
                         f"{'; '.join(approx)}")
    bad = [x for x in rows if x["degraded"]]
    if bad:
        out.notes.append(f"wrong results at {len(bad)} size x placement(s) by nccl-tests' own rule: "
                         + ", ".join(f"{x['size']} B {x['placement']}" for x in bad))
    return rows, cut


def _which(r: _Run, table: list[dict], path: str, collective: str | None, out: Parsed) -> str:
    """The program that printed the table: named in the log, else --collective, else the table's
    facts (bench.imports.infer), then the file name among what the table allows."""
    if r.program:
        collective_of(r.program)  # a program distbench does not know: one line with the known ones
        return re.sub(r"_perf.*$", "", Path(r.program).name)
    t = infer.Table(world=out.world, ops=frozenset(x["redop"] if x["redop"] != "none" else "" for x in table),
                    roots=frozenset(x["root"] for x in table),
                    rows=tuple((x["size"], x["count"], x["type"], x["algbw"], x["busbw"]) for x in table))
    fits = infer.candidates(t)
    if collective is not None:
        prog = next((p for p, c in PROGRAMS.items() if c == collective), None)
        if prog is None or prog not in fits:
            raise BenchError(f"'{path}': --collective {collective} does not fit the table ({infer.describe(t)}): "
                             f"it fits {', '.join(fits) or 'no nccl-tests collective'}")
        return prog
    named = infer.from_file_name(Path(path).name, fits)
    if len(fits) == 1:
        out.notes.append(f"collective inferred from the table: {fits[0]} ({infer.describe(t)}; nccl-tests' bus "
                         "factors, doc/PERFORMANCE.md)")
        return fits[0]
    if len(named) == 1:
        out.notes.append(f"collective inferred: {named[0]}, from the file name '{Path(path).name}' among what the "
                         f"table fits ({', '.join(fits)}: {infer.describe(t)})")
        return named[0]
    raise BenchError(f"'{path}': does not say which collective it ran; tried: a program name echoed in the log "
                     f"(none), '# Collective test starting' (none), the table ({infer.describe(t)}: fits "
                     f"{', '.join(fits) or 'none'}), the file name ({', '.join(named) or 'names none of them'}); "
                     "give --collective NAME (e.g. all_reduce)")


def _argv(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:  # an unbalanced quote in an echoed shell line
        return command.split()
