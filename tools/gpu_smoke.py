"""`make gpu-smoke`: a short, real check (a few minutes) on a machine with CUDA GPUs.

Runs through the public command line only (`python -m bench <kind> ...`), with nccl and
CUDA-event timing, at world min(2, GPUs):

  1. collectives: all_reduce at 1 MiB and 1 GiB (busbw at 1 GiB in the summary)
  2. allreduce: ring (pipelined p2p) and native at world 2, plus one NCCL variant (native with
     NCCL_ALGO=Ring) whose algorithm is verified in NCCL's TUNING log (table nccl_tuning)
  3. strategies: ddp, 6 timed steps (the config requires >= 5)
  4. pipeline: 2 stages, GPipe, 4 micro-batches (the bubble in the summary)

Every step must run for real: a refused option (exit 2) is a failure, as is a step with no
result rows, rows without times (or, on GPU, timed on another device or without NVML values).
The steps that need two ranks fail on a one-GPU machine (they would time nothing). It ends with
one short summary. Without CUDA it says so and exits 0; `--cpu` runs the same steps on gloo with
2 real CPU ranks (smaller sizes), which checks this script itself. Results go under
results/gpu-smoke/ (or --out), away from the suites' own latest runs.
"""

import argparse
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEP_TIMEOUT_S = 240
NVML_COLUMNS = ("gpu_util_max_pct", "gpu_mem_used_peak_bytes", "gpu_power_mean_w", "gpu_sm_clock_mean_mhz",
                "gpu_temp_max_c", "gpu_energy_j", "throttled", "throttle_reasons")
TIME_COLUMNS = ("time_median_s", "step_median_s")


def bench(*argv, timeout=STEP_TIMEOUT_S, env=None):
    full = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=timeout)


def steps_for(backend: str, world: int, out: str, cpu: bool) -> list[dict]:
    """The steps: name, argv, env, whether it needs 2 ranks to mean anything."""
    common = ["--nproc", str(world), "--backend", backend, "--out", out, "--telemetry-interval-s", "0.05"]
    small, big = ("64K", "1M") if cpu else ("1M", "1G")
    return [
        {"name": "collectives", "argv": ["collectives", "-c", "all_reduce", "--sizes", f"{small},{big}", "--dtype",
                                         "float32", "--op", "sum", "--mode", "throughput", "--budget-s", "0.3",
                                         "--check", "1", *common], "needs2": False},
        {"name": "allreduce", "argv": ["allreduce", "-a", "ring,native", "--sizes", "1M,16M", "--dtype", "float32",
                                       "--op", "sum", "--budget-s", "0.2", "--check", "1", *common], "needs2": True},
        {"name": "nccl-variant", "argv": ["allreduce", "-a", "native", "--nccl-algo", "Ring", "--sizes", "16M",
                                          "--dtype", "float32", "--op", "sum", "--budget-s", "0.2", "--check", "1",
                                          *common], "needs2": True, "gpu_only": True},
        {"name": "strategies", "argv": ["strategies", "-s", "ddp", "--model", "mlp-small", "--steps", "6", "--warmup", "1",
                                        "--check", "1", *common], "needs2": True},
        {"name": "pipeline", "argv": ["pipeline", "--stages", "2", "--schedule", "gpipe", "--chunks", "4",
                                      "--steps", "6", "--warmup", "1", "--no-efficiency", "--backend", backend,
                                      "--out", out, "--telemetry-interval-s", "0.05"], "needs2": True},
    ]


