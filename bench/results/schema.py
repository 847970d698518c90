"""The versioned result schema shared by every benchmark kind (documented in docs/schema.md).

One store serves every kind: a new kind adds columns to `results`, it does not get a new store.
Bump SCHEMA_VERSION when a column changes meaning or type; adding a nullable column is not a
bump. Readers check `schema_version` in meta.json.
"""

from collections.abc import Mapping

from bench.kind import KINDS
from bench.telemetry.summary import TELEMETRY_SUMMARY  # noqa: F401  (the sampler owns its columns; re-exported)

SCHEMA_VERSION = 2  # 2: `kind` is the kind's one name (collectives | allreduce | strategies | pipeline);
# table strategy_spans added

# Columns every results row has, whatever its kind, with pandas dtypes.
COMMON = {
    "run_id": "string",
    "suite": "string",
    "kind": "string",  # collectives | allreduce | strategies | pipeline (meta.json's kind; v1: collective | algorithm | strategy)
    "case_id": "string",  # stable key: identical case specs give identical ids across runs
    "world": "int64",
    "nodes": "int64",
    "backend": "string",
    "device_type": "string",
    "threads_per_rank": "int64",
    "oversubscribed": "bool",
    "degraded": "string",  # why the number is not what it claims to be; "" when it is
    "profile_trace": "string",  # --profile / --profile-size: rank 0's torch.profiler Chrome trace, relative to the run dir (rank r: .rank<r>.json); null: not traced
}

COLLECTIVE = {
    "collective": "string",
    "algorithm": "string",  # "native" for the backend's own; ring/tree/... from bench.allreduce
    "size_bytes": "int64",  # S: total array bytes (nccl-tests)
    "count": "int64",  # elements of S
    "dtype": "string",
    "op": "string",  # reduce op, "" for data movement
    "root": "int64",  # -1 where the collective has none
    "placement": "string",  # out-of-place | in-place
    "mode": "string",  # latency | throughput | nccl-tests (bench/timing/loop.py says what each sample is)
    "rank_reduce": "string",  # how the ranks' times of one iteration make the figure: max | avg | min | rank0 (nccl-tests -a)
    "blocking": "bool",  # throughput mode: each op waited for (True) or a block's ops in flight (False; PARAM --z 0)
    "warmup_iters": "int64",
    "iters": "int64",
    "samples": "int64",
    "warmup_op_s": "float64",
    "latency_hold": "string",  # CUDA latency mode: 'spin' (each sample held behind a spin kernel, its dispatch outside) or 'none' (the op's wait blocks the host: dispatch inside); "" elsewhere
    "samples_with_dispatch": "int64",  # CUDA latency mode: samples whose host dispatch is inside them (every one when latency_hold is 'none'; those kept at the capped hold otherwise)
    "time_median_s": "float64",  # median over iterations of the iteration's time reduced over ranks (rank_reduce)
    "time_p5_s": "float64",  # 5th percentile (numpy linear), same samples
    "time_p25_s": "float64",  # 25th percentile
    "time_p75_s": "float64",  # 75th percentile
    "time_p95_s": "float64",  # 95th percentile
    "time_min_s": "float64",  # fastest iteration
    "time_max_s": "float64",  # slowest iteration
    "time_mean_s": "float64",  # mean (for reference: medians are the statistic)
    "time_stdev_s": "float64",  # sample standard deviation (ddof=1)
    "time_cv": "float64",  # stdev / mean
    "time_iqr_s": "float64",  # p75 - p25
    "noisy": "bool",  # IQR / median > 0.1 (torch.utils.benchmark's rule)
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


# The long telemetry table: one row per sampled value, or per metric that could not be read
# (value null, reason given). Case keys beyond size_bytes/placement are kept as extra columns.
TELEMETRY = {
    "run_id": "string",
    "case_id": "string",
    "size_bytes": "int64",
    "placement": "string",
    "algorithm": "string",  # allreduce kind: the case's algorithm label (e.g. ring, native[NCCL_ALGO=Tree])
    "strategy": "string",  # strategies / pipeline kinds: the case's strategy
    "model": "string",  # strategies / pipeline kinds: the case's model preset
    "host": "string",
    "node_rank": "int64",
    "device_uuid": "string",  # NVML uuid ('GPU-...'); null for host metrics
    "rank": "int64",  # per-rank metrics (rss_bytes); else null
    "core": "int64",  # per-core metrics (cpu_util_pct); else null
    "time_s": "float64",  # Unix seconds (time.time) on the sampling host
    "metric": "string",  # name with its unit: power_w, energy_j (counter), mem_used_bytes, ...
    "value": "float64",
    "reason": "string",  # why the metric is missing; null when it has a value
}



# The tables every kind's runs may hold; each kind adds its own columns and tables (Kind.columns:
# bench/<kind>/columns.py, bench/training/columns.py), merged in TABLES in registration order.
GENERIC = {
    "results": {**COMMON, **COLLECTIVE, **TELEMETRY_SUMMARY},
    "samples": SAMPLES, "ranks": RANKS, "telemetry": TELEMETRY,
}


class _Tables(Mapping):
    """Every table's columns: GENERIC, plus each registered kind's own (bench.kind.Kind.columns),
    in registration order. A kind never edits this file; two kinds that give one column two dtypes
    are refused (ValueError naming both)."""

    def __init__(self):
        self._seen: tuple = ()
        self._tables: dict = {}

    def _merged(self) -> dict:
        kinds = tuple(KINDS)
        if kinds != self._seen:
            out = {t: dict(cols) for t, cols in GENERIC.items()}
            owner: dict = {}
            for kind in kinds:
                for table, cols in kind.columns.items():
                    into = out.setdefault(table, {})
                    for c, d in cols.items():
                        if into.get(c, d) != d:
                            raise ValueError(f"column {table}.{c}: kind {kind.name} declares {d}, "
                                             f"{owner.get((table, c), 'the schema')} {into[c]}")
                        into[c] = d
                        owner.setdefault((table, c), f"kind {kind.name}")
            self._seen, self._tables = kinds, out
        return self._tables

    def __getitem__(self, table: str) -> dict:
        return self._merged()[table]

    def __iter__(self):
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())


TABLES = _Tables()


def conform(df, table: str):
    """Add any missing column as null and cast every column to its dtype (one pass: a results
    table has over a hundred columns). A column the schema does not know is refused: a
    mistyped row key must not become a new column while the real one stays null."""
    import pandas as pd  # lazy: pandas only to conform a frame; the schema (tools/schema_doc.py) needs none

    if table not in TABLES:
        raise ValueError(f"table '{table}' is not in the schema; known: {', '.join(sorted(TABLES))}")
    cols = TABLES[table]
    unknown = [c for c in df.columns if c not in cols]
    if unknown:
        raise ValueError(f"table '{table}': column(s) {', '.join(map(repr, unknown))} not in the schema "
                         "(bench/results/schema.py)")
    missing = {c: pd.array([pd.NA] * len(df), dtype=_nullable(d)) for c, d in cols.items() if c not in df.columns}
    if missing:
        df = pd.concat([df, pd.DataFrame(missing, index=df.index)], axis=1)
    df = df.astype({c: _nullable(d) for c, d in cols.items()})
    return df[list(cols)]


def _nullable(dtype: str) -> str:
    return {"int64": "Int64", "bool": "boolean", "float64": "Float64"}.get(dtype, dtype)
