"""The results store under concurrency: two writers into one results root at once, readers while
they write, and meta.json updated from several processes and threads of one run.

Writers and the reader are real processes (multiprocessing, spawn) writing small fake rows through
RunWriter, the way rank 0 of a launch does (one part per finished case, meta.json updated after
each, then the merge); no process group is needed. The reader loops over what `distbench runs`,
`history` and `report` call (bench.results.index.build and scan, bench.results.runs, load_run)."""

import multiprocessing as mp
import threading
import time
import traceback
from pathlib import Path

import bench.kinds  # noqa: F401  (the kinds' tables: a spawned reader imports this module, not conftest)
from bench.results import index as ix
from bench.results import runs as runs_mod
from bench.results.rundir import RunDir
from bench.results.store import RunWriter, list_runs, load_run

CASES = 40  # per run: enough parts that a merge takes long enough for a reader to be inside it
ROUNDS = 3  # runs per writer, one after the other: each finalize is a chance for the race


def _row(run_id: str, i: int) -> dict:
    return {"run_id": run_id, "suite": "s", "kind": "collectives", "case_id": f"c{i:04d}", "world": 2, "nodes": 1,
            "backend": "gloo", "device_type": "cpu", "threads_per_rank": 1, "oversubscribed": False,
            "degraded": "", "collective": "all_reduce", "size_bytes": 8 * (i + 1), "time_median_s": 1e-4,
            "noisy": False, "wrong": 0}


def write_run(root: str, run_id: str, cases: int = CASES):
    """What rank 0 of a launch does to the store: meta, a part and a mark per case, the merge."""
    w = RunWriter(root, "s", run_id, part_prefix="w2-")
    w.update_meta(lambda m: {**m, "suite": "s", "run_id": run_id, "kind": "collectives", "state": "running",
                             "started_utc": run_id[:16], "launches": {"2": {"world": 2, "cases": cases, "done": []}}})
    for i in range(cases):
        w.write_case({"results": [_row(run_id, i)]})
        w.run.mark_done("2", f"c{i:04d}", 0.001)
    w.finish_launch(2, rows=cases, wrong=0)
    w.finalize()
    w.update_meta(lambda m: {**m, "state": "complete", "ended_utc": "now"})


def _writer(root: str, name: str, go, errors):
    try:
        go.wait(60)
        for r in range(ROUNDS):
            write_run(root, f"2026010{r}T00000{name}Z-{name}")
    except Exception:  # noqa: BLE001 - handed to the test, which fails with it
        errors.put(traceback.format_exc())


def _check_run(d: Path, seen: list[str]):
    """One load_run of a run another process may be writing: it never names a problem, never has a
    case twice, and has every case its meta.json (read first) says is done."""
    done = set(runs_mod.read_meta(d).get("launches", {}).get("2", {}).get("done", []))
    run = load_run(d)
    if run.problems:
        seen.append(f"load_run({d.name}) problems: {run.problems}")
    ids = list(run.tables["results"]["case_id"]) if "results" in run.tables else []
    if len(ids) != len(set(ids)):
        seen.append(f"load_run({d.name}): {len(ids) - len(set(ids))} case(s) read twice")
    if not done <= set(ids):
        seen.append(f"load_run({d.name}): {len(done - set(ids))} done case(s) missing")


def _reader(root: str, stop, seen_q, loops_q):
    seen: list[str] = []
    loops = 0
    while not stop.is_set() or loops == 0:
        try:
            listing = list_runs(root)
            if listing.problems:
                seen.append(f"list_runs problems: {listing.problems}")
            if Path(root).is_dir():
                idx = ix.build(root)  # `distbench runs` and `distbench history`
                if idx.problems:
                    seen.append(f"index problems: {idx.problems}")
            for d in runs_mod.find_runs(root):  # `distbench report`'s choice of runs
                runs_mod.summarize(d)
            for d in listing.runs:
                _check_run(d, seen)
        except Exception:  # noqa: BLE001 - a reader that crashes is what this test looks for
            seen.append(traceback.format_exc(limit=-3))
        loops += 1
    seen_q.put(seen[:8])
    loops_q.put(loops)


