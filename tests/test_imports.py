"""`distbench import nccl-tests|param FILE...`: other tools' output (real layouts, tests/data/imports,
written with the tools' own printf formats: nccl-tests src/util.cu at a0b82b2, src/common.cu at
de3ddbe for the older layout; PARAM comms.py at 1e115ff and fa6d244) becomes a stored collectives
run that show, compare, report and gate read; every malformed file is one line, exit 2."""

import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import one_line_error as _one_line_error

from bench.cli import main
from bench.imports import nccl_tests, param
from bench.errors import BenchError
from bench.results.store import load_run

DATA = Path(__file__).parent / "data" / "imports"
TEXT = DATA / "all_reduce_perf-2.17.6.txt"
JSON = DATA / "all_reduce_perf-2.17.6.json"
PARAM = DATA / "param-comms-all_reduce.log"


def _import(capsys, tool, *files, out, extra=()):
    rc = main(["import", tool, *map(str, files), "--out", str(out), *extra])
    text = capsys.readouterr()
    assert rc == 0, text.err
    return Path(text.out.strip().rsplit(": ", 1)[1])


# ----------------------------------------------------------------------------- nccl-tests text

def test_nccl_tests_text_rows_are_the_printed_numbers():
    p = nccl_tests.parse(TEXT)
    assert (p.world, p.version, p.nccl_version, p.format) == (8, "2.17.6", "2.27.3", "text")
    assert p.command == "mpirun -np 8 -H gpu-node-17:8 ./build/all_reduce_perf -b 8 -e 128M -f 4 -g 1"
    assert p.hosts == ["gpu-node-17"] * 8 and p.devices == ["NVIDIA H100 80GB HBM3"] * 8
    assert p.device_ids == list(range(8)) and p.notes == []
    assert len(p.rows) == 26  # 13 sizes x out-of-place, in-place
    r = {(x["size_bytes"], x["placement"]): x for x in p.rows}
    big = r[(33554432, "out-of-place")]  #    33554432  8388608  float  sum  -1  204.64  163.97  286.94  0
    assert big["time_median_s"] == pytest.approx(204.64e-6, rel=1e-12)
    assert (big["algbw_gbps"], big["busbw_gbps"], big["wrong"], big["count"]) == (163.97, 286.94, 0, 8388608)
    assert big["bus_factor"] == pytest.approx(286.94 / 163.97)
    assert big["case_id"] == "all_reduce.float32.sum.root-1.nccl-tests.w8"
    assert (big["mode"], big["rank_reduce"], big["op"], big["root"], big["iters"], big["warmup_iters"]) == \
        ("nccl-tests", "avg", "sum", -1, 20, 1)
    assert r[(8, "in-place")]["time_median_s"] == pytest.approx(17.50e-6)


def test_nccl_tests_average_flag_sets_the_rank_reduction():
    text = TEXT.read_text().replace("-f 4 -g 1", "-f 4 -g 1 -a 3")
    assert {r["rank_reduce"] for r in nccl_tests.parse_text(text, "x.txt").rows} == {"max"}


def test_nccl_tests_text_cut_off_mid_row_keeps_the_finished_sizes():
    p = nccl_tests.parse(DATA / "all_reduce_perf-cutoff.txt")
    assert len(p.rows) == 14 and max(r["size_bytes"] for r in p.rows) == 32768
    assert p.notes == ["cut off: the last row (line 26) is incomplete and was left out"]


def test_nccl_tests_text_without_footer_is_noted_as_cut_off():
    text = "\n".join(ln for ln in TEXT.read_text().splitlines() if "Avg bus" not in ln and "Out of" not in ln)
    p = nccl_tests.parse_text(text, "x.txt")
    assert len(p.rows) == 26 and p.notes[0].startswith("cut off: no '# Avg bus bandwidth' footer")


