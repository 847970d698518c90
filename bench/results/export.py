"""A distbench run as a pytest-benchmark saved run (JSON), so `pytest-benchmark compare` reads it.

One benchmark per results row (case, size, placement). `stats.data` holds the raw per-iteration
samples: for communication kinds the per-iteration time reduced over ranks as the row's
rank_reduce says (max: the completion time; the same statistic the row's time_median_s summarizes), from samples.parquet; for training kinds the
per-step wall time (max over ranks) from strategy_steps.parquet. A row without raw samples gets
its median as the only datum. The statistics fields are pytest-benchmark's own (its Stats class),
so the numbers match what pytest-benchmark would have computed from the same data.
"""

from pathlib import Path

import pandas as pd

from bench.errors import BenchError
from bench.kind import BASE_KEYS, KINDS
from bench.results.store import load_run

RANK_AGG = {"max": "max", "avg": "mean", "min": "min", "rank0": "first"}  # bench.timing.stats.reduce_ranks

_EXTRA = ("busbw_gbps", "algbw_gbps", "bus_factor", "wrong", "noisy", "samples_per_s", "tokens_per_s",
          "peak_memory_bytes", "bubble_measured", "degraded", "oversubscribed", "throttled")
_SETTINGS = ("dtype", "op", "mode")  # what a collective case is beside its key


def _params() -> tuple[str, ...]:
    """The columns that say what a row measured: every kind's case key, then the settings."""
    keys = [c for k in KINDS for c in k.read.key_columns() if c != "case_id"]
    return tuple(dict.fromkeys([*BASE_KEYS[1:], *_SETTINGS, *keys]))


def _plain(v):
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def _samples_by_case(run) -> dict:
    out = {}
    s = run.tables.get("samples")
    if s is not None and len(s):
        res = run.tables.get("results")
        how = {}  # (case, size, placement) -> the row's rank_reduce (max when the row has none)
        if res is not None and "rank_reduce" in res:
            for r in res[["case_id", "size_bytes", "placement", "rank_reduce"]].itertuples(index=False):
                how[(str(r.case_id), int(r.size_bytes), str(r.placement))] = r.rank_reduce if isinstance(r.rank_reduce, str) else "max"
        keys = ["case_id", "size_bytes", "placement"]
        for (case, size, place), g in s.sort_values("rank").groupby(keys, sort=False):
            k = (str(case), int(size), str(place))
            per_iter = g.groupby("iteration", sort=True)["seconds"].agg(RANK_AGG.get(how.get(k, "max"), "max"))
            out[k] = [float(x) for x in per_iter.values]
    steps = run.tables.get("strategy_steps")
    if steps is not None and len(steps):
        per_step = steps.groupby(["case_id", "step"], sort=False)["step_wall_s"].max()
        for case, g in per_step.groupby(level=0, sort=False):
            out[(str(case), None, None)] = [float(x) for x in g.values]
    return out


def to_pytest_benchmark(run_dir) -> dict:
    try:
        from pytest_benchmark import __version__ as pb_version  # lazy: optional dependency (dev extra)
        from pytest_benchmark.stats import Stats  # lazy: optional dependency (dev extra)
    except ImportError:
        raise BenchError("export --format pytest-benchmark needs pytest-benchmark (pip install pytest-benchmark)") from None
    run = load_run(Path(run_dir))
    if "results" not in run.tables or run["results"].empty:
        if run.problems:  # the real problem first: the file that cannot be read
            raise BenchError(f"run '{run_dir}' cannot be read: {run.problems[0]}")
        raise BenchError(f"run '{run_dir}' has no results rows")
    meta = run.meta
    raw = _samples_by_case(run)
    benchmarks = []
    for _, r in run["results"].iterrows():
        case = str(r["case_id"])
        size = _plain(r.get("size_bytes"))
        place = _plain(r.get("placement"))
        data = raw.get((case, size, place)) or raw.get((case, None, None))
        median = _plain(r.get("time_median_s")) or _plain(r.get("step_median_s"))
        if not data:
            if median is None:
                continue
            data = [float(median)]
        stats = Stats()
        for x in data:
            stats.update(x)
        params = {k: _plain(r.get(k)) for k in _params() if k in r and _plain(r.get(k)) not in (None, "")}
        param = "-".join(str(v) for k, v in params.items() if k in ("size_bytes", "placement", "chunks", "schedule"))
        name = f"{case}[{param}]" if param else case
        benchmarks.append({
            "group": case, "name": name, "fullname": f"distbench/{meta.get('suite', 'run')}::{name}",
            "params": params, "param": param or None,
            "extra_info": {k: _plain(r.get(k)) for k in _EXTRA if k in r and _plain(r.get(k)) is not None},
            "options": {"disable_gc": False, "timer": "perf_counter_ns (max over ranks)", "min_rounds": len(data),
                        "max_time": None, "min_time": None, "warmup": _plain(r.get("warmup_iters")) or False},
            "stats": {**stats.as_dict(), "data": data, "iterations": 1},
        })
    ranks = [x for la in (meta.get("launches") or {}).values() for x in la.get("ranks", [])]
    soft = meta.get("software") or {}
    first = ranks[0] if ranks else {}
    return {
        "machine_info": {
            "node": first.get("host", ""), "processor": first.get("cpu_model", ""), "machine": "",
            "python_compiler": "", "python_implementation": "CPython",
            "python_implementation_version": soft.get("python", ""), "python_version": soft.get("python", ""),
            "python_build": [], "release": "", "system": soft.get("platform", ""),
            "cpu": {"brand_raw": first.get("cpu_model", ""), "count": first.get("cores")},
            "distbench": {"run_id": meta.get("run_id"), "kind": meta.get("kind"), "torch": soft.get("torch"),
                          "nccl": soft.get("nccl"), "cuda": soft.get("cuda"),
                          "gpus": sorted({g.get("name", "") for x in ranks for g in x.get("gpus", [])})},
        },
        "commit_info": {"id": meta.get("git_sha"), "time": meta.get("started_utc"),
                        "author_time": meta.get("started_utc"), "dirty": meta.get("git_dirty"),
                        "project": "distbench", "branch": "(unknown)"},
        "benchmarks": benchmarks,
        "datetime": meta.get("started_utc"),
        "version": pb_version,
    }
