"""`distbench export --format openmetrics | textfile`: every kind's stored runs as Prometheus
metrics. Each export is read back with prometheus_client's own parsers and checked by Prometheus'
own tools: `promtool check metrics` (the text format 0.0.4 linter) on the textfile, and
`promtool tsdb create-blocks-from openmetrics` (Prometheus' OpenMetrics parser, the backfill path)
on the OpenMetrics text. A node_exporter started on the textfile's directory serves our series.
Values are the stored numbers exactly (a median is the run's stored median, GB/s x 1e9)."""

import json
import math
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client import exposition
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from bench.cli import main
from bench.results.fingerprint import of_run
from bench.results.store import load_run, write_json
from conftest import assert_usage_error, run_cli
from report_fixtures import _meta, _write, allreduce_run, collectives_run, pipeline_run, strategies_run

PROMTOOL = shutil.which("promtool")
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: apt-get install prometheus "
                                    "(Debian's package ships /usr/bin/promtool)")
needs_node_exporter = pytest.mark.skipif(NODE_EXPORTER is None, reason="node_exporter not found: apt-get install "
                                         "prometheus-node-exporter")
START = 1767225600.0  # the fixtures' started_utc, 2026-01-01T00:00:00+00:00


def doctor_run(root: Path, run_id="20260101T000500Z-doc001", suspects=True) -> Path:
    """A doctor run of 4 ranks on 2 hosts as the kind stores it: pair rows, and its verdict's table."""
    hosts = ["node-a", "node-a", "node-b", "node-b"]
    rows = []
    for src in range(4):
        for dst in range(4):
            if src != dst:
                t = 1e-3 * (3.0 if {src, dst} == {1, 2} else 1.0)
                rows.append({"run_id": run_id, "suite": "doctor", "kind": "doctor", "case_id": f"doctor.pair.{src}-{dst}",
                             "world": 4, "nodes": 2, "backend": "gloo", "collective": "sendrecv", "size_bytes": 65536,
                             "placement": "p2p", "samples": 4, "time_median_s": t, "time_min_s": t * 0.9,
                             "time_max_s": t * 1.2, "time_mean_s": t * 1.05, "algbw_gbps": 65536 / t / 1e9,
                             "doctor_test": "pair", "src_rank": src, "dst_rank": dst, "src_host": hosts[src],
                             "dst_host": hosts[dst], "link_class": "intra" if hosts[src] == hosts[dst] else "inter"})
    tables = {"results": rows}
    if suspects:
        tables["doctor_suspects"] = [
            {"run_id": run_id, "position": 1, "suspect": "link rank 1 <-> rank 2", "scope": "rank-link", "factor": 3.0,
             "mads": math.inf, "evidence": "rank 1 <-> rank 2: 21.8 MB/s, class median 65.5 MB/s"},
            {"run_id": run_id, "position": 2, "suspect": "rank 3 compute", "scope": "compute", "factor": 1.25,
             "mads": 6.5, "evidence": "rank 3 compute: 5 ms per matmul, median 4 ms"}]
    meta = _meta(run_id, "doctor", "doctor", worlds=(4,))
    for r in meta["launches"]["4"]["ranks"]:
        r["host"] = hosts[r["rank"]]
    meta["launches"]["4"]["nodes"] = 2
    return _write(root / "doctor" / run_id, tables, meta)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("om") / "results"
    return {"collectives": collectives_run(root), "allreduce": allreduce_run(root), "pipeline": pipeline_run(root),
            "strategies": strategies_run(root), "doctor": doctor_run(root),
            "doctor-clean": doctor_run(root, "20260101T000600Z-doc002", suspects=False)}


def export(*argv) -> tuple[int, str, str]:
    r = run_cli("export", *map(str, argv))
    return r.returncode, r.stdout, r.stderr


def openmetrics(capsys, *run_dirs) -> dict:
    """{family name: Metric} of `distbench export --format openmetrics RUN...`, read by prometheus_client's parser."""
    assert main(["export", "--format", "openmetrics", *map(str, run_dirs)]) == 0
    text = capsys.readouterr().out
    assert text.endswith("# EOF\n")
    return {m.name: m for m in parse_openmetrics(text)}