def test_nccl_tests_older_layout_error_column_is_not_a_count(tmp_path):
    f = DATA / "all_gather_perf-2.10-old-layout.txt"
    anon = tmp_path / "out.txt"  # the same table under a name that names no collective
    anon.write_text(f.read_text())
    with pytest.raises(BenchError, match=r"fits all_gather, alltoall\), the file name \(names none of them\); give "
                                         "--collective NAME"):
        nccl_tests.parse(anon)
    for p in (nccl_tests.parse(f), nccl_tests.parse(anon, collective="all_gather")):
        assert p.world == 4 and p.devices == ["Tesla V100-SXM2-32GB"] * 4 and p.version == ""
        assert len(p.rows) == 18 and {r["collective"] for r in p.rows} == {"all_gather_single"}
        assert {r["wrong"] for r in p.rows} == {None} and {r["op"] for r in p.rows} == {""}
        assert {r["max_error"] for r in p.rows} == {0.0} and {r["degraded"] for r in p.rows} == {""}
        assert {r["root"] for r in p.rows} == {-1} and {r["iters"] for r in p.rows} == {20}
        assert "not a count" in p.notes[0]
        first = min(p.rows, key=lambda r: (r["size_bytes"], r["placement"] != "out-of-place"))
        assert (first["size_bytes"], first["time_median_s"], first["busbw_gbps"]) == (1024, pytest.approx(9.81e-6), 0.08)
    assert any("from the file name 'all_gather_perf-2.10-old-layout.txt'" in n for n in nccl_tests.parse(f).notes)


def test_nccl_tests_per_iteration_layout_and_no_validation():
    """-I 1 adds i_min i_max i_p99 i_cv% per placement; -c 0 prints N/A for #wrong (src/util.cu)."""
    hdr = ("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s"
           % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
              "i_cv%", "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%"))
    row = ("%12li  %12li  %8s  %6s  %6s" % (1048576, 524288, "bfloat16", "max", "     0")  # reduce: busbw = algbw
           + "  %7s  %6s  %6s    N/A  %7s  %7s  %7s  %7s" % ("25.10", "41.78", "41.78", "24.00", "27.00", "26.90", "3.10")
           + "  %7s  %6s  %6s    N/A  %7s  %7s  %7s  %7s" % ("24.90", "42.11", "42.11", "24.00", "26.00", "25.90", "2.80"))
    text = "\n".join(["# Collective test starting: reduce_perf", "#  Rank  0 Group  0 Pid 1 on h device  0 [0000:01:00] G",
                      "#  Rank  1 Group  0 Pid 1 on h device  1 [0000:02:00] G", hdr, row, "# Avg bus bandwidth    : 73.4"])
    p = nccl_tests.parse_text(text, "x.txt")
    assert [(r["placement"], r["time_median_s"], r["busbw_gbps"], r["wrong"]) for r in p.rows] == [
        ("out-of-place", pytest.approx(25.10e-6), 41.78, None), ("in-place", pytest.approx(24.90e-6), 42.11, None)]
    assert p.rows[0]["case_id"] == "reduce.bfloat16.max.root0.nccl-tests.w2"


# ----------------------------------------------------------------------------- nccl-tests -J JSON

def test_nccl_tests_json_agrees_with_the_text_of_the_same_run():
    j, t = nccl_tests.parse(JSON), nccl_tests.parse(TEXT)
    assert (j.format, j.world, j.nccl_version, j.hosts) == ("json", 8, "2.27.3", ["gpu-node-17"] * 8)
    assert j.command == "./build/all_reduce_perf -b 8 -e 128M -f 4 -g 1 -J ar.json"
    assert j.version == "unknown (JSON file version 3)" and j.device_ids == list(range(8))
    assert len(j.rows) == len(t.rows) == 26
    for a, b in zip(j.rows, t.rows):
        assert (a["case_id"], a["size_bytes"], a["placement"], a["wrong"]) == \
            (b["case_id"], b["size_bytes"], b["placement"], b["wrong"])
        assert a["time_median_s"] == pytest.approx(b["time_median_s"], abs=0.006e-6)  # text: 2 decimals (us)
    doc = json.loads(JSON.read_text())
    r = doc["results"][9]
    row = next(x for x in j.rows if x["size_bytes"] == r["size"] and x["placement"] == "in-place")
    assert row["time_median_s"] == r["in_place"]["time"] * 1e-6 and row["busbw_gbps"] == r["in_place"]["bus_bw"]


