"""bench.results store and schema: parquet round trip keeps the schema, interrupted runs keep their
parts, meta.json merges, conform types every column and refuses one the schema does not know."""

import json

import pandas as pd
import pytest

from bench.results.schema import SCHEMA_VERSION, TABLES, conform
from bench.results.store import RunWriter, load_run


def _row(**kw):
    return {"run_id": "r1", "suite": "s", "kind": "collectives", "case_id": "c", "world": 2, "nodes": 1,
            "backend": "gloo", "device_type": "cpu", "threads_per_rank": 1, "oversubscribed": False,
            "degraded": "", "collective": "all_reduce", "size_bytes": 1024, "time_median_s": 1e-4,
            "noisy": False, "wrong": 0, **kw}


def test_parquet_round_trip_keeps_schema(tmp_path):
    w = RunWriter(tmp_path, "s", "r1", part_prefix="w2-")
    w.update_meta(lambda m: {**m, "suite": "s"})
    w.write_case({"results": [_row(), _row(size_bytes=2048)],
                  "samples": [{"run_id": "r1", "case_id": "c", "size_bytes": 1024, "placement": "in-place",
                               "rank": 0, "iteration": 0, "seconds": 1e-4}]})
    w.write_case({"results": [_row(size_bytes=4096)]})
    w.finalize()
    assert not (tmp_path / "s" / "r1" / "parts").exists()
    run = load_run(tmp_path / "s" / "r1")
    assert run.meta["schema_version"] == SCHEMA_VERSION
    df = run["results"]
    assert df["size_bytes"].tolist() == [1024, 2048, 4096]
    assert list(df.columns[:len(TABLES["results"])]) == list(TABLES["results"])
    assert str(df["size_bytes"].dtype) == "Int64" and str(df["time_median_s"].dtype) == "Float64"
    assert str(df["noisy"].dtype) == "boolean" and str(df["collective"].dtype).startswith("string")
    assert pd.isna(df["algbw_gbps"]).all()  # absent columns come back as typed nulls
    assert run["samples"]["seconds"].tolist() == [1e-4]


def test_interrupted_run_keeps_finished_parts(tmp_path):
    w = RunWriter(tmp_path, "s", "r2")
    w.write_case({"results": [_row()]})
    w.write_case({"results": [_row(size_bytes=8)]})
    # no finalize(): the process died here
    run = load_run(tmp_path / "s" / "r2")
    assert sorted(run["results"]["size_bytes"].tolist()) == [8, 1024]
    leftovers = [p.name for p in (tmp_path / "s" / "r2").rglob("*") if ".tmp" in p.name]
    assert leftovers == []


def test_meta_updates_merge(tmp_path):
    w = RunWriter(tmp_path, "s", "r3")
    w.update_meta(lambda m: {**m, "a": 1})
    w.finish_launch(2, rows=3, wrong=0)
    meta = json.loads((tmp_path / "s" / "r3" / "meta.json").read_text())
    assert meta["a"] == 1 and meta["launches"]["2"]["rows"] == 3 and "finished_utc" in meta["launches"]["2"]


def test_conform_rejects_bad_types():
    with pytest.raises((TypeError, ValueError)):
        conform(pd.DataFrame([_row(size_bytes="big")]), "results")


def test_conform_refuses_an_unknown_column():
    """A mistyped row key must not become a new column while the real one stays null."""
    with pytest.raises(ValueError, match="'time_medain_s' not in the schema"):
        conform(pd.DataFrame([_row(time_medain_s=1e-4)]), "results")
    with pytest.raises(ValueError, match="table 'resutls' is not in the schema"):
        conform(pd.DataFrame([_row()]), "resutls")


def test_a_run_with_an_unknown_column_is_not_merged_silently(tmp_path):
    """Parts are raw; the merge conforms them: the table is left unmerged and the problem, naming
    the column, is returned and recorded in meta.json."""
    w = RunWriter(tmp_path, "s", "r4")
    w.write_case({"results": [_row(wrnog=0)]})
    problems = w.finalize()
    assert len(problems) == 1 and "'wrnog' not in the schema" in problems[0]
    assert not (w.dir / "results.parquet").exists()
    assert json.loads((w.dir / "meta.json").read_text())["problems"] == problems


def test_schema_doc_is_generated_from_the_code():
    import subprocess
    import sys

    from conftest import ROOT

    p = subprocess.run([sys.executable, str(ROOT / "tools/schema_doc.py"), "--check"], capture_output=True)
    assert p.returncode == 0, "docs/schema.md is stale: run python tools/schema_doc.py"