def check_rows(name: str, run, gpu: bool) -> list[str]:
    """Problems with a step's rows: none, no times, wrong device, no NVML values (GPU)."""
    import pandas as pd  # lazy: pandas (~0.6 s) only to check rows; the header stays stdlib so --help is instant

    res = run.tables.get("results")
    if res is None or res.empty:
        return [f"{name}: no result rows"]
    problems = []
    tcol = next((c for c in TIME_COLUMNS if c in res.columns), None)
    if tcol is None or not (pd.to_numeric(res[tcol], errors="coerce") > 0).all():
        problems.append(f"{name}: rows without a positive time ({tcol or 'no time column'})")
    if gpu:
        if "device_type" in res.columns and set(res["device_type"].dropna()) != {"cuda"}:
            problems.append(f"{name}: rows timed on {sorted(set(res['device_type'].dropna()))}, not cuda")
        if "gpu_mem_used_peak_bytes" not in res.columns or res["gpu_mem_used_peak_bytes"].isna().any():
            why = "; ".join(sorted(set(res.get("telemetry_missing", pd.Series(dtype=str)).dropna()))) or "?"
            problems.append(f"{name}: NVML values missing in some rows: {why}")
    elif "gpus_sampled" not in res.columns or res["gpus_sampled"].isna().all():
        problems.append(f"{name}: rows carry no telemetry summary")
    if "wrong" in res.columns and (pd.to_numeric(res["wrong"], errors="coerce").fillna(0) > 0).any():
        problems.append(f"{name}: wrong elements in the check")
    if name == "nccl-variant":
        problems += variant_problems(run)
    return problems


def variant_problems(run) -> list[str]:
    """The variant launch's algorithm must be verified in NCCL's TUNING log (table nccl_tuning)."""
    tun = run.tables.get("nccl_tuning")
    if tun is None or tun.empty:
        return ["nccl-variant: no nccl_tuning rows: the algorithm NCCL ran is not verified"]
    bad = tun[~tun["matches_asked"].astype(bool)]
    return [f"nccl-variant: asked {r['variant']}, NCCL chose {r['algorithm_chosen']}/{r['protocol_chosen']} "
            f"at {int(r['size_bytes'])} B: FALLBACK" for _, r in bad.iterrows()]


def run_step(step: dict, gpu: bool):
    """(status 'ok' | 'failed', problems, loaded run or None)."""
    from bench.results.store import load_run  # lazy: loads pandas and torch; the header stays stdlib so --help is instant

    print(f"\n## {step['name']}: python -m bench {' '.join(step['argv'])}", flush=True)
    t0 = time.perf_counter()
    try:
        p = bench(*step["argv"], env=step.get("env"))
    except subprocess.TimeoutExpired:
        return "failed", [f"{step['name']}: did not finish in {STEP_TIMEOUT_S} s"], None
    took = time.perf_counter() - t0
    if p.returncode == 2:  # the CLI refused our options: a failure, never a skip
        msg = (p.stderr.strip().splitlines() or ["?"])[-1]
        return "failed", [f"{step['name']}: the CLI refused the options (exit 2): {msg}"], None
    dirs = re.findall(r"^# results: (.+)$", p.stdout, flags=re.M)
    if p.returncode != 0 or not dirs:
        print("\n".join((p.stdout + p.stderr).strip().splitlines()[-15:]))
        return "failed", [f"{step['name']}: exit {p.returncode}" + ("" if dirs else ", no results directory")], None
    print(f"  ran in {took:.1f} s; results: {dirs[-1]}")
    run = load_run(dirs[-1])
    problems = check_rows(step["name"], run, gpu)
    return ("failed" if problems else "ok"), problems, run


def _f(v, fmt="{:.4g}"):
    try:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
    except TypeError:
        pass
    return fmt.format(v) if isinstance(v, float) else str(v)


