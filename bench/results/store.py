"""Parquet result store: results/<suite>/<run_id>/{meta.json, <table>.parquet, parts/}.

Each finished case is written as its own part file (temp file, then an atomic rename), so an
interrupted sweep keeps every finished case and never leaves a half-written file. finalize()
merges the parts into one file per table; load_run() reads either form. The merged file names the
parts it holds (parquet key-value metadata `distbench.parts`), so parts left behind by a merge that
was stopped before it removed them are never read twice. A write the system refuses (a full disk)
raises bench.results.rundir.WriteError: one line, the path, the free space, where the finished
cases are; nothing half-written is left in place. Concurrency: bench.results.rundir's docstring.

Reading is defensive (issue 11): a truncated or corrupt parquet file, an unreadable meta.json and
files the store did not write are skipped, each named in `Run.problems`, and the rest of the run
loads; `load_run(path, strict=True)` raises the first problem instead. A meta.json from a newer
schema version is always an error: its tables cannot be interpreted. finalize() keeps a corrupt
part aside as `<part>.corrupt` and records it in meta.json `problems`.
"""

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.errors import BenchError
from bench.results.rundir import (RunDir, WriteError, _atomic_write, _why, locked, read_consistent,  # noqa: F401
                                  read_meta, write_json)  # (re-exported)
from bench.results.schema import SCHEMA_VERSION, TABLES, conform


PARTS_KEY = b"distbench.parts"  # a merged file's metadata: the part files merged into it (JSON list of names)


def write_parquet(df: pd.DataFrame, path: Path, run_dir: Path | None = None, parts: list[str] | None = None):
    """df as parquet at path, atomically (bench.results.rundir._atomic_write: a refused write is a
    WriteError naming path; run_dir, when given, is named as where the finished cases are)."""
    table = pa.Table.from_pandas(df, preserve_index=False)  # what DataFrame.to_parquet writes
    if parts is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), PARTS_KEY: json.dumps(parts).encode()})
    _atomic_write(path, lambda p: pq.write_table(table, p), run_dir)


def merged_parts(merged: Path) -> set[str]:
    """The part file names a merged table holds (empty for a file written before they were recorded)."""
    try:
        meta = pq.read_schema(merged).metadata or {}
        return set(json.loads(meta.get(PARTS_KEY, b"[]")))
    except Exception:  # noqa: BLE001 - unreadable: its reader names it; it holds no part
        return set()


def table_files(run_dir: Path, table: str) -> list[Path]:
    """A table's files: the merged file, if any, then the parts not merged into it."""
    run_dir = Path(run_dir)
    merged = run_dir / f"{table}.parquet"
    parts = sorted((run_dir / "parts" / table).glob("*.parquet"))
    if not merged.exists():
        return parts
    held = merged_parts(merged) if parts else set()
    return [merged] + [f for f in parts if f.name not in held]


def _read_parquet(f: Path, problems: list[str], where: Path) -> pd.DataFrame | None:
    """One parquet file, or None with a problem naming it (truncated, corrupt, unreadable)."""
    try:
        return pd.read_parquet(f)
    except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError / ... on a bad file
        problems.append(f"{_rel(f, where)}: unreadable parquet, skipped ({_why(e)})")
        return None


def _rel(f: Path, where: Path | None = None) -> str:
    """How a problem names a file: its path as given (the run directory's path joined)."""
    return str(f)


def _read_parts(files: list[Path], problems: list[str] | None = None, bad: list[Path] | None = None,
                where: Path | None = None) -> pd.DataFrame | None:
    """These part files of one table, in completion order, as one frame (None if there are none).
    A part that cannot be read is skipped, named in `problems` and added to `bad`."""
    problems = [] if problems is None else problems
    frames = []
    for f in files:
        df = _read_parquet(f, problems, where)
        if df is None:
            if bad is not None:
                bad.append(f)
        elif len(df):
            frames.append(df)
    if not frames:
        return None
    with warnings.catch_warnings():  # all-null columns in some parts: concat's dtype notice
        warnings.simplefilter("ignore", FutureWarning)
        return pd.concat(frames, ignore_index=True)