def samples(metric, suffix="", **labels) -> list:
    return [s for s in metric.samples if s.name == metric.name + suffix
            and all(s.labels.get(k) == v for k, v in labels.items())]


def one(metric, suffix="", **labels):
    (s,) = samples(metric, suffix, **labels)
    return s


def results(run_dir) -> pd.DataFrame:
    return load_run(run_dir)["results"]


# ---- values -------------------------------------------------------------------------------------------


def test_a_collective_s_median_busbw_and_spread_are_the_stored_numbers(runs, capsys):
    fams = openmetrics(capsys, runs["collectives"])
    t, bus = fams["distbench_op_time_seconds"], fams["distbench_op_busbw_bytes_per_second"]
    assert t.type == "summary" and t.unit == "seconds" and bus.unit == "bytes_per_second"
    res = results(runs["collectives"])
    assert len(samples(t)) == 3 * len(res)  # p25, median and p75 stored: three quantiles per row
    for r in res.itertuples():
        key = {"collective": r.collective, "size_bytes": str(r.size_bytes), "placement": r.placement}
        assert one(t, quantile="0.5", **key).value == float(r.time_median_s)
        assert one(t, quantile="0.25", **key).value == float(r.time_p25_s)
        assert one(t, quantile="0.75", **key).value == float(r.time_p75_s)
        assert one(bus, **key).value == float(r.busbw_gbps) * 1e9
        s = one(t, quantile="0.5", **key)
        assert float(s.timestamp) == START
        assert s.labels == {**key, "quantile": "0.5", "run_id": "20260101T000000Z-coll01", "suite": "collectives",
                            "kind": "collectives", "machine": "cpu-test-cpu-9000-2c-gloo-w2-torch2.13", "hosts": "node-a",
                            "case_id": r.case_id, "world": "2", "mode": "latency", "dtype": "float32", "op": r.op,
                            "threads_per_rank": "1", "device_type": "cpu", "algorithm": "native", "backend": "gloo"}
    assert samples(t, "_count") == []  # the fixture stores no mean: no count and sum


def test_count_and_sum_are_the_samples_and_mean_times_samples(runs, capsys):
    t = openmetrics(capsys, runs["doctor"])["distbench_op_time_seconds"]
    for r in results(runs["doctor"]).itertuples():
        key = {"case_id": r.case_id, "doctor_test": "pair"}
        assert one(t, "_count", **key).value == 4
        assert one(t, "_sum", **key).value == float(r.time_mean_s) * 4
        assert [(s.labels["quantile"], s.value) for s in t.samples if s.labels.get("case_id") == r.case_id
                and "quantile" in s.labels] == [("0.0", float(r.time_min_s)), ("0.5", float(r.time_median_s)),
                                                ("1.0", float(r.time_max_s))]


def test_an_allreduce_run_labels_its_algorithm_at_each_world(runs, capsys):
    t = openmetrics(capsys, runs["allreduce"])["distbench_op_time_seconds"]
    res = results(runs["allreduce"])
    for r in res.itertuples():
        s = one(t, quantile="0.5", algorithm=r.algorithm, world=str(r.world), size_bytes=str(r.size_bytes))
        assert s.value == float(r.time_median_s) and s.labels["kind"] == "allreduce"
    assert one(openmetrics(capsys, runs["allreduce"])["distbench_run"], "_info").labels["world"] == "2+4"


