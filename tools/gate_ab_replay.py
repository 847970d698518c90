#!/usr/bin/env python3
"""How often the same-machine A/B gate flags unchanged code, with and without its confirmation,
replayed on recorded launches (docs/gate.md, "Confirmation").

    .venv/bin/python tools/gate_ab_replay.py --launch 30 --pause-every 6 --pause-s 40   # record, then replay
    .venv/bin/python tools/gate_ab_replay.py --runs results/gate-ab-replay               # replay what is there
    .venv/bin/python tools/gate_ab_replay.py --runs DIR --draws 300 --scenarios unchanged

--launch N: N fresh launches of the suite (`python -m bench KIND --suite S`), all of this tree's
code, in blocks of --pause-every launches after a pause of --pause-s seconds; prints the launch
factor (each launch's median over cases of time / the case's median over launches) by position in
its block: does the first launch after a pause run slower (the A/B has no warm-up launch)? Run
on a quiet machine.

Replay: each draw takes 4P distinct launches at random (exchangeable: unchanged code). The first
2P are the first look (arms assigned as the gate interleaves them, A B, B A, ...), the next 2P the
fresh pairs; a scenario's slowdown multiplies the candidate's times (it shows the rule, not an
injection). Prints per scenario: draws, how many the first look flags (the gate without a
confirmation) and at which levels (a draw can flag several), how many stay flagged after
bench.regress.gate.confirm_ab. Tests never run it.
"""

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bench.kinds  # noqa: E402,F401  (fills the kind registry)
from bench.regress.compare import Rules  # noqa: E402
from bench.regress.ab import confirm_ab  # noqa: E402
from bench.regress.gate import gate_ab, gated_regressions  # noqa: E402
from bench.errors import BenchError  # noqa: E402
from bench.regress.launch import interleaved, run_suite  # noqa: E402
from bench.results.store import load_run  # noqa: E402

SCENARIOS = {
    "unchanged": lambda r: 1.0,
    "uniform 1.5x": lambda r: 1.5,
    "all_reduce 1.5x": lambda r: 1.5 if r["collective"] == "all_reduce" else 1.0,
    "broadcast 1.5x": lambda r: 1.5 if r["collective"] == "broadcast" else 1.0,
    "all_reduce@16M 2x": lambda r: 2.0 if r["collective"] == "all_reduce" and r["size_bytes"] == 16 << 20 else 1.0,
    "all_reduce 1.2x": lambda r: 1.2 if r["collective"] == "all_reduce" else 1.0,
}


def launch(n: int, suite: Path, out: Path, every: int, pause_s: float) -> None:
    """n launches in blocks; each run directory listed in out/launches.txt as `block position dir`."""
    out.mkdir(parents=True, exist_ok=True)
    listing = out / "launches.txt"
    before = max((int(ln.split()[0]) for ln in listing.read_text().splitlines() if ln.strip()), default=0) \
        if listing.exists() else 0  # blocks continue the numbering of launches already recorded here
    for i in range(n):
        block, pos = before + i // every + 1, i % every + 1
        if pos == 1 and pause_s > 0:
            time.sleep(pause_s)
        try:
            run = run_suite("collectives", suite, out, cwd=ROOT)
        except BenchError as e:
            sys.exit(f"gate_ab_replay: launch {i + 1}: {e}")
        with listing.open("a") as f:
            f.write(f"{block} {pos} {run}\n")
        print(f"  launch {i + 1}/{n} (block {block}, position {pos}): {run}", flush=True)


def recorded(out: Path) -> list[tuple[int, int, pd.DataFrame]]:
    rows = [ln.split() for ln in (out / "launches.txt").read_text().splitlines() if ln.strip()]
    return [(int(b), int(p), load_run(ROOT / d if not Path(d).is_absolute() else d)["results"]) for b, p, d in rows]


