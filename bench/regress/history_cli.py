"""`distbench history` and `distbench bisect`: performance across commits (docs/history.md).

`distbench runs` (bench.report.cli) answers from the same run index (bench.results.index).
Bad input is a BenchError (one line, exit 2) raised before anything is written.
"""

import argparse
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.options import AB_SUITE, ab_suite, deprecated

FORMATS = ("table", "json")


def add_parser(sub):
    h = sub.add_parser("history", help="one case or group across stored runs, ordered by commit, per machine; "
                                       "flags step changes")
    h.add_argument("--case", default=None, metavar="CASE_ID[@SIZE]", help="a case id (e.g. "
                   "all_reduce.float32.sum.root-1.latency.w2), optionally at one size (@4M)")
    h.add_argument("--group", default=None, metavar="NAME",
                   help="a group of the kind: a collective, an algorithm, a strategy or a schedule")
    h.add_argument("--out", default="results", metavar="DIR", help="results root to read (default results/)")
    h.add_argument("--suite", default=None, help="only runs of this suite")
    h.add_argument("--kind", default=None, help="only runs of this kind")
    h.add_argument("--fingerprint", default=None, help="only this machine class (its slug, or a part of it)")
    h.add_argument("--metric", default=None, help="default: the kind's first gated metric (e.g. time_median_s)")
    h.add_argument("--threshold", type=float, default=None,
                   help="flag steps between fitted levels larger than this fraction (default 0.10, the gate's tolerance)")
    h.add_argument("--format", default="table", choices=FORMATS, help="output format: table | json")
    h.add_argument("--output-dir", dest="output_dir", default=None, metavar="DIR",
                   help="also write the plot (history.png) to this directory")
    deprecated(h, "--root", "--out")
    deprecated(h, "-o", "--output-dir")
    h.set_defaults(func=cmd_history)

    b = sub.add_parser("bisect", help="find the first commit between GOOD and BAD where a case or group got slower "
                                      "(the gate's same-machine A/B at each step of git bisect run)")
    b.add_argument("good", metavar="GOOD", help="a commit where the case or group was fast")
    b.add_argument("bad", metavar="BAD", help="a later commit (GOOD must be its ancestor) where it is slow")
    b.add_argument("--suite", default=None, help=f"suite TOML file run at each step (default {AB_SUITE})")
    b.add_argument("--case", default=None, metavar="CASE_ID[@SIZE]", help="the case that got slower")
    b.add_argument("--group", default=None, metavar="NAME", help="the group that got slower (e.g. all_reduce)")
    b.add_argument("--pairs", type=int, default=None, help="A/B launch pairs per step (default 3)")
    b.add_argument("--min-ratio", type=float, default=None,
                   help="BAD must measure at least this much slower than GOOD to bisect (default 1.10)")
    b.add_argument("--out", default=None, metavar="DIR",
                   help="results root that keeps every launch's run (then `distbench history --out DIR`; "
                        "default: a temporary one, removed)")
    deprecated(b, "--keep", "--out")
    b.set_defaults(func=cmd_bisect)

    # internal: one step of `distbench bisect` (git bisect run calls it); callable, not in --help
    s = sub.add_parser("bisect-step", help=argparse.SUPPRESS)
    s.add_argument("spec", metavar="SPEC", help="the step's JSON spec, written by `distbench bisect`")
    s.set_defaults(func=cmd_bisect_step)


def cmd_history(args) -> int:
    from bench.regress import history as hs  # lazy: duckdb and asv only when asked

    fmt = args.format
    target = hs.Target.parse(args.case, args.group)
    threshold = hs.DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    if not threshold > 0:
        raise BenchError(f"--threshold {args.threshold}: give a fraction > 0 (e.g. 0.1 for 10%)")
    h = hs.history(args.out, target, suite=args.suite, kind=args.kind, fingerprint=args.fingerprint,
                   metric=args.metric, threshold=threshold)
    sys.stdout.write(hs.to_text(h) if fmt == "table" else hs.to_json(h))
    if args.output_dir:
        from bench.regress.history_plot import plot_history  # lazy: matplotlib only for a plot

        png = plot_history(h, Path(args.output_dir) / "history.png")
        print(f"# plot: {png}", file=sys.stderr)
    return 0


def cmd_bisect(args) -> int:
    from bench.regress import bisect as bs  # lazy: duckdb only when asked
    from bench.regress import history as hs  # lazy: duckdb and asv only when asked

    target = hs.Target.parse(args.case, args.group)
    pairs = bs.DEFAULT_PAIRS if args.pairs is None else args.pairs
    min_ratio = bs.DEFAULT_MIN_RATIO if args.min_ratio is None else args.min_ratio
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise BenchError(f"--out '{args.out}' is a file; give a directory (a results root)")
    found = bs.bisect(args.good, args.bad, ab_suite(args.suite), target, pairs=pairs, min_ratio=min_ratio, log=log,
                      keep=args.out)
    sys.stdout.write(found.to_text())
    return 0


def cmd_bisect_step(args) -> int:
    from bench.regress import bisect as bs  # lazy: duckdb only when asked

    return bs.main(args.spec)
