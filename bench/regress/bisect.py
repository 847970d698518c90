"""`distbench bisect GOOD BAD --suite S --case C | --group G`: the first commit where it got slower.

Like asv's `asv find`, this is a binary search over commits, but each step is a same-machine A/B
(the gate's `--against`, bench.regress.ab): fresh launches of the suite for GOOD and for the commit
under test, interleaved over P pairs (A B, B A, ...) with the same python and venv, each revision's
code imported from its own temporary git worktree (PYTHONPATH), so a slower host cannot pass for
a slower commit. The search itself is `git bisect run` in another temporary worktree: the user's
working tree, index, branch and bisect state are never touched, also when interrupted (Ctrl-C or
SIGTERM: the bisect's process group is stopped, `git bisect reset` runs in the temporary worktree,
both worktrees are removed).

The rule (one number per step): the target's value in a launch is the geometric mean of the kind's
first gated metric (e.g. time_median_s) over the target's cases, relative to the same over the
launch's other cases when the suite has any (the gate's per-group rule: what slows the whole launch,
such as a busy host, cancels; a slowdown of every case is then no slowdown of the target's own); a pair's ratio is the candidate's
value over GOOD's in that pair; a step's ratio is the geometric mean over its P pairs. First GOOD
against BAD is measured: BAD must be at least --min-ratio slower (default 1.10, the gate's
tolerance), else there is nothing to bisect. A commit is then "bad" (slower) when its ratio is past
the midpoint between GOOD and BAD in log terms, ratio > sqrt(ratio_BAD): nearer BAD's level than
GOOD's. The report names the first bad commit, its measured ratio and how many pairs decided it.

Step exit codes (git bisect run): 0 good, 1 bad, 125 skip (the suite could not run at that commit).
"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

import bench
from bench.errors import BenchError
from bench.regress import ab
from bench.regress import baseline as bl
from bench.regress.compare import normalize_kind, reading
from bench.regress.history import Target, _geomeans, _match
from bench.regress.launch import interleaved
from bench.results import index as ix
from bench.results.store import load_run
from bench.timing.progress import Progress

DEFAULT_PAIRS = 3
DEFAULT_MIN_RATIO = 1.10
GOOD, BAD, SKIP = 0, 1, 125
STEP_COMMAND = "bisect-step"  # `distbench bisect-step SPEC`: what git bisect run calls (bench.regress.history_cli)


@dataclass
class Measure:
    sha: str
    ratio: float  # the commit's value over GOOD's, geometric mean over the pairs
    pair_ratios: list[float]

    @property
    def pairs(self) -> int:
        return len(self.pair_ratios)

    def above(self, threshold: float) -> int:
        return sum(r > threshold for r in self.pair_ratios)


@dataclass
class Found:
    commit: str
    subject: str
    measure: Measure
    good: str
    bad: str
    bad_measure: Measure
    threshold: float  # the midpoint ratio a bad commit must pass
    target: str
    steps: list[dict] = field(default_factory=list)

    def to_text(self) -> str:
        m = self.measure
        lines = [f"bisect: first slower commit {self.commit} {self.subject}",
                 f"  target: {self.target}",
                 f"  measured: x{m.ratio:.3f} against GOOD over {m.pairs} pair(s) ({m.above(self.threshold)} of "
                 f"{m.pairs} pairs past the midpoint x{self.threshold:.3f})",
                 f"  GOOD {self.good[:12]} .. BAD {self.bad[:12]}: BAD measured x{self.bad_measure.ratio:.3f} over "
                 f"{self.bad_measure.pairs} pair(s); {len(self.steps)} commit(s) tested by git bisect run"]
        lines += [f"    {s['sha'][:12]} x{s['ratio']:.3f} ({s['pairs']} pairs) -> {s['verdict']}" for s in self.steps]
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# One A/B measurement of the target


def _common(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The rows of the cases every run has (so a value never moves because a launch lacked a case)."""
    common = None
    for _, g in rows.groupby("run_id"):
        k = set(map(tuple, g[keys].astype(str).values))
        common = k if common is None else common & k
    return rows[[tuple(x) in (common or set()) for x in rows[keys].astype(str).values]]


def _value(rows: pd.DataFrame, target) -> dict:
    """{run_id: the target's value in that launch}: the geometric mean of the kind's first gated
    metric over the target's cases, divided by the same over the launch's other cases when it has
    any (the gate's per-group rule: a group against the rest of its launch, so what slows the whole
    launch, e.g. a busy host, cancels); the target alone when it is the whole suite."""
    rows = rows.assign(kind=rows["kind"].map(normalize_kind))
    hit, kind = _match(rows, target)
    metric = reading(kind).gated()[0].column
    keys = [c for c in reading(kind).key_columns() if c in hit]
    hit = _common(hit, keys)
    rest = _common(rows[(rows["kind"] == kind) & ~rows.index.isin(hit.index)], keys)
    own = {str(r): float(v) for r, v in _geomeans(hit[metric], hit["run_id"]).items()}
    if rest.empty:
        return own
    other = {str(r): float(v) for r, v in _geomeans(rest[metric], rest["run_id"]).items()}
    return {r: v / other[r] for r, v in own.items() if r in other}


