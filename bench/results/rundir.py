"""One run directory: results/<suite>/<run_id>/ and its meta.json, in one object.

Everything that builds a run's path or edits its meta.json goes through here (the harness,
every kind's traces, the store's writer, resume), so the layout is written down once.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.results.metadata import utc_now
from bench.results.schema import SCHEMA_VERSION

RESULTS_LINE = "# results: "  # what a launch prints, then its run directory, when the run is closed (rank 0)


def _atomic_write(path: Path, write):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


def write_json(obj, path: Path):
    def w(p):
        p.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")

    _atomic_write(path, w)


def _why(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def read_meta(path: Path, problems: list[str]) -> dict:
    """meta.json of a run directory: {} when absent; {} and a problem when unreadable or not an
    object. A schema_version newer than this code's is a BenchError (naming the file, both versions)."""
    p = Path(path) / "meta.json"
    if not p.exists():
        return {}
    try:
        meta = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        problems.append(f"{p}: unreadable meta.json, run metadata missing ({_why(e)})")
        return {}
    if not isinstance(meta, dict):
        problems.append(f"{p}: meta.json is a JSON {type(meta).__name__}, not an object; run metadata missing")
        return {}
    v = meta.get("schema_version")
    if v is not None:
        if isinstance(v, bool) or not isinstance(v, int):
            problems.append(f"{p}: schema_version {v!r} is not an integer; read as version {SCHEMA_VERSION}")
        elif v > SCHEMA_VERSION:
            raise BenchError(f"{p}: schema version {v} is newer than this distbench's {SCHEMA_VERSION}; "
                             "upgrade distbench to read this run")
    return meta


@dataclass(frozen=True)
class RunDir:
    root: Path  # the results root (a suite's `out`, default results/)
    suite: str
    run_id: str

    @classmethod
    def of(cls, cfg, run_id: str) -> "RunDir":
        """The run directory of a run of this config (cfg.out / cfg.name / run_id)."""
        return cls(Path(cfg.out), cfg.name, run_id)

    @classmethod
    def at(cls, path) -> "RunDir":
        p = Path(path)
        return cls(p.parent.parent, p.parent.name, p.name)

    @property
    def path(self) -> Path:
        return Path(self.root) / self.suite / self.run_id

    @property
    def suite_dir(self) -> Path:
        return Path(self.root) / self.suite

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    def exists(self) -> bool:
        return self.meta_path.exists()

    def siblings(self) -> list[str]:
        """Run ids of the other runs of this suite under the same root (oldest first)."""
        return sorted(p.name for p in self.suite_dir.glob("*") if (p / "meta.json").exists())

    def read_meta(self) -> dict:
        """meta.json ({} when absent). An unreadable one is renamed meta.json.corrupt (never
        overwritten) and the run goes on with a fresh meta whose `problems` say so; a newer schema
        version is a BenchError (this code must not rewrite it)."""
        problems: list[str] = []
        meta = read_meta(self.path, problems)
        p = self.meta_path
        if problems and not meta and p.exists():  # unreadable, or not a JSON object
            os.replace(p, p.with_name("meta.json.corrupt"))
            meta = {"problems": [f"{x}; kept aside as meta.json.corrupt" for x in problems]}
        return meta

    def update_meta(self, change):
        """meta.json <- change(current meta); atomic."""
        meta = change(self.read_meta())
        write_json({**meta, "schema_version": SCHEMA_VERSION}, self.meta_path)

    def update_launch(self, key: str, **facts):
        """meta.json `launches[key]` <- its facts updated with these."""
        def change(m):
            launches = dict(m.get("launches", {}))
            launches[str(key)] = {**launches.get(str(key), {}), **facts}
            return {**m, "launches": launches}

        self.update_meta(change)

    def finish_launch(self, key, **facts):
        """Launch `key` finished, with its totals."""
        self.update_launch(str(key), **facts, finished_utc=utc_now())

    def mark_done(self, key: str, unit_key: str, seconds: float | None = None):
        """Launch `key` finished the unit `unit_key` (what --resume skips), in `seconds` of wall
        time (its `case_s`: what `--dry-run` estimates a later run of the case from)."""
        def change(m):
            launches = dict(m.get("launches", {}))
            entry = dict(launches.get(key, {}))
            entry["done"] = [*entry.get("done", []), unit_key]
            if seconds is not None:
                entry["case_s"] = {**entry.get("case_s", {}), unit_key: round(float(seconds), 3)}
            launches[key] = entry
            return {**m, "launches": launches}

        self.update_meta(change)
