"""`distbench export`: a stored run in another tool's format (pytest-benchmark saved-run JSON);
and the checks of a run directory or output file given on any command line."""

import json
import os
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.results.export import to_pytest_benchmark


FORMATS = ("pytest-benchmark",)


def add_parser(sub):
    e = sub.add_parser("export", help="export a run in another tool's format")
    e.add_argument("run", metavar="RUN", help="run directory")
    e.add_argument("--format", default="pytest-benchmark", choices=FORMATS,
                   help="output format: pytest-benchmark (saved-run JSON)")
    e.add_argument("-o", "--output", default=None, metavar="FILE", help="file to write (default: stdout)")
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


def cmd_export(args) -> int:
    if args.output:
        _output_file(args.output, "--output")
    doc = to_pytest_benchmark(_dir(args.run, "RUN"))
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