def measure(kind: str, suite_rel: Path | None, suite_abs: Path, good_tree: Path, cand_tree: Path, sha: str,
            pairs: int, out: Path, target, run: Callable | None = None, log=print) -> Measure:
    """P interleaved pairs (GOOD first in even pairs, as the gate's A/B) of fresh launches; each
    revision runs its own copy of the suite when it has one. run: bl.run_suite (a test's stand-in)."""
    run = run or bl.run_suite
    def suite_in(tree):
        return tree / suite_rel if suite_rel is not None and (tree / suite_rel).exists() else suite_abs

    a, b = [], []
    order = interleaved(pairs, "good", "cand")
    progress = Progress(len(order), plain=True)
    for i, arm in enumerate(order):
        what = f"bisect {sha[:12]}: pair {i // 2 + 1}/{pairs}: {'GOOD' if arm == 'good' else 'this commit'}"
        log(f"# {what}")
        tree = good_tree if arm == "good" else cand_tree
        d = run(kind, suite_in(tree), out, cwd=tree, env=ab.arm_env(tree), ok_codes=(0, 1))
        (a if arm == "good" else b).append(load_run(d))
        progress.tick(f"{what} launch")
    rows = pd.concat([r["results"] for r in a + b], ignore_index=True)
    values = _value(rows, target)
    ratios = []
    for ra, rb in zip(a, b):
        ida, idb = str(ra["results"]["run_id"].iloc[0]), str(rb["results"]["run_id"].iloc[0])
        ratios.append(values[idb] / values[ida])
    return Measure(sha=sha, ratio=math.exp(sum(map(math.log, ratios)) / len(ratios)), pair_ratios=ratios)


# ---------------------------------------------------------------------------------------------
# The driver


def _check(good: str, bad: str, suite, pairs: int, min_ratio: float, top: Path) -> tuple[str, str]:
    if pairs < 1:
        raise BenchError(f"--pairs {pairs}: give at least 1 A/B pair per step (default {DEFAULT_PAIRS})")
    if not min_ratio > 1:
        raise BenchError(f"--min-ratio {min_ratio}: give a ratio > 1 (e.g. 1.1: BAD at least 10% slower)")
    if not Path(suite).is_file():
        raise BenchError(f"suite file '{suite}' not found")
    g, b = ix.resolve_commit(good, top), ix.resolve_commit(bad, top)
    if g == b:
        raise BenchError(f"GOOD '{good}' and BAD '{bad}' are the same commit {g[:12]}; nothing to bisect")
    if subprocess.run(["git", "merge-base", "--is-ancestor", g, b], cwd=top).returncode != 0:
        raise BenchError(f"GOOD '{good}' ({g[:12]}) is not an ancestor of BAD '{bad}' ({b[:12]}); give an older "
                         "GOOD on BAD's history (git log BAD)")
    dirty = ix.git("status", "--porcelain", "--untracked-files=no", cwd=top)
    if dirty:
        files = ", ".join(ix.git("diff", "--name-only", "HEAD", cwd=top).splitlines()[:3]) or dirty.splitlines()[0]
        raise BenchError(f"the working tree has uncommitted changes ({files}); commit or stash them before "
                         "`distbench bisect` (it must leave the tree exactly as it was)")
    return g, b


