"""Finding stored runs and describing them: kind, start, state, cases, rows, command.

Reads meta.json and parquet footers only (never re-runs anything), so `distbench runs` stays
quick over a results/ tree with many runs.
"""

import json
import shlex
from pathlib import Path

import pyarrow.parquet as pq

from bench.errors import BenchError
from bench.kind import KINDS, kind_named, kind_of_run
from bench.results.rundir import read_consistent
from bench.results.store import table_files


def kind_names() -> list[str]:
    """Every registered kind, in registration order."""
    return KINDS.names()


def normalize_kind(kind) -> str:
    """The registered kind a stored name means (older runs used other spellings: each kind lists
    its aliases); an unregistered name is returned as given."""
    try:
        return kind_named(kind).name
    except BenchError:
        return str(kind or "").strip().lower()


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "meta.json").exists() or any(path.glob("*.parquet")) or (path / "parts").is_dir())


def resolve_run_dir(text) -> Path:
    """A run directory given on the command line, or a one-line BenchError saying what is wrong."""
    p = Path(text)
    if not p.exists():
        raise BenchError(f"run directory '{text}' does not exist; give a directory like results/<suite>/<run_id> "
                         "(see `distbench runs`)")
    if not is_run_dir(p):
        raise BenchError(f"'{text}' is not a run directory: it has no meta.json and no parquet tables; "
                         "give a directory like results/<suite>/<run_id> (see `distbench runs`)")
    return p


def read_meta(path: Path) -> dict:
    p = Path(path) / "meta.json"
    try:
        meta = json.loads(p.read_text()) if p.exists() else {}
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}  # a JSON list or number: no metadata (load_run names it)


def _rows_and_cases(path: Path) -> tuple[int, int, list[str]]:
    """Rows of the results table, distinct case ids, and kind values seen (merged file + parts),
    as of one moment while another process merges the run (bench.results.rundir.read_consistent)."""
    return read_consistent(path, lambda: _count(path))


def _count(path: Path) -> tuple[int, int, list[str]]:
    rows, cases, kinds = 0, set(), set()
    for f in table_files(path, "results"):
        try:
            cols = pq.read_schema(f).names
            t = pq.read_table(f, columns=[c for c in ("case_id", "kind") if c in cols])
        except (OSError, ValueError):
            continue
        rows += t.num_rows
        if "case_id" in t.column_names:
            cases.update(v for v in t.column("case_id").to_pylist() if v is not None)
        if "kind" in t.column_names:
            kinds.update(v for v in t.column("kind").to_pylist() if v is not None)
    return rows, len(cases), sorted(kinds)


def kind_of(meta: dict, result_kinds=(), results=None) -> str:
    """meta.json "kind" first; else a kind that claims the run; else the results rows' kind column
    (bench.kind.kind_of_run)."""
    kinds = list(result_kinds)
    if results is not None and "kind" in results:
        kinds += list(results["kind"].dropna().unique())
    return kind_of_run(meta, kinds)


def state_of(path: Path, meta: dict) -> tuple[str, str]:
    """(complete | interrupted | failed, why). A launch is finished when meta has its finished_utc;
    parts/ left behind means the end-of-run merge never happened."""
    launches = meta.get("launches") or {}
    recorded = meta.get("state")  # the harness marks complete / interrupted / failed (running while it goes)
    if recorded in ("failed", "interrupted"):
        return recorded, str(meta.get("failure") or meta.get("error") or f"marked {recorded} (ended {meta.get('ended_utc', '?')})")
    if recorded == "running" and not meta.get("ended_utc"):
        return "interrupted", "marked running with no end: still running, or killed"
    for key in ("error", "failed", "failure"):
        if meta.get(key):
            return "failed", str(meta[key])
    for w, la in launches.items():
        for key in ("error", "failed", "failure"):
            if isinstance(la, dict) and la.get(key):
                return "failed", f"world {w}: {la[key]}"
    unfinished = [w for w, la in launches.items() if not (isinstance(la, dict) and la.get("finished_utc"))]
    if not meta:
        return "interrupted", "no meta.json"
    if not launches:
        return "interrupted", "no launch recorded in meta.json"
    if unfinished:
        return "interrupted", f"launch(es) for world {', '.join(unfinished)} never finished"
    if (path / "parts").is_dir():
        return "interrupted", "parts/ not merged"
    wrong = sum(int(la.get("wrong") or 0) for la in launches.values() if isinstance(la, dict))
    if wrong:
        return "failed", f"{wrong} wrong element(s)"
    return "complete", ""


def command_of(meta: dict) -> str:
    """The command that reproduces the run, runnable from the recorded cwd."""
    cmd = meta.get("command_line") or ""
    if isinstance(cmd, list):
        cmd = shlex.join(str(c) for c in cmd)
    parts = cmd.split(" ", 1)
    if parts and (parts[0] == "__main__.py" or parts[0].endswith("bench/__main__.py") or parts[0] == "-m"):
        cmd = "python -m bench" + (" " + parts[1] if len(parts) > 1 else "")
    cwd = meta.get("cwd")
    return f"cd {shlex.quote(str(cwd))} && {cmd}" if cwd and cmd else cmd


def summarize(path) -> dict:
    """One line of `distbench runs`."""
    path = Path(path)
    meta = read_meta(path)
    rows, done, kinds = _rows_and_cases(path)
    launches = meta.get("launches") or {}
    launches = [la for la in launches.values() if isinstance(la, dict)]
    planned = sum(int(la.get("cases") or 0) for la in launches)
    if any("done" in la for la in launches):  # the harness's units (case x size), as planned counts them
        done = sum(len(la.get("done") or []) for la in launches)
    state, why = state_of(path, meta)
    return {"dir": str(path), "kind": kind_of(meta, kinds), "suite": meta.get("suite", path.parent.name),
            "run_id": meta.get("run_id", path.name), "start": meta.get("started_utc", ""), "state": state,
            "why": why, "cases_done": done, "cases_planned": planned or None, "rows": rows,
            "command": meta.get("command_line", "")}


def find_runs(root) -> list[Path]:
    """Run directories under root (root/<suite>/<run_id>, or root itself / root/<run_id>), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    if is_run_dir(root) and (root / "meta.json").exists():
        return [root]
    found = [p for p in root.glob("*/*") if p.is_dir() and is_run_dir(p)]
    found += [p for p in root.glob("*") if p.is_dir() and (p / "meta.json").exists()]
    # Run ids start with the UTC start time, so the name orders them.
    return sorted(set(found), key=lambda p: (read_meta(p).get("started_utc", ""), p.name))


def latest_per_kind(root) -> list[Path]:
    """The newest run of each kind under root, in KINDS order (then any other kind)."""
    latest: dict[str, Path] = {}
    for p in find_runs(root):
        latest[summarize(p)["kind"]] = p  # find_runs is oldest first: the last one wins
    names = KINDS.names()
    order = [k for k in names if k in latest] + sorted(k for k in latest if k not in names)
    return [latest[k] for k in order]
