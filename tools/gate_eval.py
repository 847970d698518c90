#!/usr/bin/env python3
"""Evaluate the regression gate on this machine (issue 10's "done means" numbers).

    .venv/bin/python tools/gate_eval.py                 # full: record + 10 unchanged + 10 slowed + 2 checks
    .venv/bin/python tools/gate_eval.py --quick         # a tiny suite, 4 repeats, 2 + 2 gate runs (~5 min)

Steps:
1. `distbench baseline record --suite S --repeats N --root ROOT` (the baseline for this machine;
   ROOT defaults to results/baselines, the committed place; commit it when the numbers are good).
2. `make gate` RUNS times on unchanged code: every exit code other than 0 is a false alarm.
3. `make gate` RUNS times under a genuine slowdown of the candidate only (the baseline is not
   touched): --slowdown env sets DISTBENCH_TEST_SLOWDOWN=F (every timed op really takes F times as
   long; bench/timing/loop.py), --slowdown busy runs one busy-looping process per core during the
   candidate run (and its confirmation). Exit 1 is a catch.
4. A doctored baseline 2x better than reality (times x 0.5, busbw x 2): expect exit 1.
5. The baseline under another fingerprint (cores changed): expect exit 3.
Prints a summary table; exits 0 when every goal is met (0 false alarms, >= 90% caught, 1, 3).
Run it on a quiet machine: the baseline's repeats are the noise model.
"""

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

QUICK_SUITE = """kind = "collectives"
name = "gate-eval-quick"
description = "tools/gate_eval.py --quick"
collectives = ["all_reduce", "broadcast"]
world = [2]
dtypes = ["float32"]
ops = ["sum"]
roots = [0]
placements = ["out-of-place", "in-place"]
modes = ["latency"]
sizes = ["4M", "16M"]
warmup = 2
iters = 10
budget_s = 0.1
check = 1
"""


def sh(cmd, env=None, log=None) -> tuple[int, str, float]:
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
    out = p.stdout + p.stderr
    if log:
        log.write(f"$ {' '.join(map(str, cmd))}  (env {env or {}})\n{out}\nexit {p.returncode}\n\n")
        log.flush()
    return p.returncode, out, time.time() - t0


def _burn(stop):
    while not stop.is_set():
        pass


class Busy:
    """One busy-looping process per core for the duration of the block."""

    def __enter__(self):
        self.stop = mp.Event()
        self.procs = [mp.Process(target=_burn, args=(self.stop,), daemon=True) for _ in range(os.cpu_count() or 1)]
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.terminate()


def gate_runs(n, suite, root, log, work, env=None, busy=False, label=""):
    codes, secs = [], []
    exit_file = work / "gate.exit"
    for i in range(n):
        cmd = ["make", "-s", "gate", f"SUITE={suite}", f"BASELINES={root}", f"GATE_EXIT={exit_file}"]
        exit_file.unlink(missing_ok=True)
        if busy:
            with Busy():
                rc, out, dt = sh(cmd, env, log)
        else:
            rc, out, dt = sh(cmd, env, log)
        rc = int(exit_file.read_text()) if exit_file.exists() else rc  # make exits 2 on any failure
        codes.append(rc)
        secs.append(dt)
        head = next((ln for ln in out.splitlines() if ln.startswith("gate:")), out.strip().splitlines()[-1:] or [""])
        print(f"  {label} {i + 1}/{n}: exit {rc} in {dt:.0f} s  {head if isinstance(head, str) else head[0]}"[:200], flush=True)
    return codes, secs


def fresh_run(suite, out, log) -> Path:
    kind = re.search(r'^kind\s*=\s*"(\w+)"', Path(suite).read_text(), re.M).group(1)
    rc, text, _ = sh([PY, "-m", "bench", kind, "--suite", str(suite), "--out", str(out)], log=log)
    found = re.findall(r"^# results: (.+)$", text, re.M)
    if not found:
        raise SystemExit(f"gate_eval: the suite did not run (exit {rc}); see the log")
    return Path(found[-1].strip())


def doctor(src: Path, dest: Path, factor: float):
    """A copy of the baseline whose times are x factor (and rates / factor): 'better than reality'."""
    import pandas as pd  # lazy: pandas (~0.6 s) only to doctor a baseline; the driver is stdlib-only

    shutil.copytree(src, dest)
    df = pd.read_parquet(dest / "results.parquet")
    for col in [c for c in df.columns if c.endswith("_s") and (c.startswith("time_") or c.startswith("step_"))]:
        df[col] = df[col] * factor
    for col in ("busbw_gbps", "algbw_gbps", "samples_per_s", "tokens_per_s"):
        if col in df.columns:
            df[col] = df[col] / factor
    df.to_parquet(dest / "results.parquet", index=False)