def test_nccl_tests_json_cut_off_keeps_complete_results():
    p = nccl_tests.parse(DATA / "all_reduce_perf-cutoff.json")
    assert len(p.rows) == 18 and max(r["size_bytes"] for r in p.rows) == 524288
    assert p.world == 8 and p.notes == ["cut off: the JSON ends early; its 9 complete result(s) were kept"]


def test_nccl_tests_json_null_out_of_place_and_nan():
    doc = json.loads(JSON.read_text())
    doc["results"] = doc["results"][:2]
    doc["results"][0]["out_of_place"] = None  # writeBenchMarkLineNullBody
    doc["results"][1]["in_place"]["bus_bw"] = "nan"  # jsonDouble writes NaN as the string "nan"
    p = nccl_tests.parse_json(json.dumps(doc), "x.json")
    assert [(r["size_bytes"], r["placement"]) for r in p.rows] == [(8, "in-place"), (32, "out-of-place"), (32, "in-place")]
    assert p.rows[-1]["busbw_gbps"] is None


# ----------------------------------------------------------------------------- PARAM

def test_param_rows_are_the_printed_numbers():
    p = param.parse(PARAM)
    assert (p.world, p.format) == (8, "text") and len(p.rows) == 13
    assert p.command.startswith("comms.py --backend nccl --b 8 --e 134217728 --f 4 --z 1")
    r = p.rows[-1]  # COMMS-RES-all_reduce-float32  134217728  33554432  ...
    line = PARAM.read_text().strip().splitlines()[-1].split()
    assert (r["size_bytes"], r["count"]) == (134217728, 33554432)
    assert r["time_median_s"] == pytest.approx(float(line[3]) * 1e-6)
    assert r["rank_median_min_s"] == pytest.approx(float(line[6]) * 1e-6)
    assert r["rank_median_max_s"] == pytest.approx(float(line[7]) * 1e-6)
    assert (r["algbw_gbps"], r["busbw_gbps"]) == (float(line[8]), float(line[9]))
    assert (r["mode"], r["blocking"], r["rank_reduce"], r["placement"], r["wrong"]) == \
        ("throughput", True, "median", "out-of-place", None)
    assert r["case_id"] == "all_reduce.float32.sum.root-1.throughput.w8"


def test_param_2020_layout_needs_the_collective():
    f = DATA / "param-comms-2020-layout.log"
    with pytest.raises(BenchError, match="give --collective NAME"):
        param.parse(f)
    p = param.parse(f, collective="all_reduce")
    assert p.world == 4 and len(p.rows) == 6 and {r["blocking"] for r in p.rows} == {False}
    assert p.rows[0]["time_median_s"] == pytest.approx(float(f.read_text().splitlines()[4].split()[3]) * 1e-6)
    assert "rank_median_min_s" not in p.rows[0]  # no Min / Max columns in that layout: left null
    assert any("float32 assumed" in n for n in p.notes)


# ----------------------------------------------------------------------------- malformed files: one line, exit 2

