"""Defensive reading of stored runs: corrupt parquet, newer schema, bad meta.json and foreign
files each name the file, and the rest of the run loads; a write the system refuses (a full disk)
is one line naming the path and the free space, and every finished case stays whole."""

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.results import index as ix
from bench.results import rundir, store
from bench.results.schema import SCHEMA_VERSION
from bench.results.store import RunWriter, WriteError, list_runs, load_run
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import bench_index as gen  # noqa: E402  (the synthetic runs of tests/test_history.py)


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
    (tmp_path / "s" / "20240103T000000-c" / ".progress").mkdir(parents=True)  # a run being made: hidden entries only
    runs, problems = list_runs(tmp_path)
    assert [p.name for p in runs] == ["20240101T000000-a", "20240102T000000-b"]
    text = "\n".join(problems)
    assert "README.md" in text and "junk.txt" in text and "emptydir" in text
    assert "baselines" not in text and ".cache" not in text and "20240103T000000-c" not in text and len(problems) == 3
    assert list_runs(tmp_path / "missing") == ([], [])


# ---------------------------------------------------------------------------------------------
# A full disk mid-run: one line naming the path and the free space, every finished case whole


def _refuse(monkeypatch, err, after_bytes=b"PAR1 half"):
    """Every parquet write from now on: some bytes reach the file, then the system refuses."""
    def write_table(table, where, **kw):
        Path(where).write_bytes(after_bytes)
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(store.pq, "write_table", write_table)


def _hidden(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob(".*") if p.name != ".lock")


@pytest.mark.parametrize("err, words", [(errno.ENOSPC, "no space left writing"),
                                        (errno.EDQUOT, "disk quota exceeded writing"),
                                        (errno.EIO, "cannot write")])
def test_a_refused_part_write_is_one_line_and_keeps_every_finished_case(tmp_path, monkeypatch, err, words):
    w = _run(tmp_path)  # three cases written
    w.run.mark_done("2", "c3")
    _refuse(monkeypatch, err)
    with pytest.raises(WriteError) as e:
        w.write_case({"results": [_row(64)]}, done=("2", "c4", 0.1))
    part = w.dir / "parts" / "results" / "w2-00004.parquet"
    msg = str(e.value)
    assert isinstance(e.value, BenchError) and "\n" not in msg  # the CLI prints a BenchError as one line, exit 2
    assert msg.startswith(f"{words} {part}") and " free on /" in msg
    assert msg.endswith(f"; every case finished before it is kept in {w.dir}")
    assert not part.exists() and _hidden(w.dir) == []  # the temp file of the failed write is gone
    run = load_run(w.dir, strict=True)
    assert sorted(run["results"]["size_bytes"]) == [8, 16, 32]
    assert run.meta["launches"]["2"]["done"] == ["c3"]  # the refused case is not marked done: --resume runs it


def test_a_case_is_kept_whole_or_not_at_all(tmp_path, monkeypatch):
    """The second table of a case refused, or the mark in meta.json: the case's first part goes
    too, so a resume never stores that case twice."""
    w = _run(tmp_path)
    real = store.pq.write_table
    calls = []

    def second_refused(table, where, **kw):
        calls.append(where)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(table, where, **kw)

    monkeypatch.setattr(store.pq, "write_table", second_refused)
    sample = {"run_id": "r1", "case_id": "c", "size_bytes": 64, "placement": "in-place", "rank": 0, "iteration": 0,
              "seconds": 1e-4}
    with pytest.raises(WriteError, match="no space left writing .*parts/samples/w2-00004.parquet"):
        w.write_case({"results": [_row(64)], "samples": [sample]}, done=("2", "c4", 0.1))
    assert sorted(p.name for p in (w.dir / "parts" / "results").iterdir()) == [
        "w2-00001.parquet", "w2-00002.parquet", "w2-00003.parquet"]
    monkeypatch.setattr(store.pq, "write_table", real)
    monkeypatch.setattr(rundir.Path, "write_text", _refused_text)
    with pytest.raises(WriteError, match=r"no space left writing .*meta\.json \("):
        w.write_case({"results": [_row(64)]}, done=("2", "c4", 0.1))
    monkeypatch.undo()
    run = load_run(w.dir, strict=True)
    assert sorted(run["results"]["size_bytes"]) == [8, 16, 32] and "launches" not in run.meta
    assert _hidden(w.dir) == []


