#!/usr/bin/env python3
"""Evaluate the regression gate on this machine (issue 18's "done means" table).

    .venv/bin/python tools/gate_eval.py                          # every scenario, 10 runs each (hours: A/B runs ~5 min)
    .venv/bin/python tools/gate_eval.py --scenarios ab-unchanged,ab-one-collective --runs 5
    .venv/bin/python tools/gate_eval.py --scenarios doctored,other-mode,other-blocking --keep-baseline
    .venv/bin/python tools/gate_eval.py --list                   # the scenarios and their cost

Scenarios (mode `ab`: `make gate-ab AGAINST=--against` (default HEAD: the working tree against
its own commit, i.e. unchanged code when the tree is clean); mode `stored`: `make gate` against
the baseline recorded here; a slowdown is DISTBENCH_TEST_SLOWDOWN for the candidate only:
bench/timing/loop.py, and the A/B gives it to the candidate's launches only):

    record              `distbench baseline record` (skipped with --keep-baseline)
    stored-unchanged    make gate on unchanged code x RUNS: expect 0 (false alarms otherwise)
    ab-unchanged        make gate-ab on unchanged code x RUNS: expect 0. The A/B reads no stored
                        baseline, so "A/B when the stored baseline comes from another host" is
                        this same scenario (its row says so)
    uniform             every case 1.5x, both modes (--modes): expect 1 in >= 90%
    one-collective      all_reduce=1.5 (all its sizes), both modes: expect 1 in >= 90%
    one-case            all_reduce@16M=2 (one collective, one size >= 4 MiB), both modes: expect 1 in >= 90%
    doctored            the baseline 2x better for all_reduce only (its times x 0.5): expect 1
    other-mode          the baseline's rows in throughput mode: expect 3 naming `mode`
    other-blocking      the baseline's rows non-blocking: expect 3 naming `blocking`
    other-fingerprint   the baseline under another fingerprint (cores): expect 3

Prints one table (scenario, mode, runs, expected, got, pass); exits 0 when every row passes.
Run it on a quiet machine: every launch is a measurement. Tests never run it (docs/gate.md).
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

SLOWDOWNS = {"uniform": "1.5", "one-collective": "all_reduce=1.5", "one-case": "all_reduce@16M=2"}
SCENARIOS = ("record", "stored-unchanged", "ab-unchanged", *SLOWDOWNS, "doctored", "other-mode", "other-blocking",
             "other-fingerprint")
COST = {"record": "repeats x ~25 s", "stored-unchanged": "runs x 30-60 s", "ab-unchanged": "runs x 2 x pairs x ~25 s",
        "uniform": "per mode as above", "one-collective": "per mode as above", "one-case": "per mode as above",
        "doctored": "~25 s", "other-mode": "~25 s (shared run)", "other-blocking": "~25 s (shared run)",
        "other-fingerprint": "~25 s (shared run)"}

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


def gate_runs(n, mode, suite, root, log, work, env=None, against="HEAD", pairs=5, label="") -> list[int]:
    """`make gate` (mode stored) or `make gate-ab` (mode ab) n times; their exit codes."""
    codes = []
    exit_file = work / f"{mode}.exit"
    for i in range(n):
        if mode == "ab":
            cmd = ["make", "-s", "gate-ab", f"AGAINST={against}", f"PAIRS={pairs}", f"SUITE={suite}",
                   f"GATE_AB_EXIT={exit_file}", f"ARGS=--out {work / 'results'}"]
        else:
            cmd = ["make", "-s", "gate", f"SUITE={suite}", f"BASELINES={root}", f"GATE_EXIT={exit_file}",
                   f"ARGS=--out {work / 'results'}"]
        exit_file.unlink(missing_ok=True)
        rc, out, dt = sh(cmd, env, log)
        rc = int(exit_file.read_text()) if exit_file.exists() else rc  # make exits 2 on any failure
        codes.append(rc)
        head = next((ln for ln in out.splitlines() if ln.startswith("gate:")), (out.strip().splitlines() or [""])[-1])
        print(f"  {label} [{mode}] {i + 1}/{n}: exit {rc} in {dt:.0f} s  {head}"[:220], flush=True)
    return codes


def fresh_run(suite, out, log) -> Path:
    kind = re.search(r'^kind\s*=\s*"(\w+)"', Path(suite).read_text(), re.M).group(1)
    rc, text, _ = sh([PY, "-m", "bench", kind, "--suite", str(suite), "--out", str(out)], log=log)
    found = re.findall(r"^# results: (.+)$", text, re.M)
    if not found:
        die(f"gate_eval: the suite did not run (exit {rc}); see the log")
    return Path(found[-1].strip())


def doctor(src: Path, dest: Path, factor: float, collective: str | None = None):
    """A copy of the baseline whose times are x factor (and rates / factor), for every row or for
    one collective's rows only: 'better than reality' when factor < 1."""
    import pandas as pd  # lazy: pandas (~0.6 s) only to doctor a baseline; the driver is stdlib-only

    shutil.copytree(src, dest)
    df = pd.read_parquet(dest / "results.parquet")
    hit = df["collective"] == collective if collective else pd.Series(True, index=df.index)
    for col in [c for c in df.columns if c.endswith("_s") and (c.startswith("time_") or c.startswith("step_"))]:
        df.loc[hit, col] = df.loc[hit, col] * factor
    for col in ("busbw_gbps", "algbw_gbps", "samples_per_s", "tokens_per_s"):
        if col in df.columns:
            df.loc[hit, col] = df.loc[hit, col] / factor
    df.to_parquet(dest / "results.parquet", index=False)