def test_two_writers_and_a_reader_at_once_lose_nothing_and_read_nothing_half_written(tmp_path):
    ctx = mp.get_context("spawn")
    root = str(tmp_path / "results")
    go, stop = ctx.Event(), ctx.Event()
    errors, seen_q, loops_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    writers = [ctx.Process(target=_writer, args=(root, n, go, errors)) for n in ("a", "b")]
    reader = ctx.Process(target=_reader, args=(root, stop, seen_q, loops_q))
    for p in (*writers, reader):
        p.start()
    time.sleep(0.5)  # the reader is already looping (over an empty root) when the writers start
    go.set()
    for p in writers:
        p.join(120)
    stop.set()
    seen, loops = seen_q.get(timeout=120), loops_q.get(timeout=120)
    reader.join(60)
    assert errors.empty(), errors.get()
    assert all(p.exitcode == 0 for p in (*writers, reader))
    assert seen == [], "\n".join(seen)
    assert loops > 1
    # afterwards: both writers' runs are all there, complete, every case once
    idx = ix.build(root)
    assert idx.problems == []
    assert sorted(idx.runs["run_id"]) == sorted(f"2026010{r}T00000{n}Z-{n}" for r in range(ROUNDS) for n in "ab")
    assert set(idx.runs["state"]) == {"complete"} and set(idx.runs["rows"]) == {CASES}
    assert set(idx.runs["cases_done"]) == {CASES}
    for d in list_runs(root).runs:
        run = load_run(d)
        assert run.problems == [] and sorted(run["results"]["case_id"]) == [f"c{i:04d}" for i in range(CASES)]
        assert not (d / "parts").exists() and not [f for f in d.iterdir() if f.name.startswith(".") and
                                                    f.name != ".lock"]


def _update_launches(run_dir: str, who: str, n: int, go):
    go.wait(60)
    threads = [threading.Thread(target=_marks, args=(run_dir, f"{who}.{t}", n)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _marks(run_dir: str, key: str, n: int):
    rd = RunDir.at(run_dir)
    for i in range(n):
        rd.mark_done(key, f"u{i}")


def test_meta_updates_from_two_processes_and_their_threads_are_all_kept(tmp_path):
    """meta.json is read, changed and written again by every update (the launcher marks the run's
    state while rank 0 marks cases done; telemetry adds its facts): none may be lost."""
    rd = RunDir(tmp_path / "results", "s", "r1")
    rd.update_meta(lambda m: {**m, "suite": "s"})
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    procs = [ctx.Process(target=_update_launches, args=(str(rd.path), who, 60, go)) for who in ("p", "q")]
    for p in procs:
        p.start()
    time.sleep(0.3)
    go.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    launches = rd.read_meta()["launches"]
    assert sorted(launches) == ["p.0", "p.1", "q.0", "q.1"]
    assert {k: len(v["done"]) for k, v in launches.items()} == {k: 60 for k in launches}
    assert not [f for f in rd.path.iterdir() if f.name.startswith(".") and f.name != ".lock"]  # no temp file left


def _merge_during_first(monkeypatch, module, name, writer):
    """module.name runs the writer's merge just before its first call: a merge by another process
    in the middle of a read, made deterministic."""
    real, calls = getattr(module, name), []

    def once(*a, **kw):
        if not calls:
            calls.append(1)
            writer.finalize()
        return real(*a, **kw)

    monkeypatch.setattr(module, name, once)
    return calls


def test_a_merge_in_the_middle_of_load_run_is_read_again(tmp_path, monkeypatch):
    from bench.results import store

    root = tmp_path / "results"
    write_run(str(root), "r1", cases=3)  # merged
    w = RunWriter(root, "s", "r1", part_prefix="resume1-")
    for i in (3, 4):
        w.write_case({"results": [_row("r1", i)]})
    calls = _merge_during_first(monkeypatch, store, "_read_parts", w)  # listed, then merged away
    run = load_run(w.dir)
    assert calls and run.problems == [] and sorted(run["results"]["case_id"]) == [f"c{i:04d}" for i in range(5)]
    assert not (w.dir / "parts").exists()


def test_a_merge_in_the_middle_of_the_index_scan_is_scanned_again(tmp_path, monkeypatch):
    root = tmp_path / "results"
    write_run(str(root), "r1", cases=3)
    w = RunWriter(root, "s", "r1", part_prefix="resume1-")
    for i in (3, 4):
        w.write_case({"results": [_row("r1", i)]})
    calls = _merge_during_first(monkeypatch, ix, "scan", w)
    idx = ix.build(root)
    assert calls and idx.problems == [] and idx.runs["rows"].tolist() == [5]
    df, skipped = ix.scan_runs([w.dir], "filename, case_id")  # what history reads
    assert skipped == [] and sorted(df["case_id"]) == [f"c{i:04d}" for i in range(5)]
