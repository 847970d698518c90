"""Small stored runs for the report tests, written with the result store (no benchmark runs)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.results.schema import SCHEMA_VERSION, TABLES, conform
from bench.results.store import RunWriter, write_json, write_parquet

HOSTILE = "<script>alert('x')</script>"


def _meta(run_id, suite, kind, worlds=(2,), oversubscribed=False, command=None, gpu_reason="NVML: library not found"):
    launches = {}
    for w in worlds:
        launches[str(w)] = {
            "world": w, "backend": "gloo", "nodes": 1, "hosts": ["node-a"], "threads_per_rank": 1, "cases": 2,
            "oversubscribed": oversubscribed and w > 2, "rows": 4, "wrong": 0,
            "notes": ([f"OVERSUBSCRIBED at world {w}: {w} ranks x 1 thread(s) on 2 cores"] if oversubscribed and w > 2
                      else []),
            "ranks": [{"rank": r, "host": "node-a", "cpu_model": "Test CPU 9000", "cores": 2, "gpus": []}
                      for r in range(w)],
            "started_utc": "2026-01-01T00:00:00+00:00", "finished_utc": "2026-01-01T00:01:00+00:00"}
    return {"run_id": run_id, "suite": suite, "kind": kind, "schema_version": SCHEMA_VERSION,
            "command_line": command or f"__main__.py {kind} --out results", "cwd": "/src/distbench",
            "started_utc": "2026-01-01T00:00:00+00:00", "git_sha": "0123456789abcdef0123", "git_dirty": True,
            "software": {"python": "3.11", "torch": "2.13.0+cpu", "cuda": None, "nccl": None, "platform": "Linux"},
            "launches": launches, "telemetry": {"enabled": True, "gpu_metrics": gpu_reason}}


def _write(run_dir: Path, tables: dict, meta: dict):
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(meta, run_dir / "meta.json")
    for name, rows in tables.items():
        df = pd.DataFrame(rows)
        # tables the schema knows are conformed as finalize() would; others are stored as given
        write_parquet(conform(df, name) if name in TABLES else df, run_dir / f"{name}.parquet")
    return run_dir


def _telemetry(run_id, case_id, t0):
    rows = []
    for i in range(6):
        t = t0 + 0.1 * i
        rows += [{"run_id": run_id, "case_id": case_id, "host": "node-a", "node_rank": 0, "core": c, "time_s": t,
                  "metric": "cpu_util_pct", "value": 50.0 + 10 * c} for c in range(2)]
        rows += [{"run_id": run_id, "case_id": case_id, "host": "node-a", "node_rank": 0, "rank": r, "time_s": t,
                  "metric": "rss_bytes", "value": 4e8 + 1e6 * i} for r in range(2)]
    rows.append({"run_id": run_id, "case_id": case_id, "host": "node-a", "node_rank": 0, "time_s": t0,
                 "metric": "gpu_metrics", "value": None, "reason": "NVML: library not found"})
    return rows


def collectives_run(root: Path, run_id="20260101T000000Z-coll01", command=None, scale=1.0, with_samples=True,
                    with_telemetry=True) -> Path:
    rng = np.random.default_rng(0)
    results, samples = [], []
    t0 = 1.7e9
    for coll, factor, op in (("all_reduce", 1.0, "sum"), ("broadcast", 1.0, "")):
        case_id = f"{coll}.float32.{op or 'none'}.root0.latency.w2"
        for k, size in enumerate((1024, 4096, 65536, 1048576)):
            for place in ("out-of-place", "in-place"):
                times = (20e-6 + size / 1e9) * scale * (1 + 0.05 * rng.random((2, 8)))
                med = float(np.median(times.max(axis=0)))
                results.append({
                    "run_id": run_id, "suite": "collectives", "kind": "collectives", "case_id": case_id, "world": 2,
                    "nodes": 1, "backend": "gloo", "device_type": "cpu", "threads_per_rank": 1,
                    "oversubscribed": False, "degraded": "", "collective": coll, "algorithm": "native",
                    "size_bytes": size, "count": size // 4, "dtype": "float32", "op": op, "root": 0,
                    "placement": place, "mode": "latency", "iters": 8, "samples": 8, "time_median_s": med,
                    "time_p25_s": med * 0.97, "time_p75_s": med * 1.03, "noisy": k == 0,
                    "algbw_gbps": size / med / 1e9, "busbw_gbps": size / med / 1e9 * factor, "bus_factor": factor,
                    "checks": 1, "wrong": 0, "case_start_unix_s": t0 + k, "case_end_unix_s": t0 + k + 0.5,
                    "telemetry_missing": "NVML: library not found"})
                for r in range(2):
                    for it in range(8):
                        samples.append({"run_id": run_id, "case_id": case_id, "size_bytes": size, "placement": place,
                                        "rank": r, "iteration": it, "seconds": float(times[r, it])})
    tables = {"results": results}
    if with_samples:
        tables["samples"] = samples
    if with_telemetry:
        tables["telemetry"] = _telemetry(run_id, "all_reduce.float32.sum.root0.latency.w2", t0)
    return _write(root / "collectives" / run_id, tables, _meta(run_id, "collectives", "collectives", command=command))


def allreduce_run(root: Path, run_id="20260101T000100Z-ar0001") -> Path:
    results, resid, preds = [], [], []
    sizes = [4096 * 4**i for i in range(5)]
    for w in (2, 4):
        for algo, alpha, beta in (("ring", 200e-6, 1e-9), ("tree", 50e-6, 2e-9)):
            for s in sizes:
                t = alpha + s * beta
                results.append({"run_id": run_id, "suite": "allreduce", "kind": "algorithm", "case_id": f"{algo}.w{w}",
                                "world": w, "nodes": 1, "backend": "gloo", "device_type": "cpu",
                                "threads_per_rank": 1, "oversubscribed": w == 4, "degraded": "",
                                "collective": "all_reduce", "algorithm": algo, "variant": "", "size_bytes": s,
                                "count": s // 4, "dtype": "float32", "op": "sum", "root": -1,
                                "placement": "in-place", "mode": "latency", "time_median_s": t,
                                "time_p25_s": t * 0.95, "time_p75_s": t * 1.05, "noisy": False,
                                "algbw_gbps": s / t / 1e9, "busbw_gbps": s / t / 1e9 * 2 * (w - 1) / w,
                                "bus_factor": 2 * (w - 1) / w, "checks": 1, "wrong": 0})
                resid.append({"run_id": run_id, "label": algo, "fit_worlds": str(w), "world": w, "size_bytes": s,
                              "measured_s": t, "fitted_s": t * 1.02, "rel_residual": 0.02})
            for n in (2, 4, 8, 16):
                for s in (4096, 1048576):
                    preds.append({"run_id": run_id, "suite": "allreduce", "source": "model", "label": algo,
                                  "algorithm": algo, "dtype": "float32", "op": "sum", "mode": "latency",
                                  "fit_worlds": "2", "fit_oversubscribed": False, "world": n, "size_bytes": s,
                                  "predicted_time_s": alpha * n + s * beta, "measured_time_s": None})
    cross = [{"run_id": run_id, "dtype": "float32", "op": "sum", "mode": "latency", "world": w,
              "oversubscribed": w == 4, "measured_kind": "crossover", "measured_bytes": 150000.0,
              "model_kind": "crossover", "model_bytes": 150000.0} for w in (2, 4)]
    model = [{"run_id": run_id, "suite": "allreduce", "label": a, "algorithm": a, "variant": "", "dtype": "float32",
              "op": "sum", "mode": "latency", "fit_worlds": "2", "points": 5, "alpha_us": 1.0, "bandwidth_gbps": 1.0,
              "rms_rel_residual": 0.02, "max_abs_rel_residual": 0.02} for a in ("ring", "tree")]
    meta = _meta(run_id, "allreduce", "allreduce", worlds=(2, 4), oversubscribed=True)
    return _write(root / "allreduce" / run_id, {"results": results, "residuals": resid, "predictions": preds,
                                                "crossover": cross, "model": model}, meta)


def _strategy_row(run_id, suite, kind, strategy, model, chunks, schedule, step_s, batch=64, checkpoint="never"):
    p = 2
    return {"run_id": run_id, "suite": suite, "kind": kind, "case_id": f"{strategy}.{model}.{schedule}.m{chunks}.{checkpoint}",
            "world": 2, "nodes": 1, "backend": "gloo", "device_type": "cpu", "threads_per_rank": 1,
            "oversubscribed": False, "degraded": "no CUDA: DataParallel is a pass-through" if strategy == "dp" else "",
            "strategy": strategy, "model": model, "chunks": chunks, "schedule": schedule, "checkpoint": checkpoint,
            "batch": batch, "micro_batch": batch // chunks, "sweep_mode": "mini-batch", "stages": p,
            "step_median_s": step_s, "step_p25_s": step_s * 0.97, "step_p75_s": step_s * 1.03, "step_iqr_s": step_s * 0.06,
            "samples_per_s": batch / step_s, "samples_per_s_per_device": batch / step_s / 2,
            "memory_kind": "host", "peak_memory_bytes": int((300 + 10 * chunks) * 2**20), "wrong": 0,
            "bubble_measured": (p - 1) / (chunks + p - 1) * 1.1 if strategy == "pp" else None,
            "bubble_gpipe_theory": (p - 1) / (chunks + p - 1) if strategy == "pp" else None,
            "bubble_megatron_theory": (p - 1) / chunks if strategy == "pp" else None,
            "replay_bubble": (p - 1) / (chunks + p - 1) * 1.05 if strategy == "pp" else None}


def pipeline_run(root: Path, run_id="20260101T000200Z-pp0001", with_spans=True) -> Path:
    results, steps, spans, eff = [], [], [], []
    for schedule in ("gpipe", "1f1b"):
        for m in (1, 2, 4):
            if schedule == "1f1b" and m < 2:
                continue
            step_s = 0.1 * (m + 1) / (2 * m) + 0.01
            row = _strategy_row(run_id, "pipeline", "pipeline", "pp", "mlp-pipe", m, schedule, step_s)
            results.append(row)
            for st in range(5):
                for r in range(2):
                    steps.append({"run_id": run_id, "case_id": row["case_id"], "step": st, "rank": r,
                                  "step_wall_s": step_s * (1 + 0.01 * st)})
            # one timed step per case: stage r does fwd of each micro-batch, then bwd, with a comm wait
            for r in range(2):
                t = 0.01 * r
                for mb in range(m):
                    spans.append({"run_id": run_id, "case_id": row["case_id"], "step": 2, "rank": r, "stage": r,
                                  "micro_batch": mb, "action": "fwd", "start_s": t, "end_s": t + 0.01})
                    t += 0.012
                spans.append({"run_id": run_id, "case_id": row["case_id"], "step": 2, "rank": r, "stage": -1,
                              "micro_batch": -1, "action": "comm", "start_s": t, "end_s": t + 0.005})
                t += 0.005
                for mb in range(m):
                    spans.append({"run_id": run_id, "case_id": row["case_id"], "step": 2, "rank": r, "stage": r,
                                  "micro_batch": mb, "action": "bwd", "start_s": t, "end_s": t + 0.02})
                    t += 0.021
                spans.append({"run_id": run_id, "case_id": row["case_id"], "step": 2, "rank": r, "stage": -1,
                              "micro_batch": -1, "action": "step", "start_s": 0.01 * r, "end_s": t})
    for m in (1, 2, 4, 8):
        eff.append({"run_id": run_id, "case_id": f"eff.m{m}", "model": "mlp-pipe", "batch": 64, "chunks": m,
                    "micro_batch": 64 // m, "step_median_s": 0.05 * (1 + 0.1 * m), "samples_per_s": 64 / (0.05 * (1 + 0.1 * m)),
                    "relative_throughput": 1 / (1 + 0.1 * (m - 1)), "ideal_pipeline_step_s": 0.03, "stages": 2})
    tables = {"results": results, "strategy_steps": steps, "microbatch_efficiency": eff}
    if with_spans:
        tables["strategy_spans"] = spans
    return _write(root / "pipeline" / run_id, tables, _meta(run_id, "pipeline", "pipeline"))


def strategies_run(root: Path, run_id="20260101T000300Z-st0001") -> Path:
    results = []
    for model in ("mlp-small", "gpt-small"):
        for strategy, step_s in (("dp", 0.05), ("ddp", 0.04), ("tp", 0.08), ("fsdp", 0.07)):
            results.append(_strategy_row(run_id, "strategies", "strategy", strategy, model, 1, "", step_s))
        results.append(_strategy_row(run_id, "strategies", "strategy", "pp", model, 4, "1f1b", 0.06))
    meta = _meta(run_id, "strategies", "strategies")
    del meta["kind"]  # an older run: the kind comes from the rows ('strategy')
    return _write(root / "strategies" / run_id, {"results": results}, meta)


def interrupted_run(root: Path, run_id="20260101T000400Z-int001") -> Path:
    """A run whose second launch never finished and whose parts were never merged."""
    meta = _meta(run_id, "collectives", "collectives", worlds=(2, 4))
    del meta["launches"]["4"]["finished_utc"]
    run_dir = root / "collectives" / run_id
    write_json(meta, run_dir / "meta.json")
    w = RunWriter(root, "collectives", run_id, part_prefix="w2-")
    src = pd.read_parquet(collectives_run(root / "_src")  / "results.parquet").head(3)
    w.write_case({"results": [{k: v for k, v in r.items() if v is not None and v is not pd.NA}
                              for r in json.loads(src.to_json(orient="records"))]})
    return run_dir