def other_fingerprint(src: Path, dest_root: Path) -> Path:
    meta = json.loads((src / "meta.json").read_text())
    meta["fingerprint"]["cores"] = int(meta["fingerprint"].get("cores", 0)) + 62
    dest = dest_root / (src.name.replace(f"-{meta['fingerprint']['cores'] - 62}c-", f"-{meta['fingerprint']['cores']}c-"))
    shutil.copytree(src, dest)
    (dest / "meta.json").write_text(json.dumps(meta, indent=2))
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--quick", action="store_true", help="tiny suite, 4 repeats, alpha 0.05, 2 runs each (checks the script)")
    ap.add_argument("--suite", default=None, help="default suites/smoke.toml")
    ap.add_argument("--repeats", type=int, default=None, help="baseline repeats (default 8; quick 4)")
    ap.add_argument("--runs", type=int, default=None, help="gate runs per scenario (default 10; quick 2)")
    ap.add_argument("--root", default=None, help="baselines root (default results/baselines; quick: a temp dir)")
    ap.add_argument("--slowdown", default="env", choices=("env", "busy"), help="how the candidate is slowed")
    ap.add_argument("--factor", type=float, default=1.5, help="slowdown factor for --slowdown env")
    ap.add_argument("--keep-baseline", action="store_true", help="do not record; use the stored one")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gate-eval-"))
    log = open(work / "log.txt", "w")
    if args.quick:  # checks the script, not the machine: 4 repeats cannot give narrow bands at alpha 0.01
        suite = work / "quick.toml"
        suite.write_text(QUICK_SUITE)
        (work / "quick.gate.toml").write_text("alpha = 0.05\nmax_band = 1.0\n")
    else:
        suite = Path(args.suite or "suites/smoke.toml")
    repeats = args.repeats or (4 if args.quick else 8)
    runs = args.runs or (2 if args.quick else 10)
    root = Path(args.root or (work / "baselines" if args.quick else "results/baselines")).resolve()
    print(f"gate_eval: suite {suite}, {repeats} repeats, {runs} runs per scenario, baselines {root}; log {work / 'log.txt'}")
    t_start = time.time()
    rows = []

    if not args.keep_baseline:
        rc, out, dt = sh([PY, "-m", "bench", "baseline", "record", "--suite", str(suite), "--repeats", str(repeats),
                          "--root", str(root), "--out", str(work / "results")], log=log)
        m = re.search(r"^# baseline: (.+)$", out, re.M)
        if rc != 0 or not m:
            print(out[-2000:])
            return 2
        base = Path(m.group(1).strip())
        rows.append(("record baseline", 1, "exit 0", f"exit {rc}", "-", rc == 0, dt))
        print(f"  recorded {base} in {dt:.0f} s")
    else:
        base = None
    codes, secs = gate_runs(runs, suite, root, log, work, label="unchanged")
    if base is None:
        m = re.search(r"baseline: (\S+)", (work / "log.txt").read_text())
        base = Path(m.group(1)) if m else None
    fa = sum(c != 0 for c in codes)
    rows.append(("unchanged code", runs, "exit 0", f"{fa} false alarm(s); exits {sorted(set(codes))}", "0",
                 fa == 0, sum(secs)))

    env = {"DISTBENCH_TEST_SLOWDOWN": str(args.factor)} if args.slowdown == "env" else None
    codes, secs = gate_runs(runs, suite, root, log, work, env=env, busy=args.slowdown == "busy", label="slowed")
    caught = sum(c == 1 for c in codes)
    what = f"{args.factor}x (DISTBENCH_TEST_SLOWDOWN)" if args.slowdown == "env" else "busy process per core"
    rows.append((f"slowdown {what}", runs, "exit 1", f"{caught} caught; exits {sorted(set(codes))}",
                 f">= {max(1, int(0.9 * runs))}", caught >= max(1, int(0.9 * runs)), sum(secs)))

    cur = fresh_run(suite, work / "results", log)
    if base is None or not (base / "meta.json").exists():
        print("gate_eval: no baseline directory found for the doctored / fingerprint checks")
        return 2
    doc = work / "doctored" / base.name
    doctor(base, doc, 0.5)
    rc, out, dt = sh([PY, "-m", "bench", "gate", "--baseline", str(doc), "--current", str(cur)], log=log)
    rows.append(("doctored baseline 2x better", 1, "exit 1", f"exit {rc}", "1", rc == 1, dt))
    other = other_fingerprint(base, work / "other")
    rc, out, dt = sh([PY, "-m", "bench", "gate", "--baseline", str(other), "--current", str(cur)], log=log)
    why = next((ln for ln in out.splitlines() if ln.startswith("gate:")), "")
    rows.append(("baseline of another fingerprint", 1, "exit 3", f"exit {rc}", "3", rc == 3, dt))

    print()
    print(f"| check | runs | expected | result | goal | met | seconds |")
    print(f"| --- | --- | --- | --- | --- | --- | --- |")
    for name, n, exp, got, goal, ok, dt in rows:
        print(f"| {name} | {n} | {exp} | {got} | {goal} | {'yes' if ok else 'NO'} | {dt:.0f} |")
    print(f"\nfingerprint check said: {why[:300]}")
    print(f"total {time.time() - t_start:.0f} s; baseline {base}; log {work / 'log.txt'}")
    return 0 if all(r[5] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
