"""`make gpu-smoke`: a short check (< 3 minutes) on a machine with a CUDA GPU.

Runs, with nccl and CUDA-event timing (the timer on a cuda device), through the real CLI:
one collective case (all_reduce, world 1), one allreduce-algorithm case (`distbench
allreduce`) and one strategy case (`distbench strategies`), then prints the telemetry summary
of each with the NVML values it read. A subcommand that does not exist yet is skipped with a
message. Without CUDA it says so and exits 0 (`--cpu` runs the same steps with gloo, to check
this script itself). Exit 1 when a run fails or its rows carry no GPU telemetry. Results go
under results/gpu-smoke/<suite>/<run_id>/ (or --out), away from the suites' own latest runs.
"""

import argparse
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEP_TIMEOUT_S = 75
SHOW = ("gpus_sampled", "telemetry_samples", "gpu_util_mean_pct", "gpu_util_max_pct", "gpu_mem_used_peak_bytes",
        "gpu_proc_mem_peak_bytes", "gpu_power_mean_w", "gpu_energy_j", "gpu_temp_max_c", "gpu_sm_clock_mean_mhz",
        "gpu_pcie_tx_bytes", "gpu_nvlink_tx_bytes", "throttled", "throttle_reasons", "host_cpu_util_mean_pct",
        "rank_rss_peak_bytes", "telemetry_missing")
# Options that keep another kind's run short, passed only when its --help lists them.
SHORT = {
    "allreduce": [(("--sizes",), "1M,16M"), (("--algorithms", "--algorithm"), "ring"), (("--budget-s",), "0.2"),
                  (("--check",), "1")],
    "strategies": [(("--strategies", "--strategy"), "ddp"), (("--steps",), "3"), (("--warmup",), "1"),
                   (("--iters",), "3"), (("--budget-s",), "0.2")],
}


def bench(*argv, timeout=STEP_TIMEOUT_S):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def subcommand_help(name: str) -> str | None:
    p = bench(name, "--help", timeout=60)
    return p.stdout if p.returncode == 0 else None


def short_args(kind: str, help_text: str) -> list[str]:
    out = []
    for names, val in SHORT.get(kind, []):
        for opt in names:  # the first spelling the kind's --help lists
            if re.search(rf"(^|[\s,\[]){re.escape(opt)}([\s,=\]]|$)", help_text):
                out += [opt, val]
                break
    return out


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def report(kind: str, run_dir: str, need_gpu: bool = True) -> list[str]:
    """Print the telemetry summary of a run; return problems found."""
    import pandas as pd

    from bench.results.store import load_run

    run = load_run(run_dir)
    res = run.tables.get("results")
    problems = []
    tel_meta = run.meta.get("telemetry", {})
    print(f"  telemetry: enabled={tel_meta.get('enabled')} interval={tel_meta.get('interval_s')}s "
          f"gpu_metrics={tel_meta.get('gpu_metrics')}")
    for launch in tel_meta.get("launches", {}).values():
        for node in launch.get("nodes", []):
            for m in node.get("mapping", []):
                print(f"  rank {m['rank']}: cuda:{m['cuda_index']} -> {m['nvml_uuid']} ({m['name']}) "
                      f"matched by {m['matched_by'] or m['why']}")
    if res is None or res.empty:
        return [f"{kind}: no results rows"]
    keys = [c for c in ("case_id", "size_bytes", "placement", "algorithm", "strategy") if c in res.columns]
    for _, row in res.head(4).iterrows():
        print("  " + " ".join(f"{k}={_fmt(row[k])}" for k in keys))
        pairs = [f"{k}={_fmt(None if pd.isna(row[k]) else row[k])}" for k in SHOW if k in res.columns]
        print(textwrap.fill(" ".join(pairs), width=118, initial_indent="      ", subsequent_indent="      "))
    if "gpus_sampled" not in res.columns or res["gpus_sampled"].isna().all():
        problems.append(f"{kind}: results rows carry no telemetry (does its runner wrap cases in tel.case?)")
    elif need_gpu and res["gpu_mem_used_peak_bytes"].isna().any():
        why = "; ".join(sorted(set(res["telemetry_missing"].dropna()))) or "?"
        problems.append(f"{kind}: GPU telemetry missing in some rows: {why}")
    t = run.tables.get("telemetry")
    if t is not None and not t.empty:
        counts = t[t["value"].notna()].groupby("metric").size()
        print("  telemetry rows per metric: " + ", ".join(f"{m}={n}" for m, n in counts.items()))
        miss = t[t["value"].isna()][["metric", "reason"]].drop_duplicates()
        for _, m in miss.iterrows():
            print(f"  missing: {m['metric']}: {m['reason']}")
    return problems


