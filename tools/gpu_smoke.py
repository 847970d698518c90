"""`make gpu-smoke`: a short, real check (8 minutes at most) on a machine with CUDA GPUs.

Three parts, run C, A, B, each check independent (one failure never stops the others; each runs
in a process of its own session with its own time limit, killed with every rank it started when
the limit passes; none starts once less than 30 s of the --budget-s total is left), each ending
in one line `# gpu-smoke: [ok|FAILED|not run] <check>: <what was verified>`. Every check can
fail on wrong data (its verdict is a pure function: tools/gpu_smoke_checks.py for parts A and B,
tools/gpu_smoke_ranks.py for part C, each fed wrong data in tests/test_gpu_smoke.py); a check that
could not run here, or ran without data to judge, says `not run`, which is not a pass.

C. Several ranks on one device (tools/gpu_smoke_ranks.py; docs/telemetry.md
   "What make gpu-smoke proves"). First the transport: nccl with >= 2 GPUs; on one GPU, NCCL >=
   2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 if two ranks pass a probe on cuda:0; else gloo with CUDA
   tensors in ranks started here (the CLI gives gloo ranks the CPU), pipelines through host copies.
  item 1 latency ranks   2 ranks, the CUDA latency loop on an all_reduce: every rank done, same
                         samples, same agreed spin-kernel holds
  item 2 per-case memory 4 ranks, ddp+tp with the reference check, without, with: allocated <=
                         reserved; rank 0's peak does not move with the check
  item 4 process groups  the same cases (+ pp+tp where p2p is native): live groups stay flat
  item 3 schedules bubble every schedule (suites/pipeline-schedules.toml at 2 ranks): measured vs
                         exact bubble per schedule, within 2 points (reported; CUDA_WAITS_UNVERIFIED
                         is not cleared in code)
  plan                   `distbench plan` calibrated on a small timed run, validated on the
                         schedules run: its held-out step MAPE within PLAN_MAPE_MAX_PCT
  plan-layouts           (only with --checks plan-layouts) docs/plan.md's layout study, small, at
                         world 4 (timed workload): the collectives with two groups of 2 at once,
                         pp2, pp2 x dp2 and tp2's host cost (pp1 x tp2, world 2) calibrated, pp2 x
                         tp2 held out; the held-out pp2 x tp2 MAPE within PLAN_LAYOUTS_MAPE_MAX_PCT,
                         its comm source and host cost

A. Through the public command line (`python -m bench <kind> ...`, nccl, world min(2, GPUs)):
  collectives   all_reduce at 1 MiB and 64 MiB in the latency, throughput and nccl-tests modes:
                rows timed on cuda with NVML values, each row's rank_reduce as documented
  barrier       `collectives -c barrier`, latency and throughput: a row per mode, size 0, no
                bandwidth, under BARRIER_MAX_S; on CUDA the latency row timed without the hold
                (the barrier's wait blocks the host), every sample counted with its dispatch
  energy        all_reduce of 64 MiB, throughput, a 2 s budget: an energy figure over the timed
                span (J/op, J/GB consistent, mean power plausible: gpu_smoke_energy.check_energy);
                every other step's rows: each energy figure given or absent with its reason
  nccl-variant  native all_reduce with NCCL_ALGO=Ring: a probe launch with NCCL's TUNING log,
                then a timed launch without NCCL_DEBUG; NCCL's choice where it logs one (one
                rank: NCCL's one-rank path logs no choice: not run)
  strategies    ddp, 6 timed steps, then dp (mlp-large): each case's per-GPU peak allocated
                against its footprint estimate (bench/training/footprint.py) and ranks of one
                role against each other (gpu_smoke_checks.peaks_verdict)
  allreduce, pipeline  (two ranks only: on one GPU they are not run and say so)
  overlap       `distbench overlap`, all_reduce 64 MiB against 8 GEMMs of 4096^2 on a side stream, and
                DDP (25 MB buckets): hidden_share the formula of the stored medians, "both" never
                below either side's own time, on a GPU hidden_share > 0 (two streams overlapped),
                DDP's no_sync step shorter than its step (gpu_smoke_checks.overlap_verdict)
  collectives-full  suites/collectives-full.toml up to 1 MiB (two dtypes, sum, both placements
                and modes): every case its dry run plans has a row, every sized row checked; last,
                the longest step
B. In-process on cuda:0 (each check in its own child process with a time limit):
  item 4  a CUDA latency sample excludes host dispatch: an op that spends 2 ms on the host before
          a ~0.2 ms kernel reads ~0.2 ms (an event on the idle stream would read >= 2 ms)
  item 3  two cases in a row, the first leaving 2 GiB in a reference cycle: after the harness's
          release_between_cases the second case's peak is its own
  item 3  a pipeline trainer (world 1 NCCL group, interleaved, 2 local stages) is freed on `del`
          (our patched methods hold it weakly), and its CUDA memory is back once the harness's
          release between cases has run (torch's pipelining objects may wait for the collector)
  item 9  (>= 2 GPUs) the strategy clock spans the work of every device it drives
  item 12 NVML: clock-event reasons read under load on the loaded GPU (no gpu_idle, a SM clock),
          and the throttled flag and reasons as docs/telemetry.md defines them, from its samples

Exit 0 when every check passed, 1 when one FAILED, 3 when none failed but some were not run
(not proved: one GPU leaves the two-rank steps out, --cpu part B, a spent budget). Without CUDA
it says so and exits 0; `--cpu` runs parts C and A on gloo host ranks (smaller sizes), which
checks this script; `--checks a,b` runs only the checks named.
Results go under results/gpu-smoke/ (or --out), away from the suites' own latest runs.
"""

import argparse
import gc
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))  # gpu_smoke_ranks, also when this file is imported (tests)

import gpu_smoke_checks as V  # noqa: E402 - the verdicts of parts A and B (no torch, no pandas at import)
import gpu_smoke_ranks as R  # noqa: E402 - stdlib only at import; the ranks' functions for part C
import gpu_smoke_energy as E  # noqa: E402 - the energy columns' check (no torch at import)

STEP_TIMEOUT_S = 120
TOTAL_BUDGET_S = 480  # one H100 / H200 in 8 minutes; a check starts only with 30 s left
NVML_COLUMNS = ("gpu_util_max_pct", "gpu_mem_used_peak_bytes", "gpu_power_mean_w", "gpu_sm_clock_mean_mhz",
                "gpu_temp_max_c", "gpu_energy_j", "throttled", "throttle_reasons")