def summary_lines(runs: dict, gpu: bool) -> list[str]:
    """One short summary: busbw at the largest size, the NCCL variant, the pipeline bubble, NVML."""
    from bench.telemetry.nvml import reading_label  # lazy: bench.telemetry loads torch; the header stays stdlib so --help is instant

    out = []
    r = runs.get("collectives")
    if r is not None:
        res = r.tables["results"]
        top = res[res["size_bytes"] == res["size_bytes"].max()]
        bw = top["busbw_gbps"].max() if "busbw_gbps" in top else None
        out.append(f"collectives: all_reduce busbw {_f(bw)} GB/s at {int(top['size_bytes'].iloc[0]) >> 20} MiB "
                   f"(world {int(top['world'].iloc[0])}, {top['backend'].iloc[0]})")
    r = runs.get("nccl-variant")
    if r is not None:
        res, tun = r.tables["results"], r.tables.get("nccl_tuning")
        row = res.iloc[0]
        chosen = ("not in NCCL's log (unverified)" if tun is None or tun.empty else
                  ", ".join(f"{t['algorithm_chosen']}/{t['protocol_chosen']} at {int(t['size_bytes']) >> 20} MiB "
                            f"({'as asked' if t['matches_asked'] else 'FALLBACK'})" for _, t in tun.iterrows()))
        out.append(f"nccl variant: {row.get('variant', '?')} -> NCCL chose: {chosen}")
    r = runs.get("pipeline")
    if r is not None:
        res = r.tables["results"]
        row = res.iloc[0]
        out.append(f"pipeline: {row.get('schedule', '?')} stages {row.get('stages', '?')} chunks {row.get('chunks', '?')}: "
                   f"bubble measured {_f(row.get('bubble_measured'))}, GPipe theory {_f(row.get('bubble_gpipe_theory'))}"
                   + ("" if gpu else " (host timers)"))
    for name, r in runs.items():
        res = r.tables["results"]
        if "gpus_sampled" not in res.columns:
            continue
        row = res.iloc[-1]
        n = int(row["telemetry_samples"]) if "telemetry_samples" in res.columns and row["telemetry_samples"] == \
            row["telemetry_samples"] else 0
        vals = " ".join(f"{c}={_f(row[c])}" for c in NVML_COLUMNS if c in res.columns)
        out.append(f"nvml [{name}, last case, {reading_label(n)}]: {vals}" if gpu
                   else f"telemetry [{name}]: gpus_sampled={_f(row['gpus_sampled'])} ({reading_label(n)}); "
                        "GPU columns stay null on CPU")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/gpu-smoke", help="results root (default results/gpu-smoke)")
    ap.add_argument("--cpu", action="store_true",
                    help="run the same steps with gloo on 2 CPU ranks (checks this script; GPU columns stay null)")
    args = ap.parse_args(argv)
    import torch  # lazy: torch (~2 s) after argument parsing, so --help and usage errors are instant

    gpu = not args.cpu
    if gpu and not torch.cuda.is_available():
        print(f"gpu-smoke: no CUDA device visible (torch {torch.__version__}, CUDA {torch.version.cuda}); "
              "nothing to check here, run it on a GPU machine (or --cpu to check the script)")
        return 0
    if gpu:
        gpus = torch.cuda.device_count()
        world = min(2, gpus)
        print(f"gpu-smoke: {gpus} CUDA device(s), {torch.cuda.get_device_name(0)}; torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}; backend nccl, world {world}, CUDA-event timing")
        backend = "nccl"
    else:
        world, backend = 2, "gloo"
        print(f"gpu-smoke --cpu: torch {torch.__version__}; backend gloo, world 2, host timers")
    outcomes, problems, runs = {}, [], {}
    for step in steps_for(backend, world, args.out, args.cpu):
        if step.get("gpu_only") and not gpu:
            continue  # NCCL_ALGO means nothing to gloo
        if step["needs2"] and world < 2:
            outcomes[step["name"]] = "failed"
            problems.append(f"{step['name']}: needs 2 GPUs (one GPU: it would time nothing)")
            continue
        outcomes[step["name"]], p, run = run_step(step, gpu)
        problems += p
        if run is not None:
            runs[step["name"]] = run
    print("\n# gpu-smoke summary")
    for line in summary_lines(runs, gpu):
        print(f"#   {line}")
    print("# gpu-smoke: " + ", ".join(f"{k} {v}" for k, v in outcomes.items()))
    for p in problems:
        print(f"#   problem: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
