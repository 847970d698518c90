"""nccl-tests / rccl-tests text output as people publish it -> distbench rows (docs/imports.md lists
every variant and the source line it comes from).

A log is read in two passes. `_runs` walks its lines once (launcher prefixes stripped, `\\`-continued
commands joined) and splits it into runs: what precedes a table (a command naming the program, the
version line, `# Collective test starting`, `# nThread`, the header) starts a new run once the one
before printed rows; the options the log prints are read on the way (bench.imports.nccl_options).
A `Test ... failure` line refuses a run that stopped before its last size (aborted); after a run
that printed them all it is the run's own check failing, kept with its rows. `_parse_run` then
reads each run's table (bench.imports.nccl_rows), the world (bench.imports.nccl_world) and the
collective: the program the log names, else --collective, else what the table's facts allow
(bench.imports.infer), else the file name.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

from bench.imports import Parsed, infer, result_row
from bench.imports.nccl_names import OPS, PROGRAMS, TYPES, collective_of, nccl_version_text
from bench.imports.nccl_options import Options, argv_of, from_argv, from_comment, from_header, from_nthread_line
from bench.imports.nccl_rows import judge_errors, last_row, pre_2020_gather_algbw, read_rows, tokens
from bench.imports.nccl_world import check, resolve, tagged_processes
from bench.errors import BenchError

# launcher prefixes on every line: OpenMPI --tag-output `[1,0]<stdout>:`; srun -l / --label ` 0: `
_PREFIXES = (re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:"), re.compile(r"^\s*\d+: "))
_RANK = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?(?:Pid\s+\d+\s+)?on\s+(?P<host>\S+)\s+"
                   r"device\s+(?P<dev>\d+)\s+\[[^\]]*\]\s*(?P<name>.*)$")
# `# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703` (2.13+); rccl-tests: `rccl-library=`
_VERSION = re.compile(r"^#\s*(nccl|rccl)-tests version (\S+)(?:.*[nr]ccl-library=(\d+))?")
# the library's own line: `NCCL version 2.9.9+cuda11.2` (NCCL_DEBUG=VERSION/INFO, bare or after `NCCL INFO`),
# `RCCL version : 2.27.7-HEAD:96a25b5` (rccl-tests)
_LIBRARY = re.compile(r"\b([NR]CCL) version\s*:?\s*(\d[\w.+:-]*)")
_PARAMS = re.compile(r"nThread (?P<t>\d+) nGpus (?P<g>\d+) minBytes (?P<lo>\d+) maxBytes (?P<hi>\d+)"
                     r"(?: step: (?P<step>\d+)\((?P<by>factor|bytes)\))?.*?warmup iters: (?P<w>\d+) iters: (?P<n>\d+)"
                     r"(?: agg iters: (?P<m>\d+))?")
# a program name wherever a command line echoes it: `./build/all_reduce_perf`, `all_gather_perf_mpi`
_PROGRAM = re.compile(r"(?:^|[\s/=:'\"])([a-z0-9]+(?:_[a-z0-9]+)*)_perf(?:_mpi)?(?=$|[\s'\";|&)])")
# what comes before a command: `Running:` (nccl-tests' own scripts), a shell prompt (`user@host:~/dir$ `,
# `[root@host dir]# `, `(env) $ `), `+ ` (sh -x), `$ `
_PROMPT = re.compile(r"^(?:\([^)]*\)\s*)?(?:Running:\s*|\[[^\]]*\][$#]\s*|\S+@\S*?[$#]\s+|[$+]\s+)")
# src/common.h: `HOST: Test NCCL failure common.cu:392 'unhandled system error'`, `Test CUDA failure`,
# ` .. HOST pid P: Test failure common.cu:N` (TESTCHECK; rccl-tests: `Test HIP failure`); src/common.cu
# testStreamSynchronize: `HOST: Test timeout (Ns) common.cu:N`
_FAILURE = re.compile(r"\bTest (?:[A-Z]+ )?(?:failure|timeout)\b")


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
    avg_bus: str = ""  # `# Avg bus bandwidth : B [OK|FAILED]` (FAILED: below NCCL_TESTS_MIN_BW x 0.9)
    failures: list[tuple[int, str]] = field(default_factory=list)
    opts: Options = field(default_factory=Options)
    reduced_max: int | None = None  # `# Reducing maxBytes to N due to memory limitation` (src/common.cu)

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
            (runs[-1] if runs else fresh(no)).failures.append((no, s))
            continue
        if s.startswith("#"):
            body, where = s.lstrip("#").strip(), f"line {no}: {s}"
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
                r = fresh(no, unless=lambda r: r.params is not None or r.header is not None)
                r.params = m
                from_nthread_line(body, where, r.opts)
            elif body.startswith(("Blocking Enabled", "Per-Iteration Report")):
                from_comment(body, where, fresh(no).opts)
            elif m := re.match(r"Reducing maxBytes to (\d+)", body):
                fresh(no).reduced_max = int(m.group(1))
            elif m := _RANK.match(s):
                fresh(no).ranks.append((int(m["rank"]), m["host"], m["name"].strip(), int(m["dev"]), int(m["group"] or 0)))
            elif {"size", "count", "type"} <= set(body.split()) and {"time", "cputime"} & set(body.split()):
                head = tokens(ln)
                head[0] = (head[0][0], head[0][1].lstrip("#"))  # '#' of the comment, or glued: '#size'
                r = fresh(no, unless=lambda r: r.header is not None)
                r.header = [t for t in head if t[1]]
                from_header([t for _, t in r.header], where, r.opts)
            elif body.startswith("Out of bounds values") and runs:
                runs[-1].out_of_bounds = body.split(":", 1)[-1].strip()
            elif body.startswith("Avg bus bandwidth") and runs:
                runs[-1].footer, runs[-1].avg_bus = True, body.split(":", 1)[-1].strip()
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
    """Every run of an nccl-tests / rccl-tests text log, in the order printed. A failure line refuses
    the import only for a run that stopped before its last size; a run that finished (its footer, or
    its last announced size printed whole) and then failed its own check is imported and says so."""
    runs = _runs(text)
    for r in runs:
        if r.failures and not _finished(r, path):
            no, what = r.failures[0]
            after = f" after {len(r.data)} size(s)" if r.data else (" before its results table" if r.header is None
                                                                    else " before its first size")
            raise BenchError(f"'{path}' line {no}: the run{(' of ' + r.program) if r.program else ''} aborted"
                             f"{after}: {what}")
    tables = [r for r in runs if r.header is not None]
    if not tables:
        raise BenchError(f"'{path}': not nccl-tests output (no results header '#  size  count  type  redop ...  "
                         "time  algbw  busbw  #wrong' found)")
    out, tagged = [], tagged_processes(text)
    for i, r in enumerate(tables):
        p = _parse_run(r, path, collective, world, tagged)
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


def _sizes(p: re.Match, reduced: int | None) -> list[int]:
    """The sizes a run announced (src/common.cu TimeTest: from minBytes, x step factor or + step
    bytes, up to maxBytes or the `Reducing maxBytes` figure); [] when the line does not say."""
    lo, hi, step = int(p["lo"]), reduced or int(p["hi"]), int(p["step"] or 0)
    if not step or (p["by"] == "factor" and step < 2) or lo > hi:
        return []
    out, s = [], lo
    while s <= hi and len(out) < 100_000:
        out.append(s)
        s = s * step if p["by"] == "factor" else s + step
    return out


def _finished(r: _Run, path: str) -> bool:
    """Whether a run printed every size: its `# Avg bus bandwidth` footer, or a whole last row past
    the last-but-one size it announced (a printed size is the loop's rounded down to whole elements
    per rank, src/<coll>.cu GetCollByteCount)."""
    if not r.data or r.header is None:
        return False
    if r.footer:
        return True
    last = last_row(r.header, r.data, path)
    sizes = _sizes(r.params, r.reduced_max) if r.params else []
    if last is None or not sizes or not last[1]:
        return False
    return last[0] > (sizes[-2] if len(sizes) > 1 else -1)


def _parse_run(r: _Run, path: str, collective: str | None, world: int | None, tagged: int) -> Parsed:
    out = Parsed(file=path, format="text")
    out.version = r.version if r.tool == "nccl-tests" or not r.version else f"{r.version} (rccl-tests)"
    out.nccl_version, out.command = r.library, r.command
    if r.tool == "rccl-tests":
        out.notes.append(f"rccl-tests {r.version}: RCCL, which torch names backend 'nccl'")
    argv, params, ranks, opts = argv_of(out.command), r.params, sorted(r.ranks), r.opts
    from_argv(argv, opts, path)
    table, cut, stamps = read_rows(r.header, r.data, path, out)
    if not table:
        raise BenchError(f"'{path}': nccl-tests header found but no result row (the run stopped before its first size)")
    per_proc = int(params["t"]) * int(params["g"]) if params else opts.value("t") * opts.value("g")
    named = _named(r, collective)
    out.world, how = resolve(path=path, given=world, ranks=len(ranks), argv=argv, per_proc=per_proc, program=named,
                             rows=table, tagged=tagged)
    if not ranks:
        out.notes.append(f"world {out.world} from {how} (no '#  Rank' lines)")
    out.hosts, out.devices, out.device_ids = [x[1] for x in ranks], [x[2] for x in ranks], [x[3] for x in ranks]
    name = _named(r, None) or _which(r, table, path, collective, out)  # --collective: checked against the table
    groups = len({x[4] for x in ranks}) or 1
    pre_2020_gather_algbw(name, table, out.world, r.header, out)
    check(path=path, program=name, world=out.world, how=how, rows=table, groups=groups)
    judge_errors(table, out.world, out)
    _say(r, out, opts, cut, stamps, groups)
    if not out.command:
        out.command = (f"{r.program or name + '_perf'} -b {params['lo']} -e {params['hi']} -w {params['w']} "
                       f"-n {params['n']} -t {params['t']} -g {params['g']}  (reconstructed from the header)"
                       if params else r.program)
    warmup = int(params["w"]) if params else None
    iters = int(params["n"]) * int(params["m"] or 1) if params else None
    group = {"group_size": out.world // groups, "groups": groups} if groups > 1 else {}
    for row in table:
        out.rows.append(result_row(
            collective=PROGRAMS[name], size_bytes=row["size"], count=row["count"],
            dtype=TYPES.get(row["type"], row["type"]), op=OPS.get(row["redop"], row["redop"]), root=row["root"],
            placement=row["placement"], world=out.world, mode="nccl-tests", rank_reduce=opts.rank_reduce,
            blocking=True, time_s=row["time_us"] * 1e-6, algbw_gbps=row["algbw"], busbw_gbps=row["busbw"],
            wrong=row["wrong"], warmup_iters=warmup, iters=iters,
            extra={"max_error": row["error"], "degraded": row["degraded"], "tool_options": opts.tool_options,
                   **row["extra"], **group}))
    return out


def _say(r: _Run, out: Parsed, opts, cut: bool, stamps: list[str], groups: int) -> None:
    """What the file's notes and meta.json source say beside the rows: the options, the footer, a
    failure after the last size, the timestamps."""
    out.options = opts.record()
    out.notes += opts.notes
    if not opts.command:
        out.notes.append("rank reduction: nccl-tests' default -a 1 (the average over ranks) assumed: the log records "
                         "no command line, and nccl-tests never prints -a")
    if opts.tool_options:
        out.notes.append(f"nccl-tests options that change what its time means: {opts.tool_options} (column "
                         "tool_options: compare and the report pair these rows only with rows measured alike)")
    if groups > 1:
        out.notes.append(f"NCCL_TESTS_SPLIT: {groups} groups of {out.world // groups} ranks ran at once; the figures "
                         "are one group's (group_size, groups)")
    if r.out_of_bounds and not r.out_of_bounds.startswith("0"):
        out.notes.append(f"nccl-tests' footer: Out of bounds values : {r.out_of_bounds}")
        out.failed.append(f"Out of bounds values : {r.out_of_bounds}")
    if r.avg_bus.endswith("FAILED"):
        out.notes.append(f"nccl-tests' footer: Avg bus bandwidth : {r.avg_bus} (below NCCL_TESTS_MIN_BW x 0.9)")
        out.failed.append(f"Avg bus bandwidth : {r.avg_bus}")
    if r.failures:
        no, what = r.failures[0]
        more = f" (and {len(r.failures) - 1} more such line(s), one per process)" if len(r.failures) > 1 else ""
        out.failure = f"line {no}: {what}{more}"
        out.notes.append(f"the run printed every size, then nccl-tests reported a failure: {out.failure}")
        out.failed.append(out.failure)
    if not r.footer and not cut:
        out.notes.append(f"cut off: no '# Avg bus bandwidth' footer, the run ended after {len(r.data)} size(s)")
    if stamps:
        out.stamps = {"first": stamps[0], "last": stamps[-1], "rows": len(stamps),
                      "clock": "the host's local time, no zone (nccl-tests -S 1: strftime %Y-%m-%d %H:%M:%S)"}


def _named(r: _Run, collective: str | None) -> str | None:
    """The program the log names, else the one --collective names; None: the table must tell."""
    if r.program:
        collective_of(r.program)  # a program distbench does not know: one line with the known ones
        return re.sub(r"_perf.*$", "", Path(r.program).name)
    return next((p for p, c in PROGRAMS.items() if c == collective), None) if collective else None


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