TIME_COLUMNS = ("time_median_s", "step_median_s")
RESULTS: list[tuple[str, str, str]] = []  # (status, check, line)


def report(status: str, check: str, line: str):
    RESULTS.append((status, check, line))
    print(f"# gpu-smoke: {status} {check}: {line}", flush=True)


def run_child(argv: list, timeout: float, env=None) -> subprocess.CompletedProcess:
    """argv in its own session; on timeout the whole session (the ranks it started too) is
    killed and subprocess.TimeoutExpired raised, so a hung check leaves nothing running."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})}
    p = subprocess.Popen(argv, cwd=ROOT, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def bench(*argv, timeout=STEP_TIMEOUT_S, env=None, transport=None):
    """`python -m bench ARGV`; on a patched transport (gloo-cuda) the same CLI through
    tools/gpu_smoke_ranks.py, which gives its gloo ranks CUDA tensors (patch_cli_ranks)."""
    if transport is not None and transport.patched:
        entry = [str(ROOT / "tools" / "gpu_smoke_ranks.py")]
        env = {**(env or {}), R.CLI_TRANSPORT_ENV: transport.name}
    else:
        entry = ["-m", "bench"]
    if transport is not None:
        env = {**transport.env, **(env or {})}
    return run_child([sys.executable, *entry, *argv], timeout, env)


BARRIER_MODES = ("latency", "throughput")


def steps_for(backend: str, world: int, out: str, cpu: bool) -> list[dict]:
    """Part A's checks, in order: name, argv, whether it needs 2 ranks, whether it means anything
    on gloo (gpu_only), its own time limit (limit_s, else STEP_TIMEOUT_S), and whether its cases
    are planned by a dry run first (dry_run). A check added here gets its verdict in check_rows."""
    common = ["--nproc", str(world), "--backend", backend, "--out", out, "--telemetry-interval-s", "0.05"]
    small, big = ("64K", "1M") if cpu else ("1M", "64M")
    # on a GPU the footprint (1 GiB of parameters) dominates the peaks; on host ranks peaks are not judged
    model = "mlp-small" if cpu else "mlp-large"
    ovl_size, ovl_n = ("1M", "256") if cpu else ("64M", "4096")  # a collective and a GEMM of some ms each
    full = ["--dtype", "float32", "--sizes", "8,64K"] if cpu else ["--dtype", "float32,bfloat16", "--sizes", "8,64K,1M"]
    return [
        {"name": "collectives", "argv": ["collectives", "-c", "all_reduce", "--sizes", f"{small},{big}", "--dtype",
                                         "float32", "--op", "sum", "--mode", "latency,throughput,nccl-tests",
                                         "--budget-s", "0.1", "--check", "1", *common], "needs2": False},
        {"name": "barrier", "argv": ["collectives", "-c", "barrier", "--mode", ",".join(BARRIER_MODES), "--budget-s", "0.05",
                                     "--check", "1", *common], "needs2": False, "limit_s": 60},
        {"name": "nccl-variant", "argv": ["allreduce", "-a", "native", "--nccl-algo", "Ring", "--nccl-proto", "",
                                          "--sizes", "16M", "--dtype", "float32", "--op", "sum", "--budget-s", "0.1",
                                          "--check", "1", "--predict-worlds", "2", *common],
         "needs2": False, "gpu_only": True},
        # energy over a timed span long enough for NVML's counter (bench.telemetry.energy.MIN_SPAN_S):
        # a figure is required here; every other step's rows are checked for a figure or its reason
        {"name": "energy", "argv": ["collectives", "-c", "all_reduce", "--sizes", "64M", "--dtype", "float32", "--op",
                                    "sum", "--mode", "throughput", "--budget-s", "2", "--check", "1", *common],
         "needs2": True, "gpu_only": True, "limit_s": 90},  # at world 1 NCCL's all_reduce is a copy: no 1 s span
        {"name": "strategies", "argv": ["strategies", "-s", "ddp,dp", "--model", model, "--steps", "6",
                                        "--warmup", "1", "--check", "1", *common], "needs2": False},
        {"name": "allreduce", "argv": ["allreduce", "-a", "ring,native", "--sizes", "1M,16M", "--dtype", "float32",
                                       "--op", "sum", "--budget-s", "0.1", "--check", "1", "--nccl-algo", "",
                                       "--nccl-proto", "", *common], "needs2": True},
        {"name": "pipeline", "argv": ["pipeline", "--stages", "2", "--schedule", "gpipe", "--chunks", "4",
                                      "--steps", "6", "--warmup", "1", "--no-efficiency", "--backend", backend,
                                      "--out", out, "--telemetry-interval-s", "0.05"], "needs2": True},
        {"name": "overlap", "argv": ["overlap", "-c", "all_reduce", "--sizes", ovl_size, "--compute", "gemm",
                                     "--gemm-n", ovl_n, "--gemm-iters", "8", "--reps", "5", "--warmup", "2",
                                     "--training", "ddp", "--bucket-cap-mb", "25", "--steps", "5", *common],
         "needs2": True, "limit_s": 90},
        # last: the longest step (about 150 cases), so a tight budget leaves it out before the others
        {"name": "collectives-full", "argv": ["collectives", "--suite", "suites/collectives-full.toml", "-c", "all", *full,
                                              "--op", "sum", "--placement", "out-of-place,in-place",
                                              "--mode", "latency,throughput", "--budget-s", "0.01", "--warmup", "2",
                                              "--iters", "5", "--check", "1", *common],
         "needs2": False, "dry_run": True, "limit_s": 150},
    ]


def check_rows(name: str, run, gpu: bool, planned: set | None = None) -> tuple[list[str], list[str], list[str]]:
    """(problems, facts verified, not judged) of a step's rows (gpu_smoke_checks)."""
    import pandas as pd  # lazy: pandas (~0.6 s) only to check rows; the header stays stdlib so --help is instant

    res = run.tables.get("results")
    if res is None or res.empty:
        return [f"{name}: no result rows"], [], []
    problems, facts, unjudged = [], [f"{len(res)} rows"], []
    tcol = next((c for c in TIME_COLUMNS if c in res.columns), None)
    if tcol is None or not (pd.to_numeric(res[tcol], errors="coerce") > 0).all():
        problems.append(f"rows without a positive time ({tcol or 'no time column'})")
    if gpu:
        if "device_type" in res.columns and set(res["device_type"].dropna()) != {"cuda"}:
            problems.append(f"rows timed on {sorted(set(res['device_type'].dropna()))}, not cuda")
        if "gpu_mem_used_peak_bytes" not in res.columns or res["gpu_mem_used_peak_bytes"].isna().any():
            why = "; ".join(sorted(set(res.get("telemetry_missing", pd.Series(dtype=str)).dropna()))) or "?"
            problems.append(f"NVML values missing in some rows: {why}")
        else:
            facts.append("NVML values in every row")
    elif "gpus_sampled" not in res.columns or res["gpus_sampled"].isna().all():
        problems.append("rows carry no telemetry summary")
    if "wrong" in res.columns and (pd.to_numeric(res["wrong"], errors="coerce").fillna(0) > 0).any():
        problems.append("wrong elements in the check")
    if "rank_reduce" in res.columns and "mode" in res.columns:
        want = {"latency": "max", "throughput": "max", "nccl-tests": "avg", "overlap": "max"}
        got = {(m, r) for m, r in zip(res["mode"], res["rank_reduce"]) if isinstance(m, str) and isinstance(r, str)}
        bad = [(m, r) for m, r in got if want.get(m) != r]
        if bad:
            problems.append(f"rank_reduce not as documented: {sorted(bad)}")
        elif got:
            facts.append("modes/rank_reduce " + ", ".join(f"{m}:{r}" for m, r in sorted(got)))
    rows = res.to_dict("records")
    verdict = None
    if name == "nccl-variant":
        verdict = variant_checks(run)
    elif name == "strategies":
        verdict = V.peaks_verdict(_table_rows(run, "strategy_ranks"), footprints(rows))
    elif name == "barrier":
        verdict = V.barrier_verdict(rows, list(BARRIER_MODES))
    elif name == "overlap":
        verdict = V.overlap_verdict(rows, gpu)
    elif name == "collectives-full":
        verdict = V.suite_verdict(planned or set(), rows)
    if verdict is not None:
        problems, facts, unjudged = problems + verdict[0], facts + verdict[1], unjudged + verdict[2]
    if "energy_note" in res.columns or name == "energy":  # every figure given, or absent with its reason
        e_problems, e_facts = E.check_energy(res, gpu, need_figure=name == "energy")
        problems, facts = problems + e_problems, facts + e_facts
    return problems, facts, unjudged