def by_position(runs) -> pd.DataFrame:
    """Each launch's factor, then their geometric mean by position in the block."""
    t = pd.DataFrame([r.set_index(["case_id", "size_bytes", "placement"])["time_median_s"] for _, _, r in runs])
    x = np.log(t / t.median())
    f = pd.Series(np.exp(x.median(axis=1)).values, index=[p for _, p, _ in runs], name="launch factor")
    return f.groupby(level=0).apply(lambda s: float(np.exp(np.log(s).mean()))).to_frame()


def replay(runs: list[pd.DataFrame], rules: Rules, pairs: int, draws: int, scenarios: list[str], seed: int) -> pd.DataFrame:
    cat = lambda rs: pd.concat(rs, ignore_index=True)  # noqa: E731

    def arms(seq, slow, start):
        order = interleaved(pairs, "A", "B", start=start)
        a = [r for r, arm in zip(seq, order) if arm == "A"]
        b = []
        for r, arm in zip(seq, order):
            if arm == "B":
                k = r.apply(slow, axis=1)
                b.append(r.assign(time_median_s=r["time_median_s"] * k, busbw_gbps=r["busbw_gbps"] / k))
        return a, b

    out = []
    for name in scenarios:
        rng = random.Random(seed)
        flagged = confirmed = 0
        levels = {"launch factor": 0, "group": 0, "case": 0}
        for _ in range(draws):
            pick = rng.sample(runs, 4 * pairs)
            a1, b1 = arms(pick[:2 * pairs], SCENARIOS[name], 0)
            first = gate_ab(cat(a1), cat(b1), "collectives", rules=rules)
            if first.exit_code != 1:
                continue
            flagged += 1
            cases_r, kinds_r = gated_regressions(first)
            groups_r = kinds_r["group"].notna().sum() if "group" in kinds_r else 0
            levels["launch factor"] += len(kinds_r) > groups_r
            levels["group"] += groups_r > 0
            levels["case"] += len(cases_r) > 0
            a2, b2 = arms(pick[2 * pairs:], SCENARIOS[name], pairs)
            v = confirm_ab(first, gate_ab(cat(a2), cat(b2), "collectives", rules=rules),
                           gate_ab(cat(a1 + a2), cat(b1 + b2), "collectives", rules=rules), pairs=(pairs, pairs))
            confirmed += v.exit_code == 1
        out.append({"scenario": name, "draws": draws, "first look flags": flagged,
                    "by level (launch factor / group / case)": "/".join(str(int(v)) for v in levels.values()),
                    "after confirmation": confirmed})
        print(f"  {name}: {flagged}/{draws} flagged by the first look, {confirmed}/{draws} after confirmation", flush=True)
    return pd.DataFrame(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "results/gate-ab-replay", help="where launches are (launches.txt)")
    ap.add_argument("--launch", type=int, default=0, help="record N fresh launches first")
    ap.add_argument("--pause-every", type=int, default=6)
    ap.add_argument("--pause-s", type=float, default=40.0)
    ap.add_argument("--suite", type=Path, default=ROOT / "suites/smoke.toml")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    bad = [s for s in names if s not in SCENARIOS]
    if bad:
        ap.error(f"--scenarios {','.join(bad)}: unknown; known: {', '.join(SCENARIOS)}")
    if args.launch:
        launch(args.launch, args.suite, args.runs, args.pause_every, args.pause_s)
    if not (args.runs / "launches.txt").exists():
        ap.error(f"--runs {args.runs}: no launches.txt (record some with --launch N)")
    runs = recorded(args.runs)
    if len(runs) < 4 * args.pairs:
        ap.error(f"--runs {args.runs}: {len(runs)} launches; a draw needs 4 x --pairs = {4 * args.pairs}")
    print(f"launch factor by position in its block (a block starts after a pause; {len(runs)} launches):")
    print(by_position(runs).round(3).to_string())
    side = args.suite.with_name(args.suite.stem + ".gate.toml")
    rules = Rules.load(side) if side.exists() else Rules()
    table = replay([r for _, _, r in runs], rules, args.pairs, args.draws, names, args.seed)
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
