"""Same-machine A/B gate: `distbench gate --against REV --suite S [--pairs P]` (docs/gate.md).

A stored baseline cannot tell a slower host from a slower commit (issue 18: unchanged code failed
`make gate` on another host of the baseline's machine class). So, as asv's `continuous` runs the
base and the new commit back to back on one machine and pyperf compares runs taken together, the
base revision REV is checked out in a temporary git worktree and both revisions run the suite in
fresh launches on this machine, interleaved over P pairs (A B, B A, A B, ...), with the same python and
venv (PYTHONPATH points at REV's tree, so `python -m bench` imports REV's code). The base only
needs `python -m bench <kind> --suite FILE --out DIR`, so a REV older than this option works.
Then bench.regress.gate.gate_ab judges the candidate's launches against the base's.

DISTBENCH_TEST_SLOWDOWN (test only, bench/timing/loop.py) is given to the candidate's launches only.
"""

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import pandas as pd

from bench.errors import BenchError
from bench.regress import baseline as bl
from bench.regress.compare import Rules
from bench.regress.gate import NOT_COMPARABLE, Verdict, confirm_ab, gate_ab
from bench.regress.launch import interleaved
from bench.results.store import load_run
from bench.timing.progress import Progress

DEFAULT_PAIRS = 5  # 10 launches of the smoke suite: about 4 minutes on 2 cores
MIN_PAIRS = 3


class CannotCheckOut(Exception):
    """REV is not in this clone or cannot be checked out: exit 3 (nothing to compare with)."""


def _git(*args, cwd=None) -> str:
    proc = subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise CannotCheckOut((proc.stderr.strip().splitlines() or [f"git {' '.join(args)} failed"])[-1])
    return proc.stdout.strip()


@contextmanager
def worktree(rev: str, repo="."):
    """REV checked out (detached) in a temporary git worktree; removed afterwards."""
    top = Path(_git("rev-parse", "--show-toplevel", cwd=repo))
    sha = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=top)
    tmp = Path(tempfile.mkdtemp(prefix="distbench-ab-"))
    tree = tmp / "tree"
    try:
        _git("worktree", "add", "--detach", "--force", str(tree), sha, cwd=top)
        yield tree, sha
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], capture_output=True, cwd=top)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], capture_output=True, cwd=top)


GIT_LOCATION = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_PREFIX")


def arm_env(tree: Path | None) -> dict:
    """The environment of one arm: the base's imports REV's tree and gets no test slowdown."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
        env.pop("DISTBENCH_TEST_SLOWDOWN", None)
        for var in GIT_LOCATION:  # `git bisect run` in a linked worktree exports its GIT_DIR: the arm's
            env.pop(var, None)  # launch must find (and record as git_sha) its own tree's commit
    return env


def _suites(suite, tree: Path) -> tuple[Path, Path]:
    """(the candidate's suite, the base's: REV's own copy when it has one)."""
    suite = Path(suite).resolve()
    rel = suite.relative_to(Path.cwd().resolve()) if suite.is_relative_to(Path.cwd().resolve()) else None
    return suite, tree / rel if rel is not None and (tree / rel).exists() else suite


def run_pairs(kind: str, suite, tree: Path, pairs: int, out: Path, log=print,
              run: Callable = bl.run_suite, start: int = 0) -> tuple[list[Path], list[Path]]:
    """P pairs of fresh launches, base then candidate, interleaved; (base runs, candidate runs).
    start: pairs already run (the confirmation's fresh pairs continue the alternation, so over all
    pairs each revision goes first equally often when their number is even)."""
    suite, base_suite = _suites(suite, tree)
    a, b = [], []
    order = interleaved(pairs, "base", "candidate", start=start)
    progress = Progress(len(order), plain=True)
    for i, arm in enumerate(order):
        n = start + i // 2 + 1
        log(f"# gate A/B pair {n}/{start + pairs}: {arm}")
        if arm == "base":
            a.append(run(kind, base_suite, out / "base", cwd=tree, env=arm_env(tree), ok_codes=(0, 1)))
        else:
            b.append(run(kind, suite, out / "candidate", env=arm_env(None), ok_codes=(0, 1)))
        progress.tick(f"gate A/B pair {n}/{start + pairs} {arm} launch")
    return a, b


def gate_against(rev: str, suite, *, pairs: int = DEFAULT_PAIRS, out="results", rules: Rules | None = None,
                 warn_only: bool = False, log=print, run: Callable = bl.run_suite, confirm: bool = True) -> Verdict:
    """The A/B verdict of the working tree against REV on this machine: P interleaved pairs, and when
    they flag a regression, P fresh pairs that must flag it too (gate.confirm_ab; confirm=False: the
    first pairs' flag stands)."""
    if pairs < MIN_PAIRS:
        raise BenchError(f"--pairs {pairs}: the A/B gate needs at least {MIN_PAIRS} pairs (2 leave a variance of 2 degrees "
                         f"of freedom, too few to trust); default {DEFAULT_PAIRS}")
    kind = bl.suite_kind(suite)
    out = Path(out).resolve() / "gate-ab"
    side = Path(suite).with_name(Path(suite).stem + ".gate.toml")
    rules = rules or (Rules.load(side) if side.exists() else Rules())
    try:
        with worktree(rev) as (tree, sha):
            facts = {"against": f"{rev} ({sha[:12]})", "pairs": pairs, "base runs": str(out / "base"),
                     "candidate runs": str(out / "candidate")}
            judge = lambda a, b: _judge(a, b, kind, rules, warn_only, facts)  # noqa: E731
            a, b = run_pairs(kind, suite, tree, pairs, out, log=log, run=run)
            first = judge(a, b)
            if first.status != "regression" or not confirm:
                return first
            log(f"# gate A/B: pairs 1-{pairs} flag {first.reason}; {pairs} fresh pairs to confirm")
            a2, b2 = run_pairs(kind, suite, tree, pairs, out, log=log, run=run, start=pairs)
    except CannotCheckOut as e:
        return Verdict(exit_code=NOT_COMPARABLE, status="not-comparable",
                       reason=f"cannot check out '{rev}' for the A/B gate: {e}")
    return confirm_ab(first, judge(a2, b2), judge(a + a2, b + b2), pairs=(pairs, pairs))


def _judge(a: list[Path], b: list[Path], kind: str, rules: Rules, warn_only: bool, facts: dict) -> Verdict:
    """gate_ab on the base's runs `a` and the candidate's runs `b`."""
    ra, rb = [load_run(d) for d in a], [load_run(d) for d in b]
    rows = lambda runs: pd.concat([r["results"] for r in runs], ignore_index=True)  # noqa: E731
    return gate_ab(rows(ra), rows(rb), kind, rules=rules, warn_only=warn_only, base_meta=ra[0].meta,
                   cand_meta=rb[0].meta, facts={**facts, "pairs": len(a)})