class RunWriter:
    """Writes one launch's parts into a run directory (bench.results.rundir.RunDir owns its paths
    and meta.json)."""

    def __init__(self, root, suite: str, run_id: str, part_prefix: str = ""):
        self.run = RunDir(Path(root), suite, run_id)
        self.dir = self.run.path
        self.prefix = part_prefix  # one prefix per launch, so launches never share part names
        self._parts = 0

    @classmethod
    def at(cls, run_dir, part_prefix: str = "") -> "RunWriter":
        """A writer for an existing run directory (to merge its parts, add tables, update its meta)."""
        r = RunDir.at(run_dir)
        return cls(r.root, r.suite, r.run_id, part_prefix)

    def read_meta(self) -> dict:
        return self.run.read_meta()

    def update_meta(self, change):
        self.run.update_meta(change)

    def finish_launch(self, world: int, **facts):
        self.run.finish_launch(str(world), **facts)

    def write_case(self, tables: dict[str, list[dict]], done: tuple | None = None):
        """One finished case: {table name: rows}. Parts are numbered in completion order. With
        done=(launch key, unit key, seconds) the case is also marked done in meta.json (what
        --resume skips). All or nothing: a write the system refuses (a full disk) removes this
        case's parts already written and raises WriteError, so the store holds every case
        finished before it, whole, and none twice after a resume."""
        self._parts += 1
        self.run.create()
        written: list[Path] = []
        try:
            for table, rows in tables.items():
                if rows:  # parts are raw (cheap to write); finalize() and load_run() conform them
                    path = self.dir / "parts" / table / f"{self.prefix}{self._parts:05d}.parquet"
                    write_parquet(pd.DataFrame(rows), path, self.dir)
                    written.append(path)
            if done is not None:
                self.run.mark_done(*done)
        except BaseException:
            for path in written:
                path.unlink(missing_ok=True)
            raise

    def finalize(self):
        """Merge the parts into one file per table (with the merged file already there, if any:
        a resumed run keeps what the first finalize merged). A part that cannot be read is not
        merged: it is renamed `<part>.corrupt`, left in parts/, and recorded in meta.json
        `problems`; the other parts are merged. Returns the problems (each names its file).
        Runs under the run's lock (two processes never merge one run at once); a merged file that
        cannot be written (a full disk) raises WriteError with every part still in place."""
        parts = self.dir / "parts"
        if not parts.is_dir():
            return []
        read_meta(self.dir, [])  # a newer schema version: BenchError, before anything is rewritten
        with locked(self.dir):
            if not parts.is_dir():  # merged meanwhile by another process (the launcher, rank 0 stopping)
                return []
            problems = [p for tdir in sorted(p for p in parts.iterdir() if p.is_dir()) for p in self._merge(tdir)]
            if not any(parts.iterdir()):
                parts.rmdir()
            if problems:
                self.update_meta(lambda m: {**m, "problems": [*m.get("problems", []), *problems]})
        return problems

    def _merge(self, tdir: Path) -> list[str]:
        """One table's parts into <table>.parquet, then the parts removed (the write first: a
        stop in between leaves parts the merged file names as held, never read twice)."""
        problems: list[str] = []
        files = sorted(tdir.glob("*.parquet"))
        merged = self.dir / f"{tdir.name}.parquet"
        held = merged_parts(merged) if merged.exists() else set()  # a merge stopped before removing its parts
        todo = [f for f in files if f.name not in held]
        bad: list[Path] = []
        df = _read_parts(todo, problems, bad, self.dir)
        if df is not None:
            if merged.exists():  # a resumed run: keep what the first finalize merged
                old = _read_parquet(merged, problems, self.dir)
                if old is not None:
                    df = _concat([old, df])
                else:  # keep the unreadable merged file aside, never overwrite it
                    os.replace(merged, merged.with_name(merged.name + ".corrupt"))
            try:
                write_parquet(conform(df, tdir.name), merged, self.dir, parts=[f.name for f in todo if f not in bad])
            except (ValueError, TypeError) as e:  # not a schema table, or columns it does not know
                return [*problems, f"{_rel(tdir, self.dir)}: not merged ({_why(e)})"]
        for f in files:
            if f in bad:
                os.replace(f, f.with_name(f.name + ".corrupt"))
            else:
                f.unlink()
        if not any(tdir.iterdir()):
            tdir.rmdir()
        return problems


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return pd.concat(frames, ignore_index=True)


@dataclass
class Run:
    dir: Path
    meta: dict
    tables: dict[str, pd.DataFrame]
    problems: list[str] = field(default_factory=list)  # what could not be read, each naming its file

    def __getitem__(self, table: str) -> pd.DataFrame:
        return self.tables[table]


# What the store itself writes into a run directory; anything else is named as foreign.
_OWN_SUFFIXES = (".parquet", ".corrupt")
_OWN_NAMES = ("meta.json", "parts")


def load_run(path, strict: bool = False) -> Run:
    """Read a run directory, merged or still in parts (an interrupted run).

    A file that cannot be read (truncated or corrupt parquet, invalid meta.json), a parts/ table
    the schema does not know and any file the store did not write are skipped and named in
    `Run.problems`; the rest of the run loads. strict=True raises the first problem as a
    BenchError instead. A newer schema version (meta.json) always raises BenchError. A merge
    by another process during the read makes it read again (bench.results.rundir.read_consistent)."""
    path = Path(path)
    if not path.is_dir():
        raise BenchError(f"run directory '{path}' does not exist or is not a directory")
    run = read_consistent(path, lambda: _load(path))
    if strict and run.problems:
        raise BenchError(run.problems[0])
    return run