def run_step(kind: str, argv: list[str], need_gpu: bool = True) -> tuple[str, list[str]]:
    """('ok' | 'skipped' | 'failed', problems)."""
    print(f"\n## {kind}: python -m bench {' '.join(argv)}", flush=True)
    t0 = time.perf_counter()
    try:
        p = bench(*argv)
    except subprocess.TimeoutExpired:
        return "failed", [f"{kind}: did not finish in {STEP_TIMEOUT_S} s"]
    took = time.perf_counter() - t0
    if p.returncode == 2:  # the kind refused our options (usage error): its message says why
        msg = (p.stderr.strip().splitlines() or ["?"])[-1]
        print(f"  skipped: the {kind} CLI refused these options: {msg}")
        return "skipped", []
    m = re.findall(r"^# results: (.+)$", p.stdout, flags=re.M)
    if p.returncode != 0 or not m:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-15:])
        print(tail)
        return "failed", [f"{kind}: exit {p.returncode}"]
    print(f"  ran in {took:.1f} s; results: {m[-1]}")
    problems = report(kind, m[-1], need_gpu)
    return ("failed" if problems else "ok"), problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/gpu-smoke", help="results root (default results/gpu-smoke)")
    ap.add_argument("--cpu", action="store_true",
                    help="run the same steps with gloo on CPU (checks this script; GPU columns stay null)")
    args = ap.parse_args(argv)
    import torch

    backend = "gloo" if args.cpu else "nccl"
    if not args.cpu and not torch.cuda.is_available():
        print(f"gpu-smoke: no CUDA device visible (torch {torch.__version__}, CUDA {torch.version.cuda}); "
              "nothing to check here, run it on a GPU machine")
        return 0
    if args.cpu:
        print(f"gpu-smoke --cpu: torch {torch.__version__}; backend gloo, world 1, host timers")
    else:
        print(f"gpu-smoke: {torch.cuda.device_count()} CUDA device(s), {torch.cuda.get_device_name(0)}; "
              f"torch {torch.__version__}, CUDA {torch.version.cuda}; backend nccl, world 1, CUDA-event timing")
    common = ["--nproc", "1", "--backend", backend, "--telemetry-interval-s", "0.05"]
    steps = [("collectives", ["collectives", "--suite", os.devnull, "-c", "all_reduce", "--sizes", "1M,64M",
                              "--budget-s", "0.3", "--out", f"{args.out}", *common])]
    for kind in ("allreduce", "strategies"):
        help_text = subcommand_help(kind)
        if help_text is None:
            steps.append((kind, None))
            continue
        extra = short_args(kind, help_text)
        if "--telemetry-interval-s" not in help_text:  # a kind not on the common options yet
            extra_common = ["--nproc", "1", "--backend", backend]
        else:
            extra_common = common
        steps.append((kind, [kind, *extra, "--out", args.out, *extra_common]))
    outcomes, problems = {}, []
    for kind, a in steps:
        if a is None:
            print(f"\n## {kind}: skipped: `distbench {kind}` does not exist yet")
            outcomes[kind] = "skipped"
            continue
        outcomes[kind], p = run_step(kind, a, need_gpu=not args.cpu)
        problems += p
    print("\n# gpu-smoke: " + ", ".join(f"{k} {v}" for k, v in outcomes.items()))
    for p in problems:
        print(f"#   {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
