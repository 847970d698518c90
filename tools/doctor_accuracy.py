#!/usr/bin/env python3
"""How often does `distbench doctor` name the fault that was injected? (a study on a simulated cluster)

    sudo .venv/bin/python tools/doctor_accuracy.py --reps 10 --ranks-per-node 1 --link 1gbit \\
        --slow-link-rate 200mbit --slow-node-rate 200mbit --quota rank3=25%

Each repetition runs four scenarios, interleaved (healthy, link, node, compute, healthy, ...) so
that whatever drifts on the machine hits them alike, each as one

    distbench simcluster --nodes 4 --ranks-per-node R --link RATE [FAULT] -- distbench doctor [DOCTOR_ARGS]

    healthy   no fault: the right answer is no suspect
    link      --link-of node0-node2=SLOW_LINK_RATE: the link between node0 and node2, both ways
    node      --link-of node1=SLOW_NODE_RATE: node1's whole link
    compute   --cpu-quota-of rankR=PCT: one rank's CPU (a cgroup quota)

and reads the doctor's verdict from the run it stored (`top_suspect`, `suspects`: the
`doctor_suspects` table, position 1 = the top suspect). Prints one markdown table: scenario, the
fault injected, runs, runs whose top suspect is the injected fault (healthy: no suspect at all),
false suspects (every suspect named, at any position, that is not the injected fault), runs
without a verdict, and the median wall time of the doctor (its run's start to its last launch's
end, from meta.json; the whole invocation where meta.json lacks them).

Needs root and what simcluster needs (docs/simcluster.md). Every run is a measurement on a shared
machine: run the study on a quiet one. Ctrl-C or SIGTERM stops the run in flight (simcluster
tears its cluster down: no namespace or cgroup is left) and prints the table of the runs done.
"""

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.errors import BenchError  # noqa: E402  (after the path: the tool runs from tools/)
from bench.results.rundir import RESULTS_LINE  # noqa: E402
from bench.results.store import load_run  # noqa: E402
from bench.simcluster.cpu import parse_quotas  # noqa: E402
from bench.simcluster.net import parse_links  # noqa: E402

NODES = 4
SCENARIOS = ("healthy", "link", "node", "compute")
SLOW_PAIR = (0, 2)  # the link scenario's two nodes
SLOW_NODE = 1  # the node scenario's node


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    fault: str  # what the table says was injected
    args: tuple  # simcluster's options that inject it
    injected: str | None  # the doctor's name for it; None: no fault


def scenarios(a) -> dict[str, Scenario]:
    """The chosen scenarios (a.scenarios), each checked here: one line, before any run."""
    quota = parse_quotas([a.quota], a.nodes, a.ranks_per_node)[0] if "compute" in a.scenarios else None
    parse_links(a.nodes, a.link, [f"node{SLOW_PAIR[0]}-node{SLOW_PAIR[1]}={a.slow_link_rate}",
                                  f"node{SLOW_NODE}={a.slow_node_rate}"])
    pair = f"node{SLOW_PAIR[0]}-node{SLOW_PAIR[1]}"
    every = [
        Scenario(name="healthy", fault="none", args=(), injected=None),
        Scenario(name="link", fault=f"{pair} at {a.slow_link_rate}", args=("--link-of", f"{pair}={a.slow_link_rate}"),
                 injected=f"link node{SLOW_PAIR[0]} <-> node{SLOW_PAIR[1]}"),
        Scenario(name="node", fault=f"node{SLOW_NODE}'s link at {a.slow_node_rate}",
                 args=("--link-of", f"node{SLOW_NODE}={a.slow_node_rate}"), injected=f"node node{SLOW_NODE}"),
    ]
    if quota:
        every.append(Scenario(name="compute", fault=f"{quota.target} at {quota.percent:g}% of one CPU",
                              args=("--cpu-quota-of", a.quota),
                              injected=f"rank {quota.rank} compute" if quota.rank is not None else f"node node{quota.node}"))
    return {s.name: s for s in every if s.name in a.scenarios}


def schedule(reps: int, names=SCENARIOS) -> list[str]:
    """Interleaved: healthy, link, node, compute, healthy, ... (never all of one scenario in a row)."""
    return [name for _ in range(reps) for name in names]