GARBAGE = {
    "empty": ("nccl-tests", b"", "is empty"),
    "binary": ("nccl-tests", b"\x7fELF\x02\x01\x01\x00\x00\x00" * 20, "binary file"),
    "latin-1": ("nccl-tests", "size count type \xe9\n".encode("latin-1"), "not UTF-8"),
    "one-line error": ("nccl-tests", b"all_reduce_perf: error while loading shared libraries: libnccl.so.2\n",
                       "not nccl-tests output"),
    "json list": ("nccl-tests", b"[1, 2, 3]\n", "not nccl-tests output"),
    "json no results": ("nccl-tests", b'{"version": 3, "args": ["./all_reduce_perf"]}', "JSON without a 'results' list"),
    "json cut before results": ("nccl-tests", b'{"version":3,"start_time":"2026-11-30 09:14:07","args":["./all_r',
                                "cut off before its first result"),
    "header, no row": ("nccl-tests", ("# Collective test starting: all_reduce_perf\n#  Rank  0 Group  0 Pid 1 on h "
                                      "device  0 [0000:01:00] G\n#  size  count  type  redop  root  time  algbw  busbw  "
                                      "#wrong  time  algbw  busbw  #wrong\n").encode(), "no result row"),
    "bad middle row": ("nccl-tests", TEXT.read_bytes().replace(b"    18.03    0.11", b"    0.11", 1),
                       "line 23: 12 columns, expected 13"),
    "not a number": ("nccl-tests", TEXT.read_bytes().replace(b"18.10", b"18.1x", 1), "time '18.1x' is not a number"),
    "unknown program": ("nccl-tests", TEXT.read_bytes().replace(b"all_reduce_perf", b"hypercube_perf"),
                        "unknown nccl-tests program 'hypercube_perf'"),
    "param garbage": ("param", b"Traceback (most recent call last):\n  File \"comms.py\", line 1\n", "not PARAM comms output"),
    "param pt2pt only": ("param", b"\tCOMMS-RES  size (B)  pingLatency(us):p50  p75  p95\n\tCOMMS-RES-pt2pt-float32 8 1 2 3\n",
                         "only pt2pt table"),
    "param no world": ("param", b"".join(ln + b"\n" for ln in PARAM.read_bytes().splitlines()[1:]), "give --world N"),
    "param unknown column": ("param", b"\t PARAM COMM environment: {'world_size': 2}\n\tCOMMS-RES  size (B)  Foo(us)\n",
                             "unknown PARAM column 'Foo(us)'"),
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_malformed_file_is_one_line_exit_2(case, tmp_path, capsys):
    tool, data, needle = GARBAGE[case]
    f = tmp_path / "input.log"
    f.write_bytes(data)
    rc = main(["import", tool, str(f), "--out", str(tmp_path / "results")])
    line = _one_line_error(capsys, rc, needle)
    assert str(f) in line
    assert not (tmp_path / "results").exists()


# ----------------------------------------------------------------------------- stored, shown, compared, reported

def _distbench_twin(imported: Path, root: Path, factor: float) -> Path:
    """A stored distbench run of the same cases (nccl-tests mode, world 8) whose times are `factor`
    times the imported ones: what `distbench collectives --mode nccl-tests` at world 8 would store."""
    run = load_run(imported)
    res = run["results"].copy()
    res["run_id"] = "20260101T000000Z-twin01"
    res["time_median_s"] = res["time_median_s"] * factor
    res["algbw_gbps"] = res["algbw_gbps"] / factor
    res["busbw_gbps"] = res["busbw_gbps"] / factor
    meta = {k: v for k, v in run.meta.items() if k not in ("source", "notes")}
    meta.update(run_id="20260101T000000Z-twin01", suite="collectives", command_line="__main__.py collectives")
    d = root / "collectives" / "20260101T000000Z-twin01"
    d.mkdir(parents=True)
    res.to_parquet(d / "results.parquet", index=False)
    (d / "meta.json").write_text(json.dumps(meta))
    return d


@pytest.mark.parametrize("tool,file", [("nccl-tests", TEXT), ("nccl-tests", JSON), ("param", PARAM)])
def test_import_show_compare_report(tool, file, tmp_path, capsys):
    out = tmp_path / "results"
    run_dir = _import(capsys, tool, file, out=out)
    assert run_dir.parent == out / f"import-{tool}"
    meta = json.loads((run_dir / "meta.json").read_text())
    src = meta["source"]
    assert (meta["kind"], src["tool"], src["files"][0]["path"]) == ("collectives", tool, str(file.resolve()))
    assert src["command"] and "time_median_s" in src["definitions"] and meta["state"] == "complete"
    assert sorted(p.name for p in run_dir.iterdir()) == ["meta.json", "results.parquet"]
    assert load_run(run_dir, strict=True)["results"]["run_id"].unique().tolist() == [meta["run_id"]]

    assert main(["show", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    assert f"Imported from {tool}" in shown and "peak busbw" in shown

    twin = _distbench_twin(run_dir, tmp_path / "mine", 1.25)
    assert main(["compare", str(run_dir), str(twin), "--format", "json"]) == 0
    cases = pd.DataFrame(json.loads(capsys.readouterr().out)["cases"])
    t = cases[cases["metric"] == "time_median_s"]
    assert len(t) == len(load_run(run_dir)["results"]) and t["ratio"].round(9).unique().tolist() == [1.25]

    from bench.report.html import build_report
    index = build_report([twin, run_dir], tmp_path / "report")
    html = index.read_text()
    assert html.index('id="glance"') < html.index('id="runs"') < html.index('<section id="collectives">')
    assert "headline_collectives_busbw.png" in html and "collectives_all_reduce_busbw_ratio_vs_peer.png" in html
    assert "of peer" in html and ">80%<" in html  # the headline: peak busbw / the peer's peak = 1 / 1.25
    assert f"imported from</th><td>{tool}" in html


def test_peer_ratios_match_on_the_case_and_size():
    """Like with like (the same mode, too: issue 31 item 6, tests/test_peer_overlay.py)."""
    from bench.collectives.plots import peer_ratios
    own = pd.DataFrame({"collective": ["all_reduce"] * 2, "world": [8, 8], "dtype": ["float32"] * 2,
                        "placement": ["in-place"] * 2, "size_bytes": [1024, 2048], "_label": ["mine"] * 2,
                        "_tool": ["distbench"] * 2, "mode": ["nccl-tests"] * 2, "busbw_gbps": [3.0, 8.0],
                        "time_median_s": [1e-5, 2e-5]})
    peer = own.assign(_label="theirs", _tool="nccl-tests", mode="nccl-tests", busbw_gbps=[2.0, 10.0],
                      time_median_s=[2e-5, 1e-5])
    peer = pd.concat([peer, peer.iloc[:1].assign(world=4)], ignore_index=True)  # another world: not matched
    r = peer_ratios(own, peer)
    assert r[["size_bytes", "busbw_ratio", "time_ratio", "tool", "mode", "peer_mode"]].values.tolist() == [
        [1024, 1.5, 0.5, "nccl-tests", "nccl-tests", "nccl-tests"],
        [2048, 0.8, 2.0, "nccl-tests", "nccl-tests", "nccl-tests"]]


def test_several_files_make_one_run_and_bad_out_is_one_line(tmp_path, capsys):
    run_dir = _import(capsys, "nccl-tests", TEXT, DATA / "all_gather_perf-2.10-old-layout.txt", out=tmp_path / "r",
                      extra=("--collective", "all_gather"))
    # --collective fills in for the log that does not name its collective; the other keeps its own
    res = load_run(run_dir)["results"]
    assert sorted(res["collective"].unique()) == ["all_gather_single", "all_reduce"]
    assert sorted(res["world"].unique()) == [4, 8]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert sorted(meta["launches"]) == ["4", "8"] and len(meta["source"]["files"]) == 2
    rc = main(["import", "nccl-tests", str(TEXT), "--world", "2", "--out", str(tmp_path / "r2")])
    _one_line_error(capsys, rc, "lists 8 ranks", "--world 2 disagrees")
    rc = main(["import", "param", str(PARAM), "--suite", "../up", "--out", str(tmp_path / "r2")])
    _one_line_error(capsys, rc, "--suite '../up'")
    f = tmp_path / "file"
    f.write_text("x")
    rc = main(["import", "nccl-tests", str(TEXT), "--out", str(f)])
    _one_line_error(capsys, rc, f"--out '{f}' is a file")


def test_gate_on_imported_runs(tmp_path, capsys):
    """Imported logs are runs like any other: two make a baseline, a third is gated against it."""
    runs = [_import(capsys, "nccl-tests", TEXT, out=tmp_path / "r") for _ in range(3)]
    assert main(["baseline", "update", "--from", str(runs[0]), str(runs[1]), "--baseline-root", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert main(["gate", "--current", str(runs[2]), "--baseline", str(tmp_path / "b"), "--no-confirm"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gate: PASS") and "gpu-nvidia-h100-80gb-hbm3x8-nccl-w8" in out
