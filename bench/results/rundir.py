"""One run directory: results/<suite>/<run_id>/ and its meta.json, in one object.

Everything that builds a run's path or edits its meta.json goes through here (the harness,
every kind's traces, the store's writer, resume), so the layout is written down once.

What holds when several processes share a results root (docs/runs.md, "What the store guarantees"):
every file is written to a hidden temp file in its own directory and renamed into place
(os.replace), so a reader sees the old file or the new one, never half of one; a write that fails
(a full disk) removes its temp file and raises WriteError naming the path and the free space. A
run directory appears whole (made under a hidden name, then renamed). meta.json's read-change-write
and the merge of parts run under an exclusive lock on the run's `.lock` (fcntl.flock, re-entrant
within a process), so no update is lost. Readers take no lock: `read_consistent` reads again when
a merge replaced files under them.
"""

import errno
import fcntl
import json
import os
import shutil
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from bench.errors import BenchError
from bench.results.metadata import utc_now
from bench.results.schema import SCHEMA_VERSION

RESULTS_LINE = "# results: "  # what a launch prints, then its run directory, when the run is closed (rank 0)
LOCK_NAME = ".lock"  # in each run directory: held while meta.json is changed or parts are merged


class WriteError(BenchError):
    """A store write the system refused (no space left, quota, read-only, I/O error): one line
    naming the path and the free space on its filesystem; nothing half-written is left in place."""


def _free_text(path: Path) -> str:
    """'12.0 MiB free on /mnt/x': the free space of the filesystem holding path (its nearest
    existing ancestor) and that filesystem's mount point."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        free = shutil.disk_usage(p).free
    except OSError:
        return "free space unknown"
    mount = p
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    return f"{_bytes_text(free)} free on {mount}"


def _bytes_text(n: int) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:.1f} {unit}"
    return f"{n} B"


def write_error(e: OSError, path: Path, run_dir: Path | None = None) -> WriteError:
    """The one-line error for a refused write of path (inside run_dir, when given)."""
    free = _free_text(path)
    if e.errno == errno.ENOSPC:
        text = f"no space left writing {path} ({free})"
    elif e.errno == errno.EDQUOT:
        text = f"disk quota exceeded writing {path} ({free})"
    else:
        text = f"cannot write {path}: {e.strerror or _why(e)} ({free})"
    if run_dir is not None:
        text += f"; every case finished before it is kept in {run_dir}"
    return WriteError(text)


def _atomic_write(path: Path, write, run_dir: Path | None = None):
    """write(tmp) to a hidden temp file beside path, then rename it over path. An OSError (a full
    disk, a quota) removes the temp file and raises WriteError; other errors remove it too."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")  # unique per process and thread
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(e, OSError):
            raise write_error(e, path, run_dir) from None
        raise


def write_json(obj, path: Path, run_dir: Path | None = None):
    text = json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"  # before the temp file: a bad object writes nothing
    _atomic_write(path, lambda p: p.write_text(text), run_dir)


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


_LOCKS: dict[str, list] = {}  # lock file -> [RLock, fd or None, depth]: one flock per process, re-entrant
_LOCKS_GUARD = threading.Lock()


@contextmanager
def locked(run_dir: Path):
    """Exclusive use of a run directory's meta.json and parts: fcntl.flock on its .lock, so other
    processes wait (the lock goes with the process: a killed writer holds nothing); the same
    process may enter again (a merge that records its problems in meta.json), one thread at a time."""
    key = os.path.abspath(Path(run_dir) / LOCK_NAME)
    with _LOCKS_GUARD:
        entry = _LOCKS.setdefault(key, [threading.RLock(), None, 0])
    with entry[0]:
        if entry[2] == 0:
            try:
                fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as e:
                raise write_error(e, Path(key), Path(run_dir)) from None
            fcntl.flock(fd, fcntl.LOCK_EX)
            entry[1] = fd
        entry[2] += 1
        try:
            yield
        finally:
            entry[2] -= 1
            if entry[2] == 0:
                fd, entry[1] = entry[1], None
                os.close(fd)  # releases the flock


class Snapshot(NamedTuple):
    top: frozenset  # (name, inode, bytes, mtime_ns) of each table file in the run directory
    parts: frozenset  # '<table>/<file>' of each file under parts/


def snapshot(run_dir: Path) -> Snapshot:
    """What a merge changes in a run directory: its table files and its parts (never meta.json)."""
    top, parts = set(), set()
    for f in _entries(Path(run_dir)):
        if f.name.endswith((".parquet", ".corrupt")) and not f.name.startswith("."):
            try:
                st = f.stat()
            except OSError:
                continue
            top.add((f.name, st.st_ino, st.st_size, st.st_mtime_ns))
    for t in _entries(Path(run_dir) / "parts"):
        parts.update(f"{t.name}/{f.name}" for f in _entries(Path(t.path)))
    return Snapshot(frozenset(top), frozenset(parts))


def same_tables(before: Snapshot, after: Snapshot) -> bool:
    """No merge between two snapshots: the same table files, every part still there (parts added
    meanwhile are fine: a read is of a moment before them)."""
    return after.top == before.top and before.parts <= after.parts


def _entries(d: Path) -> list:
    try:
        with os.scandir(d) as it:
            return list(it)
    except OSError:  # absent (merged away), or not a directory
        return []


def read_consistent(run_dir: Path, read, tries: int = 40):
    """read() of a run directory that no merge changed underneath: read again while a merge
    (bench.results.store.RunWriter.finalize) replaced or removed files during the read, so a
    reader never sees a case twice (the merged file and its part) or misses one (a part merged
    away after it was listed). Parts added meanwhile are fine: the read is of a moment before."""
    out = None
    for attempt in range(tries):
        before = snapshot(run_dir)
        try:
            out = read()
        except FileNotFoundError:  # a directory merged away while it was listed
            out = None
        else:
            if same_tables(before, snapshot(run_dir)):
                return out
        time.sleep(min(0.002 * 2 ** attempt, 0.05))  # a merge takes milliseconds
    return out if out is not None else read()


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

    def create(self):
        """Make the run directory if it is missing, whole: under a hidden name with its .lock,
        then renamed into place, so a reader never meets it empty (bench.results.store.list_runs
        names an empty directory as foreign)."""
        p = self.path
        if p.is_dir():
            return
        try:
            self.suite_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.suite_dir / f".{self.run_id}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
            tmp.mkdir()
            (tmp / LOCK_NAME).touch()
            try:
                os.rename(tmp, p)
            except OSError:  # made meanwhile (another rank noting its progress): use that one
                shutil.rmtree(tmp, ignore_errors=True)
                if not p.is_dir():
                    raise
        except OSError as e:
            raise write_error(e, p) from None

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
        """meta.json <- change(current meta); atomic, and under the run's lock: an update made by
        another process or thread meanwhile (the launcher, rank 0, telemetry) is never lost."""
        self.create()
        with locked(self.path):
            meta = change(self.read_meta())
            write_json({**meta, "schema_version": SCHEMA_VERSION}, self.meta_path, self.path)

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
