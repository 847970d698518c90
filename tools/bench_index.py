#!/usr/bin/env python3
"""Synthetic results trees for the run index and `distbench history` (issue 24), and their benchmark.

    .venv/bin/python tools/bench_index.py                 # 1,000 runs in a temp dir, then times
                                                          # `distbench runs` and `distbench history`
    .venv/bin/python tools/bench_index.py --runs 1000 --keep DIR   # keep the tree to explore it

Each synthetic run is small and shaped like a real collectives run (meta.json with git commit,
fingerprint facts, software; results.parquet with medians and quartiles): 4 cases (all_reduce and
broadcast at 1 MiB and 4 MiB), two machine classes (2 and 4 cores), one commit per 2 runs, and
all_reduce 1.5x slower from the middle commit on (a step for history to flag). Tests use
`generate` on a few runs; the timing is for a quiet machine only (never a test's assertion).
"""

import argparse
import hashlib
import math
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bench.results.store import write_json, write_parquet  # noqa: E402

MiB = 1 << 20
CASES = (("all_reduce", "all_reduce.float32.sum.root-1.latency.w2"), ("broadcast", "broadcast.float32.none.root0.latency.w2"))
SIZES = (MiB, 4 * MiB)


def fake_sha(i: int) -> str:
    return hashlib.sha1(f"commit {i}".encode()).hexdigest()


def meta(run_id: str, sha: str, start: datetime, cores: int, suite: str = "smoke") -> dict:
    ranks = [{"rank": r, "host": "vm", "cpu_model": "AMD EPYC", "cores": cores, "gpus": [], "device": "cpu"}
             for r in range(2)]
    return {"schema_version": 2, "run_id": run_id, "suite": suite, "kind": "collectives",
            "config": {"name": suite, "world": [2]}, "started_utc": start.isoformat(timespec="seconds"),
            "git_sha": sha, "git_dirty": False, "command_line": f"python -m bench collectives --suite {suite}",
            "software": {"torch": "2.13.0+cpu", "nccl": None, "python": "3.11"},
            "launches": {"2": {"world": 2, "backend": "gloo", "nodes": 1, "ranks": ranks, "cases": len(CASES) * len(SIZES),
                               "finished_utc": start.isoformat(timespec="seconds")}}}


def write_run(root: Path, run_id: str, sha: str, start: datetime, times: dict, cores: int = 2,
              suite: str = "smoke") -> Path:
    """One stored run: times {(collective, size): median seconds}; quartiles at +-2%."""
    d = Path(root) / suite / run_id
    rows = [{"run_id": run_id, "suite": suite, "kind": "collectives", "case_id": cid, "world": 2, "collective": coll,
             "size_bytes": size, "placement": "in-place", "time_median_s": t, "time_p25_s": t * 0.98,
             "time_p75_s": t * 1.02, "busbw_gbps": size / t / 1e9, "algbw_gbps": size / t / 1e9, "bus_factor": 1.0,
             "count": size // 4, "dtype": "float32", "op": "sum" if coll == "all_reduce" else "none",
             "root": -1 if coll == "all_reduce" else 0, "mode": "latency", "rank_reduce": "max", "backend": "gloo",
             "nodes": 1, "device_type": "cpu", "noisy": False, "samples": 10, "iters": 10, "checks": 1, "wrong": 0}
            for coll, cid in CASES for size in SIZES for t in [times[(coll, size)]]]
    write_parquet(pd.DataFrame(rows), d / "results.parquet")
    write_json(meta(run_id, sha, start, cores, suite), d / "meta.json")
    return d


def generate(root, runs: int, *, shas=None, step_at: int | None = None, factor: float = 1.5, sigma: float = 0.02,
             seed: int = 0, machines=(2, 4)) -> list[Path]:
    """`runs` synthetic runs under root/smoke/, two per commit, machines alternating; all_reduce is
    `factor` slower from commit `step_at` on (default: the middle commit). shas: the commits to use
    (default fake ones), oldest first; run k is on commit k // 2."""
    rng = np.random.default_rng(seed)
    commits = (runs + 1) // 2
    shas = list(shas) if shas is not None else [fake_sha(i) for i in range(commits)]
    step_at = commits // 2 if step_at is None else step_at
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    out = []
    for k in range(runs):
        c = min(k // 2, len(shas) - 1)
        start = t0 + timedelta(minutes=10 * k)
        cores = machines[k % len(machines)]
        times = {(coll, s): 1e-3 * (i + 1) * s / MiB * (2.0 / cores) * math.exp(rng.normal(0, sigma))
                 * (factor if coll == "all_reduce" and c >= step_at else 1.0)
                 for i, (coll, _) in enumerate(CASES) for s in SIZES}
        run_id = start.strftime("%Y%m%dT%H%M%SZ") + f"-{k:06x}"
        out.append(write_run(root, run_id, shas[c], start, times, cores=cores))
    return out


def _timed(argv: list[str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench", *argv], capture_output=True, text=True)
    s = time.perf_counter() - t
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    print(f"  {s:6.2f} s  exit {proc.returncode}  distbench {' '.join(argv)}\n           last line: {last[:100]}")
    return s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--keep", default=None, metavar="DIR", help="write the tree here and keep it")
    args = p.parse_args(argv)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="distbench-index-")) / "results"
    t = time.perf_counter()
    generate(root, args.runs)
    print(f"# {args.runs} synthetic runs under {root} ({time.perf_counter() - t:.1f} s to write)")
    try:
        _timed(["runs", "--out", str(root)])
        _timed(["runs", "--out", str(root), "--fingerprint", "4c", "--since", "2026-01-02"])
        _timed(["history", "--out", str(root), "--suite", "smoke", "--group", "all_reduce", "--output-dir", str(root.parent / "hist")])
        _timed(["history", "--out", str(root), "--suite", "smoke", "--case", "broadcast.float32.none.root0.latency.w2@4M"])
    finally:
        if not args.keep:
            shutil.rmtree(root.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