def _load(path: Path) -> Run:
    problems: list[str] = []
    meta = read_meta(path, problems)
    tables = {}
    for p in sorted(path.glob("*.parquet")):
        if p.name.startswith("."):
            continue
        df = _read_parquet(p, problems, path)
        if df is not None:
            tables[p.stem] = df
    parts = path / "parts"
    if parts.is_dir():
        for tdir in sorted(parts.iterdir()):
            if not tdir.is_dir():
                if not tdir.name.startswith("."):
                    problems.append(f"{_rel(tdir, path)}: foreign file in parts/, ignored")
                continue
            if tdir.name not in TABLES:
                problems.append(f"{_rel(tdir, path)}: parts of unknown table '{tdir.name}', ignored")
                continue
            for f in sorted(tdir.iterdir()):
                if not f.name.startswith(".") and not f.name.endswith(_OWN_SUFFIXES):
                    problems.append(f"{_rel(f, path)}: foreign file in parts/, ignored")
            held = merged_parts(path / f"{tdir.name}.parquet") if tdir.name in tables else set()
            files = [f for f in sorted(tdir.glob("*.parquet")) if f.name not in held]
            df = _read_parts(files, problems, where=path)
            if df is None:
                continue
            try:
                both = [tables[tdir.name], df] if tdir.name in tables else [df]
                tables[tdir.name] = conform(_concat(both), tdir.name)
            except (ValueError, TypeError) as e:
                problems.append(f"{_rel(tdir, path)}: parts not loaded ({_why(e)})")
    for f in sorted(path.iterdir()):
        if f.name.startswith(".") or f.name in _OWN_NAMES or (f.is_file() and f.name.endswith(_OWN_SUFFIXES)):
            continue
        problems.append(f"{_rel(f, path)}: foreign {'directory' if f.is_dir() else 'file'} in the run directory, "
                        "ignored")
    for f in sorted(path.rglob("*.corrupt")):
        problems.append(f"{_rel(f, path)}: kept aside as corrupt by an earlier merge, not loaded")
    return Run(dir=path, meta=meta, tables=tables, problems=problems)


class Listing(NamedTuple):
    runs: list[Path]  # run directories, oldest first (run ids start with the UTC start time)
    problems: list[str]  # foreign files and directories under the root, each named


# Directories under the results root that hold something other than runs (bench.regress.baseline).
NOT_SUITES = ("baselines",)


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "meta.json").exists() or (path / "parts").is_dir()
                              or any(path.glob("*.parquet")))


def _only_hidden(d: Path) -> bool:
    try:
        names = [e.name for e in os.scandir(d)]
    except OSError:
        return False
    return bool(names) and all(n.startswith(".") for n in names)


def list_runs(root) -> Listing:
    """Run directories under a results root (<root>/<suite>/<run_id>) and the foreign entries met
    on the way, each named: a file at the root or in a suite directory, a directory that holds no
    run. Hidden entries (.name) and the baselines directory are skipped silently. A missing root
    has no runs and no problems; an unreadable one is one problem."""
    root = Path(root)
    runs: list[Path] = []
    problems: list[str] = []
    if not root.exists():
        return Listing(runs, problems)
    try:
        suites = sorted(root.iterdir())
    except OSError as e:
        return Listing(runs, [f"{root}: cannot list the results root ({_why(e)})"])
    for suite in suites:
        if suite.name.startswith(".") or suite.name in NOT_SUITES:
            continue
        if not suite.is_dir():
            problems.append(f"{suite}: foreign file in the results root, ignored")
            continue
        if is_run_dir(suite):  # <root>/<run_id> given a suite directory as the root
            problems.append(f"{suite}: a run directory directly under the results root; expected "
                            f"{root}/<suite>/<run_id>, ignored")
            continue
        try:
            entries = sorted(suite.iterdir())
        except OSError as e:
            problems.append(f"{suite}: cannot list the suite directory ({_why(e)})")
            continue
        for d in entries:
            if d.name.startswith("."):
                continue
            if is_run_dir(d):
                runs.append(d)
            elif d.is_dir() and _only_hidden(d):
                continue  # a run being made (its lock, a temp file) or only a launch's progress notes
            else:
                problems.append(f"{d}: foreign {'directory' if d.is_dir() else 'file'} (not a run), ignored")
    runs.sort(key=lambda p: (p.name, str(p)))
    return Listing(runs, problems)


def latest_run(root, suite: str) -> Path | None:
    d = Path(root) / suite
    runs = sorted((p for p in d.iterdir() if (p / "meta.json").exists()), key=lambda p: p.name) if d.is_dir() else []
    return runs[-1] if runs else None
