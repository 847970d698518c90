#!/usr/bin/env python3
"""The overlap kind against an exact yardstick: a simulated link of known rate and a compute
action of known duration (docs/overlap.md, "The yardstick").

    sudo .venv/bin/python tools/overlap_yardstick.py --link 200mbit --compute-s 0.05 \\
        --sizes 256K,1M,2M,4M,8M --reps 15 [--page docs/measurements/DATE-overlap-yardstick.md]

Runs, one after the other (never at once: they would time each other):

1. sleep: `distbench simcluster --nodes 2 --ranks-per-node 1 --link RATE -- distbench overlap -c
   all_reduce --sizes SIZES --compute sleep --compute-s C --training none`. The compute sleeps
   (it uses no core), so the only thing the two sides share is nothing: the expectation is exact.
   Expected comm time t_link = S x 2(n-1)/n x 8 / (RATE x 1448/1514) (a ring all_reduce moves
   2(n-1)/n x S bytes through each node's link, n = 2: S; tbf shapes whole frames, of which TCP's
   payload is 1448 of 1514 bytes at MTU 1500). Expected hidden share = min(t_link, C) / t_link:
   1 while the link time is below the compute time, C / t_link above it.
2. gemm: the same with --compute gemm sized to about C on this host: what the 2-core host's
   contention does (the compute and gloo's threads share the cores): each side's slowdown, and
   the hidden share against the ideal from the measured alone times.
3. ddp: `... -- distbench overlap -c all_reduce --sizes 1M --training ddp --bucket-cap-mb 1,4,25`
   at --ddp-link: DDP's exposed communication at three bucket sizes across 2 simulated nodes.

Prints each table (markdown) and with --page writes them to a dated page with the commit and the
runs' directories. Needs root and what simcluster needs (docs/simcluster.md).
"""

import argparse
import math
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.results.rundir import RESULTS_LINE  # noqa: E402  (after the path: the tool runs from tools/)
from bench.results.store import load_run  # noqa: E402
from bench.simcluster.net import parse_rate  # noqa: E402
from bench.units import parse_size  # noqa: E402

TOLERANCE = 0.05  # the bar: the measured hidden share within 5% of its expectation


# tc's tbf counts every frame's bytes from the Ethernet header on (skb->len): a TCP segment at MTU
# 1500 carries 1448 payload bytes (20 IP + 20 TCP + 12 timestamp option) in a 1514-byte frame.
PAYLOAD_SHARE = 1448 / 1514


def expected_link_s(size: int, rate_bits: int, n: int = 2) -> float:
    """A ring all_reduce's time on links of rate_bits: 2(n-1)/n x S payload bytes through each
    node's link, at the payload share of the shaped rate."""
    return size * 2 * (n - 1) / n * 8 / (rate_bits * PAYLOAD_SHARE)


def expected_hidden(t_link: float, compute_s: float) -> float:
    return min(t_link, compute_s) / t_link


def run_overlap(out: str, link: str, args: list[str]) -> Path:
    cmd = [sys.executable, "-m", "bench", "simcluster", "--nodes", "2", "--ranks-per-node", "1", "--link", link,
           "--", "distbench", "overlap", "--out", out, *args]
    print("$ " + " ".join(cmd[2:]), flush=True)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    sys.stdout.write(p.stdout[-3000:])
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-3000:])
        raise SystemExit(f"overlap_yardstick: the run failed (exit {p.returncode})")
    for line in p.stdout.splitlines():
        if line.startswith(RESULTS_LINE):
            return Path(line[len(RESULTS_LINE):].strip())
    raise SystemExit("overlap_yardstick: the run printed no results line")


