"""`distbench report`, `distbench show`, `distbench runs`: read stored runs, never re-run.

Bad input raises bench.errors.BenchError (one line, exit 2); this module must not import
bench.cli (bench.cli imports it).
"""

import io
import json
import math
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from bench.errors import BenchError, unknown
from bench.kind import render_run
from bench.options import deprecated
from bench.results.store import load_run

FORMATS = ("table", "csv", "json", "markdown")
DEFAULT_ROOT = "results"


def add_parser(sub):
    p = sub.add_parser("report", help="HTML + PNG report of stored runs (default: the latest run of each kind)")
    p.add_argument("runs", nargs="*", metavar="RUN_DIR",
                   help="run directories (results/<suite>/<run_id>); none: the latest run of each kind under --out")
    p.add_argument("--baseline", action="append", default=[], metavar="DIR",
                   help="baseline run directory, overlaid on the curves (repeatable)")
    p.add_argument("--output-dir", dest="output_dir", default=None, metavar="DIR",
                   help="report directory to write (default reports/<kinds>-<newest run id>/)")
    p.add_argument("--out", default=DEFAULT_ROOT, metavar="DIR",
                   help="results root to take the latest runs from when none is given (default results/)")
    deprecated(p, "-o", "--output-dir")
    deprecated(p, "--root", "--out")
    p.add_argument("--title", default=None, help="page title")
    p.set_defaults(func=cmd_report)

    s = sub.add_parser("show", help="re-print a stored run's tables and summary, or export a table")
    s.add_argument("run", metavar="RUN_DIR", help="a run directory (results/<suite>/<run_id>)")
    s.add_argument("--format", default="table", type=str.lower, choices=FORMATS,
                   help=f"output format: {' | '.join(FORMATS)} (default table)")
    s.add_argument("--table", default=None, help="which table: results (default), samples, model, ... (see the run dir)")
    s.set_defaults(func=cmd_show)

    r = sub.add_parser("runs", help="list stored runs: kind, start, state, cases done/planned, rows, command")
    r.add_argument("--kind", default=None, help="only this kind: collectives | allreduce | pipeline | strategies")
    r.add_argument("--out", default=DEFAULT_ROOT, metavar="DIR", help="results root to list (default results/)")
    add_index_filters(r)
    deprecated(r, "--root", "--out")
    r.set_defaults(func=cmd_runs)


# ----------------------------------------------------------------------------- report

