"""`make gpu-smoke`: a short, real check (well under 5 minutes) on a machine with CUDA GPUs.

Two parts, each check independent (one failure never stops the others), each ending in one line
`# gpu-smoke: [ok|FAILED|skipped] <check>: <what was verified>`:

A. Through the public command line (`python -m bench <kind> ...`, nccl, world min(2, GPUs)):
  collectives   all_reduce at 1 MiB and 64 MiB in the latency, throughput and nccl-tests modes:
                rows timed on cuda with NVML values, each row's rank_reduce as documented (item 4)
  nccl-variant  native all_reduce with NCCL_ALGO=Ring: a probe launch with NCCL's TUNING log,
                then a timed launch without NCCL_DEBUG (item 7); NCCL's choice where it logs one
                (one rank: NCCL's one-rank path logs no choice, which the line says)
  strategies    ddp, 6 timed steps, then dp: two cases in a row, each with its own memory peak
  allreduce, pipeline  (two ranks only: on one GPU they are skipped and say so)
B. In-process on cuda:0 (each check in its own child process with a time limit):
  item 4  a CUDA latency sample excludes host dispatch: an op that spends 2 ms on the host before
          a ~0.2 ms kernel reads ~0.2 ms (an event on the idle stream would read >= 2 ms)
  item 3  two cases in a row, the first leaving 2 GiB in a reference cycle: after the harness's
          release_between_cases the second case's peak is its own
  item 3  a pipeline trainer (world 1 NCCL group, interleaved, 2 local stages) is freed on `del`
          (our patched methods hold it weakly), and its CUDA memory is back once the harness's
          release between cases has run (torch's pipelining objects may wait for the collector)
  item 9  (>= 2 GPUs) the strategy clock spans the work of every device it drives
  item 12 NVML: clock-event reasons, SM and application clocks, and the throttled flag computed
          from them as docs/telemetry.md defines it

Exit 0 when nothing failed (skips are not failures), 1 otherwise. Without CUDA it says so and
exits 0; `--cpu` runs part A on gloo with 2 CPU ranks (smaller sizes), which checks this script.
Results go under results/gpu-smoke/ (or --out), away from the suites' own latest runs.
"""

import argparse
import gc
import json
import math
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEP_TIMEOUT_S = 120
TOTAL_BUDGET_S = 270  # part A stops starting CLI steps after this; part B is short
NVML_COLUMNS = ("gpu_util_max_pct", "gpu_mem_used_peak_bytes", "gpu_power_mean_w", "gpu_sm_clock_mean_mhz",
                "gpu_temp_max_c", "gpu_energy_j", "throttled", "throttle_reasons")
TIME_COLUMNS = ("time_median_s", "step_median_s")
RESULTS: list[tuple[str, str, str]] = []  # (status, check, line)


def report(status: str, check: str, line: str):
    RESULTS.append((status, check, line))
    print(f"# gpu-smoke: {status} {check}: {line}", flush=True)


def bench(*argv, timeout=STEP_TIMEOUT_S, env=None):
    full = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=timeout)


def steps_for(backend: str, world: int, out: str, cpu: bool) -> list[dict]:
    """The CLI steps: name, argv, whether it needs 2 ranks, whether it means anything on gloo."""
    common = ["--nproc", str(world), "--backend", backend, "--out", out, "--telemetry-interval-s", "0.05"]
    small, big = ("64K", "1M") if cpu else ("1M", "64M")
    return [
        {"name": "collectives", "argv": ["collectives", "-c", "all_reduce", "--sizes", f"{small},{big}", "--dtype",
                                         "float32", "--op", "sum", "--mode", "latency,throughput,nccl-tests",
                                         "--budget-s", "0.1", "--check", "1", *common], "needs2": False},
        {"name": "nccl-variant", "argv": ["allreduce", "-a", "native", "--nccl-algo", "Ring", "--nccl-proto", "",
                                          "--sizes", "16M", "--dtype", "float32", "--op", "sum", "--budget-s", "0.1",
                                          "--check", "1", "--predict-worlds", "2", *common],
         "needs2": False, "gpu_only": True},
        {"name": "strategies", "argv": ["strategies", "-s", "ddp,dp", "--model", "mlp-small", "--steps", "6",
                                        "--warmup", "1", "--check", "1", *common], "needs2": False},
        {"name": "allreduce", "argv": ["allreduce", "-a", "ring,native", "--sizes", "1M,16M", "--dtype", "float32",
                                       "--op", "sum", "--budget-s", "0.1", "--check", "1", "--nccl-algo", "",
                                       "--nccl-proto", "", *common], "needs2": True},
        {"name": "pipeline", "argv": ["pipeline", "--stages", "2", "--schedule", "gpipe", "--chunks", "4",
                                      "--steps", "6", "--warmup", "1", "--no-efficiency", "--backend", backend,
                                      "--out", out, "--telemetry-interval-s", "0.05"], "needs2": True},
    ]