def other_setting(src: Path, dest: Path, column: str, value, config_key: str, config_value):
    """A copy of the baseline measured, by its rows and config, with another setting."""
    import pandas as pd  # lazy, as above

    shutil.copytree(src, dest)
    df = pd.read_parquet(dest / "results.parquet")
    df[column] = value
    df.to_parquet(dest / "results.parquet", index=False)
    meta = json.loads((dest / "meta.json").read_text())
    meta.setdefault("config", {})[config_key] = config_value
    (dest / "meta.json").write_text(json.dumps(meta, indent=2))


def other_fingerprint(src: Path, dest_root: Path) -> Path:
    meta = json.loads((src / "meta.json").read_text())
    meta["fingerprint"]["cores"] = int(meta["fingerprint"].get("cores", 0)) + 62
    dest = dest_root / (src.name.replace(f"-{meta['fingerprint']['cores'] - 62}c-", f"-{meta['fingerprint']['cores']}c-"))
    shutil.copytree(src, dest)
    (dest / "meta.json").write_text(json.dumps(meta, indent=2))
    return dest


def die(message: str):
    """Bad input: one line on stderr, exit 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def parse_scenarios(text: str) -> list[str]:
    want = [s.strip() for s in str(text).split(",") if s.strip()]
    bad = [s for s in want if s not in SCENARIOS]
    if bad or not want:
        die(f"gate_eval: --scenarios '{text}': unknown {', '.join(bad) or '(none given)'}; known: {', '.join(SCENARIOS)}")
    return want


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma list of: {', '.join(SCENARIOS)}")
    ap.add_argument("--modes", default="ab,stored", help="for the slowdown scenarios: ab, stored or both")
    ap.add_argument("--runs", type=int, default=None, help="gate runs per scenario and mode (default 10; quick 2)")
    ap.add_argument("--pairs", type=int, default=5, help="A/B launch pairs per gate-ab run (default 5)")
    ap.add_argument("--against", default="HEAD", help="A/B base revision (default HEAD: unchanged code on a clean tree)")
    ap.add_argument("--quick", action="store_true", help="tiny suite, 4 repeats, alpha 0.05, 2 runs (checks the script only)")
    ap.add_argument("--suite", default=None, help="default suites/smoke.toml")
    ap.add_argument("--repeats", type=int, default=None, help="baseline repeats (default 8; quick 4)")
    ap.add_argument("--root", default=None, help="baselines root (default results/baselines; quick: a temp dir)")
    ap.add_argument("--keep-baseline", action="store_true", help="do not record; use the stored one")
    ap.add_argument("--list", action="store_true", help="list the scenarios and their cost, run nothing")
    args = ap.parse_args(argv)
    if args.list:
        for s in SCENARIOS:
            print(f"{s:18s} {COST[s]}")
        return 0
    scenarios = parse_scenarios(args.scenarios)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - {"ab", "stored"}:
        die(f"gate_eval: --modes '{args.modes}': give ab, stored or ab,stored")
    if args.keep_baseline and "record" in scenarios:
        scenarios.remove("record")
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
    print(f"gate_eval: {', '.join(scenarios)}; modes {', '.join(modes)}; suite {suite}; {runs} runs; "
          f"{args.pairs} A/B pairs against {args.against}; baselines {root}; log {work / 'log.txt'}", flush=True)
    t_start = time.time()
    rows = []  # (scenario, mode, runs, expected, got, pass)
    goal = max(1, -(-9 * runs // 10))  # >= 90% caught

    base = None
    if "record" in scenarios:
        rc, out, dt = sh([PY, "-m", "bench", "baseline", "record", "--suite", str(suite), "--repeats", str(repeats),
                          "--baseline-root", str(root), "--out", str(work / "results")], log=log)
        m = re.search(r"^# baseline: (.+)$", out, re.M)
        rows.append(("record", "stored", 1, "exit 0", f"exit {rc}", rc == 0 and bool(m)))
        if not m:
            print(out[-2000:])
        base = Path(m.group(1).strip()) if m else None
    if "stored-unchanged" in scenarios:
        codes = gate_runs(runs, "stored", suite, root, log, work, label="unchanged")
        fa = sum(c != 0 for c in codes)
        rows.append(("unchanged", "stored", runs, "exit 0, 0 false alarms", f"{fa} false alarm(s); exits {sorted(set(codes))}", fa == 0))
    if "ab-unchanged" in scenarios:
        codes = gate_runs(runs, "ab", suite, root, log, work, against=args.against, pairs=args.pairs, label="unchanged")
        fa = sum(c != 0 for c in codes)
        rows.append(("unchanged", "ab", runs, "exit 0, 0 false alarms", f"{fa} false alarm(s); exits {sorted(set(codes))}", fa == 0))
        rows.append(("unchanged, stored baseline from another host", "ab", runs, "exit 0",
                     "same runs as the row above: the A/B reads no stored baseline", fa == 0))
    for name, pattern in SLOWDOWNS.items():
        if name not in scenarios:
            continue
        for mode in modes:
            codes = gate_runs(runs, mode, suite, root, log, work, env={"DISTBENCH_TEST_SLOWDOWN": pattern},
                              against=args.against, pairs=args.pairs, label=name)
            caught = sum(c == 1 for c in codes)
            rows.append((f"{name} ({pattern})", mode, runs, f"exit 1 in >= {goal}", f"{caught} caught; exits {sorted(set(codes))}",
                         caught >= goal))

    checks = [s for s in ("doctored", "other-mode", "other-blocking", "other-fingerprint") if s in scenarios]
    if checks:
        if base is None:
            import importlib

            fp = importlib.import_module("bench.results.fingerprint")
            bl = importlib.import_module("bench.regress.baseline")
            try:
                base = bl.find(root, fp.of_this_machine([2]))
            except Exception as e:  # noqa: BLE001 - reported in the table
                print(f"gate_eval: no stored baseline for this machine under {root}: {e}")
        cur = fresh_run(suite, work / "results", log) if base is not None else None
        for name in checks:
            if base is None:
                rows.append((name, "stored", 1, "-", "no baseline", False))
                continue
            dest = work / name / base.name
            if name == "doctored":
                doctor(base, dest, 0.5, collective="all_reduce")
                want, field = 1, ""
            elif name == "other-mode":
                other_setting(base, dest, "mode", "throughput", "modes", ["throughput"])
                want, field = 3, "mode"
            elif name == "other-blocking":
                other_setting(base, dest, "blocking", False, "blocking", 0)
                want, field = 3, "blocking"
            else:
                dest = other_fingerprint(base, work / name)
                want, field = 3, "cores"
            rc, out, _ = sh([PY, "-m", "bench", "gate", "--baseline", str(dest), "--current", str(cur), "--no-confirm"], log=log)
            why = next((ln for ln in out.splitlines() if ln.startswith("gate:")), "")
            ok = rc == want and (not field or field in why)
            rows.append((name, "stored", 1, f"exit {want}" + (f" naming {field}" if field else ""), f"exit {rc}: {why[:120]}", ok))

    print()
    print("| scenario | mode | runs | expected | got | pass |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, mode, n, exp, got, ok in rows:
        print(f"| {name} | {mode} | {n} | {exp} | {got} | {'yes' if ok else 'NO'} |")
    print(f"\ntotal {time.time() - t_start:.0f} s; log {work / 'log.txt'}")
    return 0 if all(r[5] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