def writable_dir(path: Path, what: str):
    """Create `path` (and parents) and check a file can be written there, or one BenchError naming it."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise BenchError(f"{what} '{path}' is a file, not a directory; give a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".distbench-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise BenchError(f"{what} '{path}' cannot be written ({e.strerror or type(e).__name__}"
                         f"{': ' + str(e.filename) if e.filename and str(e.filename) != str(path) else ''}); "
                         "give a writable directory") from None


def _default_out(dirs: list[Path]) -> Path:
    from bench.results import runs as runs_mod  # lazy: report.runs loads pyarrow.parquet; not at CLI start-up

    kinds = list(dict.fromkeys(runs_mod.kind_of(runs_mod.read_meta(d)) for d in dirs))
    newest = max((d.name for d in dirs), default=datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
    return Path("reports") / f"{'+'.join(kinds)}-{newest}"


def cmd_report(args) -> int:
    from bench.results import runs as runs_mod  # lazy: report.runs loads pyarrow.parquet; not at CLI start-up

    dirs = [runs_mod.resolve_run_dir(d) for d in args.runs]
    base = [runs_mod.resolve_run_dir(d) for d in args.baseline]
    if not dirs:
        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise BenchError(f"--out '{args.out}' is a file, not a results directory")
        dirs = runs_mod.latest_per_kind(args.out)
        if not dirs:
            raise BenchError(f"no runs under the results root --out '{args.out}' to report on; run a benchmark first "
                             "(e.g. make bench) or give RUN_DIR arguments (the report directory is --output-dir)")
        print(f"# reporting the latest run of each kind under {args.out}: " + ", ".join(map(str, dirs)))
    from bench.report.html import build_report  # lazy: matplotlib only when a report is made

    out = Path(args.output_dir) if args.output_dir else _default_out(dirs)
    writable_dir(out, "report directory --output-dir")
    index = build_report(dirs, out, baseline_dirs=base, title=args.title)
    print(f"report: {index}")
    return 0


# ----------------------------------------------------------------------------- show

def _py(v):
    """A cell as a plain JSON value: numpy scalars to Python, NA / NaN to null (floats keep every
    digit: json writes repr(), which round-trips exactly)."""
    if v is None:
        return None
    if hasattr(v, "item"):
        v = v.item()
    if v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def to_json(df) -> str:
    cols = list(df.columns)
    rows = [{c: _py(v) for c, v in zip(cols, rec)} for rec in df.itertuples(index=False, name=None)]
    return json.dumps(rows, indent=1, default=str) + "\n"


def to_markdown(df) -> str:
    def cell(v):
        v = _py(v)
        return "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + " --- |" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in rec) + " |" for rec in df.itertuples(index=False, name=None)]
    return "\n".join(lines) + "\n"


def to_csv(df) -> str:
    buf = io.StringIO()
    # repr-exact floats: '%.17g' reloads to the same float64
    df.to_csv(buf, index=False, float_format="%.17g")
    return buf.getvalue()


def render_table(run, table: str | None) -> str:
    """The terminal view: the closing summary the live run printed (the same code, bench.kinds),
    or, with --table, that table as plain text."""
    if table is None and run.meta.get("kind"):
        return render_run(run) + "\n"
    name = table or "results"
    df = run.tables[name].dropna(axis=1, how="all")  # the results table carries every kind's columns
    with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 250):
        return df.to_string(index=False) + "\n"


def cmd_show(args) -> int:
    from bench.results import runs as runs_mod  # lazy: report.runs loads pyarrow.parquet; not at CLI start-up

    fmt = args.format
    path = runs_mod.resolve_run_dir(args.run)
    run = load_run(path)
    if not run.tables:
        if run.problems:  # the real problem first: an unreadable file, not "no tables"
            raise BenchError(f"run '{args.run}' cannot be read: {run.problems[0]}")
        raise BenchError(f"run '{args.run}' has no tables yet (no parquet file and no finished case)")
    if args.table is not None and args.table not in run.tables:
        raise unknown("table", args.table, run.tables)
    if fmt == "table":
        text = render_table(run, args.table)
    else:
        name = args.table or ("results" if "results" in run.tables else sorted(run.tables)[0])
        df = run.tables[name]
        text = {"csv": to_csv, "json": to_json, "markdown": to_markdown}[fmt](df)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


# ----------------------------------------------------------------------------- runs

def add_index_filters(r):
    """`distbench runs` filters over the run index (bench.results.index)."""
    r.add_argument("--suite", default=None, help="only runs of this suite")
    r.add_argument("--fingerprint", default=None, help="only this machine class (its slug, or a part of it)")
    r.add_argument("--commits", default=None, metavar="A..B|REV",
                   help="only runs of these commits: git rev-list A..B, or one revision")
    r.add_argument("--since", default=None, metavar="DATE", help="only runs started on or after (YYYY-MM-DD or ISO time)")
    r.add_argument("--until", default=None, metavar="DATE", help="only runs started before the end of (YYYY-MM-DD) or before")
    r.add_argument("--format", default="table", type=str.lower, choices=("table", "json", "csv"),
                   help="output format: table | json | csv")


def cmd_runs(args) -> int:
    from bench.results import runs as runs_mod  # lazy: report.runs loads pyarrow.parquet; not at CLI start-up
    from bench.results import index as ix  # lazy: the index loads duckdb; not at CLI start-up

    kind = None
    if args.kind is not None:
        kind = runs_mod.normalize_kind(args.kind)
        if kind not in runs_mod.kind_names():
            raise unknown("kind", args.kind, runs_mod.kind_names())
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise BenchError(f"results root '{args.out}' is a file, not a directory; give --out DIR")
    if not Path(args.out).is_dir():
        raise BenchError(f"results root '{args.out}' does not exist; give --out DIR (where benchmarks wrote their runs)")
    fmt = args.format
    idx = ix.build(args.out)
    rows = ix.select(idx.runs, kind=kind, suite=args.suite, fingerprint=args.fingerprint, commits=args.commits,
                     since=args.since, until=args.until)
    if fmt == "json":
        sys.stdout.write(ix.to_json(rows))
        return 0
    if fmt == "csv":
        sys.stdout.write(to_csv(rows))
        return 0
    if rows.empty:
        print(f"# no runs{' of kind ' + kind if kind else ''} under {args.out} (of {len(idx.runs)} indexed)")
        return 0
    print(f"{'kind':<12} {'start (UTC)':<26} {'state':<12} {'cases':>9} {'rows':>7}  {'commit':<13} fingerprint")
    for r in rows.to_dict("records"):
        planned = r["cases_planned"] if r["cases_planned"] is not None and r["cases_planned"] == r["cases_planned"] else "?"
        if isinstance(planned, float):
            planned = int(planned)
        sha = (r["git_sha"][:12] if r["git_sha"] else "?") + ("+" if r["git_dirty"] is True else "")
        print(f"{r['kind']:<12} {r['start'] or '?':<26} {r['state']:<12} {str(r['cases_done']) + '/' + str(planned):>9} "
              f"{r['rows']:>7}  {sha:<13} {r['fingerprint']}")
        print(f"{'':<12} {r['dir']}")
        print(f"{'':<12} $ {r['command']}" + (f"   [{r['why']}]" if r["why"] else ""))
    print(f"# {len(rows)} of {len(idx.runs)} run(s) under {args.out}")
    return 0