def test_a_pipeline_run_s_step_time_throughput_bubble_and_memory(runs, capsys):
    fams = openmetrics(capsys, runs["pipeline"])
    step, bubble = fams["distbench_step_time_seconds"], fams["distbench_bubble_ratio"]
    for r in results(runs["pipeline"]).itertuples():
        key = {"schedule": r.schedule, "chunks": str(r.chunks)}
        assert one(step, quantile="0.5", **key).value == float(r.step_median_s)
        assert one(fams["distbench_samples_per_second"], **key).value == float(r.samples_per_s)
        assert one(fams["distbench_peak_memory_bytes"], memory_kind="host", **key).value == float(r.peak_memory_bytes)
        assert one(bubble, source="measured", **key).value == float(r.bubble_measured)
        assert one(bubble, source="gpipe_theory", **key).value == float(r.bubble_gpipe_theory)
        assert one(bubble, source="replay", **key).value == float(r.replay_bubble)
    assert "distbench_op_time_seconds" not in fams  # no timed op in a training run
    assert one(step, quantile="0.5", chunks="4", schedule="1f1b").labels["strategy"] == "pp"


def test_an_older_strategies_run_is_named_by_its_rows(runs, capsys):
    """meta.json without `kind` (rows say 'strategy'): the kind label is the kind's one name."""
    fams = openmetrics(capsys, runs["strategies"])
    for r in results(runs["strategies"]).itertuples():
        s = one(fams["distbench_step_time_seconds"], quantile="0.5", strategy=r.strategy, model=r.model)
        assert s.value == float(r.step_median_s) and s.labels["kind"] == "strategies"
    assert "distbench_bubble_ratio" in fams and samples(fams["distbench_bubble_ratio"], strategy="ddp") == []


def test_the_doctor_s_suspects_one_series_each(runs, capsys):
    fams = openmetrics(capsys, runs["doctor"], runs["doctor-clean"])
    count = fams["distbench_suspects"]
    assert one(count, run_id="20260101T000500Z-doc001").value == 2
    assert one(count, run_id="20260101T000600Z-doc002").value == 0  # judged, nothing found
    slow = fams["distbench_suspect_slowdown_ratio"]
    assert [(s.labels["position"], s.labels["suspect"], s.labels["scope"], s.value) for s in slow.samples] == \
        [("1", "link rank 1 <-> rank 2", "rank-link", 3.0), ("2", "rank 3 compute", "compute", 1.25)]
    assert [s.value for s in fams["distbench_suspect_shortfall_ratio"].samples] == [1 - 1 / 3.0, 1 - 1 / 1.25]
    assert [s.value for s in fams["distbench_suspect_mads"].samples] == [math.inf, 6.5]
    assert one(slow, position="1").labels["evidence"] == "rank 1 <-> rank 2: 21.8 MB/s, class median 65.5 MB/s"
    assert one(slow, position="1").labels["hosts"] == "node-a,node-b"


def test_kinds_without_a_verdict_have_no_suspect_series(runs, capsys):
    fams = openmetrics(capsys, runs["collectives"], runs["pipeline"])
    assert not {n for n in fams if "suspect" in n}


def test_the_run_info_series(runs, capsys):
    info = one(openmetrics(capsys, runs["collectives"])["distbench_run"], "_info")
    meta = load_run(runs["collectives"]).meta
    assert info.value == 1 and float(info.timestamp) == START
    assert info.labels == {"run_id": "20260101T000000Z-coll01", "suite": "collectives", "kind": "collectives",
                           "machine": of_run(meta).slug(), "hosts": "node-a", "git_sha": "0123456789abcdef0123",
                           "git_dirty": "true", "torch": "2.13.0+cpu", "nccl": "", "cuda": "", "python": "3.11",
                           "launcher": "", "backend": "gloo", "world": "2", "started_utc": "2026-01-01T00:00:00+00:00"}


def test_several_runs_in_one_export_each_keep_their_time(runs, capsys):
    fams = openmetrics(capsys, runs["collectives"], runs["pipeline"], runs["doctor"])
    start = fams["distbench_run_start_time_seconds"]
    assert sorted((s.labels["kind"], s.value, float(s.timestamp)) for s in start.samples) == \
        [(k, START, START) for k in ("collectives", "doctor", "pipeline")]


def test_a_run_without_started_utc_is_stamped_by_its_run_id(tmp_path, capsys):
    run = collectives_run(tmp_path)
    meta = load_run(run).meta
    del meta["started_utc"]
    write_json(meta, run / "meta.json")
    info = one(openmetrics(capsys, run)["distbench_run"], "_info")
    assert float(info.timestamp) == START and info.labels["started_utc"] == ""