def _refused_text(self, text, *a, **kw):
    with open(self, "w") as f:
        f.write(text[: len(text) // 2])
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_refused_meta_json_write_leaves_the_old_one(tmp_path, monkeypatch):
    w = _run(tmp_path)
    before = (w.dir / "meta.json").read_text()
    monkeypatch.setattr(rundir.Path, "write_text", _refused_text)
    with pytest.raises(WriteError) as e:
        w.finish_launch(2, rows=3)
    assert str(e.value).startswith(f"no space left writing {w.dir / 'meta.json'} (")
    monkeypatch.undo()
    assert (w.dir / "meta.json").read_text() == before and _hidden(w.dir) == []
    assert load_run(w.dir, strict=True).meta["suite"] == "s"


def test_a_refused_merge_keeps_every_part_and_a_later_one_merges(tmp_path, monkeypatch):
    w = _run(tmp_path)
    _refuse(monkeypatch, errno.ENOSPC)
    with pytest.raises(WriteError, match=r"no space left writing .*results\.parquet \(.* free on /"):
        w.finalize()
    assert len(list((w.dir / "parts" / "results").glob("*.parquet"))) == 3
    assert not (w.dir / "results.parquet").exists() and _hidden(w.dir) == []
    assert sorted(load_run(w.dir, strict=True)["results"]["size_bytes"]) == [8, 16, 32]
    monkeypatch.undo()  # space again
    assert w.finalize() == []
    assert sorted(load_run(w.dir, strict=True)["results"]["size_bytes"]) == [8, 16, 32]


def test_a_merge_stopped_before_removing_its_parts_reads_nothing_twice(tmp_path, monkeypatch):
    """A stop between writing the merged file and removing the parts (rank 0's grace ran out):
    the merged file names the parts it holds, so readers and the next merge skip them."""
    w = _run(tmp_path)
    w2 = RunWriter.at(w.dir, part_prefix="resume1-")
    monkeypatch.setattr(store.Path, "unlink", lambda self, *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        w.finalize()
    monkeypatch.undo()
    assert (w.dir / "results.parquet").exists() and len(list((w.dir / "parts" / "results").iterdir())) == 3
    assert sorted(load_run(w.dir, strict=True)["results"]["size_bytes"]) == [8, 16, 32]
    assert ix.build(tmp_path).runs["rows"].tolist() == [3]
    w2.write_case({"results": [_row(64)]})
    assert w2.finalize() == []
    assert sorted(load_run(w.dir, strict=True)["results"]["size_bytes"]) == [8, 16, 32, 64]
    assert not (w.dir / "parts").exists()


# The real thing: a launch at world 2 whose results root is a tmpfs that fills up mid-run. The
# mount lives in a private mount namespace (unshare -m); the shell below starts the run, waits
# until rank 0 has finished case 1 and entered case 2 (held 2 s before writing it by the test-only
# fault `slowwrite`), fills the tmpfs to the last byte, and copies the results out when it ends.
FILL = r"""
set -u
mount -t tmpfs -o size=60m tmpfs "$MNT" || exit 97
"$PY" -m bench "$@" --out "$MNT/results" >"$COPY/stdout" 2>"$COPY/stderr" &
pid=$!
i=0
until grep -qs '"index": 2' "$MNT"/results/*/*/.progress/rank0.json; do
  i=$((i+1)); [ $i -gt 2400 ] && break; sleep 0.05
done
head -c "$(df -B1 --output=avail "$MNT" | tail -1)" /dev/zero > "$MNT/filler" 2>/dev/null
wait $pid; echo $? > "$COPY/rc"
rm -f "$MNT/filler"
cp -a "$MNT/results" "$COPY/results"
"""


def _tmpfs_why_not() -> str | None:
    if os.geteuid() != 0:
        return f"mounting a tmpfs needs root; this test runs as uid {os.geteuid()}"
    if not shutil.which("unshare"):
        return "needs unshare on PATH (util-linux)"
    r = subprocess.run(["unshare", "-m", "sh", "-c", 'd=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs "$d"; '
                        's=$?; umount "$d" 2>/dev/null; rmdir "$d"; exit $s'], capture_output=True, text=True)
    return None if r.returncode == 0 else f"cannot mount a tmpfs in a mount namespace: {' '.join(r.stderr.split())}"


@pytest.mark.slow  # a launch of 2 ranks: 10-30 s on a busy 2-core machine
def test_a_full_disk_mid_run_ends_in_one_line_and_keeps_the_finished_cases(tmp_path):
    why = _tmpfs_why_not()
    if why:
        pytest.skip(why)
    mnt, copy = tmp_path / "mnt", tmp_path / "copy"
    mnt.mkdir()
    copy.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MNT": str(mnt), "COPY": str(copy), "PY": sys.executable,
           "DISTBENCH_FAULT": "slowwrite:0:2"}
    subprocess.run(["unshare", "-m", "sh", "-c", FILL, "sh", "collectives", "-c", "all_reduce", "--sizes",
                    "1K,2K,4K,8K", "-n", "3", "-w", "1", "--budget-s", "0.005"], cwd=ROOT, env=env, timeout=300,
                   check=True)
    rc, err = int((copy / "rc").read_text()), (copy / "stderr").read_text()
    assert rc == 2 and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("distbench:")]
    said = [re.search(r"no space left writing (\S+) \((\d[^)]*) free on (\S+)\); every case finished before it "
                      r"is kept in (\S+)$", ln) for ln in lines]
    said = [m for m in said if m]
    assert said, err
    path, free, mount, kept = said[0].groups()
    assert mount == str(mnt) and path.startswith(kept + "/") and kept.startswith(f"{mnt}/results/collectives/")
    run_dir = copy / "results" / Path(kept).relative_to(mnt / "results")
    run = load_run(run_dir)
    assert run.problems == [], run.problems
    done = run.meta["launches"]["2"]["done"]
    assert done == ["all_reduce.float32.sum.root-1.latency.w2@1024B"]  # case 1 finished; case 2 never was
    assert run["results"]["size_bytes"].tolist() == [1024]  # whole, readable, once
    assert [p for p in _hidden(run_dir) if not p.startswith(".progress")] == []  # no temp file left
    listed = subprocess.run([sys.executable, "-m", "bench", "runs", "--out", str(copy / "results"), "--format", "json"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    rows = json.loads(listed.stdout)
    assert [(r["cases_done"], r["rows"]) for r in rows] == [(1, 1)], listed.stdout + listed.stderr
    assert len(lines) == 1, lines  # the launcher passes the store's WriteError through, adding nothing


# ---------------------------------------------------------------------------------------------
# `distbench runs`, `history` and `report` over a root where one of two runs has a truncated
# merged table and a truncated part: each skips them, names them, and does not crash


def _root_with_a_damaged_run(tmp_path) -> tuple[Path, Path, Path]:
    """Two runs of one machine; the newer one keeps all_reduce at 4 MiB in a readable part and
    loses the rest to a truncated merged table and a truncated part. Returns (root, good, bad)."""
    root = tmp_path / "results"
    good, bad = gen.generate(root, 2, machines=(2,))
    rows = pd.read_parquet(bad / "results.parquet")  # all_reduce 1M, 4M, broadcast 1M, 4M
    parts = bad / "parts" / "results"
    parts.mkdir(parents=True)
    rows.iloc[[0, 2]].to_parquet(bad / "results.parquet", index=False)
    rows.iloc[[1]].to_parquet(parts / "w2-00001.parquet", index=False)
    rows.iloc[[3]].to_parquet(parts / "w2-00002.parquet", index=False)
    _truncate(bad / "results.parquet", keep=100)
    _truncate(parts / "w2-00002.parquet", keep=100)
    return root, good, bad


def parts_file(run_dir: Path) -> Path:
    return run_dir / "parts" / "results" / "w2-00002.parquet"


def test_runs_skips_and_names_a_truncated_table_and_part(tmp_path, capsys):
    root, good, bad = _root_with_a_damaged_run(tmp_path)
    assert main(["runs", "--out", str(root)]) == 0
    out = capsys.readouterr().out
    assert str(good) in out and str(bad) in out and "# 2 of 2 run(s)" in out
    line = next(ln for ln in out.splitlines() if "unreadable, skipped" in ln)
    assert "results.parquet" in line and "parts/results/w2-00002.parquet" in line
    assert main(["runs", "--out", str(root), "--format", "json"]) == 0
    listed = {r["dir"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[str(good)]["rows"] == 4 and listed[str(bad)]["rows"] == 1
    assert "w2-00002.parquet" in listed[str(bad)]["why"] and listed[str(good)]["why"] == ""
    problems = ix.build(root).problems  # the reasons, each naming its file
    assert [p.split(": ")[0] for p in problems] == [str(bad / "results.parquet"), str(parts_file(bad))]
    assert all("unreadable parquet, skipped" in p for p in problems)



def test_runs_names_an_unreadable_meta_json(tmp_path, capsys):
    root, good, bad = _root_with_a_damaged_run(tmp_path)
    (good / "meta.json").write_text('{"suite": ')  # truncated
    assert main(["runs", "--out", str(root), "--format", "json"]) == 0
    listed = {r["dir"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[str(good)]["why"] == "unreadable, skipped: meta.json" and listed[str(good)]["rows"] == 4
    assert any(p.startswith(f"{good / 'meta.json'}: unreadable meta.json") for p in ix.build(root).problems)


def test_history_skips_a_truncated_table_and_part(tmp_path, capsys):
    root, good, bad = _root_with_a_damaged_run(tmp_path)
    assert main(["history", "--out", str(root), "--group", "all_reduce", "--format", "json"]) == 0
    h = json.loads(capsys.readouterr().out)
    assert [(p["dir"], p["cases"]) for p in h["points"]] == [(str(good), 1), (str(bad), 1)]  # 4 MiB: in both
    said = json.dumps(h["notes"])
    assert "w2-00002.parquet" in said and "results.parquet" in said  # the index's problems, in history's notes


def test_report_skips_and_names_a_truncated_table_and_part(tmp_path, capsys):
    root, good, bad = _root_with_a_damaged_run(tmp_path)
    for argv in (["--out", str(root)], [str(bad), str(good)]):  # the latest run of the kind, and both given
        out_dir = tmp_path / "report" / str(len(argv))
        assert main(["report", *argv, "--output-dir", str(out_dir)]) == 0
        page = (out_dir / "index.html").read_text()
        assert page.count("NOT READ") >= 2
        assert str(bad / "results.parquet") in page and str(parts_file(bad)) in page
    capsys.readouterr()
