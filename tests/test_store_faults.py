"""Defensive reading of stored runs (issue 11): corrupt parquet, newer schema, bad meta.json and
foreign files each name the file, and the rest of the run loads."""

import json

import pytest

from bench.errors import BenchError
from bench.results.schema import SCHEMA_VERSION
from bench.results.store import RunWriter, list_runs, load_run


def _row(size=1024, **kw):
    return {"run_id": "r1", "suite": "s", "kind": "collectives", "case_id": "c", "world": 2, "nodes": 1,
            "backend": "gloo", "device_type": "cpu", "threads_per_rank": 1, "oversubscribed": False,
            "degraded": "", "collective": "all_reduce", "size_bytes": size, "time_median_s": 1e-4,
            "noisy": False, "wrong": 0, **kw}


def _run(tmp_path, sizes=(8, 16, 32), run_id="r1"):
    w = RunWriter(tmp_path, "s", run_id, part_prefix="w2-")
    w.update_meta(lambda m: {**m, "suite": "s", "run_id": run_id})
    for s in sizes:
        w.write_case({"results": [_row(s)]})
    return w


def _truncate(path, keep=20):
    data = path.read_bytes()
    path.write_bytes(data[:keep])


def test_truncated_part_loads_the_rest_and_names_the_file(tmp_path):
    w = _run(tmp_path)
    parts = sorted((w.dir / "parts" / "results").glob("*.parquet"))
    _truncate(parts[1])
    run = load_run(w.dir)
    assert sorted(run["results"]["size_bytes"].tolist()) == [8, 32]
    assert len(run.problems) == 1 and parts[1].name in run.problems[0] and "unreadable parquet" in run.problems[0]
    with pytest.raises(BenchError, match=parts[1].name):
        load_run(w.dir, strict=True)


def test_finalize_keeps_a_corrupt_part_aside_and_records_it(tmp_path):
    w = _run(tmp_path)
    parts = sorted((w.dir / "parts" / "results").glob("*.parquet"))
    _truncate(parts[0])
    problems = w.finalize()  # must not crash
    assert len(problems) == 1 and parts[0].name in problems[0]
    assert (parts[0].parent / (parts[0].name + ".corrupt")).exists()
    assert not parts[1].exists() and not parts[2].exists()  # merged
    meta = json.loads((w.dir / "meta.json").read_text())
    assert meta["problems"] == problems and meta["suite"] == "s"
    run = load_run(w.dir)
    assert sorted(run["results"]["size_bytes"].tolist()) == [16, 32]
    assert any(".corrupt" in p and "not loaded" in p for p in run.problems)


def test_corrupt_merged_table_loads_the_other_tables(tmp_path):
    w = _run(tmp_path)
    w.write_case({"samples": [{"run_id": "r1", "case_id": "c", "size_bytes": 8, "placement": "in-place",
                               "rank": 0, "iteration": 0, "seconds": 1e-4}]})
    w.finalize()
    (w.dir / "results.parquet").write_bytes(b"PAR1 this is not parquet")
    run = load_run(w.dir)
    assert "results" not in run.tables and run["samples"]["seconds"].tolist() == [1e-4]
    assert any("results.parquet" in p for p in run.problems)


def test_resumed_finalize_keeps_the_first_merge(tmp_path):
    w = _run(tmp_path, sizes=(8,))
    w.finalize()
    w2 = RunWriter.at(w.dir, part_prefix="resume1-")
    w2.write_case({"results": [_row(16)]})
    assert w2.finalize() == []
    run = load_run(w.dir)
    assert run["results"]["size_bytes"].tolist() == [8, 16] and run.problems == []


def test_newer_schema_is_a_clear_error(tmp_path):
    w = _run(tmp_path)
    meta = json.loads((w.dir / "meta.json").read_text())
    (w.dir / "meta.json").write_text(json.dumps({**meta, "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(BenchError) as e:
        load_run(w.dir)
    msg = str(e.value)
    assert "meta.json" in msg and str(SCHEMA_VERSION + 1) in msg and str(SCHEMA_VERSION) in msg
    assert "\n" not in msg
    with pytest.raises(BenchError):  # a writer must not rewrite a newer run either
        w.finalize()


def test_invalid_meta_json_is_named_and_tables_still_load(tmp_path):
    w = _run(tmp_path)
    (w.dir / "meta.json").write_text('{"suite": "s", ')  # truncated
    run = load_run(w.dir)
    assert run.meta == {} and len(run["results"]) == 3
    assert any("meta.json" in p and "unreadable" in p for p in run.problems)
    (w.dir / "meta.json").write_text("[1, 2]")
    assert any("not an object" in p for p in load_run(w.dir).problems)
    w.finalize()  # merging does not need the meta
    w.finish_launch(2, rows=3)  # a writer keeps the bad meta aside instead of crashing or overwriting it
    assert (w.dir / "meta.json.corrupt").read_text() == "[1, 2]"
    meta = json.loads((w.dir / "meta.json").read_text())
    assert "kept aside" in meta["problems"][0] and meta["launches"]["2"]["rows"] == 3


def test_foreign_files_are_named_and_ignored(tmp_path):
    w = _run(tmp_path)
    (w.dir / "notes.txt").write_text("mine")
    (w.dir / "stuff").mkdir()
    (w.dir / "parts" / "results" / "README").write_text("x")
    (w.dir / "parts" / "bogus").mkdir()
    (w.dir / "parts" / "bogus" / "x.parquet").write_bytes(b"junk")
    (w.dir / ".DS_Store").write_text("hidden: ignored silently")
    run = load_run(w.dir)
    assert len(run["results"]) == 3
    text = "\n".join(run.problems)
    for name in ("notes.txt", "stuff", "README", "bogus"):
        assert name in text
    assert ".DS_Store" not in text and len(run.problems) == 4


def test_good_run_has_no_problems(tmp_path):
    w = _run(tmp_path)
    w.finalize()
    run = load_run(w.dir)
    assert run.problems == [] and run.meta["schema_version"] == SCHEMA_VERSION


def test_missing_run_dir_is_a_bench_error(tmp_path):
    with pytest.raises(BenchError, match="does not exist"):
        load_run(tmp_path / "nope")


def test_list_runs_names_foreign_entries(tmp_path):
    _run(tmp_path, run_id="20240101T000000-a")
    _run(tmp_path, run_id="20240102T000000-b").finalize()
    (tmp_path / "README.md").write_text("x")
    (tmp_path / "s" / "junk.txt").write_text("x")
    (tmp_path / "s" / "emptydir").mkdir()
    (tmp_path / "baselines" / "fp").mkdir(parents=True)  # known: not a suite
    (tmp_path / ".cache").mkdir()
    runs, problems = list_runs(tmp_path)
    assert [p.name for p in runs] == ["20240101T000000-a", "20240102T000000-b"]
    text = "\n".join(problems)
    assert "README.md" in text and "junk.txt" in text and "emptydir" in text
    assert "baselines" not in text and ".cache" not in text and len(problems) == 3
    assert list_runs(tmp_path / "missing") == ([], [])