# ---- Prometheus' own tools -----------------------------------------------------------------------------


KINDS = ("collectives", "allreduce", "pipeline", "strategies", "doctor")


@needs_promtool
@pytest.mark.parametrize("kind", KINDS)
def test_promtool_checks_the_textfile_of_every_kind(runs, kind, tmp_path):
    out = tmp_path / f"{kind}.prom"
    assert main(["export", "--format", "textfile", str(runs[kind]), "-o", str(out)]) == 0
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=out.read_text(), capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


@needs_promtool
@pytest.mark.parametrize("kind", KINDS)
def test_prometheus_backfills_the_openmetrics_of_every_kind(runs, kind, tmp_path):
    """`promtool tsdb create-blocks-from openmetrics`: Prometheus' OpenMetrics parser reads the file
    (a wrong type, unit, label or a missing # EOF fails it) into a block at the run's time; what
    `promtool tsdb dump` reads back from the block is every sample, value for value."""
    out, db = tmp_path / f"{kind}.om", tmp_path / "blocks"
    assert main(["export", "--format", "openmetrics", str(runs[kind]), "-o", str(out)]) == 0
    r = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(out), str(db)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    (db / "wal").mkdir()  # promtool's dump opens the database's write-ahead log, which a backfill does not make
    dump = subprocess.run([PROMTOOL, "tsdb", "dump", str(db)], capture_output=True, text=True, timeout=120)
    assert dump.returncode == 0, dump.stderr[-2000:]
    stored = {}
    for line in dump.stdout.splitlines():  # {__name__="x", a="b", ...} VALUE MILLISECONDS
        series, value, ms = line.rsplit(" ", 2)
        stored[series] = (float(value), int(ms))
    exported = {"{" + ", ".join(f'{k}="{v}"' for k, v in sorted({"__name__": s.name, **s.labels}.items()) if v) + "}":
                (s.value, int(float(s.timestamp) * 1000)) for m in parse_openmetrics(out.read_text()) for s in m.samples
                if '"' not in "".join(s.labels.values())}  # (no label value here needs quoting; an empty one is none)
    assert exported and {k: stored.get(k) for k in exported} == exported
    assert {ms for _, ms in stored.values()} == {int(START * 1000)}


def test_the_textfile_has_no_timestamps_and_the_same_series(runs, tmp_path, capsys):
    """node_exporter refuses a file with timestamps (collector/textfile.go hasTimestamps)."""
    out = tmp_path / "all.prom"
    assert main(["export", "--format", "textfile", *map(str, runs.values()), "-o", str(out)]) == 0
    text = out.read_text()
    flat = {(s.name, tuple(sorted(s.labels.items()))): s for m in parse_text(text) for s in m.samples}
    assert flat and all(s.timestamp is None for s in flat.values())
    om = {(s.name, tuple(sorted(s.labels.items()))): s.value for m in openmetrics(capsys, *runs.values()).values()
          for s in m.samples}
    assert {k: s.value for k, s in flat.items()} == om
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all.prom"]  # no temp file left beside it