def check_rows(name: str, run, gpu: bool) -> tuple[list[str], list[str]]:
    """(problems, facts verified) of a step's rows."""
    import pandas as pd  # lazy: pandas (~0.6 s) only to check rows; the header stays stdlib so --help is instant

    res = run.tables.get("results")
    if res is None or res.empty:
        return [f"{name}: no result rows"], []
    problems, facts = [], [f"{len(res)} rows"]
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
        want = {"latency": "max", "throughput": "max", "nccl-tests": "avg"}
        got = {(m, r) for m, r in zip(res["mode"], res["rank_reduce"]) if isinstance(m, str) and isinstance(r, str)}
        bad = [(m, r) for m, r in got if want.get(m) != r]
        if bad:
            problems.append(f"rank_reduce not as documented: {sorted(bad)}")
        elif got:
            facts.append("modes/rank_reduce " + ", ".join(f"{m}:{r}" for m, r in sorted(got)))
    if name == "nccl-variant":
        p, f = variant_checks(run)
        problems, facts = problems + p, facts + f
    if name == "strategies" and "peak_memory_bytes" in res.columns:
        facts.append("peaks " + ", ".join(f"{s}={int(b) >> 20} MiB" for s, b in zip(res["strategy"], res["peak_memory_bytes"])
                                          if b == b))
    return problems, facts


def variant_checks(run) -> tuple[list[str], list[str]]:
    """Item 7: a probe launch logged (NCCL_DEBUG on) and the timed launch ran without NCCL_DEBUG."""
    problems, facts = [], []
    res = run.tables["results"]
    envs = [json.loads(e) for e in res["nccl_env"]] if "nccl_env" in res.columns else []
    if any("NCCL_DEBUG" in e for e in envs) and "NCCL_DEBUG" not in os.environ:
        problems.append("a timed row ran with NCCL_DEBUG set")
    elif envs:
        facts.append("timed rows without NCCL_DEBUG (" + ", ".join(sorted({e.get('NCCL_ALGO', '-') for e in envs})) + ")")
    probes = [k for k in run.meta.get("launches", {}) if k.endswith(":probe")]
    logs = list((Path(run.dir) / "nccl").glob("*/*.log")) if getattr(run, "dir", None) else []
    if not probes:
        problems.append("no probe launch in meta.json")
    else:
        facts.append(f"probe launch {probes[0]} wrote {len(logs)} NCCL log file(s)")
    tun = run.tables.get("nccl_tuning")
    if tun is None or tun.empty:
        facts.append("no TUNING line (one rank: NCCL's one-rank path chooses no algorithm)"
                     if int(res["world"].iloc[0]) == 1 else "no TUNING line: NCCL's choice NOT verified")
    else:
        for _, t in tun.iterrows():
            ok = bool(t["matches_asked"])
            (facts if ok else problems).append(f"asked {t['variant']}, NCCL chose {t['algorithm_chosen']}/"
                                               f"{t['protocol_chosen']} at {int(t['size_bytes'])} B"
                                               + ("" if ok else ": FALLBACK"))
    return problems, facts