def command(a, sc: Scenario) -> list[str]:
    return [sys.executable, "-m", "bench", "simcluster", "--nodes", str(a.nodes), "--ranks-per-node",
            str(a.ranks_per_node), "--link", a.link, *sc.args, "--", "distbench", "doctor", *shlex.split(a.doctor_args)]


# ---- reading the doctor's verdict: the one place that knows how it is stored ----

def suspects(run_dir) -> list[str]:
    """The doctor's suspects, top first: its `doctor_suspects` table (bench/doctor/columns.py),
    ordered by `position`; [] when it named none."""
    table = load_run(run_dir).tables.get("doctor_suspects")
    if table is None or table.empty:
        return []
    return [str(s) for s in table.sort_values("position")["suspect"]]


def top_suspect(run_dir) -> str | None:
    found = suspects(run_dir)
    return found[0] if found else None


def same_suspect(name: str | None, injected: str | None) -> bool:
    """The doctor's name against the injected fault's: case and spacing aside, a link either way round."""
    if name is None or injected is None:
        return name is injected
    a, b = (" ".join(x.lower().split()) for x in (name, injected))
    if "<->" in a and "<->" in b:  # 'link node0 <-> node2'
        ends = [{e.strip() for e in x.removeprefix("link ").split("<->")} for x in (a, b)]
        return a.startswith("link ") == b.startswith("link ") and ends[0] == ends[1]
    return a == b


def doctor_wall_s(run_dir, fallback_s: float) -> float:
    """The doctor run's start to its last launch's end (meta.json), else the invocation's wall."""
    try:
        meta = json.loads((Path(run_dir) / "meta.json").read_text())
        ends = [la["finished_utc"] for la in meta.get("launches", {}).values() if la.get("finished_utc")]
        return (datetime.fromisoformat(max(ends)) - datetime.fromisoformat(meta["started_utc"])).total_seconds()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return fallback_s


def run_dir_of(stdout: str) -> str | None:
    lines = [ln[len(RESULTS_LINE):].strip() for ln in stdout.splitlines() if ln.startswith(RESULTS_LINE)]
    if not lines:
        return None
    return lines[-1] if os.path.isabs(lines[-1]) else str(ROOT / lines[-1])


# ---- the table ----

def tally(records: list[dict], scs: dict[str, Scenario]) -> list[dict]:
    rows = []
    for name in (n for n in SCENARIOS if n in scs):  # the scenarios chosen (--scenarios)
        mine = [r for r in records if r["scenario"] == name]
        judged = [r for r in mine if r["suspects"] is not None]
        walls = [r["wall_s"] for r in judged]
        rows.append({
            "scenario": name, "fault": scs[name].fault, "runs": len(mine),
            "right": sum(same_suspect(r["suspects"][0] if r["suspects"] else None, scs[name].injected) for r in judged),
            "false": sum(not same_suspect(s, scs[name].injected) for r in judged for s in r["suspects"]),
            "failed": len(mine) - len(judged),
            "wall_s": statistics.median(walls) if walls else None})
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| scenario | fault injected | runs | top suspect == injected | false suspects | no verdict | "
           "median doctor wall (s) |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        wall = f"{r['wall_s']:.1f}" if r["wall_s"] is not None else "-"
        out.append(f"| {r['scenario']} | {r['fault']} | {r['runs']} | {r['right']} / {r['runs'] - r['failed']} | "
                   f"{r['false']} | {r['failed']} | {wall} |")
    return "\n".join(out)


