"""The versioned result schema shared by every benchmark kind (documented in docs/schema.md).

One store serves every kind: a new kind adds columns to `results`, it does not get a new store.
Bump SCHEMA_VERSION when a column changes meaning or type; adding a nullable column is not a
bump. Readers check `schema_version` in meta.json.
"""

SCHEMA_VERSION = 1

# Columns every results row has, whatever its kind, with pandas dtypes.
COMMON = {
    "run_id": "string",
    "suite": "string",
    "kind": "string",  # collective | algorithm | strategy
    "case_id": "string",  # stable key: identical case specs give identical ids across runs
    "world": "int64",
    "nodes": "int64",
    "backend": "string",
    "device_type": "string",
    "threads_per_rank": "int64",
    "oversubscribed": "bool",
    "degraded": "string",  # why the number is not what it claims to be; "" when it is
}

COLLECTIVE = {
    "collective": "string",
    "algorithm": "string",  # "native" for the backend's own; ring/tree/... from bench.algorithms
    "size_bytes": "int64",  # S: total array bytes (nccl-tests)
    "count": "int64",  # elements of S
    "dtype": "string",
    "op": "string",  # reduce op, "" for data movement
    "root": "int64",  # -1 where the collective has none
    "placement": "string",  # out-of-place | in-place
    "mode": "string",  # latency | throughput
    "warmup_iters": "int64",
    "iters": "int64",
    "samples": "int64",
    "warmup_op_s": "float64",
    "time_median_s": "float64",
    "time_p5_s": "float64",
    "time_p25_s": "float64",
    "time_p75_s": "float64",
    "time_p95_s": "float64",
    "time_min_s": "float64",
    "time_max_s": "float64",
    "time_mean_s": "float64",
    "time_stdev_s": "float64",
    "time_cv": "float64",
    "time_iqr_s": "float64",
    "noisy": "bool",
    "algbw_gbps": "float64",  # S / time_median_s / 1e9
    "busbw_gbps": "float64",  # algbw * bus_factor
    "bus_factor": "float64",
    "rank_median_min_s": "float64",
    "rank_median_max_s": "float64",
    "rank_skew_s": "float64",  # max - min over ranks of each rank's own median
    "slowest_rank": "int64",
    "checks": "int64",
    "wrong": "int64",  # wrong elements summed over ranks and checks
}

SAMPLES = {
    "run_id": "string",
    "case_id": "string",
    "size_bytes": "int64",
    "placement": "string",
    "rank": "int64",
    "iteration": "int64",
    "seconds": "float64",
}

RANKS = {
    "run_id": "string",
    "case_id": "string",
    "size_bytes": "int64",
    "placement": "string",
    "rank": "int64",
    "node_rank": "int64",
    "host": "string",
    "median_s": "float64",
}

TABLES = {"results": {**COMMON, **COLLECTIVE}, "samples": SAMPLES, "ranks": RANKS}


def conform(df, table: str):
    """Add any missing known column as null and cast known columns to their dtype."""
    import pandas as pd

    cols = TABLES.get(table, {})
    for name, dtype in cols.items():
        if name not in df.columns:
            df[name] = pd.Series([pd.NA] * len(df), dtype=_nullable(dtype))
    for name, dtype in cols.items():
        df[name] = df[name].astype(_nullable(dtype))
    ordered = [c for c in cols if c in df.columns] + [c for c in df.columns if c not in cols]
    return df[ordered]


def _nullable(dtype: str) -> str:
    return {"int64": "Int64", "bool": "boolean", "float64": "Float64"}.get(dtype, dtype)