def _table_rows(run, table: str) -> list[dict]:
    df = run.tables.get(table)
    return [] if df is None else df.to_dict("records")


def footprints(rows: list[dict]) -> dict:
    """{case_id: each rank's footprint estimate, bytes} of the strategies rows (without the
    reference check: the peaks are the timed steps'), from bench.training.memory.rank_bytes."""
    from bench.training.case import CaseSpec  # lazy: loads torch; only once a strategies run is read
    from bench.training.memory import rank_bytes  # lazy: loads torch; only once a strategies run is read

    out = {}
    for r in rows:
        composed = "+" in r["strategy"]  # a composed layout: its own degrees (bench.training.case.CaseSpec)
        case = CaseSpec(strategy=r["strategy"], model=r["model"], world=int(r["world"]), batch=int(r["batch"]),
                        chunks=int(r.get("chunks") or 1), schedule=r.get("schedule") or "",
                        **({"tp": int(r["tp_degree"]), "dp": int(r["dp_degree"]), "fsdp": int(r["fsdp_degree"])}
                           if composed else {}))
        out[r["case_id"]] = rank_bytes(case, check=False)
    return out


def variant_checks(run) -> tuple[list[str], list[str], list[str]]:
    """The nccl-variant step's run, read for gpu_smoke_checks.variant_verdict."""
    res = run.tables["results"]
    envs = [json.loads(e) for e in res["nccl_env"]] if "nccl_env" in res.columns else []
    logs = list((Path(run.dir) / "nccl").glob("*/*.log")) if getattr(run, "dir", None) else []
    return V.variant_verdict(envs=envs, probes=[k for k in run.meta.get("launches", {}) if k.endswith(":probe")],
                             logs=len(logs), tuning=_table_rows(run, "nccl_tuning"), world=int(res["world"].iloc[0]),
                             debug_in_env="NCCL_DEBUG" in os.environ)


def run_step(step: dict, gpu: bool, limit_s: float = STEP_TIMEOUT_S):
    from bench.results.store import load_run  # lazy: loads pandas and torch; the header stays stdlib so --help is instant

    print(f"\n## {step['name']}: python -m bench {' '.join(step['argv'])}", flush=True)
    t0 = time.perf_counter()
    planned = None
    try:
        if step.get("dry_run"):  # what the product plans for these options: the cases the run must have
            d = bench(*step["argv"], "--dry-run", env=step.get("env"), timeout=min(60, limit_s))
            if d.returncode != 0:
                return report(V.FAILED, step["name"], f"the dry run exited {d.returncode}: "
                                                      f"{(d.stderr.strip().splitlines() or ['?'])[-1]}")
            planned = V.planned_cases(d.stdout)
        p = bench(*step["argv"], env=step.get("env"), timeout=max(1.0, limit_s - (time.perf_counter() - t0)))
    except subprocess.TimeoutExpired:
        return report(V.FAILED, step["name"], f"did not finish in {limit_s:.0f} s")
    took = time.perf_counter() - t0
    if p.returncode == 2:  # the CLI refused our options: a failure, never a skip
        msg = (p.stderr.strip().splitlines() or ["?"])[-1]
        return report(V.FAILED, step["name"], f"the CLI refused the options (exit 2): {msg}")
    dirs = re.findall(r"^# results: (.+)$", p.stdout, flags=re.M)
    if p.returncode != 0 or not dirs:
        print("\n".join((p.stdout + p.stderr).strip().splitlines()[-15:]))
        return report(V.FAILED, step["name"], f"exit {p.returncode}" + ("" if dirs else ", no results directory"))
    run = load_run(dirs[-1])
    problems, facts, unjudged = check_rows(step["name"], run, gpu, planned)
    report(V.status_of(problems, unjudged), step["name"], f"{V.line_of(problems, facts, unjudged)} ({took:.0f} s, {dirs[-1]})")
    for lb in summary_lines(step["name"], run, gpu):
        print(f"#   {lb}")


