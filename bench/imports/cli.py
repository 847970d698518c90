"""`distbench import nccl-tests FILE...` and `distbench import param FILE...`: other tools' results
become one stored run of the collectives kind (bench.imports). Exit 0; 1 when a file's own check
failed (wrong elements, nccl-tests' out-of-bounds footer or a failure line after its last size:
the run is imported and flagged, as a distbench run that found wrong results exits 1); 2 and
nothing written for bad input."""

import re
import sys

from bench.imports import nccl_tests, param, store
from bench.errors import BenchError

TOOLS = {nccl_tests.TOOL: nccl_tests, param.TOOL: param}


def add_parser(sub):
    p = sub.add_parser("import", help="store nccl-tests or PARAM comms output as a distbench run (then compare, "
                                      "report, show, gate)")
    tools = p.add_subparsers(dest="tool", required=True, parser_class=type(p), metavar="TOOL")
    for name, mod in TOOLS.items():
        t = tools.add_parser(name, help=f"{name} output: {mod.__doc__.splitlines()[0].split(' -> ')[0]}")
        t.add_argument("files", nargs="+", metavar="FILE", help="the tool's output files (one run holds them all)")
        t.add_argument("--out", default="results", help="results root (default results/)")
        t.add_argument("--suite", default=f"import-{name}", help=f"suite name of the run (default import-{name})")
        t.add_argument("--collective", default=None,
                       help="the collective of logs that do not name it (older layouts)"
                            + ("" if name == nccl_tests.TOOL else "; with logs that do, keeps only its rows"))
        t.add_argument("--world", type=int, default=None, help="ranks, for logs that do not list them")
        t.set_defaults(func=cmd_import)


def _parse(mod, f, args):
    """One file's runs; every error names it (a few come from shared vocabulary that does not know the file)."""
    try:
        return mod.parse_runs(f, collective=args.collective, world=args.world)
    except BenchError as e:
        if str(f) in str(e):
            raise
        raise BenchError(f"'{f}': {e}") from None


def cmd_import(args) -> int:
    mod = TOOLS[args.tool]
    if args.world is not None and args.world < 1:
        raise BenchError(f"--world {args.world} must be >= 1")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", args.suite):
        raise BenchError(f"--suite '{args.suite}': a suite name is letters, digits, '_', '.' and '-' (it names the "
                         "directory under --out)")
    parsed = [p for f in args.files for p in _parse(mod, f, args)]
    path = store(parsed, tool=mod.TOOL, definitions=mod.DEFINITIONS, out=args.out, suite=args.suite,
                 argv=["distbench", *sys.argv[1:]] if sys.argv[1:2] == ["import"] else None)
    rows = sum(len(p.rows) for p in parsed)
    for p in parsed:
        for n in p.notes:
            print(f"distbench: note: {p.file}: {n}", file=sys.stderr)
    print(f"# imported {rows} row(s) of {len(parsed)} run(s) from {len(args.files)} {mod.TOOL} file(s): {path}")
    failed = [(p.file, p.check_failed()) for p in parsed if p.check_failed()]
    for f, why in failed:
        print(f"distbench: {f}: {mod.TOOL} says its own check failed ({'; '.join(why)}): the results were "
              "imported, flagged wrong", file=sys.stderr)
    return 1 if failed else 0  # as a distbench run that found wrong results
