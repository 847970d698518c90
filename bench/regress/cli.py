"""`distbench compare`, `distbench baseline`, `distbench gate`: judge stored runs.

Exit codes: 0 pass, 1 confirmed regression or wrong results (gate), 2 usage error (BenchError),
3 no comparable baseline (gate). docs/gate.md describes the rule.
"""

import json
import os
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.options import AB_SUITE, ab_suite, deprecated
from bench.regress import ab
from bench.regress import baseline as bl
from bench.regress import gate as gt
from bench.regress.compare import Rules, compare_rows, key_columns, normalize_kind, reading
from bench.regress.render import render
from bench.regress.settings import unlike_cases
from bench.results import fingerprint as fp
from bench.results.cli import _dir, _output_file
from bench.results.rundir import read_meta
from bench.results.store import load_run
from bench.suite import tomllib

FORMATS = ("table", "markdown", "json")


def add_parser(sub):
    """Adds compare, baseline (record / update) and gate."""
    p = sub.add_parser("compare", help="compare two runs (or a baseline and a run) case by case")
    p.add_argument("a", metavar="A", help="baseline side: a run directory or a baseline directory")
    p.add_argument("b", metavar="B", help="current side: a run directory (or a baseline directory)")
    p.add_argument("--format", default="table", choices=FORMATS, help="output format: table | markdown | json")
    p.add_argument("--rules", default=None, help="gate rules TOML (tolerances per suite and case)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("baseline", help="record or update a stored baseline (results/baselines/<fingerprint>/)")
    bsub = p.add_subparsers(dest="baseline_command", required=True, parser_class=type(p))
    r = bsub.add_parser("record", help="run a suite N times in fresh launches and store it as the baseline")
    r.add_argument("--suite", required=True, help="suite TOML file, e.g. suites/smoke.toml")
    r.add_argument("--repeats", type=int, default=None,
                   help="times the suite is repeated, each in a fresh launch (default 8; >= 3 to estimate noise)")
    r.add_argument("--baseline-root", dest="baseline_root", default=None, metavar="DIR",
                   help="baselines root (default results/baselines)")
    r.add_argument("--out", default="results", metavar="DIR",
                   help="results root the repeat runs are written to (default results/)")
    deprecated(r, "--root", "--baseline-root")
    r.set_defaults(func=cmd_baseline_record)
    u = bsub.add_parser("update", help="make existing runs (one repeat each) the new baseline generation")
    u.add_argument("--from", dest="runs", nargs="+", required=True, metavar="RUN", help="run directories")
    u.add_argument("--baseline-root", dest="baseline_root", default=None, metavar="DIR",
                   help="baselines root (default results/baselines)")
    u.add_argument("--baseline", default=None, help="the baseline directory (default <baseline-root>/<fingerprint>)")
    u.add_argument("--suite", default=None, help="suite file the runs came from (kept in meta.json)")
    deprecated(u, "--root", "--baseline-root")
    u.set_defaults(func=cmd_baseline_update)

    g = sub.add_parser("gate", help="regression gate: exit 0 pass, 1 confirmed regression, 3 no comparable baseline")
    g.add_argument("--baseline", default=None,
                   help="a baseline directory, or a root of them chosen by fingerprint (default results/baselines)")
    g.add_argument("--current", default=None, help="the run directory to judge")
    g.add_argument("--suite", default=None, help="instead of --current: run this suite now, then judge it; with "
                                                 f"--against, the suite both revisions run (default {AB_SUITE})")
    g.add_argument("--warn-only", action="store_true", help="report regressions but exit 0")
    g.add_argument("--no-confirm", action="store_true", help="no confirmation (stored: no re-run of what the first launch flagged; "
                   "--against: no fresh pairs): flagged regressions stand")
    g.add_argument("--rules", default=None, help="gate rules TOML (default <suite>.gate.toml beside the suite)")
    g.add_argument("--format", default="table", choices=FORMATS,
                   help="output format: table | markdown | json (printed)")
    g.add_argument("--markdown", default=None, metavar="FILE",
                   help="also write the markdown summary here ($GITHUB_STEP_SUMMARY is appended to when set)")
    g.add_argument("--out", default="results", metavar="DIR",
                   help="results root --suite and confirmation runs are written to (default results/)")
    g.add_argument("--against", default=None, metavar="REV",
                   help="same-machine A/B instead of a stored baseline: run --suite (default "
                        f"{AB_SUITE}) for git revision REV (a temporary worktree, this python) and for the working "
                        "tree, interleaved, and judge the pairs")
    g.add_argument("--pairs", type=int, default=None, help="A/B launch pairs (default 5; with --against)")
    g.set_defaults(func=cmd_gate)


def _readable(run, path) -> None:
    """A run with no results rows because a file cannot be read: say which file (the real problem)."""
    if ("results" not in run.tables or run["results"].empty) and run.problems:
        raise BenchError(f"run '{path}' cannot be read: {run.problems[0]}")


def _rows(path):
    """(results rows, meta, label) of a run or baseline directory."""
    if bl.is_baseline(path):
        try:
            b = bl.load(path)
        except bl.NotComparable as e:
            raise BenchError(str(e)) from None
        return b.results, b.meta, f"baseline {Path(path).name} ({len(b.meta.get('repeats', []))} repeats)"
    run = load_run(path)
    _readable(run, path)
    if "results" not in run.tables or run["results"].empty:
        raise BenchError(f"run '{path}' has no results rows")
    return run["results"], run.meta, f"run {Path(path).name}"


def cmd_compare(args) -> int:
    fmt = args.format
    a_rows, a_meta, a_label = _rows(_dir(args.a, "A"))
    b_rows, b_meta, b_label = _rows(_dir(args.b, "B"))
    kind = normalize_kind(a_meta.get("kind") or a_rows["kind"].dropna().iloc[0])
    other = normalize_kind(b_meta.get("kind") or b_rows["kind"].dropna().iloc[0])
    if kind != other:
        raise BenchError(f"cannot compare a {kind} result with a {other} result")
    unlike = unlike_cases(a_rows, b_rows, key_columns(kind))
    if unlike:  # like with like: the same case timed another way is not a regression nor an improvement
        raise BenchError(f"cannot compare {b_label} with {a_label}: the same cases were measured differently: "
                         f"{'; '.join(unlike)}; compare runs measured alike (docs/imports.md for imported runs)")
    rules = Rules.load(args.rules) if args.rules else Rules()
    cmp = compare_rows(a_rows, b_rows, kind, rules)
    title = f"{kind}: {b_label} vs {a_label}"
    fa = fp.Fingerprint.from_dict(a_meta["fingerprint"]) if "fingerprint" in a_meta else fp.of_run(a_meta)
    fb = fp.Fingerprint.from_dict(b_meta["fingerprint"]) if "fingerprint" in b_meta else fp.of_run(b_meta)
    diff = fp.differences(fa, fb)
    if diff and fmt != "json":
        title += f"\nnote: different machine classes ({'; '.join(diff)})"
    if cmp.repeats < 2 and fmt != "json":
        title += "\nnote: A is a single launch: no noise band, so every case is `unstable` (use a baseline)"
    sys.stdout.write(render(cmp, fmt, title))
    return 0


def cmd_baseline_record(args) -> int:
    repeats = bl.DEFAULT_REPEATS if args.repeats is None else args.repeats
    if repeats < 1:
        raise BenchError(f"--repeats {repeats} must be >= 1 (>= 3 to estimate the between-launch noise)")
    if not Path(args.suite).exists():
        raise BenchError(f"suite file '{args.suite}' not found")
    side = Path(args.suite).with_name(Path(args.suite).stem + ".gate.toml")
    rules = Rules.load(side) if side.exists() else Rules()
    dest = bl.record(args.suite, repeats, root=args.baseline_root or bl.DEFAULT_ROOT, out=args.out, rules=rules)
    if repeats < 3:
        print(f"distbench: note: {repeats} repeat(s) cannot estimate between-launch noise; every case will be unstable",
              file=sys.stderr)
    print(f"# baseline: {dest}")
    return 0


def cmd_baseline_update(args) -> int:
    for r in args.runs:
        _dir(r, "run")
        if bl.is_baseline(r):
            raise BenchError(f"'{r}' is a baseline, not a run")
    dest = bl.write(args.baseline_root or bl.DEFAULT_ROOT, args.runs, "update", suite_path=args.suite,
                    dest=Path(args.baseline) if args.baseline else None)
    print(f"# baseline: {dest} (generation {json.loads((dest / 'meta.json').read_text())['generation']})")
    return 0


def cmd_gate(args) -> int:
    fmt = args.format
    if args.against is not None or args.pairs is not None:
        return _cmd_gate_ab(args, fmt)
    if bool(args.current) == bool(args.suite):
        raise BenchError("give exactly one of --current RUN and --suite FILE")
    root = Path(args.baseline or bl.DEFAULT_ROOT)
    if args.baseline is not None:  # a named path that is not there is a typo (2); no stored baseline yet is 3
        if not root.exists():
            raise BenchError(f"--baseline '{args.baseline}' does not exist; give a baseline directory or a root of "
                             f"them (default {bl.DEFAULT_ROOT}; `distbench baseline record` makes one)")
        if not root.is_dir():
            raise BenchError(f"--baseline '{args.baseline}' is a file, not a baseline directory")
        problems: list[str] = []
        if (root / "meta.json").exists() and not read_meta(root, problems) and problems:
            raise BenchError(f"--baseline '{args.baseline}' cannot be read: {problems[0]}")
        if (root / "meta.json").exists() and not bl.is_baseline(root):
            raise BenchError(f"--baseline '{args.baseline}' is a run, not a baseline; `distbench baseline update --from "
                             "RUN` makes one, or `distbench compare RUN_A RUN_B` compares two runs")
    if args.markdown:
        _output_file(args.markdown, "--markdown")
    rules = Rules.load(args.rules) if args.rules else None
    if args.suite:
        if not Path(args.suite).exists():
            raise BenchError(f"suite file '{args.suite}' not found")
        kind = bl.suite_kind(args.suite)
        if not bl.is_baseline(root):  # a root: is there a baseline for this machine before spending a run?
            worlds = _suite_worlds(args.suite)
            if worlds:
                try:
                    bl.find(root, fp.of_this_machine(worlds, _suite_backend(args.suite)))
                except bl.NotComparable as e:
                    return _report(gt.Verdict(exit_code=3, status="not-comparable", reason=str(e)), fmt, args)
        print(f"# gate: running {args.suite}", file=sys.stderr, flush=True)
        current = bl.run_suite(kind, args.suite, args.out, ok_codes=(0, 1))  # 1: wrong results, failed below
    else:
        current = _dir(args.current, "--current")
    run = load_run(current)
    _readable(run, current)
    rerun = None
    if not args.no_confirm and "results" in run.tables:
        kind = run.meta.get("kind") or ""
        try:
            rerun = gt.default_rerun(run["results"], kind)
        except BenchError:
            rerun = None
    verdict = gt.gate(root, current, rules=rules, rerun=rerun, warn_only=args.warn_only)
    return _report(verdict, fmt, args)


def _cmd_gate_ab(args, fmt: str) -> int:
    if args.against is None:
        raise BenchError("--pairs is an A/B option: give --against REV too (e.g. --against HEAD~1)")
    if args.current or args.baseline:
        raise BenchError(f"--against REV runs a suite for both revisions (--suite FILE, default {AB_SUITE}): "
                         "give neither --current nor --baseline")
    if not str(args.against).strip():
        raise BenchError("--against '': give a git revision, e.g. HEAD~1, main or a commit sha")
    suite = ab_suite(args.suite)
    if not Path(suite).exists():
        raise BenchError(f"suite file '{suite}' not found")
    pairs = ab.DEFAULT_PAIRS if args.pairs is None else args.pairs
    rules = Rules.load(args.rules) if args.rules else None
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    verdict = ab.gate_against(args.against, suite, pairs=pairs, out=args.out, rules=rules,
                              warn_only=args.warn_only, log=log, confirm=not args.no_confirm)
    return _report(verdict, fmt, args)


def _report(verdict, fmt: str, args) -> int:
    if fmt == "json":
        sys.stdout.write(json.dumps(verdict.to_json(), indent=2, default=str) + "\n")
    elif fmt == "markdown":
        sys.stdout.write(verdict.to_markdown())
    else:
        sys.stdout.write(verdict.to_text())
    md = None
    for path in (args.markdown, os.environ.get("GITHUB_STEP_SUMMARY")):
        if path:
            md = md or verdict.to_markdown()
            with open(path, "a" if path == os.environ.get("GITHUB_STEP_SUMMARY") else "w") as f:
                f.write(md)
    return verdict.exit_code


def _suite_raw(path) -> dict:
    try:
        return tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def _suite_worlds(path) -> list[int]:
    raw = _suite_raw(path)
    w = raw.get("world", raw.get("stages", [2]))
    try:
        sized = reading(raw.get("kind")).sized  # a size sweep's `world` is its list of worlds
    except BenchError:
        return []
    return [int(x) for x in (w if isinstance(w, list) else [w])] if sized else []


def _suite_backend(path) -> str | None:
    return _suite_raw(path).get("backend")