def test_a_failed_textfile_write_leaves_the_old_file_whole(runs, tmp_path, monkeypatch):
    """Written to a temp file, then renamed: a write that fails keeps the previous file as it was."""
    out = tmp_path / "distbench.prom"
    assert main(["export", "--format", "textfile", str(runs["collectives"]), "-o", str(out)]) == 0
    before = out.read_bytes()

    def broken(registry, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(exposition, "generate_latest", broken)
    assert main(["export", "--format", "textfile", str(runs["pipeline"]), "-o", str(out)]) == 2
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["distbench.prom"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(url: str, proc, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read().decode()
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"node_exporter did not serve {url}: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)


@needs_node_exporter
def test_node_exporter_serves_the_textfile(runs, tmp_path):
    d = tmp_path / "textfile"
    d.mkdir()
    assert main(["export", "--format", "textfile", str(runs["collectives"]), str(runs["doctor"]),
                 "-o", str(d / "distbench.prom")]) == 0
    port = _free_port()
    proc = subprocess.Popen([NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
                             f"--collector.textfile.directory={d}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        text = _scrape(f"http://127.0.0.1:{port}/metrics", proc)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    fams = {m.name: m for m in parse_text(text)}
    assert one(fams["node_textfile_scrape_error"]).value == 0
    r = results(runs["collectives"]).iloc[0]
    s = one(fams["distbench_op_time_seconds"], quantile="0.5", case_id=r["case_id"], size_bytes=str(r["size_bytes"]),
            placement=r["placement"])
    assert s.value == float(r["time_median_s"]) and s.labels["machine"] == "cpu-test-cpu-9000-2c-gloo-w2-torch2.13"
    assert one(fams["distbench_suspects"]).value == 2


# ---- bad input -----------------------------------------------------------------------------------------


def test_an_unknown_format_is_one_line(runs, tmp_path):
    rc, _, err = export(runs["collectives"], "--format", "influx", "-o", tmp_path / "x.prom")
    assert_usage_error(rc, err, "argument --format: invalid choice: 'influx'", tmp_path / "x.prom")


@pytest.mark.parametrize("fmt", ["openmetrics", "textfile"])
def test_a_path_that_is_not_a_run_is_one_line(runs, tmp_path, fmt):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out.prom"
    rc, _, err = export("--format", fmt, runs["collectives"], tmp_path / "empty", "-o", out)
    assert_usage_error(rc, err, "is not a run or baseline directory (no meta.json)", out)
    rc, _, err = export("--format", fmt, tmp_path / "nowhere", "-o", out)
    assert_usage_error(rc, err, "does not exist", out)


def test_the_textfile_needs_a_prom_file(runs, tmp_path):
    rc, _, err = export("--format", "textfile", runs["collectives"])
    assert_usage_error(rc, err, "give --output DIR/NAME.prom (got no --output)", tmp_path / "none")
    rc, _, err = export("--format", "textfile", runs["collectives"], "-o", tmp_path / "metrics.txt")
    assert_usage_error(rc, err, "reads only *.prom files", tmp_path / "metrics.txt")


def test_pytest_benchmark_takes_one_run(runs, tmp_path):
    rc, _, err = export(runs["collectives"], runs["pipeline"], "-o", tmp_path / "x.json")
    assert_usage_error(rc, err, "give one RUN (got 2)", tmp_path / "x.json")


# ---- a real run ----------------------------------------------------------------------------------------


@pytest.mark.slow  # one launch of 2 ranks: about 8 s on a 2-core machine
def test_a_real_collectives_run_exports_its_medians(tmp_path, capsys):
    r = run_cli("collectives", "-c", "all_reduce", "--sizes", "1K", "--iters", "5", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    (run,) = (tmp_path / "collectives").iterdir()
    t = openmetrics(capsys, run)["distbench_op_time_seconds"]
    for row in results(run).itertuples():
        key = {"size_bytes": "1024", "placement": row.placement, "rank_reduce": row.rank_reduce}
        assert one(t, quantile="0.5", **key).value == float(row.time_median_s)
        assert one(t, "_count", **key).value == row.samples
    if PROMTOOL:
        out = tmp_path / "real.prom"
        assert main(["export", "--format", "textfile", str(run), "-o", str(out)]) == 0
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=out.read_text(), capture_output=True, text=True,
                               timeout=60)
        assert (check.returncode, check.stdout, check.stderr) == (0, "", "")


# ---- imported runs, colliding rows and runs given twice ------------------------------------------------

IMPORTS = Path(__file__).parent / "data" / "imports"
NCCL_TEXT = IMPORTS / "all_reduce_perf-2.17.6.txt"  # nccl-tests 2.17.6, 8 ranks, 13 sizes x 2 placements
NCCL_JSON = IMPORTS / "all_reduce_perf-2.17.6.json"  # the same run's -J file


def _imported(tmp_path, capsys, *files) -> Path:
    """`distbench import nccl-tests FILE...`: the run directory it stored."""
    rc = main(["import", "nccl-tests", *map(str, files), "--out", str(tmp_path / "imported")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return Path(out.out.strip().rsplit(": ", 1)[1])


def _blocking_copy(tmp_path) -> Path:
    """The same log as run with -z 1 (nccl-tests prints its `# Blocking Enabled` line: util.cu writeDeviceReport)."""
    text = NCCL_TEXT.read_text().replace("-f 4 -g 1", "-f 4 -g 1 -z 1", 1)
    lines = text.splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("# nThread")) + 1
    lines.insert(at, "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n")
    f = tmp_path / "z1.txt"
    f.write_text("".join(lines))
    return f


def test_rows_that_differ_only_in_tool_options_are_two_series(tmp_path, capsys):
    """An import of a run with and without -z 1 stores 52 rows; each is its own series, labelled tool_options."""
    run = _imported(tmp_path, capsys, NCCL_TEXT, _blocking_copy(tmp_path))
    res = results(run)
    assert len(res) == 52 and sorted(set(res["tool_options"])) == ["", "-z 1"]
    bus = openmetrics(capsys, run)["distbench_op_busbw_bytes_per_second"]
    assert len(bus.samples) == 52
    for r in res.itertuples():
        key = {"size_bytes": str(r.size_bytes), "placement": r.placement}
        (s,) = [s for s in samples(bus, **key) if s.labels.get("tool_options", "") == r.tool_options]
        assert s.value == float(r.busbw_gbps) * 1e9


def test_rows_that_still_share_every_label_are_one_line(tmp_path, capsys):
    """The same log imported twice into one run: two rows per case, nothing tells them apart; the export
    refuses rather than keep one of them silently."""
    run = _imported(tmp_path, capsys, NCCL_TEXT, NCCL_TEXT)
    assert len(results(run)) == 52
    out = tmp_path / "x.om"
    rc, _, err = export("--format", "openmetrics", run, "-o", out)
    assert_usage_error(rc, err, "26 pair(s) of results rows share every label", out)


def test_the_same_run_given_twice_is_exported_once(runs, tmp_path, capsys):
    one_run = {(s.name, tuple(sorted(s.labels.items()))) for m in openmetrics(capsys, runs["collectives"]).values()
               for s in m.samples}
    d = runs["collectives"]
    twice = [(s.name, tuple(sorted(s.labels.items()))) for m in openmetrics(
        capsys, d, d.parent / ".." / d.parent.name / d.name).values() for s in m.samples]
    assert len(twice) == len(set(twice)) and set(twice) == one_run


def test_a_copy_of_a_run_is_refused_in_one_line(runs, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(runs["collectives"], copy)
    out = tmp_path / "x.prom"
    rc, _, err = export("--format", "textfile", runs["collectives"], copy, "-o", out)
    assert_usage_error(rc, err, "run id 20260101T000000Z-coll01", out)


@needs_node_exporter
def test_node_exporter_serves_a_run_given_twice_beside_another(runs, tmp_path):
    """node_exporter refuses a file with a series twice ("was collected before with the same name and label
    values"), which promtool passes: a run given twice is exported once."""
    d = tmp_path / "textfile"
    d.mkdir()
    assert main(["export", "--format", "textfile", str(runs["collectives"]), str(runs["collectives"]),
                 str(runs["doctor"]), "-o", str(d / "distbench.prom")]) == 0
    port = _free_port()
    proc = subprocess.Popen([NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
                             f"--collector.textfile.directory={d}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        text = _scrape(f"http://127.0.0.1:{port}/metrics", proc)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    log = proc.stderr.read().decode()
    assert "was collected before with the same name and label values" not in log, log[-2000:]
    fams = {m.name: m for m in parse_text(text)}
    assert one(fams["node_textfile_scrape_error"]).value == 0
    assert sorted(s.labels["kind"] for s in fams["distbench_run_start_time_seconds"].samples) == \
        ["collectives", "doctor"]


def test_an_imported_nccl_tests_time_is_a_mean_not_a_quantile(tmp_path, capsys):
    """nccl-tests' time is the mean over its iterations (doc/PERFORMANCE.md): its own gauge, never quantile 0.5."""
    run = _imported(tmp_path, capsys, NCCL_TEXT)
    fams = openmetrics(capsys, run)
    assert "distbench_op_time_seconds" not in fams  # no per-iteration figure in the text: no quantile at all
    mean = fams["distbench_op_time_mean_seconds"]
    assert mean.type == "gauge" and mean.unit == "seconds"
    for r in results(run).itertuples():
        s = one(mean, size_bytes=str(r.size_bytes), placement=r.placement)
        assert s.value == float(r.time_median_s) and s.labels["rank_reduce"] == "avg"


def _per_iter_json(tmp_path) -> Path:
    """The -J file of a -I 1 run (util.cu writePerIterReport): per-iteration CUDA-event times well below the
    printed host-timer mean, as they are for small sizes; p50_us is sorted[n / 2] (computeIterStats)."""
    doc = json.loads(NCCL_JSON.read_text())
    doc["args"] += ["-I", "1"]
    doc["config"]["per_iter_timing"] = "true"
    for k, r in enumerate(doc["results"]):
        for key in ("out_of_place", "in_place"):
            times = [r[key]["time"] * (0.5 + 0.01 * ((i * 7 + k) % 5)) for i in range(20)]
            r[f"{key}_per_iter"] = {"skipped_iterations": 0, "min_us": min(times), "max_us": max(times),
                                    "avg_us": sum(times) / 20, "p50_us": sorted(times)[10], "p95_us": sorted(times)[18],
                                    "p99_us": max(times), "stdev_us": 0.5, "cv_pct": 1.5, "times_us": times}
    f = tmp_path / "ar.json"
    f.write_text(json.dumps(doc))
    return f


def test_per_iteration_quantiles_are_in_order_and_the_mean_apart(tmp_path, capsys):
    f = _per_iter_json(tmp_path)
    run = _imported(tmp_path, capsys, f)
    fams = openmetrics(capsys, run)
    t, mean = fams["distbench_op_time_seconds"], fams["distbench_op_time_mean_seconds"]
    doc = json.loads(f.read_text())
    for res in doc["results"]:
        for key, placement in (("out_of_place", "out-of-place"), ("in_place", "in-place")):
            it = res[f"{key}_per_iter"]
            lab = {"size_bytes": str(res["size"]), "placement": placement}
            got = [(s.labels["quantile"], s.value) for s in samples(t, **lab) if "quantile" in s.labels]
            assert got == [(q, pytest.approx(it[k] * 1e-6, rel=1e-12)) for q, k in
                           (("0.0", "min_us"), ("0.5", "p50_us"), ("0.95", "p95_us"), ("1.0", "max_us"))]
            assert [v for _, v in got] == sorted(v for _, v in got)
            assert one(t, "_count", **lab).value == 20
            assert one(t, "_sum", **lab).value == pytest.approx(it["avg_us"] * 1e-6 * 20, rel=1e-12)
            assert one(mean, **lab).value == pytest.approx(res[key]["time"] * 1e-6, rel=1e-12)


def test_an_imported_param_time_is_a_mean_gauge_not_a_quantile(tmp_path, capsys):
    """PARAM's Time(us):p50 is the median over ranks of each rank's mean over its iterations: no
    iteration's quantile, so the mean gauge, its rank_reduce label saying median (over ranks)."""
    rc = main(["import", "param", str(IMPORTS / "param-comms-all_reduce.log"), "--out", str(tmp_path / "imported")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    run = Path(out.out.strip().rsplit(": ", 1)[1])
    fams = openmetrics(capsys, run)
    assert "distbench_op_time_seconds" not in fams
    mean = fams["distbench_op_time_mean_seconds"]
    for r in results(run).itertuples():
        s = one(mean, size_bytes=str(r.size_bytes))
        assert s.value == float(r.time_median_s) and s.labels["rank_reduce"] == "median"
