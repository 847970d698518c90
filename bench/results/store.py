"""Parquet result store: results/<suite>/<run_id>/{meta.json, <table>.parquet, parts/}.

Each finished case is written as its own part file (temp file, then an atomic rename), so an
interrupted sweep keeps every finished case and never leaves a half-written file. finalize()
merges the parts into one file per table; load_run() reads either form.
"""

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.results.schema import SCHEMA_VERSION, conform


def _atomic_write(path: Path, write):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


def write_parquet(df: pd.DataFrame, path: Path):
    _atomic_write(path, lambda p: df.to_parquet(p, engine="pyarrow", index=False))


def write_json(obj, path: Path):
    def w(p):
        p.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")

    _atomic_write(path, w)


def _read_parts(tdir: Path) -> pd.DataFrame | None:
    """All part files of one table, in completion order, as one frame (None if there are none)."""
    frames = [pd.read_parquet(f) for f in sorted(tdir.glob("*.parquet"))]
    frames = [f for f in frames if len(f)]
    if not frames:
        return None
    with warnings.catch_warnings():  # all-null columns in some parts: concat's dtype notice
        warnings.simplefilter("ignore", FutureWarning)
        return pd.concat(frames, ignore_index=True)


class RunWriter:
    def __init__(self, root, suite: str, run_id: str, part_prefix: str = ""):
        self.dir = Path(root) / suite / run_id
        self.prefix = part_prefix  # one prefix per launch, so launches never share part names
        self._parts = 0

    @classmethod
    def at(cls, run_dir, part_prefix: str = "") -> "RunWriter":
        """A writer for an existing run directory (to merge its parts, add tables, update its meta)."""
        w = cls.__new__(cls)
        w.dir, w.prefix, w._parts = Path(run_dir), part_prefix, 0
        return w

    def read_meta(self) -> dict:
        p = self.dir / "meta.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def update_meta(self, change):
        """meta.json <- change(current meta); atomic."""
        meta = change(self.read_meta())
        write_json({**meta, "schema_version": SCHEMA_VERSION}, self.dir / "meta.json")

    def finish_launch(self, world: int, **facts):
        from bench.results.metadata import utc_now

        def change(m):
            launches = dict(m.get("launches", {}))
            launches[str(world)] = {**launches.get(str(world), {}), **facts, "finished_utc": utc_now()}
            return {**m, "launches": launches}

        self.update_meta(change)

    def write_case(self, tables: dict[str, list[dict]]):
        """One finished case: {table name: rows}. Parts are numbered in completion order."""
        self._parts += 1
        for table, rows in tables.items():
            if rows:  # parts are raw (cheap to write); finalize() and load_run() conform them
                write_parquet(pd.DataFrame(rows), self.dir / "parts" / table / f"{self.prefix}{self._parts:05d}.parquet")

    def finalize(self):
        parts = self.dir / "parts"
        if not parts.is_dir():
            return
        for tdir in sorted(p for p in parts.iterdir() if p.is_dir()):
            files = sorted(tdir.glob("*.parquet"))
            df = _read_parts(tdir)
            if df is not None:
                write_parquet(conform(df, tdir.name), self.dir / f"{tdir.name}.parquet")
            for f in files:
                f.unlink()
            tdir.rmdir()
        parts.rmdir()


@dataclass
class Run:
    dir: Path
    meta: dict
    tables: dict[str, pd.DataFrame]

    def __getitem__(self, table: str) -> pd.DataFrame:
        return self.tables[table]


def load_run(path) -> Run:
    """Read a run directory, merged or still in parts (an interrupted run)."""
    path = Path(path)
    meta = json.loads((path / "meta.json").read_text()) if (path / "meta.json").exists() else {}
    tables = {p.stem: pd.read_parquet(p) for p in sorted(path.glob("*.parquet"))}
    parts = path / "parts"
    if parts.is_dir():
        for tdir in sorted(p for p in parts.iterdir() if p.is_dir()):
            df = _read_parts(tdir)
            if df is not None:
                both = [tables[tdir.name], df] if tdir.name in tables else [df]
                tables[tdir.name] = conform(pd.concat(both, ignore_index=True), tdir.name)
    return Run(dir=path, meta=meta, tables=tables)


def latest_run(root, suite: str) -> Path | None:
    d = Path(root) / suite
    runs = sorted((p for p in d.iterdir() if (p / "meta.json").exists()), key=lambda p: p.name) if d.is_dir() else []
    return runs[-1] if runs else None
