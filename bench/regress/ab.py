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
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pandas as pd

from bench.errors import BenchError
from bench.regress import baseline as bl
from bench.regress.compare import Rules
from bench.regress.gate import (NOT_COMPARABLE, PASS, REGRESSION, Verdict, flag_summary, gate_ab, gated_regressions,
                                 key_names, make_verdict)
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
    they flag a regression, P fresh pairs that must flag it too (confirm_ab below; confirm=False: the
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


def confirm_ab(first: Verdict, fresh: Verdict, together: Verdict, pairs: tuple[int, int]) -> Verdict:
    """The A/B's confirmation (bench.regress.ab): the first P pairs flagged a regression, so P fresh
    pairs were launched and judged alone. The launch factor, a group or a case is a regression only
    when the first pairs and the fresh pairs both flag it (the fresh pairs confirm; they do not
    discover), so unchanged code fails only when two looks in a row both go wrong. The table
    is all pairs together (the better estimate), each row keeping what the first pairs said.
    Wrong results in any launch fail outright."""
    if "wrong" in (fresh.status, together.status):
        return together
    p1, p2 = pairs
    label, fresh_label = f"pairs 1-{p1}", f"pairs {p1 + 1}-{p1 + p2}"
    if fresh.status not in ("pass", "regression"):  # e.g. not comparable: confirms nothing, clears nothing
        why = f"the fresh pairs ({fresh_label}) could not be judged: {fresh.reason}"
        return replace(first, reason=f"{first.reason} (unconfirmed: {why})",
                       confirmation={"pairs": f"{p1 + 1}-{p1 + p2}", "first": first.reason, "error": why})
    keys = [k for k in key_names(together.kind) if k in together.cases.columns] + ["metric"]
    cases = _confirmed_rows(together.cases, first.cases, fresh.cases, keys, label)
    kinds = _confirmed_rows(together.kinds, first.kinds, fresh.kinds, ["metric"], label)
    groups = _confirmed_rows(together.groups, first.groups, fresh.groups, ["metric", "_group"], label)  # the full name
    cases_r, kinds_r = gated_regressions(SimpleNamespace(cases=cases, kinds=kinds, groups=groups))
    if len(cases_r) or len(kinds_r):
        verdict = dict(exit_code=REGRESSION, status="regression",
                       reason=f"{flag_summary(cases_r, kinds_r)} (confirmed by {p2} fresh pairs; A/B over "
                              f"{p1 + p2} launch pairs)")
    else:
        verdict = dict(exit_code=PASS, status="pass",
                       reason=f"{label} flagged {flag_summary(*gated_regressions(first))}; not confirmed by "
                              f"{p2} fresh pairs ({fresh_label}): no regression over {p1 + p2} launch pairs")
    fields = {k: getattr(together, k) for k in ("kind", "baseline_dir", "run_dir", "rules", "repeats", "facts", "warn_only")}
    return make_verdict(**verdict, cases=cases, kinds=kinds, groups=groups, notes=together.notes,
                    confirmation={"pairs": f"{p1 + 1}-{p1 + p2}", "first": first.reason, "fresh": fresh.reason,
                                  "said": f"{p2} fresh pairs ({fresh_label}): {fresh.status}"}, **fields)


def _confirmed_rows(together: pd.DataFrame, first: pd.DataFrame, fresh: pd.DataFrame, keys: list[str],
                    label: str) -> pd.DataFrame:
    """together's rows, a regression only where both looks said regression; what each look said
    kept as `first_verdict` (shown as "ok (pairs 1-5: regression)") and `fresh_verdict`."""
    if together.empty:
        return together

    out = together.copy()
    for df, name in ((first, "first_verdict"), (fresh, "fresh_verdict")):
        if df.empty or not set(keys) <= set(df.columns):
            out[name] = None  # a look without these rows confirms none of them
        else:
            out = out.join(df.set_index(keys)["verdict"].rename(name), on=keys)
    stands = (out["first_verdict"] == "regression") & (out["fresh_verdict"] == "regression")
    out.loc[(out["verdict"] == "regression") & ~stands, "verdict"] = "ok"
    out.loc[stands, "verdict"] = "regression"
    out["_first_label"] = label
    return out
