"""`distbench import nccl-tests` at its edges: a -J file whose fields have the wrong types, a text log
cut off in its last row, a -J file of an NCCL_TESTS_SPLIT run, and the -J per-iteration median.

The -J layout is nccl-tests' own (NVIDIA/nccl-tests at a0b82b2, src/util.cu: writeDeviceReport writes
`config` with `devices`, one jsonRankInfo {rank, group, pid, hostname, device, device_hex, device_info}
per process, `group` being the process's NCCL_TESTS_SPLIT colour (src/common.cu main); writePerIterReport
writes `p50_us` = sorted[n / 2] of computeIterStats)."""

import json
from pathlib import Path

import pytest

from conftest import one_line_error as _one_line_error

from bench.cli import main
from bench.imports import nccl_tests
from bench.results.store import load_run

DATA = Path(__file__).parent / "data" / "imports"
TEXT = DATA / "all_reduce_perf-2.17.6.txt"  # nccl-tests 2.17.6, mpirun -np 8: all_reduce, redop sum, root -1
JSON = DATA / "all_reduce_perf-2.17.6.json"  # the same run's -J file


def _write(tmp_path, doc, name="x.json") -> Path:
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    return f


# ---- -J fields of the wrong type: one line, exit 2 ---------------------------------------------------

def _doc(**config) -> dict:
    doc = json.loads(JSON.read_text())
    doc["config"].update(config)
    return doc


BAD = {
    "nthreads not a number": ({"config": {"nthreads": "x", "devices": [{}]}, "results": []}, "config.nthreads is 'x', not an integer >= 1"),
    "a device not an object": ({"args": ["all_reduce_perf"], "config": {"devices": [1]}, "results": [{"size": 8}]},
                               "config.devices[0] is 1, not a JSON object"),
    "devices not a list": (_doc(devices={"rank": 0}), "config.devices is a JSON object, not a JSON array"),
    "config not an object": ({"config": [1], "results": []}, "config is a JSON array, not a JSON object"),
    "ngpus negative": (_doc(ngpus=-1), "config.ngpus is -1, not an integer >= 1"),
    "iterations not a number": (_doc(iterations="many"), "config.iterations is 'many'"),
    "args not a list": ({**_doc(), "args": "all_reduce_perf -b 8"}, "args is 'all_reduce_perf -b 8', not a JSON array"),
    "a device index not a number": (_doc(devices=[{"device": "gpu0", "hostname": "h"}] * 8), "config.devices[0].device is 'gpu0'"),
    "size not a number": ({**_doc(), "results": [{"size": "abc", "out_of_place": {"time": 1.0}}]}, "results[0].size is 'abc'"),
    "a time not a number": ({**_doc(), "results": [{"size": 8, "count": 2, "type": "float", "redop": "sum",
                                                    "out_of_place": {"time": "fast"}}]}, "results[0].out_of_place.time is 'fast', not a number"),
    "a figure not an object": ({**_doc(), "results": [{"size": 8, "out_of_place": 3.0}]}, "results[0].out_of_place is 3.0, not a JSON object"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_json_field_of_the_wrong_type_is_one_line(case, tmp_path, capsys):
    doc, needle = BAD[case]
    f = _write(tmp_path, doc)
    rc = main(["import", "nccl-tests", str(f), "--out", str(tmp_path / "r"), "--world", "8"])
    _one_line_error(capsys, rc, needle)
    assert not (tmp_path / "r").exists()


# ---- a text log cut off in its last row ------------------------------------------------------------------

def test_a_row_cut_off_says_nothing_of_columns_it_never_reached(tmp_path, capsys):
    """`head -c 2400` of a real all_reduce log ends inside a row: the row is left out, and the rows kept
    all print their redop and root, so no note may say they leave them blank."""
    f = tmp_path / "cut.txt"
    f.write_bytes(TEXT.read_bytes()[:2400])
    p = nccl_tests.parse(f)
    assert {(r["op"], r["root"]) for r in p.rows} == {("sum", -1)}
    assert any(n.startswith("cut off: the last row") for n in p.notes), p.notes
    assert not [n for n in p.notes if "blank" in n], p.notes


# ---- NCCL_TESTS_SPLIT ------------------------------------------------------------------------------------

def _split(groups: int) -> dict:
    """The -J file of the 8-rank run as NCCL_TESTS_SPLIT="DIV 8/groups" runs it: each process's `group`
    its colour, every figure one group's, busbw at the group's size (all_reduce: 2 (n - 1) / n)."""
    doc = json.loads(JSON.read_text())
    per = 8 // groups
    for d in doc["config"]["devices"]:
        d["group"] = d["rank"] // per
    for r in doc["results"]:
        for key in ("out_of_place", "in_place"):
            r[key]["bus_bw"] = r[key]["alg_bw"] * 2 * (per - 1) / per
    return doc


def test_a_split_json_run_is_read_per_group(tmp_path, capsys):
    f = _write(tmp_path, _split(2))
    p = nccl_tests.parse(f)
    assert p.world == 8
    assert {(r["group_size"], r["groups"]) for r in p.rows} == {(4, 2)}
    assert any(n.startswith("NCCL_TESTS_SPLIT: 2 groups of 4 ranks") for n in p.notes), p.notes
    rc = main(["import", "nccl-tests", str(f), "--out", str(tmp_path / "r")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    res = load_run(Path(out.out.strip().rsplit(": ", 1)[1]))["results"]
    assert set(res["group_size"]) == {4} and set(res["groups"]) == {2} and len(res) == 26


def test_an_unsplit_json_run_has_no_group_columns():
    p = nccl_tests.parse(JSON)
    assert not any("group_size" in r for r in p.rows)


def test_a_split_json_run_whose_figures_fit_neither_is_refused(tmp_path, capsys):
    doc = _split(2)
    for d in doc["config"]["devices"]:
        d["group"] = 0  # one group of 8 said, figures of 4
    rc = main(["import", "nccl-tests", str(_write(tmp_path, doc)), "--out", str(tmp_path / "r")])
    _one_line_error(capsys, rc, "is not all_reduce's bus factor at 8 ranks")


# ---- the per-iteration median ------------------------------------------------------------------------------

def test_the_per_iteration_median_is_stored_beside_the_printed_mean(tmp_path):
    doc = json.loads(JSON.read_text())
    doc["args"] += ["-I", "1"]
    doc["config"]["per_iter_timing"] = "true"
    for r in doc["results"]:
        for key in ("out_of_place", "in_place"):
            times = [r[key]["time"] * (0.5 + 0.01 * i) for i in range(20)]
            r[f"{key}_per_iter"] = {"skipped_iterations": 0, "min_us": min(times), "max_us": max(times),
                                    "avg_us": sum(times) / 20, "p50_us": sorted(times)[10], "p95_us": sorted(times)[18],
                                    "p99_us": max(times), "stdev_us": 0.5, "cv_pct": 1.5, "times_us": times}
    p = nccl_tests.parse(_write(tmp_path, doc))
    for row, res in zip(p.rows[::2], doc["results"]):
        assert row["time_p50_s"] == pytest.approx(res["out_of_place_per_iter"]["p50_us"] * 1e-6, rel=1e-12)
        assert row["time_median_s"] == pytest.approx(res["out_of_place"]["time"] * 1e-6, rel=1e-12)
