"""The run index: every stored run under a results root in one table, built where the files are.

One row per run directory (results/<suite>/<run_id>/): kind, suite, run id, start time, git commit
and dirty flag, machine fingerprint (bench.results.fingerprint), torch / NCCL versions, state,
cases and rows. results/ stays the source of truth: nothing is cached or migrated, no server runs.
meta.json files are read as JSON; the results tables (merged files and unmerged parts) are scanned
in one DuckDB query over the parquet files in place (`read_parquet([...], filename=true,
union_by_name=true)`, https://duckdb.org/docs/data/parquet/overview), which reads only the
columns it needs from each footer-described file, in parallel.

`distbench runs` and `distbench history` (bench.regress.history) answer from it. A file that cannot
be read (a truncated parquet, an unreadable meta.json) is skipped and named: in `Index.problems`
and in its run's `why`. Runs another process is writing are read as of a moment: `scan_runs`
scans a run again when a merge replaced its files during the scan (bench.results.rundir).
"""

import json
import subprocess
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from bench.errors import BenchError
from bench.results import runs as runs_mod  # the kind and state rules of `distbench show`
from bench.results import fingerprint as fp
from bench.results.rundir import _why, read_consistent, read_meta, same_tables, snapshot
from bench.results.store import list_runs, table_files

COLUMNS = ("kind", "suite", "run_id", "start", "git_sha", "git_dirty", "fingerprint", "torch", "nccl", "state",
           "why", "cases_done", "cases_planned", "rows", "dir", "command")


def results_files(run_dir: Path) -> list[Path]:
    """A run's results table: the merged file and any parts not merged into it (an interrupted run)."""
    return table_files(Path(run_dir), "results")


def scan(files: list[Path], columns: str, where: str = "", params=(), bad: list | None = None) -> pd.DataFrame:
    """SELECT columns FROM the parquet files (with their `filename`) in one DuckDB scan. A file
    DuckDB cannot read fails the whole scan: then each file is read on its own and the unreadable
    ones are left out, each added to `bad` as (file, why) when given (a file that only lacks a
    column asked for is left out silently)."""
    import duckdb  # lazy: only the readers of many runs need it

    if not files:
        return pd.DataFrame()
    sql = (f"SELECT {columns} FROM read_parquet(?, filename=true, union_by_name=true)"
           + (f" WHERE {where}" if where else ""))
    con = duckdb.connect()
    try:
        return con.execute(sql, [[str(f) for f in files], *params]).df()
    except duckdb.Error:
        frames = []
        for f in files:
            try:
                frames.append(con.execute(sql, [[str(f)], *params]).df())
            except duckdb.Error:
                why = _unreadable(f)
                if why and bad is not None:
                    bad.append((Path(f), why))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    finally:
        con.close()


def _unreadable(f: Path) -> str | None:
    """Why a parquet file cannot be read (truncated, corrupt, gone), or None if it reads."""
    try:
        pq.read_table(f)
    except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError / ... on a bad file
        return _why(e)
    return None


def scan_runs(dirs, columns: str, where: str = "", params=()) -> tuple[pd.DataFrame, list[tuple[Path, Path, str]]]:
    """SELECT columns (with `filename`) over the results files of these runs in one scan, each
    row with its run's `dir`; and the files skipped as unreadable, as (run dir, file, why). A run
    whose files a merge replaced during the scan (another process finishing it) is scanned again
    on its own until it reads as of one moment: never a case twice, never one missing."""
    dirs = [Path(d) for d in dirs]
    before = {d: snapshot(d) for d in dirs}
    owner = {str(f): d for d in dirs for f in results_files(d)}
    bad: list = []
    df = scan([Path(f) for f in owner], columns, where, params, bad)
    moved = {d for d in dirs if not same_tables(before[d], snapshot(d))}
    skipped = [(owner[str(f)], f, why) for f, why in bad if owner[str(f)] not in moved]
    frames = [df.assign(dir=df["filename"].map(owner))] if not df.empty else []
    if moved and frames:
        frames[0] = frames[0][~frames[0]["dir"].isin(moved)]
    for d in sorted(moved):
        def once(d=d):
            b: list = []
            return scan(results_files(d), columns, where, params, b), b

        one, b = read_consistent(d, once)
        skipped += [(d, f, why) for f, why in b]
        if not one.empty:
            frames.append(one.assign(dir=d))
    frames = [f for f in frames if not f.empty]
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not out.empty:
        out["dir"] = out["dir"].map(str)
    return out, skipped


def _counts(dirs: list[Path]) -> tuple[dict[str, tuple[int, int, list[str]]], list]:
    """run dir -> (rows, distinct case ids, kinds seen in the rows), from one scan of every file;
    and the files skipped (scan_runs)."""
    df, skipped = scan_runs(dirs, "filename, case_id, kind, count(*) AS n", where="true GROUP BY ALL")
    out: dict[str, tuple[int, int, list[str]]] = {}
    if df.empty:
        return out, skipped
    for d, g in df.groupby("dir"):
        out[d] = (int(g["n"].sum()), int(g["case_id"].dropna().nunique()), sorted(g["kind"].dropna().unique()))
    return out, skipped


def _meta(d: Path, problems: list[str]) -> dict:
    """meta.json as `distbench runs` lists it ({} when absent); an unreadable one is named in problems."""
    try:
        return read_meta(d, problems)
    except BenchError:  # a newer schema version: listed as stored (show and report say they cannot read it)
        return runs_mod.read_meta(d)


