"""A training case's memory peaks are each the max over ranks, and each says the rank it came from:
peak allocated and peak reserved may come from different ranks (a pipeline's first stage holds
the most activations, its last the most reserved), and the row must not read as one rank's pair."""

from bench.training import measure
from bench.training.case import CaseSpec
from bench.training.replay import gpipe_order

BASE_ROW = {"run_id": "r", "suite": "s", "kind": "k", "world": 3, "nodes": 1, "backend": "nccl", "device_type": "cuda",
            "threads_per_rank": 1, "oversubscribed": False, "degraded": ""}
CASE = CaseSpec(strategy="pp", model="mlp-pipe", world=3, chunks=1, schedule="gpipe", batch=9)


def _mem(alloc, reserved, rss, kind="cuda"):
    cuda = kind == "cuda"
    return {"memory_kind": kind, "peak_allocated_bytes": alloc if cuda else None, "peak_active_bytes": alloc if cuda else None,
            "peak_reserved_bytes": reserved if cuda else None, "device_used_bytes": 1 if cuda else None,
            "device_total_bytes": 2 if cuda else None, "host_peak_rss_bytes": rss, "host_peak_is_lifetime": False}


def _row(mems):
    def rec(r):
        return {"span": (0.0, 6.0), "spans": [("fwd", r, 0, float(r), r + 1.0), ("bwd", r, -1, 5.0 - r, 6.0 - r)],
                "waits": []}

    facts = [{"recs": [rec(r)] * 3, "mem": m, "solo_s": float("nan"), "role": f"stages {r}", "degraded": "",
              "devices": 1, "comm_in_compute": False, "order": gpipe_order(3, 1) if r == 0 else None, "params": 10}
             for r, m in enumerate(mems)]
    return measure.build_tables(CASE, {"facts": facts, "check": None, "loss": 1.0}, BASE_ROW, ["h"] * 3, 1)["results"][0]


def test_each_peak_names_its_rank():
    row = _row([_mem(50, 60, 300), _mem(40, 90, 100), _mem(45, 80, 500)])
    assert (row["peak_allocated_bytes"], row["peak_allocated_rank"]) == (50, 0)
    assert (row["peak_reserved_bytes"], row["peak_reserved_rank"]) == (90, 1)
    assert (row["peak_memory_bytes"], row["peak_memory_rank"]) == (90, 1)  # CUDA: peak reserved
    assert (row["host_peak_rss_bytes"], row["host_peak_rss_rank"]) == (500, 2)


def test_a_tie_names_the_lowest_rank_and_host_ranks_leave_the_cuda_ranks_null():
    row = _row([_mem(50, 90, 100), _mem(50, 90, 100), _mem(10, 20, 100)])
    assert (row["peak_allocated_rank"], row["peak_reserved_rank"], row["host_peak_rss_rank"]) == (0, 0, 0)
    host = _row([_mem(0, 0, 100, "host"), _mem(0, 0, 700, "host"), _mem(0, 0, 300, "host")])
    assert (host["peak_allocated_bytes"], host["peak_allocated_rank"]) == (None, None)
    assert (host["peak_reserved_bytes"], host["peak_reserved_rank"]) == (None, None)
    assert (host["peak_memory_bytes"], host["peak_memory_rank"]) == (700, 1)  # host: peak RSS


def test_the_rank_columns_are_in_the_schema_and_its_doc():
    from pathlib import Path

    from bench.training.columns import STRATEGY

    doc = (Path(__file__).resolve().parents[1] / "docs" / "schema.md").read_text()
    for col, dtype in (("peak_memory_rank", "int64"), ("peak_allocated_rank", "Int64"), ("peak_reserved_rank", "Int64"),
                       ("host_peak_rss_rank", "int64")):
        assert STRATEGY[col] == dtype
        assert f"| {col} | Int64 |" in doc
