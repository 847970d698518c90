"""`distbench injob` at its edges: records that do not say how many ranks a collective's group holds
(a torch profiler trace without distributedInfo, an NCCL Inspector line without n_ranks, a flight
recorder dump whose pg_config lists no ranks), and a trace with no collective in it. Bus bandwidth
needs the group size (nccl-tests doc/PERFORMANCE.md: the bus factor at n ranks): without it the row
is kept, busbw left blank and the note says why; never a traceback."""

import json
from pathlib import Path

import pytest
import report_fixtures as rf
from conftest import assert_usage_error, run_cli
from test_injob_formats import _fr_dump, _fr_entry, _inspector_line

from bench.imports import flight_recorder, kineto, nccl_inspector
from bench.imports.injob import compare, read_bytes, summarize
from bench.results.store import load_run

# A gloo span as ProcessGroupGloo records it with record_shapes=True, in a trace exported without
# distributedInfo (a job profiled before init_process_group, or a hand-cut trace)
GLOO_NO_INFO = {"traceEvents": [{"ph": "X", "name": "gloo:all_reduce", "ts": 10, "dur": 50, "pid": 1, "tid": 2,
                                 "args": {"Input Dims": [[1024]], "Input type": ["float"]}}]}
UNKNOWN = "group size unknown"


def _files(tmp_path) -> dict[str, Path]:
    kin = tmp_path / "trace.json"
    kin.write_text(json.dumps(GLOO_NO_INFO))
    insp = tmp_path / "node-a-pid1.log"
    line = json.loads(_inspector_line(0, "AllReduce", 4096, 10))
    del line["header"]["n_ranks"]
    insp.write_text(json.dumps(line) + "\n")
    fr = tmp_path / "fr_rank_0.json"
    dump = _fr_dump([_fr_entry(0, "nccl:all_reduce", [[1024]], [[1024]], 0.5)])
    dump["pg_config"] = {}
    fr.write_text(json.dumps(dump))
    return {"kineto": kin, "nccl-inspector": insp, "flight-recorder": fr}


READERS = {"kineto": kineto, "nccl-inspector": nccl_inspector, "flight-recorder": flight_recorder}


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_a_group_of_unknown_size_keeps_its_row_without_busbw(fmt, tmp_path):
    path = _files(tmp_path)[fmt]
    r = READERS[fmt].read(path, read_bytes(path))
    assert [c.group_size for c in r.calls] == [0]
    assert any(UNKNOWN in n for n in r.notes), r.notes
    (row,) = summarize([r]).to_dict("records")
    assert row["size_bytes"] == 4096 and row["time_s"] > 0
    assert row["algbw_gbps"] == pytest.approx(4096 / row["time_s"] / 1e9)
    assert row["busbw_gbps"] is None or row["busbw_gbps"] != row["busbw_gbps"]  # null (None or NaN)
    bench = load_run(rf.collectives_run(tmp_path / "results"))["results"]
    (beside,) = compare(summarize([r]), bench).to_dict("records")
    assert beside["bench_time_s"] is None and UNKNOWN in beside["note"]


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_the_command_prints_the_row_and_the_note(fmt, tmp_path):
    path = _files(tmp_path)[fmt]
    p = run_cli("injob", str(path), "--format", "json")
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr
    (row,) = json.loads(p.stdout)["rows"]
    assert row["group_size"] == 0 and row["busbw_gbps"] is None and row["size_bytes"] == 4096
    assert UNKNOWN in p.stderr
    t = run_cli("injob", str(path))
    assert t.returncode == 0, t.stderr
    (line,) = [ln for ln in t.stdout.splitlines() if ln.startswith("all_reduce")]
    assert line[48:51].strip() == "?" and line.split()[-1] == "-"  # n unknown, busbw blank (columns of render_table)


def test_save_leaves_out_rows_of_an_unknown_group_size(tmp_path):
    path = _files(tmp_path)["kineto"]
    out = tmp_path / "saved"
    p = run_cli("injob", str(path), "--save", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "--save: 1 row(s) of an unknown group size not stored" in p.stderr
    assert not out.exists()


def test_a_trace_with_no_collective_is_one_line(tmp_path):
    """The rank taken from the file's place among the files is a note, not something the trace holds."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": []}))
    p = run_cli("injob", str(path), "--out", str(tmp_path / "out"))
    assert_usage_error(p.returncode, p.stderr, f"no collective in '{path}'", tmp_path / "out")


def test_a_trace_with_only_other_events_is_one_line(tmp_path):
    path = tmp_path / "rank0_trace.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1,
                                                 "tid": 1}], "distributedInfo": {"rank": 0, "world_size": 2}}))
    p = run_cli("injob", str(path), "--out", str(tmp_path / "out"))
    assert_usage_error(p.returncode, p.stderr, "no collective in", tmp_path / "out")