def _f(v, fmt="{:.4g}"):
    try:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
    except TypeError:
        pass
    return fmt.format(v) if isinstance(v, float) else str(v)


def summary_lines(name: str, run, gpu: bool) -> list[str]:
    """A few figures of a step: busbw at the largest size, the pipeline bubble, NVML values."""
    from bench.telemetry.nvml import reading_label  # lazy: bench.telemetry loads torch

    out, res = [], run.tables["results"]
    if name == "collectives":
        top = res[res["size_bytes"] == res["size_bytes"].max()]
        for mode, rows in top.groupby("mode"):
            out.append(f"all_reduce {mode}: busbw {_f(rows['busbw_gbps'].max())} GB/s at "
                       f"{int(rows['size_bytes'].iloc[0]) >> 20} MiB (world {int(rows['world'].iloc[0])})")
    if name == "pipeline":
        row = res.iloc[0]
        out.append(f"bubble measured {_f(row.get('bubble_measured'))}, GPipe theory {_f(row.get('bubble_gpipe_theory'))}"
                   f"; degraded: {row.get('degraded') or '-'}")
    if "gpus_sampled" in res.columns:
        row = res.iloc[-1]
        n = int(row["telemetry_samples"]) if "telemetry_samples" in res.columns and row["telemetry_samples"] == \
            row["telemetry_samples"] else 0
        vals = " ".join(f"{c}={_f(row[c])}" for c in NVML_COLUMNS if c in res.columns)
        out.append(f"nvml [last case, {reading_label(n)}]: {vals}" if gpu
                   else f"telemetry: gpus_sampled={_f(row['gpus_sampled'])} ({reading_label(n)}); GPU columns null on CPU")
    return out


# ---- part B: in this process, on cuda:0 ------------------------------------------------------

