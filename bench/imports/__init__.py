"""Bring your own numbers: other tools' collective results stored as distbench runs of this kind.

`distbench import nccl-tests FILE...` (bench.imports.nccl_tests) and `distbench import
param FILE...` (bench.imports.param) each parse their files into `Parsed` tables and
`store()` writes one run directory, results/<suite>/<run_id>/, that compare, report, show and gate
read like any other run. meta.json's `source` says where the numbers came from (the tool, its
version, its command line, each file) and what each stored column means for that tool, since the
tools do not define time the way distbench does (docs/schema.md, "Imported runs").

What a file cannot give (raw samples, per-rank times, telemetry) stays absent: no samples or
ranks table, null columns; nccl-tests' -J file of a run with -I 1 holds raw per-iteration times,
stored as the samples table. Every path problem is one BenchError naming the path.
"""

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.errors import BenchError
from bench.results.metadata import new_run_id, utc_now
from bench.results.rundir import RunDir, write_json
from bench.results.schema import SCHEMA_VERSION, conform
from bench.results.store import write_parquet

KIND = "collectives"  # the kind every imported run is (this folder's own)


@dataclass(kw_only=True)
class Parsed:
    """What one file holds: result rows (distbench columns, no run-level ones yet) and its facts."""

    file: str
    format: str  # text | json
    rows: list[dict] = field(default_factory=list)
    world: int | None = None
    version: str = ""  # the tool's own version ("" where the file does not say)
    command: str = ""  # the tool's command line as the file records it
    hosts: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)  # one name per rank (GPU model), when listed
    device_ids: list[int] = field(default_factory=list)  # each rank's CUDA device index, when listed
    backend: str = "nccl"
    device_type: str = "cuda"  # cpu: a gloo job's records (bench.imports.injob)
    nccl_version: str = ""
    notes: list[str] = field(default_factory=list)  # cut off, unparsed lines, columns left null
    options: dict = field(default_factory=dict)  # the tool's options and where each was read (source.files[])
    failure: str = ""  # a run that printed every size and then reported failure: its line
    failed: list[str] = field(default_factory=list)  # the tool's own checks that failed (footer, failure line)
    samples: list[dict] = field(default_factory=list)  # raw per-iteration times (the samples table), when given
    stamps: dict | None = None  # when the rows were measured, where the tool printed it

    def check_failed(self) -> list[str]:
        """Why this run's results are not right by the tool's own check ([] when they are): wrong
        elements, rows the tool judged wrong, its footer or a failure line after the last size."""
        wrong = sum(int(r["wrong"] or 0) for r in self.rows)
        judged = sum(str(r.get("degraded") or "").startswith("wrong results") for r in self.rows)
        return ([f"{wrong} wrong element(s)"] if wrong else []) + (
            [f"{judged} row(s) wrong by the tool's own check"] if judged else []) + self.failed


def read_input(path) -> str:
    """The file's text; a missing, unreadable, binary or empty file is one BenchError naming it."""
    p = Path(path)
    if not p.exists():
        raise BenchError(f"'{path}': no such file")
    if p.is_dir():
        raise BenchError(f"'{path}' is a directory; give the tool's output file")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise BenchError(f"'{path}': cannot read it ({e.strerror or type(e).__name__})") from None
    if not data.strip():
        raise BenchError(f"'{path}' is empty: no results to import")
    if b"\0" in data[:4096]:
        raise BenchError(f"'{path}' is a binary file, not the tool's text or JSON output")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BenchError(f"'{path}' is not UTF-8 text (byte {e.start}); give the tool's text or JSON output") from None


def result_row(*, collective: str, size_bytes: int, count, dtype: str, op: str, root: int, placement: str,
               world: int, mode: str, rank_reduce: str, blocking: bool, time_s: float, algbw_gbps, busbw_gbps,
               wrong, warmup_iters=None, iters=None, extra: dict | None = None) -> dict:
    """One results row in distbench's columns (case_id as bench.collectives.config.CaseSpec names it,
    so a distbench run of the same case at the same world and mode lines up in compare and report)."""
    algbw = float(algbw_gbps) if algbw_gbps is not None else None
    busbw = float(busbw_gbps) if busbw_gbps is not None else None
    return {
        "case_id": f"{collective}.{dtype}.{op or 'none'}.root{root}.{mode}.w{world}",
        "collective": collective, "algorithm": "native", "size_bytes": int(size_bytes),
        "count": None if count is None else int(count), "dtype": dtype, "op": op, "root": int(root),
        "placement": placement, "mode": mode, "rank_reduce": rank_reduce, "blocking": blocking,
        "warmup_iters": warmup_iters, "iters": iters, "samples": None, "time_median_s": float(time_s),
        "algbw_gbps": algbw, "busbw_gbps": busbw,
        "bus_factor": busbw / algbw if algbw and busbw is not None else None,
        "wrong": None if wrong is None else int(wrong), "checks": None if wrong is None else 1,
        "world": int(world), **(extra or {}),
    }