class Stopped(Exception):
    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run_one(a, sc: Scenario, procs: list) -> dict:
    """One simcluster invocation; its record (suspects None: no verdict)."""
    t0 = time.monotonic()
    p = subprocess.Popen(command(a, sc), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    procs.append(p)  # until it ended: a signal to this tool stops it (main)
    try:
        out, err = p.communicate(timeout=a.timeout_s)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)  # simcluster tears its cluster down
        out, err = p.communicate()
    procs.remove(p)
    wall = time.monotonic() - t0
    run_dir = run_dir_of(out)
    rec = {"scenario": sc.name, "exit": p.returncode, "run_dir": run_dir, "suspects": None, "wall_s": wall}
    if run_dir and p.returncode in (0, 1):  # the doctor exits 1 when it names a suspect
        try:
            rec["suspects"] = suspects(run_dir)
            rec["wall_s"] = doctor_wall_s(run_dir, wall)
        except (OSError, ValueError, BenchError) as e:
            rec["error"] = f"cannot read the verdict: {e}"
    if rec["suspects"] is None:
        rec["error"] = rec.get("error") or f"exit {p.returncode}: " + " | ".join(err.strip().splitlines()[-3:])
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10, help="runs of each scenario (default 10)")
    ap.add_argument("--nodes", type=int, default=NODES, help=f"nodes of the simulated cluster, 3 .. 8 (default {NODES})")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help=f"a comma list of {', '.join(SCENARIOS)} (default all, interleaved in that order)")
    ap.add_argument("--ranks-per-node", dest="ranks_per_node", type=int, default=1, help="default 1")
    ap.add_argument("--link", default="1gbit", help="every node's link (default 1gbit)")
    ap.add_argument("--slow-link-rate", dest="slow_link_rate", default="200mbit",
                    help="the link scenario: node0 <-> node2 at this rate (default 200mbit)")
    ap.add_argument("--slow-node-rate", dest="slow_node_rate", default="200mbit",
                    help="the node scenario: node1's link at this rate (default 200mbit)")
    ap.add_argument("--quota", default="rank3=25%",
                    help="the compute scenario: simcluster's --cpu-quota-of (default rank3=25%%; below cores/world "
                    "to matter when ranks outnumber cores)")
    ap.add_argument("--doctor-args", dest="doctor_args", default="", help="options of distbench doctor, one string")
    ap.add_argument("--timeout-s", dest="timeout_s", type=float, default=1800, help="per run (default 1800)")
    ap.add_argument("--jsonl", default=None, help="also write every run's record here, one JSON line each")
    a = ap.parse_args(argv)
    try:
        if a.reps < 1 or a.ranks_per_node < 1:
            raise BenchError(f"--reps {a.reps} and --ranks-per-node {a.ranks_per_node} must be >= 1")
        if not 3 <= a.nodes <= 8:
            raise BenchError(f"--nodes {a.nodes}: allowed 3 .. 8 (the node and link scenarios need a third node)")
        a.scenarios = [x.strip() for x in a.scenarios.split(",") if x.strip()]
        bad = [x for x in a.scenarios if x not in SCENARIOS]
        if bad or not a.scenarios:
            raise BenchError(f"--scenarios {','.join(bad) or '(none)'}: allowed {', '.join(SCENARIOS)}")
        scs = scenarios(a)
    except BenchError as e:
        print(f"doctor_accuracy: error: {e}", file=sys.stderr)
        return 2
    records, procs, code = [], [], 0

    def stop(signum, frame):
        raise Stopped(signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    plan = schedule(a.reps, [n for n in SCENARIOS if n in a.scenarios])
    try:
        for i, name in enumerate(plan, 1):
            rec = run_one(a, scs[name], procs)
            records.append(rec)
            top = rec["suspects"][0] if rec["suspects"] else ("none" if rec["suspects"] == [] else rec["error"])
            print(f"[{i}/{len(plan)}] {name}: top suspect {top} ({rec['wall_s']:.1f} s)", file=sys.stderr, flush=True)
            if a.jsonl:
                with open(a.jsonl, "a") as f:
                    f.write(json.dumps(rec) + "\n")
    except (KeyboardInterrupt, Stopped) as e:
        code = 130 if isinstance(e, KeyboardInterrupt) else 128 + e.signum
        for p in procs:  # SIGTERM: simcluster tears its cluster down (it ignores signals meanwhile)
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.communicate(timeout=180)
            except (subprocess.TimeoutExpired, ValueError, OSError):
                p.wait(timeout=60)
        print(f"doctor_accuracy: stopped after {len(records)} of {len(plan)} runs", file=sys.stderr)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    print(markdown(tally(records, scs)))
    return code


if __name__ == "__main__":
    sys.exit(main())