def sleep_table(run_dir: Path, rate_bits: int, compute_s: float) -> tuple[list[str], bool]:
    res = load_run(run_dir)["results"]
    rows = res[res["overlap_test"] == "pair"].sort_values("size_bytes")
    out = ["| size | link time, expected | comm alone, measured | compute alone | both | hidden share, expected | "
           "measured | off by (points) | off by (relative) |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ok = True
    for r in rows.itertuples():
        t_link = expected_link_s(int(r.size_bytes), rate_bits)
        want = expected_hidden(t_link, compute_s)
        off = (r.hidden_share - want) / want
        ok &= abs(off) <= TOLERANCE
        out.append(f"| {int(r.size_bytes)} | {t_link * 1e3:.1f} ms | {r.overlap_comm_s * 1e3:.1f} ms | "
                   f"{r.overlap_compute_s * 1e3:.1f} ms | {r.overlap_both_s * 1e3:.1f} ms | {want:.3f} | "
                   f"{r.hidden_share:.3f} | {(r.hidden_share - want) * 100:+.1f} | {off:+.1%} |")
    return out, ok


def gemm_table(run_dir: Path) -> list[str]:
    res = load_run(run_dir)["results"]
    rows = res[res["overlap_test"] == "pair"].sort_values("size_bytes")
    out = ["| size | comm alone | compute alone | both | hidden share | ideal (alone times) | comm slowdown | "
           "compute slowdown |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows.itertuples():
        out.append(f"| {int(r.size_bytes)} | {r.overlap_comm_s * 1e3:.1f} ms | {r.overlap_compute_s * 1e3:.1f} ms | "
                   f"{r.overlap_both_s * 1e3:.1f} ms | {r.hidden_share:.3f} | {r.ideal_hidden_share:.3f} | "
                   f"{r.comm_slowdown:.2f}x | {r.compute_slowdown:.2f}x |")
    return out


def ddp_table(run_dir: Path) -> list[str]:
    res = load_run(run_dir)["results"]
    rows = res[res["overlap_test"] == "ddp"].sort_values("bucket_cap_mb")
    out = ["| bucket_cap_mb | buckets | step | step under no_sync | exposed | bucket all-reduces alone | hidden share |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows.itertuples():
        hidden = "-" if not math.isfinite(r.hidden_share) else f"{r.hidden_share:.3f}"
        out.append(f"| {r.bucket_cap_mb:g} | {int(r.buckets)} | {r.overlap_both_s * 1e3:.1f} ms | "
                   f"{r.overlap_compute_s * 1e3:.1f} ms | {r.overlap_exposed_s * 1e3:.1f} ms | "
                   f"{r.overlap_comm_s * 1e3:.1f} ms | {hidden} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--link", default="200mbit", help="the simulated link rate (tc units, e.g. 200mbit)")
    ap.add_argument("--compute-s", type=float, default=0.05, help="the compute action's seconds")
    ap.add_argument("--sizes", default="256K,1M,2M,4M,8M", help="all_reduce sizes, comma list")
    ap.add_argument("--reps", type=int, default=15, help="timed repetitions of each part")
    ap.add_argument("--gemm-n", type=int, default=512, help="the gemm run's matmul side")
    ap.add_argument("--gemm-iters", type=int, default=0, help="matmuls per action; 0: about --compute-s on this host")
    ap.add_argument("--ddp-link", default="1gbit", help="the DDP run's link rate")
    ap.add_argument("--skip", default="", help="parts to leave out: sleep,gemm,ddp")
    ap.add_argument("--out", default="results", help="results root")
    ap.add_argument("--page", default="", help="write the tables to this markdown page")
    a = ap.parse_args(argv)
    rate = parse_rate(a.link)
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    skip = set(filter(None, a.skip.split(",")))
    common = ["-c", "all_reduce", "--sizes", a.sizes, "--reps", str(a.reps), "--training", "none", "--no-telemetry"]
    page, runs, ok = [], {}, True
    if "sleep" not in skip:
        runs["sleep"] = run_overlap(a.out, a.link, [*common, "--compute", "sleep", "--compute-s", str(a.compute_s)])
        table, ok = sleep_table(runs["sleep"], rate, a.compute_s)
        page += [f"## Sleep compute ({a.compute_s * 1e3:g} ms) against all_reduce on {a.link} links, 2 nodes x 1 rank",
                 "", *table, "", f"Bar: every size's hidden share within {TOLERANCE:.0%} (relative) of its expectation: "
                 f"{'met' if ok else 'NOT met'}.", ""]
    if "gemm" not in skip:
        iters = a.gemm_iters or _iters_for(a.gemm_n, a.compute_s)
        runs["gemm"] = run_overlap(a.out, a.link, [*common, "--compute", "gemm", "--gemm-n", str(a.gemm_n),
                                                   "--gemm-iters", str(iters)])
        page += [f"## GEMM compute ({iters} x {a.gemm_n}^2 fp32, one thread) against all_reduce on {a.link} links",
                 "", *gemm_table(runs["gemm"]), ""]
    if "ddp" not in skip:
        runs["ddp"] = run_overlap(a.out, a.ddp_link, ["-c", "all_reduce", "--sizes", "1M", "--reps", "3",
                                                      "--training", "ddp", "--bucket-cap-mb", "1,4,25",
                                                      "--no-telemetry"])
        page += [f"## DDP (mlp-pipe, batch 16 per rank) on {a.ddp_link} links, 2 nodes x 1 rank", "",
                 *ddp_table(runs["ddp"]), ""]
    text = "\n".join(page)
    print(text)
    if a.page:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        head = [f"# Overlap yardstick, {datetime.now(timezone.utc):%Y-%m-%d}", "",
                f"Commit {commit}; command: `sudo .venv/bin/python tools/overlap_yardstick.py "
                f"{' '.join(argv if argv is not None else sys.argv[1:])}`; sizes {sizes}.", "",
                "Runs: " + ", ".join(f"{k}: `{v}`" for k, v in runs.items()), ""]
        Path(a.page).write_text("\n".join(head) + "\n" + text + "\n")
        print(f"# page: {a.page}")
    return 0 if ok else 1


def _iters_for(n: int, seconds: float) -> int:
    """Matmuls of n x n (fp32, one thread) that take about `seconds` on this host."""
    import time

    import torch  # lazy: only the gemm run sizes its action here

    torch.set_num_threads(1)
    a = torch.randn(n, n)
    torch.mm(a, a)
    t0 = time.perf_counter()
    for _ in range(5):
        torch.mm(a, a)
    return max(1, round(seconds / ((time.perf_counter() - t0) / 5)))


if __name__ == "__main__":
    raise SystemExit(main())
