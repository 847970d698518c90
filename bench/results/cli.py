"""`distbench export`: stored runs in another tool's format (pytest-benchmark saved-run JSON,
OpenMetrics text, a node_exporter textfile: docs/export.md); and the checks of a run directory or
output file given on any command line."""

import json
import os
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.results.export import to_pytest_benchmark
from bench.results.rundir import _atomic_write


FORMATS = ("pytest-benchmark", "openmetrics", "textfile")


def add_parser(sub):
    e = sub.add_parser("export", help="export runs in another tool's format")
    e.add_argument("run", metavar="RUN", nargs="+", help="run directory (openmetrics and textfile take several)")
    e.add_argument("--format", default="pytest-benchmark", choices=FORMATS,
                   help="output format: pytest-benchmark (saved-run JSON), openmetrics (OpenMetrics text, each "
                   "sample at its run's start), textfile (Prometheus text for node_exporter's textfile collector: "
                   "needs --output NAME.prom)")
    e.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="file to write (default: stdout), written to a temp file and renamed")
    e.set_defaults(func=cmd_export)


def _dir(path, what: str) -> Path:
    """A run or baseline directory given on the command line; what is wrong with it first."""
    p = Path(path)
    if not p.exists():
        raise BenchError(f"{what} '{path}' does not exist; give a run directory (results/<suite>/<run_id>) "
                         "or a baseline directory")
    if not p.is_dir():
        raise BenchError(f"{what} '{path}' is a file, not a run or baseline directory")
    if not (p / "meta.json").exists():
        raise BenchError(f"{what} '{path}' is not a run or baseline directory (no meta.json)")
    if not (p / "meta.json").is_file():
        raise BenchError(f"{what} '{path}': its meta.json is not a file; the run cannot be read")
    return p


def _output_file(path, what: str):
    """An output file's place is writable (checked before any work), or one BenchError naming it."""
    p = Path(path)
    if p.is_dir():
        raise BenchError(f"{what} '{path}' is a directory; give a file name")
    if not p.parent.is_dir():
        raise BenchError(f"{what} '{path}': its directory '{p.parent}' does not exist or is not a directory")
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise BenchError(f"{what} '{path}' cannot be written (permission denied)")


def _write(path, text: str):
    try:
        _atomic_write(Path(path), lambda p: p.write_text(text))
    except OSError as e:  # the store's WriteError is a BenchError; anything else the system refused
        raise BenchError(f"--output '{path}' cannot be written ({e.strerror or type(e).__name__})") from None


def _prometheus(args, runs: list[Path]) -> int:
    from bench.results import openmetrics  # lazy: prometheus_client only for the formats that write it

    if args.format == "textfile":
        if not args.output or not str(args.output).endswith(".prom"):
            raise BenchError(f"--format textfile writes a file for node_exporter's textfile collector, which reads "
                             f"only *.prom files: give --output DIR/NAME.prom (got {args.output or 'no --output'})")
        try:
            problems = openmetrics.write_textfile(runs, args.output)
        except OSError as e:
            raise BenchError(f"--output '{args.output}' cannot be written ({e.strerror or type(e).__name__})") from None
    else:
        text, problems = openmetrics.openmetrics_text(runs)
        if args.output:
            _write(args.output, text)
        else:
            sys.stdout.write(text)
    for p in problems:
        print(f"# not exported: {p}", file=sys.stderr)
    if args.output:
        print(f"# exported {len(runs)} run(s) to {args.output}", file=sys.stderr)
    return 0


def _once(runs: list[Path]) -> list[Path]:
    """Each run directory once (a shell glob and a name of the same run): its series twice would make
    node_exporter refuse the file; said on stderr."""
    seen: dict = {}
    for r in runs:
        if r.resolve() in seen:
            first = seen[r.resolve()]
            said = f"'{r}' given twice" if str(r) == str(first) else f"'{r}' is '{first}' given again"
            print(f"# RUN {said}: exported once", file=sys.stderr)
        seen.setdefault(r.resolve(), r)
    return list(seen.values())


def cmd_export(args) -> int:
    if args.output:
        _output_file(args.output, "--output")
    runs = [_dir(r, "RUN") for r in args.run]
    if args.format != "pytest-benchmark":
        return _prometheus(args, _once(runs))
    if len(runs) > 1:
        raise BenchError(f"--format pytest-benchmark writes one saved run: give one RUN (got {len(runs)})")
    doc = to_pytest_benchmark(runs[0])
    text = json.dumps(doc, indent=4) + "\n"
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as e:
            raise BenchError(f"--output '{args.output}' cannot be written ({e.strerror or type(e).__name__})") from None
        print(f"# exported {len(doc['benchmarks'])} benchmark(s) to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