@contextmanager
def _terminate_as_interrupt():
    """SIGTERM while bisecting raises KeyboardInterrupt, so the cleanup runs as for Ctrl-C."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler) if hasattr(signal, "SIGTERM") else None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _run_group(cmd, cwd, env, log_path: Path) -> int:
    """A command in its own session (its own process group); stopped as a group when interrupted."""
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait()
        except BaseException:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise


def bisect(good: str, bad: str, suite, target, *, pairs: int = DEFAULT_PAIRS, min_ratio: float = DEFAULT_MIN_RATIO,
           log=print, run: Callable | None = None, step_cmd: list[str] | None = None, repo=".", keep=None) -> Found:
    """Find the first commit in GOOD..BAD where the target is slower (module docstring). keep: a
    results root that keeps every launch's run (`distbench history --out KEEP` then shows them);
    default: a temporary directory, removed."""
    try:
        top = Path(ix.git("rev-parse", "--show-toplevel", cwd=repo))
    except BenchError:
        raise BenchError(f"'{Path(repo).resolve()}' is not in a git repository; run `distbench bisect` in the "
                         "repository whose commits to search") from None
    g, b = _check(good, bad, suite, pairs, min_ratio, top)
    kind = bl.suite_kind(suite)
    suite_abs = Path(suite).resolve()
    suite_rel = suite_abs.relative_to(top.resolve()) if suite_abs.is_relative_to(top.resolve()) else None
    tmp = Path(tempfile.mkdtemp(prefix="distbench-bisect-"))
    tree = tmp / "bisect"
    started = False
    with _terminate_as_interrupt():
        try:
            with ab.worktree(g, repo=top) as (good_tree, _):
                ix.git("worktree", "add", "--detach", "--force", str(tree), b, cwd=top)
                log(f"# bisect: measuring BAD {b[:12]} against GOOD {g[:12]} ({pairs} pair(s))")
                runs = Path(keep).resolve() if keep else tmp / "runs"
                # GOOD against BAD goes to the temporary directory: a refusal below (unknown target, BAD
                # not slower) leaves nothing on disk; kept runs are copied to KEEP once the bisect starts
                end = measure(kind, suite_rel, suite_abs, good_tree, tree, b, pairs, tmp / "runs-end", target,
                              run=run, log=log)
                if end.ratio < min_ratio:
                    raise BenchError(f"BAD {bad} ({b[:12]}) measured x{end.ratio:.3f} against GOOD {good} for "
                                     f"'{target.label}' over {end.pairs} pair(s), not the --min-ratio x{min_ratio:.2f} "
                                     "slower that a bisect needs; nothing to bisect")
                threshold = math.sqrt(end.ratio)
                spec = {"good_tree": str(good_tree), "suite_rel": str(suite_rel) if suite_rel else None,
                        "suite_abs": str(suite_abs), "kind": kind, "pairs": pairs, "threshold": threshold,
                        "case": target.case, "group": target.group, "size_bytes": target.size_bytes,
                        "out": str(runs), "log": str(tmp / "steps.jsonl")}
                (tmp / "spec.json").write_text(json.dumps(spec))
                if keep:
                    shutil.copytree(tmp / "runs-end", runs, dirs_exist_ok=True)
                ix.git("bisect", "start", b, g, cwd=tree)
                started = True
                code = _bench_code_dir()
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")]))}
                cmd = [*(step_cmd or [sys.executable, "-m", "bench", STEP_COMMAND]), str(tmp / "spec.json")]
                rc = _run_group(["git", "bisect", "run", *cmd], tree, env, tmp / "bisect.log")
                text = (tmp / "bisect.log").read_text()
                if rc != 0 or "is the first bad commit" not in text:
                    tail = (text.strip().splitlines() or ["no output"])[-1]
                    raise BenchError(f"git bisect run did not finish (exit {rc}): {tail}")
                first = ix.git("rev-parse", "refs/bisect/bad", cwd=tree)
                steps = [json.loads(x) for x in (tmp / "steps.jsonl").read_text().splitlines()] \
                    if (tmp / "steps.jsonl").exists() else []
                at = next((s for s in reversed(steps) if s["sha"] == first), None)
                m = end if at is None else Measure(sha=first, ratio=at["ratio"], pair_ratios=at["pair_ratios"])
                subject = ix.git("log", "-1", "--format=%s", first, cwd=top)
                return Found(commit=first, subject=subject, measure=m, good=g, bad=b, bad_measure=end,
                             threshold=threshold, target=f"{'case' if target.case else 'group'} '{target.label}' "
                                                         f"({kind}, suite {suite})", steps=steps)
        finally:
            if started:
                subprocess.run(["git", "bisect", "reset", "--quiet"], cwd=tree, capture_output=True)
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=top, capture_output=True)
            subprocess.run(["git", "worktree", "prune"], cwd=top, capture_output=True)
            shutil.rmtree(tmp, ignore_errors=True)


def _bench_code_dir() -> str:
    """The directory this distbench is imported from (the step runs this code, not the commit's)."""
    return str(Path(bench.__file__).resolve().parent.parent)


# ---------------------------------------------------------------------------------------------
# One step of `git bisect run` (run in the temporary worktree, at the commit under test)


def step(spec_path) -> int:
    spec = json.loads(Path(spec_path).read_text())
    tree = Path.cwd()
    sha = ix.git("rev-parse", "HEAD", cwd=tree)
    target = Target(case=spec["case"], group=spec["group"], size_bytes=spec["size_bytes"])
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        m = measure(spec["kind"], Path(spec["suite_rel"]) if spec["suite_rel"] else None, Path(spec["suite_abs"]),
                    Path(spec["good_tree"]), tree, sha, spec["pairs"], Path(spec["out"]), target, log=log)
    except BenchError as e:
        log(f"# bisect {sha[:12]}: skipped ({e})")
        return SKIP
    verdict = "bad" if m.ratio > spec["threshold"] else "good"
    with open(spec["log"], "a") as f:
        f.write(json.dumps({"sha": sha, "ratio": m.ratio, "pairs": m.pairs, "pair_ratios": m.pair_ratios,
                            "verdict": verdict}) + "\n")
    log(f"# bisect {sha[:12]}: x{m.ratio:.3f} over {m.pairs} pair(s) -> {verdict}")
    return BAD if verdict == "bad" else GOOD


def main(spec_path) -> int:
    """One step, as git bisect run needs it: an internal error is no verdict on the commit, so it
    stops the bisect (git: an exit code above 127)."""
    try:
        return step(spec_path)
    except Exception as e:  # noqa: BLE001 - reported in one line; the bisect stops
        print(f"# bisect step failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 128