def run_step(step: dict, gpu: bool):
    from bench.results.store import load_run  # lazy: loads pandas and torch; the header stays stdlib so --help is instant

    print(f"\n## {step['name']}: python -m bench {' '.join(step['argv'])}", flush=True)
    t0 = time.perf_counter()
    try:
        p = bench(*step["argv"], env=step.get("env"))
    except subprocess.TimeoutExpired:
        return report("FAILED", step["name"], f"did not finish in {STEP_TIMEOUT_S} s")
    took = time.perf_counter() - t0
    if p.returncode == 2:  # the CLI refused our options: a failure, never a skip
        msg = (p.stderr.strip().splitlines() or ["?"])[-1]
        return report("FAILED", step["name"], f"the CLI refused the options (exit 2): {msg}")
    dirs = re.findall(r"^# results: (.+)$", p.stdout, flags=re.M)
    if p.returncode != 0 or not dirs:
        print("\n".join((p.stdout + p.stderr).strip().splitlines()[-15:]))
        return report("FAILED", step["name"], f"exit {p.returncode}" + ("" if dirs else ", no results directory"))
    run = load_run(dirs[-1])
    problems, facts = check_rows(step["name"], run, gpu)
    line = f"{'; '.join(problems + facts)} ({took:.0f} s, {dirs[-1]})"
    report("FAILED" if problems else "ok", step["name"], line)
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
    from bench.timing.loop import LoopSpec, measure

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
    from bench.harness.rank import release_between_cases

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
    import weakref

    import torch.distributed as dist

    from bench.harness.rank import release_between_cases
    from bench.strategies import REGISTRY
    from bench.strategies.base import Ctx
    from bench.workloads import get_spec

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
    from bench.strategies.base import Clock

    if torch.cuda.device_count() < 2:
        return report("skipped", "item 9 clock on every device", "needs 2 GPUs (faked only: tests/test_cuda_waits.py)")
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
    from bench.telemetry import nvml
    from bench.telemetry.summary import reason_names, summarize

    try:
        import pynvml
    except ImportError:
        return report("skipped", "item 12 throttle flag", "pynvml (nvidia-ml-py) not installed")
    pynvml.nvmlInit()
    try:
        props = torch.cuda.get_device_properties(0)
        uuid = str(getattr(props, "uuid", "") or "")
        n = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        h = next((x for x in handles if uuid and uuid.replace("GPU-", "") in str(pynvml.nvmlDeviceGetUUID(x))),
                 handles[0])
        probe = nvml.GpuProbe(pynvml, h, "gpu0", pids={os.getpid()})
        out = []
        x = torch.randn(8192, 8192, device="cuda")
        for k in range(5):  # a little load, then read
            for _ in range(20):
                x = x @ x / 8192
            torch.cuda.synchronize()
            probe.read(float(k), out)
        vals = {m: v for _t, _u, _r, _c, m, v in out}
        node = {"host": "h", "node_rank": 0, "gpus": ["gpu0"], "gpu_status": "", "ticks": 5, "samples": out,
                "missing": {("gpu0", m): w for m, w in probe.missing.items()}}
        s = summarize([node], 0, 1, 0.1)
    finally:
        pynvml.nvmlShutdown()
    if "clock_event_reasons" not in vals:
        return report("FAILED", "item 12 throttle flag", f"clock-event reasons not read: {probe.missing}")
    mask = int(vals["clock_event_reasons"])
    app = vals.get("app_sm_clock_mhz")
    want = nvml.throttled(mask, vals.get("sm_clock_mhz"), app)
    report("ok", "item 12 throttle flag",
           f"reasons {reason_names(mask) or ['none']} (0x{mask:x}), SM {_f(vals.get('sm_clock_mhz'))} MHz, "
           f"application clock {_f(app) if app is not None else 'not read: ' + probe.missing.get('app_sm_clock_mhz', '?')}"
           f" MHz; last sample throttled={want}; case throttled={s['throttled']} ({s['throttle_reasons']})")