def _row(path: Path, meta: dict, counts, skipped: list[str]) -> dict:
    rows, cases, kinds = counts
    launches = [la for la in (meta.get("launches") or {}).values() if isinstance(la, dict)]
    planned = sum(int(la.get("cases") or 0) for la in launches)
    if any("done" in la for la in launches):
        cases = sum(len(la.get("done") or []) for la in launches)
    state, why = runs_mod.state_of(path, meta)
    if "meta.json" in skipped:  # not "no meta.json": there is one, it cannot be read
        why = ""
    if skipped:  # named in `distbench runs` beside the run (the full reasons are in Index.problems)
        why = "; ".join(x for x in (why, f"unreadable, skipped: {', '.join(skipped)}") if x)
    software = meta.get("software") or {}
    try:
        finger = fp.Fingerprint.from_dict(meta["fingerprint"]) if "fingerprint" in meta else fp.of_run(meta)
        slug = finger.slug()
    except (TypeError, ValueError, AttributeError):
        slug = "unknown"
    return {"kind": runs_mod.kind_of(meta, kinds), "suite": str(meta.get("suite") or path.parent.name),
            "run_id": str(meta.get("run_id") or path.name), "start": str(meta.get("started_utc") or ""),
            "git_sha": meta.get("git_sha") or "", "git_dirty": meta.get("git_dirty"), "fingerprint": slug,
            "torch": str(software.get("torch") or ""), "nccl": str(software.get("nccl") or ""),
            "state": state, "why": why, "cases_done": cases, "cases_planned": planned or None, "rows": rows,
            "dir": str(path), "command": runs_mod.command_of(meta)}


@dataclass
class Index:
    runs: pd.DataFrame  # one row per run, COLUMNS, oldest start first
    problems: list[str] = field(default_factory=list)  # foreign entries and unreadable files, each named


def build(root) -> Index:
    """The index of every run under root (a missing root: BenchError)."""
    root = Path(root)
    if not root.is_dir():
        raise BenchError(f"results root '{root}' does not exist; give --out DIR (the results root benchmarks wrote to)")
    listing = list_runs(root)
    counts, bad = _counts(listing.runs)
    problems = list(listing.problems)
    rows = []
    for d in listing.runs:
        mine = [f"{f}: unreadable parquet, skipped ({why})" for r, f, why in bad if r == d]
        meta_problems: list[str] = []
        meta = _meta(d, meta_problems)
        names = [str(f.relative_to(d)) for r, f, _ in bad if r == d] + ["meta.json"] * bool(meta_problems and not meta)
        problems += meta_problems + mine
        rows.append(_row(d, meta, counts.get(str(d), (0, 0, [])), names))
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df = df.sort_values(["start", "run_id"], kind="stable").reset_index(drop=True)
    return Index(df, problems)


# ---------------------------------------------------------------------------------------------
# Filters


def git(*args, cwd=None) -> str:
    """git's stdout; a BenchError naming the revision problem when git fails."""
    try:
        proc = subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise BenchError(f"cannot run git ({e})") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"git {' '.join(args)} failed"])[-1]
        raise BenchError(f"git {' '.join(args)}: {tail}")
    return proc.stdout.strip()


def resolve_commit(rev: str, repo=None) -> str:
    """The full sha of REV, or a one-line BenchError: the commit does not exist."""
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], capture_output=True,
                          text=True, cwd=repo)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BenchError(f"commit '{rev}' does not exist in the git repository at '{repo or '.'}'; give a "
                         "commit sha, branch or tag of this repository (see `git log`)")
    return proc.stdout.strip()


def commits_in(spec: str, repo=None) -> set[str]:
    """The shas a --commits value means: 'A..B' (git rev-list A..B: in B's history, not in A's)
    or one revision."""
    if ".." in spec:
        a, _, b = spec.partition("..")
        a, b = resolve_commit(a or "HEAD", repo), resolve_commit(b or "HEAD", repo)
        return set(git("rev-list", f"{a}..{b}", cwd=repo).split())
    return {resolve_commit(spec, repo)}


def parse_date(text: str, what: str) -> pd.Timestamp:
    try:
        t = pd.Timestamp(text)
    except (ValueError, TypeError):
        raise BenchError(f"{what} '{text}' is not a date; give YYYY-MM-DD or an ISO time "
                         "(e.g. 2026-12-01T12:00:00+00:00)") from None
    return t.tz_localize(timezone.utc) if t.tzinfo is None else t.tz_convert(timezone.utc)


def select(runs: pd.DataFrame, *, kind=None, suite=None, fingerprint=None, commits=None, since=None, until=None,
           repo=None) -> pd.DataFrame:
    """The runs that pass every filter given (fingerprint: the slug, or a part of it)."""
    keep = pd.Series(True, index=runs.index)
    if kind is not None:
        keep &= runs["kind"] == kind
    if suite is not None:
        keep &= runs["suite"] == suite
    if fingerprint is not None:
        keep &= runs["fingerprint"].str.contains(fingerprint, regex=False)
    if commits is not None:
        keep &= runs["git_sha"].isin(commits_in(commits, repo))
    if since is not None or until is not None:
        start = pd.to_datetime(runs["start"], utc=True, errors="coerce", format="ISO8601")
        if since is not None:
            keep &= start >= parse_date(since, "--since")
        if until is not None:
            t = parse_date(until, "--until")
            keep &= start < (t + pd.Timedelta(days=1) if len(str(until)) == 10 else t)  # a date: that whole day
    return runs[keep.fillna(False)]


def to_json(runs: pd.DataFrame) -> str:
    return json.dumps(json.loads(runs.to_json(orient="records")), indent=1) + "\n"