def _rank_entry(p: Parsed, i: int) -> dict:
    """meta.json launches[w].ranks[i] as far as the file tells (bench.results.fingerprint reads it)."""
    gpu = {"name": p.devices[i] if i < len(p.devices) else "unknown GPU (not in the file)"}
    if i < len(p.device_ids):
        gpu["index"] = p.device_ids[i]
    return {"rank": i, "host": p.hosts[i] if i < len(p.hosts) else "", "device": p.device_type,
            "gpus": [gpu] if p.device_type == "cuda" else []}


def store(parsed: list[Parsed], *, tool: str, definitions: dict, out, suite: str, argv=None) -> Path:
    """Write one run directory from the parsed files; returns its path. Every file's rows keep their
    own world; meta.json gets one launch per world (hosts, devices) so fingerprints and headers work."""
    rows = [r for p in parsed for r in p.rows]
    if not rows:
        raise BenchError(f"no result rows in {', '.join(repr(p.file) for p in parsed)}: nothing to import")
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise BenchError(f"--out '{out}' is a file, not a directory")
    run_id = new_run_id()
    rd = RunDir(root, suite, run_id)
    try:
        rd.path.mkdir(parents=True, exist_ok=False)
        probe = rd.path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise BenchError(f"cannot write the imported run under '{out}' ({e.strerror or type(e).__name__}); "
                         "give a writable --out DIR") from None
    now = utc_now()
    launches: dict[str, dict] = {}
    for p in parsed:
        w = str(p.world)
        la = launches.setdefault(w, {"world": p.world, "backend": p.backend, "nodes": max(1, len(set(p.hosts))),
                                     "hosts": [], "ranks": [], "finished_utc": now, "imported": True,
                                     "wrong": 0, "notes": []})
        la["hosts"] = list(dict.fromkeys([*la["hosts"], *p.hosts]))
        if not la["ranks"]:
            la["ranks"] = [_rank_entry(p, i) for i in range(p.world or 0)]
        la["wrong"] += sum(int(r["wrong"] or 0) for r in p.rows)
        la["notes"] += [f"{p.file}: {n}" for n in p.notes]
        if p.check_failed():
            la.setdefault("checks_failed", []).extend(f"{p.file}: {c}" for c in p.check_failed())
    versions = list(dict.fromkeys(p.version for p in parsed if p.version))
    commands = list(dict.fromkeys(p.command for p in parsed if p.command))
    ncclv = list(dict.fromkeys(p.nccl_version for p in parsed if p.nccl_version))
    source = {
        "tool": tool, "version": "; ".join(versions) or "unknown (the file does not say)",
        "command": "; ".join(commands), "nccl_version": "; ".join(ncclv), "imported_utc": now,
        "files": [{"path": str(Path(p.file).resolve()), "format": p.format, "version": p.version,
                   "command": p.command, "world": p.world, "rows": len(p.rows), "notes": p.notes,
                   "options": p.options, "failure": p.failure, "checks_failed": p.check_failed(),
                   "samples": len(p.samples), **({"timestamps": p.stamps} if p.stamps else {})} for p in parsed],
        "definitions": definitions,
    }
    argv = list(argv) if argv is not None else ["distbench", "import", tool, *[p.file for p in parsed]]
    meta = {
        "schema_version": SCHEMA_VERSION, "kind": KIND, "suite": suite, "run_id": run_id, "started_utc": now,
        "ended_utc": now, "state": "complete", "source": source, "launches": launches,
        "command_line": shlex.join(argv), "cwd": os.getcwd(),
        "software": {"nccl": "; ".join(ncclv) or None, "torch": None, "python": None,
                     "platform": f"imported from {tool}"},
        "notes": [f"imported from {tool} {source['version']}: {source['command'] or 'command line not recorded'}"],
    }
    common = {"run_id": run_id, "suite": suite, "kind": KIND, "nodes": 1, "backend": parsed[0].backend,
              "device_type": parsed[0].device_type,
              "threads_per_rank": None, "oversubscribed": False, "degraded": ""}
    df = pd.DataFrame([{**common, **r, "nodes": launches[str(r["world"])]["nodes"]} for r in rows])
    write_parquet(conform(df, "results"), rd.path / "results.parquet")
    samples = [{"run_id": run_id, **x} for p in parsed for x in p.samples]
    if samples:
        write_parquet(conform(pd.DataFrame(samples), "samples"), rd.path / "samples.parquet")
    write_json(meta, rd.meta_path)
    return rd.path