PART_B = {"latency": lambda t: check_latency_excludes_dispatch(t), "case-memory": lambda t: check_case_memory(t),
          "clock": lambda t: check_clock_all_devices(t), "throttle": lambda t: check_throttle(t),
          "pipeline-freed": lambda t: check_pipeline_freed(t)}
PART_B_TIMEOUT_S = 120


def run_one(name: str, torch) -> int:
    """One part-B check in this process (the child side of part_b)."""
    try:
        PART_B[name](torch)
    except Exception as e:  # noqa: BLE001 - reported as one line
        traceback.print_exc(limit=3)
        report("FAILED", name, f"{type(e).__name__}: {e}")
    return 0


def part_b():
    """Each check in its own process with a time limit: a CUDA or NCCL call that hangs, or a
    crash, costs that check only."""
    for name in PART_B:
        try:
            p = subprocess.run([sys.executable, __file__, "--only", name], cwd=ROOT, capture_output=True, text=True,
                               timeout=PART_B_TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(ROOT)})
        except subprocess.TimeoutExpired:
            report("FAILED", name, f"did not finish in {PART_B_TIMEOUT_S} s")
            continue
        lines = re.findall(r"^# gpu-smoke: (ok|FAILED|skipped) ([^:]+): (.*)$", p.stdout, flags=re.M)
        for status, check, line in lines:
            report(status, check, line)
        if not lines:
            tail = (p.stdout + p.stderr).strip().splitlines()[-5:]
            print("\n".join(tail))
            report("FAILED", name, f"exit {p.returncode} without a result line")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/gpu-smoke", help="results root (default results/gpu-smoke)")
    ap.add_argument("--cpu", action="store_true",
                    help="run part A with gloo on 2 CPU ranks (checks this script; GPU columns stay null)")
    ap.add_argument("--only", choices=sorted(PART_B), help="run one in-process CUDA check (part B) and exit")
    args = ap.parse_args(argv)
    import torch  # lazy: torch (~2 s) after argument parsing, so --help and usage errors are instant

    if args.only:
        return run_one(args.only, torch)
    gpu = not args.cpu
    t_start = time.monotonic()
    if gpu and not torch.cuda.is_available():
        print(f"gpu-smoke: no CUDA device visible (torch {torch.__version__}, CUDA {torch.version.cuda}); "
              "nothing to check here, run it on a GPU machine (or --cpu to check the script)")
        return 0
    if gpu:
        gpus = torch.cuda.device_count()
        world = min(2, gpus)
        print(f"gpu-smoke: {gpus} CUDA device(s), {torch.cuda.get_device_name(0)}; torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}; backend nccl, world {world}")
        backend = "nccl"
    else:
        world, backend = 2, "gloo"
        print(f"gpu-smoke --cpu: torch {torch.__version__}; backend gloo, world 2, host timers")
    for step in steps_for(backend, world, args.out, args.cpu):
        if step.get("gpu_only") and not gpu:
            continue  # NCCL_ALGO means nothing to gloo
        if step["needs2"] and world < 2:
            report("skipped", step["name"], "needs 2 GPUs (at world 1 it would time no communication)")
            continue
        if time.monotonic() - t_start > TOTAL_BUDGET_S:
            report("skipped", step["name"], f"the smoke test's {TOTAL_BUDGET_S} s budget is spent")
            continue
        try:
            run_step(step, gpu)
        except Exception as e:  # noqa: BLE001 - one step's failure never stops the others
            traceback.print_exc(limit=3)
            report("FAILED", step["name"], f"{type(e).__name__}: {e}")
    if gpu:
        print("\n## in-process checks on cuda:0 (each in its own process)", flush=True)
        part_b()
    print(f"\n# gpu-smoke summary ({time.monotonic() - t_start:.0f} s)")
    for status, check, line in RESULTS:
        print(f"#   {status:<7} {check}: {line}")
    failed = [c for s, c, _ in RESULTS if s == "FAILED"]
    print("# gpu-smoke: " + (f"FAILED: {', '.join(failed)}" if failed else "all checks ok or skipped"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