def _cycles_per_s(torch) -> float:
    """GPU clock rate for torch.cuda._sleep, measured: cycles per second of a spin kernel."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    a.record()
    torch.cuda._sleep(10_000_000)
    b.record()
    b.synchronize()
    return 10_000_000 / (a.elapsed_time(b) * 1e-3)


def check_latency_excludes_dispatch(torch):
    from bench.timing.loop import LoopSpec, measure  # lazy: part B's child only: loads torch

    dev = torch.device("cuda", 0)
    kernel_cycles = int(_cycles_per_s(torch) * 200e-6)  # a ~0.2 ms kernel

    def op(async_op):
        time.sleep(0.002)  # 2 ms of host work before the launch (a slow dispatch)
        torch.cuda._sleep(kernel_cycles)

    spec = LoopSpec(mode="latency", warmup=2, iters=20, max_iters=20, budget_s=1e-9)
    res = measure(op, spec=spec, device=dev, barrier=lambda: None, agree_max=lambda x: x)
    held = sorted(res.samples_s)[len(res.samples_s) // 2]
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    op(False)
    b.record()
    b.synchronize()
    idle = a.elapsed_time(b) * 1e-3
    ok = 0.1e-3 < held < 1.0e-3 and idle > 1.5e-3
    report("ok" if ok else "FAILED", "item 4 latency without host dispatch",
           f"op = 2 ms host + ~0.2 ms kernel: held-stream sample median {held * 1e3:.3f} ms, "
           f"event on the idle stream {idle * 1e3:.3f} ms")


class _Cycle:
    def __init__(self, t):
        self.t, self.me = t, self


def check_case_memory(torch):
    from bench.harness.rank import release_between_cases  # lazy: part B's child only: loads torch

    dev = torch.device("cuda", 0)
    release_between_cases(dev)
    gc.disable()
    try:
        _Cycle(torch.empty(2 << 30, dtype=torch.uint8, device=dev))  # case 1 leaves 2 GiB in a cycle
        release_between_cases(dev)
        x = torch.empty(256 << 20, dtype=torch.uint8, device=dev)  # case 2: 256 MiB
        st = torch.cuda.memory_stats(dev)
        del x
    finally:
        gc.enable()
    alloc, reserved = st["allocated_bytes.all.peak"], st["reserved_bytes.all.peak"]
    ok = alloc < (1 << 30) and reserved < (1 << 30)
    report("ok" if ok else "FAILED", "item 3 per-case peaks",
           f"case 1 left 2 GiB in a reference cycle; case 2 (256 MiB) peak allocated {alloc >> 20} MiB, "
           f"reserved {reserved >> 20} MiB")


def check_pipeline_freed(torch):
    import weakref  # lazy: part B's child only

    import torch.distributed as dist  # lazy: part B's child only: loads torch

    from bench.harness.rank import release_between_cases  # lazy: part B's child only: loads torch
    from bench.training import REGISTRY  # lazy: part B's child only: loads torch
    from bench.training.base import Ctx  # lazy: part B's child only: loads torch
    from bench.workloads import get_spec  # lazy: part B's child only: loads torch

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=dev)
    try:
        ctx = Ctx(spec=get_spec("mlp-small"), rank=0, world=1, device=dev, batch=64, seed=0, steps=3, chunks=2,
                  schedule="interleaved")
        gc.collect()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated(dev)
        gc.disable()
        try:
            t = REGISTRY.get("pp").setup(ctx)
            t.prefetch()
            t.step()
            torch.cuda.synchronize()
            held = torch.cuda.memory_allocated(dev) - base
            ref = weakref.ref(t)
            del t
            left_no_gc = torch.cuda.memory_allocated(dev) - base
            alive = ref() is not None
        finally:
            gc.enable()
        release_between_cases(dev)  # what the harness does before the next case (gc, empty_cache, peaks)
        left_ws = torch.cuda.memory_allocated(dev) - base
        # cuBLAS workspaces come from the caching allocator, one per (handle, stream), and torch keeps
        # them for the process (32 MiB each on Hopper): not this trainer's memory. Counted apart.
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        left = torch.cuda.memory_allocated(dev) - base
    finally:
        if own_group:
            dist.destroy_process_group()
    # The trainer itself must not outlive `del` (our patched methods hold it weakly); torch's own
    # pipelining objects (stages, schedule) may sit in reference cycles until the collector runs,
    # which the harness does between cases: the next case must start without this one's memory.
    ok = not alive and left < max(1 << 20, held // 20)  # allow a small cache (e.g. a constant) kept elsewhere
    report("ok" if ok else "FAILED", "item 3 pipeline trainer freed",
           f"interleaved pp on cuda:0 held {held >> 10} KiB; after del: trainer {'still alive' if alive else 'freed'}, "
           f"{left_no_gc >> 10} KiB left without the cycle collector, {left_ws >> 10} KiB after the harness's "
           f"release between cases, {left >> 10} KiB once torch's cuBLAS workspaces are cleared"
           + ("" if clear is not None else " (this torch cannot clear them: counted)"))


def check_clock_all_devices(torch):
    from bench.training.base import Clock  # lazy: part B's child only: loads torch

    if torch.cuda.device_count() < 2:
        return report(V.NOT_RUN, "item 9 clock on every device", "needs 2 GPUs (faked only: tests/test_cuda_waits.py)")
    devs = [torch.device("cuda", 0), torch.device("cuda", 1)]
    cycles = int(_cycles_per_s(torch) * 5e-3)
    clock = Clock(devs[0], devs)
    with clock.span("fwd"):
        with torch.cuda.device(1):
            torch.cuda._sleep(cycles)  # 5 ms on cuda:1 only
    for d in devs:
        torch.cuda.synchronize(d)
    (_, _, _, a, b), = clock.resolve()
    ok = b - a > 4e-3
    report("ok" if ok else "FAILED", "item 9 clock on every device",
           f"a 5 ms kernel on cuda:1 inside a span: span {(b - a) * 1e3:.2f} ms")


def check_throttle(torch):
    from bench.telemetry import nvml  # lazy: part B's child only: loads torch
    from bench.telemetry.summary import summarize  # lazy: part B's child only

    try:
        import pynvml  # lazy: optional package (nvidia-ml-py): its absence means the check cannot run
    except ImportError:
        return report(V.NOT_RUN, "item 12 throttle flag", "pynvml (nvidia-ml-py) not installed")
    pynvml.nvmlInit()
    try:
        props = torch.cuda.get_device_properties(0)
        uuid = str(getattr(props, "uuid", "") or "")
        n = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        h = next((x for x in handles if uuid and uuid.replace("GPU-", "") in str(pynvml.nvmlDeviceGetUUID(x))),
                 handles[0])
        probe = nvml.GpuProbe(pynvml, h, "gpu0", pids={os.getpid()})
        out, loaded = [], set()
        x = torch.randn(8192, 8192, device="cuda")
        for k in range(5):  # queue ~20 large matmuls, read while they run, then wait
            for _ in range(20):
                x = x @ x / 8192
            probe.read(float(k), out)
            if k:  # utilization is a trailing average: from the second read the GPU has been busy
                loaded.add(float(k))
            torch.cuda.synchronize()
        node = {"host": "h", "node_rank": 0, "gpus": ["gpu0"], "gpu_status": "", "ticks": 5, "samples": out,
                "missing": {("gpu0", m): w for m, w in probe.missing.items()}}
        s = summarize([node], 0, 5, 1.0)
    finally:
        pynvml.nvmlShutdown()
    problems, facts, unjudged = V.throttle_verdict(out, loaded, s, probe.missing)
    report(V.status_of(problems, unjudged), "item 12 throttle flag", V.line_of(problems, facts, unjudged))


# Part B's checks, in order (name -> check(torch), each run in its own process): a check added
# here reports one `# gpu-smoke:` line with its verdict from gpu_smoke_checks.
PART_B = {"latency": lambda t: check_latency_excludes_dispatch(t), "case-memory": lambda t: check_case_memory(t),
          "clock": lambda t: check_clock_all_devices(t), "throttle": lambda t: check_throttle(t),
          "pipeline-freed": lambda t: check_pipeline_freed(t)}
PART_B_TIMEOUT_S = 120


# ---- part C: several ranks on one device (tools/gpu_smoke_ranks.py) ----------------------------

def nccl_version(torch) -> tuple | None:
    """NCCL's version as (major, minor, patch); torch.cuda.nccl.version() is a tuple on recent
    torch, an int (major * 10000 + minor * 100 + patch, NCCL >= 2.9) on older ones."""
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a torch without NCCL
        return None
    if isinstance(v, int):
        return (v // 10000, v // 100 % 100, v % 100) if v >= 10000 else (v // 1000, v // 100 % 10, v % 100)
    return tuple(int(x) for x in v[:3])


def detect_transports(torch, cpu: bool) -> dict:
    """How ranks go on this machine (gpu_smoke_ranks.choose_transports); on one GPU with NCCL >=
    2.30 two NCCL ranks sharing cuda:0 are probed for real first (in a child, time-limited)."""
    if cpu:
        return R.choose_transports(cuda=False, gpus=0, nccl_version=None, shared_ok=None)
    gpus, ver, shared = torch.cuda.device_count(), nccl_version(torch), None
    if gpus == 1 and ver is not None and ver >= (2, 30):
        try:
            p = run_child([sys.executable, __file__, "--only", "probe", "--transport", "nccl-shared"], PROBE_TIMEOUT_S)
            shared = p.returncode == 0 and "# gpu-smoke: ok probe" in p.stdout
        except subprocess.TimeoutExpired:
            shared = False
    return R.choose_transports(cuda=True, gpus=gpus, nccl_version=ver, shared_ok=shared)


PROBE_TIMEOUT_S = 60
# Each part-C check's own limit (seconds; a check never gets more than the budget left).
PART_C_LIMIT_S = {"latency-ranks": 90, "composed-cases": 180, "schedules": 240, "plan": 240, "plan-layouts": 360}
# which transport each check runs on: 'many' for world 4 (composed layouts), 'p2p' for pipelines
PART_C_TRANSPORT = {"latency-ranks": "collectives", "composed-cases": "many", "schedules": "p2p", "plan": "p2p",
                    "plan-layouts": "many"}


def c_probe(args, torch):
    t = R.transport_by_name(args.transport)
    out = R.launch_ranks(R.rank_probe, t, 2, timeout_s=30.0)
    ok = sorted(out) == [0, 1] and all(v == 2.0 for v in out.values())
    report("ok" if ok else "FAILED", "probe", f"2 ranks on {t.describe()}: all_reduce gave {out}")


def c_latency_ranks(args, torch):
    """Item 1: the multi-rank CUDA latency loop runs for real: every rank finishes (under the
    check's time limit) with the same samples and the same agreed holds."""
    t = R.transport_by_name(args.transport)
    nbytes = (1 << 20) if t.device == "cuda" else (64 << 10)
    out = R.launch_ranks(R.rank_latency, t, 2, nbytes, 20, timeout_s=30.0)
    want = None if t.device != "cuda" else ("none" if t.backend == "gloo" else "spin")
    status, line = R.latency_verdict(out, 2, f"{t.describe()}, all_reduce {nbytes >> 10} KiB", want_hold=want)
    if want == "none":  # why no sample is held there
        line += ("; gloo's wait() blocks the host until the op is done, so a start event has always fired by then: "
                 "the loop's probe finds it and times every sample with its dispatch, agreed by every rank")
    report(status, "item 1 latency ranks", line)


def c_composed_cases(args, torch):
    """Items 2 and 4 at world 4 (composed layouts need two dimensions of degree 2): ddp+tp with the
    reference check, without, with again (rank 0's peaks must not move), then pp+tp where the
    transport sends point to point natively; live process groups after each case."""
    from bench.training.case import CaseSpec  # lazy: loads torch; the child of this check only

    t = R.transport_by_name(args.transport)
    cuda = t.device == "cuda"
    model, batch = ("mlp-large", 64) if cuda else ("mlp-tiny", 8)
    ddp_tp = CaseSpec(strategy="ddp+tp", model=model, world=4, batch=batch, dp=2, tp=2)
    cases, labels = [(ddp_tp, 1), (ddp_tp, 0), (ddp_tp, 1)], ["ddp+tp (check)", "ddp+tp (no check)", "ddp+tp (check)"]
    if t.p2p == "native":
        cases.append((CaseSpec(strategy="pp+tp", model=model, world=4, chunks=2, schedule="gpipe", batch=batch,
                               tp=2), 1))
        labels.append("pp+tp (check)")
    out = R.launch_ranks(R.rank_cases, t, 4, cases, 2, timeout_s=60.0)
    wrong = out[0]["wrong"]
    status, line = R.memory_verdict({r: o["mems"][:3] for r, o in out.items()}, out[0]["check_bytes"], labels[:3])
    report(status, "item 2 per-case memory", f"{line} ({model}, world 4 on {t.describe()})")
    status, line = R.groups_verdict({r: o["live"] for r, o in out.items()}, labels)
    if any(w for w in wrong if w):
        status, line = "FAILED", f"{line}; reference check wrong elements per case {wrong}"
    report(status, "item 4 process groups", f"{line} (world 4 on {t.name}; checks wrong per case {wrong})")


def _evidence(t) -> str:
    if t.device != "cuda":
        return "host ranks: checks the script, no GPU evidence"
    if t.p2p == "staged":
        return ("gloo with host-staged p2p: a receive is a host copy, not NCCL's on-stream wait, so this is not "
                "the evidence that clears CUDA_WAITS_UNVERIFIED")
    return "a CUDA run of every schedule: the evidence that would clear CUDA_WAITS_UNVERIFIED (not cleared in code)"


def schedules_argv(t, out: str) -> list:
    """suites/pipeline-schedules.toml at 2 ranks (every schedule, timed workload, 8 chunks), 5 steps."""
    return ["pipeline", "--suite", "suites/pipeline-schedules.toml", "--stages", "2", "--steps", "5", "--warmup", "1",
            "--check", "0", "--nproc", "2", "--backend", t.backend, "--out", out, "--telemetry-interval-s", "0.5"]


def plan_calibrate_argv(t, out: str) -> list:
    """A small calibration on the timed workload: GPipe and 1F1B (one stage per rank), Interleaved
    1F1B (two per rank, loop) and ZB-V (two per rank, V) at 2 ranks and chunks 2 and 4, so that
    the schedules run (chunks 8) is all held out; its micro-batch 2 is outside the calibrated 4..8
    (marked extrapolated; the timed workload's action times do not depend on it)."""
    return ["pipeline", "--suite", "suites/plan-calibrate.toml", "--model", "timed", "--stages", "2", "--chunks", "2,4",
            "--schedule", ",".join(PLAN_CALIBRATE_SCHEDULES), "--batch", "16", "--steps", "5", "--warmup", "1", "--check", "0",
            "--nproc", "2", "--backend", t.backend, "--out", out, "--telemetry-interval-s", "0.5"]


PLAN_CALIBRATE_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zbv")


def _cli_run(argv, t, limit_s: float) -> tuple[str, str]:
    """One CLI launch on the transport: (its results directory, on a patched transport what its
    ranks say they ran on). Raises on failure, or when a patched launch's ranks were not patched."""
    with tempfile.TemporaryDirectory() as mark:
        p = bench(*argv, timeout=limit_s, transport=t, env={R.MARK_DIR_ENV: mark})
        marks = R.patched_ranks(mark)
    dirs = re.findall(r"^# results: (.+)$", p.stdout, flags=re.M)
    if p.returncode != 0 or not dirs:
        print("\n".join((p.stdout + p.stderr).strip().splitlines()[-15:]))
        raise RuntimeError(f"python -m bench {' '.join(argv[:3])} ...: exit {p.returncode}"
                           + ("" if dirs else ", no results directory"))
    if not t.patched:
        return dirs[-1], ""
    devs = sorted(set(marks))
    if not marks or any(not m.startswith(t.device) for m in marks):
        raise RuntimeError(f"the patch did not reach every rank on {t.device}: {devs or 'no rank patched'}")
    return dirs[-1], f"{len(marks)} patched rank processes ({', '.join(devs)})"


def c_schedules(args, torch):
    """Item 3: every schedule on the timed workload, measured vs exact bubble (within 2 points)."""
    from bench.results.store import load_run  # lazy: loads pandas and torch; this check's child only

    t = R.transport_by_name(args.transport)
    run_dir, patched = _cli_run(schedules_argv(t, args.out), t, PART_C_LIMIT_S["schedules"] - 20)
    print(f"# gpu-smoke-run: schedules {run_dir}", flush=True)
    res = load_run(run_dir).tables["results"]
    if set(res["device_type"].dropna()) != {t.device}:
        return report("FAILED", "item 3 schedules bubble", f"rows timed on {sorted(set(res['device_type'].dropna()))}, "
                                                           f"not {t.device} ({run_dir})")
    rows = [{"schedule": r["schedule"], "stages": int(r["pp_degree"]), "bubble_measured": float(r["bubble_measured"]),
             "bubble_exact": float(r["bubble_exact"])} for _, r in res.iterrows()]  # stages: pipeline ranks
    entry = f"tools/gpu_smoke_ranks.py (the CLI; {patched})" if t.patched else "python -m bench"
    status, line, per = R.bubble_verdict(rows, f"{entry} pipeline on {t.describe()}, {run_dir}")
    for x in per:
        print(f"#   {x}")
    report(status, "item 3 schedules bubble", f"{line}; {_evidence(t)}")


def c_plan(args, torch):
    """`distbench plan` calibrated on a small timed-workload run and validated on the schedules run."""
    t = R.transport_by_name(args.transport)
    if not args.validate_run:
        return report(V.NOT_RUN, "plan", "no schedules run to validate on (the item 3 check left none)")
    cal, _ = _cli_run(plan_calibrate_argv(t, args.out), t, PART_C_LIMIT_S["plan"] - 40)
    print(f"## plan calibrated on {cal}", flush=True)
    text = _plan("plan", [cal, "--validate", args.validate_run, "--stages", "2", "--out", args.out], 25)
    if text is None:
        return
    status, line = R.plan_verdict(text, judge=t.device == "cuda")
    report(status, "plan", f"{line}; calibrated on {cal} ({', '.join(PLAN_CALIBRATE_SCHEDULES)}; chunks 2, 4), validated on "
                           f"{args.validate_run} (every schedule, chunks 8), {t.name}")


def _plan(check: str, argv: list, tail: int) -> str | None:
    """`distbench plan ARGV` (no ranks): its last `tail` lines printed; its output, or None after
    reporting the check FAILED in one line."""
    p = bench("plan", *argv, timeout=60)
    text = p.stdout + p.stderr
    for x in text.strip().splitlines()[-tail:]:
        print(f"#   {x}")
    if p.returncode != 0:
        report("FAILED", check, f"exit {p.returncode}: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    return text


def plan_layouts_argv(t, out: str) -> dict:
    """docs/plan.md's commands for layouts, small (timed workload, GPipe and 1F1B, batch 16): the
    communication with the layout's groups at once, pp2 and pp2 x dp2 calibrated (chunks 2, 4),
    tp2's host cost from a one-rank pipeline of it (pp1 x tp2, world 2: Interleaved 1F1B and
    Looped BFS), pp2 x tp2 held out (chunks 8)."""
    tail = ["--backend", t.backend, "--out", out, "--telemetry-interval-s", "0.5"]
    pipe = ["--model", "timed", "--schedule", "gpipe,1f1b", "--batch", "16", "--steps", "5", "--warmup", "1",
            "--check", "0", *tail]
    return {"comm": ["collectives", "-c", "all_reduce,all_gather,reduce_scatter", "--nproc", "2,4", "--group-size", "2",
                     "--mode", "throughput", "--sizes", "4K,64K,1M", "--budget-s", "0.05", *tail],
            "pp2": ["pipeline", "--suite", "suites/plan-calibrate.toml", "--stages", "2", "--chunks", "2,4", *pipe],
            "pp2 dp2": ["pipeline", "--suite", "suites/plan-calibrate.toml", "--stages", "2", "--dp", "2",
                        "--chunks", "2,4", *pipe],
            "pp1 tp2": ["pipeline", "--suite", "suites/plan-calibrate.toml", "--stages", "1", "--tp", "2",
                        "--chunks", "2,4", *pipe, "--schedule", "interleaved,looped_bfs"],
            "pp2 tp2": ["pipeline", "--suite", "suites/plan-validate.toml", "--stages", "2", "--tp", "2", "--chunks", "8",
                        *pipe]}


def c_plan_layouts(args, torch):
    """The planner across layouts at world 4: pp2 x tp2 predicted from pp2, pp2 x dp2 and the
    collectives run, then measured."""
    t = R.transport_by_name(args.transport)
    runs = {}
    for label, argv in plan_layouts_argv(t, args.out).items():
        runs[label], _ = _cli_run(argv, t, 80)
        print(f"## plan-layouts {label}: {runs[label]}", flush=True)
    text = _plan("plan-layouts", [runs["pp2"], runs["pp2 dp2"], runs["pp1 tp2"], "--comm", runs["comm"],
                                  "--validate", runs["pp2 tp2"], "--out", args.out], 12)
    if text is None:
        return
    status, line = R.plan_layouts_verdict(text, judge=t.device == "cuda")
    report(status, "plan-layouts", f"{line}; pp2, pp2 x dp2 and pp1 x tp2 calibrated, pp2 x tp2 held out, world 4 "
                                   f"on {t.name}")


PART_C = {"latency-ranks": c_latency_ranks, "composed-cases": c_composed_cases, "schedules": c_schedules, "plan": c_plan,
          "plan-layouts": c_plan_layouts}
# run only when named (--checks plan-layouts): five launches (about 3 minutes on 2 CPU cores) would
# leave the default run's other checks without budget
OPT_IN = {"plan-layouts"}
CHILD = {**{k: (lambda a, t, _k=k: PART_B[_k](t)) for k in PART_B}, "probe": c_probe,
         **{f"c-{k}": v for k, v in PART_C.items()}}


def run_one(args, torch) -> int:
    """One part-B or part-C check in this process (the child side of part_b / part_c)."""
    try:
        CHILD[args.only](args, torch)
    except Exception as e:  # noqa: BLE001 - reported as one line
        traceback.print_exc(limit=3)
        report("FAILED", args.only.removeprefix("c-"), one_line(e))
    return 0


def one_line(e: BaseException) -> str:
    """An exception in one line: a failed rank's own error (torchelastic's ChildFailedError
    quotes the rank's traceback) where there is one, else the message's first line."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    errs = [x for x in lines if re.match(r"^[\w.]+(Error|Exception)\b", x)]
    return f"{type(e).__name__}: " + (errs[-1] if errs else lines[0] if lines else "")


class Budget:
    """The smoke test's total time: a check starts only with MIN_START_S left, and gets its own
    limit or what is left, whichever is less."""
    MIN_START_S = 30

    def __init__(self, total_s: float):
        self.total_s, self.t0 = total_s, time.monotonic()

    def left(self) -> float:
        return self.total_s - (time.monotonic() - self.t0)

    def limit(self, own_s: float) -> float | None:
        left = self.left()
        return None if left < self.MIN_START_S else min(own_s, left)


def run_checked_child(name: str, argv: list, limit_s: float | None, budget: Budget) -> str:
    """A check in its own process (and session) with a time limit; its result lines re-reported,
    its '#   ' detail lines printed. Returns its stdout."""
    if limit_s is None:
        report(V.NOT_RUN, name, f"the smoke test's {budget.total_s:.0f} s budget is spent")
        return ""
    try:
        p = run_child([sys.executable, __file__, *argv], limit_s)
    except subprocess.TimeoutExpired:
        report("FAILED", name, f"did not finish in {limit_s:.0f} s (killed with every rank it started)")
        return ""
    for x in re.findall(r"^(#   .*|## .*)$", p.stdout, flags=re.M):
        print(x)
    lines = re.findall(rf"^# gpu-smoke: ({'|'.join(V.STATUSES)}) ([^:]+): (.*)$", p.stdout, flags=re.M)
    for status, check, line in lines:
        report(status, check, line)
    if not lines:
        print("\n".join((p.stdout + p.stderr).strip().splitlines()[-8:]))
        report("FAILED", name, f"exit {p.returncode} without a result line")
    return p.stdout


def part_b(budget: Budget, names=None):
    """Each check in its own process with a time limit: a CUDA or NCCL call that hangs, or a
    crash, costs that check only."""
    for name in PART_B:
        if names is None or name in names:
            run_checked_child(name, ["--only", name], budget.limit(PART_B_TIMEOUT_S), budget)


def part_c(transports: dict, out: str, budget: Budget, names=None):
    """Several ranks on one device, each check in its own process and session with its limit."""
    p2p = transports["p2p"]
    # what part C runs on, and why: a fact, not a check (it counts neither way in the summary)
    print(f"# gpu-smoke-info: transport: {p2p.describe()}: {p2p.why}; world 4: {transports.get('many', p2p).name}",
          flush=True)
    validate_run = None
    for name in PART_C:
        if (name not in names) if names is not None else name in OPT_IN:
            continue
        t = transports.get(PART_C_TRANSPORT[name], p2p)
        argv = ["--only", f"c-{name}", "--transport", t.name, "--out", out]
        if name == "plan" and validate_run:
            argv += ["--validate-run", validate_run]
        stdout = run_checked_child(name, argv, budget.limit(PART_C_LIMIT_S[name]), budget)
        found = re.findall(r"^# gpu-smoke-run: schedules (.+)$", stdout, flags=re.M)
        validate_run = found[-1] if found else validate_run


def part_a(backend: str, world: int, out: str, cpu: bool, gpu: bool, budget: Budget, names=None):
    for step in steps_for(backend, world, out, cpu):
        if names is not None and step["name"] not in names:
            continue
        if step.get("gpu_only") and not gpu:
            report(V.NOT_RUN, step["name"], "needs CUDA and NCCL (--cpu: NCCL_ALGO means nothing to gloo)")
            continue
        if step["needs2"] and world < 2:
            report(V.NOT_RUN, step["name"], "needs 2 GPUs (at world 1 it would time no communication)")
            continue
        limit = budget.limit(step.get("limit_s", STEP_TIMEOUT_S))
        if limit is None:
            report(V.NOT_RUN, step["name"], f"the smoke test's {budget.total_s:.0f} s budget is spent")
            continue
        try:
            run_step(step, gpu, limit)
        except Exception as e:  # noqa: BLE001 - one step's failure never stops the others
            traceback.print_exc(limit=3)
            report(V.FAILED, step["name"], f"{type(e).__name__}: {e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/gpu-smoke", help="results root (default results/gpu-smoke)")
    ap.add_argument("--cpu", action="store_true",
                    help="run parts A and C with gloo on CPU ranks (checks this script; GPU columns stay null)")
    ap.add_argument("--checks", default="",
                    help="comma list of checks to run (default all): " + ", ".join([*PART_C, *PART_B] + [
                        s["name"] for s in steps_for("gloo", 2, "", True)]))
    ap.add_argument("--budget-s", type=float, default=TOTAL_BUDGET_S, help=f"total seconds (default {TOTAL_BUDGET_S})")
    ap.add_argument("--only", choices=sorted(CHILD), help=argparse.SUPPRESS)  # a child: one check, then exit
    ap.add_argument("--transport", default="",
                    help="part C on this transport instead of the detected one (e.g. --cpu --transport gloo-cpu-staged: "
                         "the one-GPU gloo path on host ranks)")
    ap.add_argument("--validate-run", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    import torch  # lazy: torch (~2 s) after argument parsing, so --help and usage errors are instant

    if args.only:
        return run_one(args, torch)
    names = set(args.checks.split(",")) - {""} or None
    gpu = not args.cpu
    budget = Budget(args.budget_s)
    if gpu and not torch.cuda.is_available():
        print(f"gpu-smoke: no CUDA device visible (torch {torch.__version__}, CUDA {torch.version.cuda}); "
              "nothing to check here, run it on a GPU machine (or --cpu to check the script)")
        return 0
    if gpu:
        gpus = torch.cuda.device_count()
        world = min(2, gpus)
        print(f"gpu-smoke: {gpus} CUDA device(s), {torch.cuda.get_device_name(0)}; torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, nccl_version(torch) or ('?',)))}; "
              f"part A: backend nccl, world {world}; budget {budget.total_s:.0f} s")
        backend = "nccl"
    else:
        world, backend = 2, "gloo"
        print(f"gpu-smoke --cpu: torch {torch.__version__}; backend gloo, host timers; budget {budget.total_s:.0f} s")
    print("\n## part C: several ranks on one device (each check in its own process, time-limited)", flush=True)
    transports = ({k: R.transport_by_name(args.transport) for k in ("collectives", "p2p", "many")} if args.transport
                  else detect_transports(torch, args.cpu))
    part_c(transports, args.out, budget, names)
    print("\n## part A: the command line", flush=True)
    part_a(backend, world, args.out, args.cpu, gpu, budget, names)
    print("\n## part B: in-process checks on cuda:0 (each in its own process)", flush=True)
    if gpu:
        part_b(budget, names)
    else:
        for name in (n for n in PART_B if names is None or n in names):
            report(V.NOT_RUN, name, "needs CUDA (--cpu)")
    print(f"\n# gpu-smoke summary ({time.monotonic() - budget.t0:.0f} s of {budget.total_s:.0f})")
    for status, check, line in RESULTS:
        print(f"#   {status:<7} {check}: {line}")
    last, code = V.outcome(RESULTS)
    print(f"# gpu-smoke: {last}")
    return code


if __name__ == "__main__":
    sys.exit(main())
