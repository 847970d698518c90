"""`distbench import nccl-tests` on logs as people publish them (issue 32).

Two halves. Our own small fixtures, written here with nccl-tests' printf formats (src/util.cu
writeBenchmarkLinePreamble `%12li  %12li  %8s  %6s  %6s` and writeBenchmarkLineBody `  %7s  %6s  %6s
%6g`; the header `# %10s  %12s  %8s  %6s  %6s ...`), one per layout variant the reader accepts. Then
every real log in ../shared/peers/ (published by others; SOURCES.md lists the figures each prints),
read in place, never copied into the project: the test skips, saying why, where that folder is absent.
"""

import re
from collections import Counter
from pathlib import Path

import pytest

from bench.cli import main
from bench.imports import nccl_tests, param
from bench.errors import BenchError
from bench.results.store import load_run
from conftest import ROOT

PEERS = ROOT.parent / "shared" / "peers"
WIDTH = {"size": 12, "count": 12, "type": 8, "redop": 6, "root": 6}
FIG = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
       "all_gather": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0,
       "reduce": lambda n: 1.0}
RANKS_PER = {"all_reduce": 1, "broadcast": 1, "reduce": 1}  # size = count x 4 x (ranks unless listed here)


def table(coll, *, world=4, lead=("size", "count", "type", "redop", "root"), wrong="#wrong",
          sizes=(0, 1024, 1 << 20, 1 << 26), redop="sum", root=-1, wrong_text="0", blank=()):
    """Header and rows of one nccl-tests table (float), figures consistent with the collective's
    bus factor at `world`; `blank` columns print empty (as alltoall did before 2.13)."""
    per = ("time", "algbw", "busbw", wrong)
    head = "# %10s" % lead[0] + "".join("  %*s" % (WIDTH[c], c) for c in lead[1:])
    head += "".join("  %7s  %6s  %6s  %6s" % per for _ in range(2))
    rows = []
    for s in sizes:
        count = s // 4 // (RANKS_PER.get(coll, world))
        vals = {"size": str(s), "count": str(count), "type": "float", "redop": redop, "root": str(root)}
        vals.update({c: "" for c in blank})
        line = "%12s" % vals[lead[0]] + "".join("  %*s" % (WIDTH[c], vals[c]) for c in lead[1:])
        t_us = 20.0 + s / 5e4
        alg = s / t_us / 1e3
        for _ in range(2):
            line += "  %7.2f  %6.2f  %6.2f  %6s" % (t_us, alg, alg * FIG[coll](world), wrong_text)
        rows.append(line)
    return [head, *rows]


def log(coll, *, world=4, before=(), after=None, **kw):
    ranks = ["#  Rank %2d Group  0 Pid %6d on %10s device %2d [0000:%02x:00] NVIDIA H100 80GB HBM3"
             % (r, 100 + r, "node-a", r, r) for r in range(world)]
    params = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20 "
              "agg iters: 1 validation: 1 graph: 0")
    foot = ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 12.5", "#"] if after is None else after
    return "\n".join([*before, params, "#", "# Using devices", *ranks, "#", *table(coll, world=world, **kw), *foot])


def read(tmp_path, text, name="out.txt", **kw):
    f = tmp_path / name
    f.write_text(text)
    return nccl_tests.parse_runs(f, **kw)


# ----------------------------------------------------------------------------- the collective, wherever it is said

@pytest.mark.parametrize("coll,redop,root,want", [
    ("all_reduce", "sum", -1, "all_reduce"), ("reduce_scatter", "sum", -1, "reduce_scatter_single"),
    ("broadcast", "none", 0, "broadcast"), ("reduce", "max", 0, "reduce")])
def test_collective_inferred_from_the_table(tmp_path, coll, redop, root, want):
    (p,) = read(tmp_path, log(coll, redop=redop, root=root))
    assert {r["collective"] for r in p.rows} == {want}
    assert any(n.startswith(f"collective inferred from the table: {coll} (redop ") for n in p.notes)


def test_tables_alike_fall_back_to_the_file_name_then_refuse(tmp_path):
    text = log("all_gather", redop="none")
    (p,) = read(tmp_path, text, name="ag_perf_all_gather.log")
    assert {r["collective"] for r in p.rows} == {"all_gather_single"}
    assert any("from the file name 'ag_perf_all_gather.log' among what the table fits (all_gather, alltoall" in n
               for n in p.notes)
    with pytest.raises(BenchError, match=r"tried: a program name echoed in the log \(none\), '# Collective test "
                                         r"starting' \(none\), the table \(.*fits all_gather, alltoall\), the file "
                                         r"name \(names none of them\); give --collective NAME"):
        read(tmp_path, text, name="run7.txt")
    with pytest.raises(BenchError, match="--collective all_reduce does not fit the table"):
        read(tmp_path, text, name="run7.txt", collective="all_reduce")


@pytest.mark.parametrize("echo,want,command", [
    (["user@host:~/nccl-tests$ ./build/all_gather_perf -b 8 -e 64M -f 2 -g 4"], "all_gather_single",
     "./build/all_gather_perf -b 8 -e 64M -f 2 -g 4"),
    (["[root@host dir]# mpirun -np 4 --allow-run-as-root ./build/alltoall_perf -b 8 -e 64M"], "all_to_all_single",
     "mpirun -np 4 --allow-run-as-root ./build/alltoall_perf -b 8 -e 64M"),
    (["Running: CUDA_VISIBLE_DEVICES=0,1,2,3 ./build/reduce_scatter_perf -b 8 -e 64M -g 4"], "reduce_scatter_single",
     "CUDA_VISIBLE_DEVICES=0,1,2,3 ./build/reduce_scatter_perf -b 8 -e 64M -g 4"),
    (["$ mpirun -np 4 -x NCCL_DEBUG=WARN \\", "    /opt/nccl-tests/build/all_gather_perf \\", "    -b 8 -e 64M -a 3"],
     "all_gather_single", "mpirun -np 4 -x NCCL_DEBUG=WARN /opt/nccl-tests/build/all_gather_perf -b 8 -e 64M -a 3"),
])
def test_program_read_wherever_the_command_is_echoed(tmp_path, echo, want, command):
    coll = {"all_gather_single": "all_gather", "all_to_all_single": "alltoall"}.get(want, "reduce_scatter")
    (p,) = read(tmp_path, log(coll, redop="none" if coll != "reduce_scatter" else "sum", before=echo), name="x.txt")
    assert {r["collective"] for r in p.rows} == {want} and p.command == command
    assert not any("inferred" in n for n in p.notes)
    assert {r["rank_reduce"] for r in p.rows} == {"max" if "-a 3" in command else "avg"}


def test_a_file_of_several_runs_imports_them_all(tmp_path, capsys):
    text = "\n".join([log("all_gather", redop="none", before=["Running: ./build/all_gather_perf -b 8 -e 64M -g 4"]),
                      log("all_reduce", before=["Running: ./build/all_reduce_perf -b 8 -e 64M -g 4"])])
    runs = read(tmp_path, text)
    assert [{r["collective"] for r in p.rows} for p in runs] == [{"all_gather_single"}, {"all_reduce"}]
    assert runs[1].notes[0] == "run 2 of 2 in the file (from line 18)"
    with pytest.raises(BenchError, match="holds 2 runs"):
        nccl_tests.parse(tmp_path / "out.txt")
    assert main(["import", "nccl-tests", str(tmp_path / "out.txt"), "--out", str(tmp_path / "res")]) == 0
    run = load_run(Path(capsys.readouterr().out.strip().rsplit(": ", 1)[1]))
    assert sorted(run["results"]["collective"].unique()) == ["all_gather_single", "all_reduce"]


# ----------------------------------------------------------------------------- prefixes and layouts

def test_srun_label_and_tag_output_prefixes_are_stripped(tmp_path):
    plain = read(tmp_path, log("all_reduce"))[0]
    for pre in (lambda i: "%3d: " % 0, lambda i: "[1,0]<stdout>:"):
        text = "\n".join(pre(i) + ln for i, ln in enumerate(log("all_reduce").splitlines()))
        (p,) = read(tmp_path, text)
        assert p.rows == plain.rows and p.world == 4 and p.hosts == ["node-a"] * 4


def test_older_layouts_without_redop_or_root(tmp_path):
    """2019 all_gather `size count type time ... error`; 2021 broadcast `size count type root time ...`."""
    (ag,) = read(tmp_path, log("all_gather", lead=("size", "count", "type"), wrong="error", wrong_text="0e+00"),
                 name="all_gather.txt")
    assert {r["collective"] for r in ag.rows} == {"all_gather_single"} and {r["max_error"] for r in ag.rows} == {0.0}
    assert {r["wrong"] for r in ag.rows} == {None} and {r["op"] for r in ag.rows} == {""}
    (bc,) = read(tmp_path, log("broadcast", lead=("size", "count", "type", "root"), root=0, wrong="error",
                               wrong_text="N/A"))
    assert {r["collective"] for r in bc.rows} == {"broadcast"} and {r["root"] for r in bc.rows} == {0}
    assert {r["max_error"] for r in bc.rows} == {None} and not any("not a count" in n for n in bc.notes)


def test_blank_redop_rows_map_by_column(tmp_path):
    (p,) = read(tmp_path, log("alltoall", lead=("size", "count", "type", "redop"), blank=("redop",), wrong="error",
                              wrong_text="N/A"), name="alltoall.log")
    assert {r["collective"] for r in p.rows} == {"all_to_all_single"} and len(p.rows) == 6
    big = [r for r in p.rows if r["size_bytes"] == 1 << 26]
    assert [r["placement"] for r in big] == ["out-of-place", "in-place"] and big[0]["time_median_s"] > 0
    assert "the rows leave redop blank under its header: read as none / -1" in p.notes


def test_numeric_error_column_flags_by_nccl_tests_rule(tmp_path, capsys):
    """Before 2.13 a size is out of bounds when error > DeltaMaxValue(float) 1e-5 x (ranks - 1)."""
    text = log("all_reduce", wrong="error", wrong_text="2e-07")
    lines = text.splitlines()
    lines[-4] = lines[-4].replace("  2e-07", "  1e+00")  # both placements of the largest size
    (p,) = read(tmp_path, "\n".join(lines))
    # exit 1: imported, but nccl-tests' own check failed (as a distbench run that found wrong results)
    assert main(["import", "nccl-tests", str(tmp_path / "out.txt"), "--out", str(tmp_path / "res")]) == 1
    assert main(["show", capsys.readouterr().out.strip().rsplit(": ", 1)[1]]) == 0
    assert "Wrong elements: 0 FAILED, 2 rows wrong by the tool's own check" in capsys.readouterr().out
    bad = {(r["size_bytes"], r["placement"]) for r in p.rows if r["degraded"]}
    assert bad == {(1 << 26, "out-of-place"), (1 << 26, "in-place")}
    assert {r["max_error"] for r in p.rows} == {2e-07, 1.0} and {r["wrong"] for r in p.rows} == {None}
    assert "nccl-tests' error 1e+00 > its tolerance 3e-05" in next(r["degraded"] for r in p.rows if r["degraded"])


def test_row_cut_after_its_out_of_place_block_is_out_of_place(tmp_path):
    lines = log("all_reduce", after=[]).splitlines()
    lines[-1] = lines[-1][:12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6 + 4 * 2 + 7 + 6 + 6 + 6]  # lead + out-of-place
    (p,) = read(tmp_path, "\n".join(lines))
    last = [r for r in p.rows if r["size_bytes"] == 1 << 26]
    assert [r["placement"] for r in last] == ["out-of-place"]
    assert any(n.startswith("cut off: the last row (line ") and "holds only its out-of-place figures; its in-place "
               "figures are missing" in n for n in p.notes)


def test_in_place_only_row_is_in_place(tmp_path):
    """Trace replay prints 32 blanks for the out-of-place block (writeBenchMarkLineNullBody)."""
    lines = log("all_reduce").splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.strip().startswith("1048576"))
    cut = 12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6
    lines[i] = lines[i][:cut] + " " * 32 + lines[i][cut + 33:]  # a 33-character block becomes 32 blanks
    (p,) = read(tmp_path, "\n".join(lines))
    assert [r["placement"] for r in p.rows if r["size_bytes"] == 1 << 20] == ["in-place"]


def test_size_zero_rows_are_left_out_and_show_says_no_zero_latency(tmp_path, capsys):
    text = log("all_reduce")
    (p,) = read(tmp_path, text)
    assert 0 not in {r["size_bytes"] for r in p.rows}
    assert "left out 1 row(s) of size 0" in " ".join(p.notes)
    assert main(["import", "nccl-tests", str(tmp_path / "out.txt"), "--out", str(tmp_path / "res")]) == 0
    path = capsys.readouterr().out.strip().rsplit(": ", 1)[1]
    assert main(["show", path]) == 0
    shown = capsys.readouterr().out
    assert "at 0B" not in shown and "left out 1 row(s) of size 0" in shown
    assert "collective inferred from the table: all_reduce" in shown


def test_wrong_in_g_form_is_approximate(tmp_path):
    (p,) = read(tmp_path, log("all_reduce", wrong_text="1.04858e+06"))
    assert {r["wrong"] for r in p.rows} == {1048580}
    assert any(n.startswith("#wrong printed in %g form (6 significant digits), stored rounded, approximate: "
                            "1.04858e+06 at 1024 B out-of-place") for n in p.notes)


def test_library_versions_are_read(tmp_path):
    rccl = ["# rccl-tests version 2.17.9-develop:4a65e8d rccl-headers=22707 rccl-library=22707",
            "# Collective test starting: all_reduce_perf"]
    (p,) = read(tmp_path, log("all_reduce", before=rccl))
    assert (p.version, p.nccl_version) == ("2.17.9-develop:4a65e8d (rccl-tests)", "RCCL 2.27.7")
    old = log("all_reduce").replace("#  Rank  3", "NCCL version 2.9.9+cuda11.2\n#  Rank  3")
    (p,) = read(tmp_path, old)
    assert (p.version, p.nccl_version) == ("", "2.9.9+cuda11.2")
    info = log("all_reduce", before=["node-a:100:100 [0] NCCL INFO NCCL version 2.18.5+cuda12.2"])
    assert read(tmp_path, info)[0].nccl_version == "2.18.5+cuda12.2"


@pytest.mark.parametrize("where", ["before", "after"])
def test_an_aborted_run_is_its_failure_in_one_line(tmp_path, capsys, where):
    fail = "node-a: Test NCCL failure common.cu:392 'unhandled system error (run with NCCL_DEBUG=INFO for details)'"
    text = log("all_reduce", before=[fail] if where == "before" else (), after=[fail] if where == "after" else None)
    if where == "before":  # the header never printed
        text = "\n".join(ln for ln in text.splitlines() if not re.match(r"^\s*(#\s+size|\d)", ln))
    else:  # it stopped before the last size it announced (maxBytes 64 MiB): its 64 MiB row never printed
        text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith(str(1 << 26)))
    f = tmp_path / "all_reduce.log"
    f.write_text(text)
    out = tmp_path / "res"
    rc = main(["import", "nccl-tests", str(f), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "aborted" in err[0] and "Test NCCL failure common.cu:392 'unhandled system error" in err[0]
    assert ("before its results table" if where == "before" else "after 3 size(s)") in err[0]
    assert not out.exists()


def test_param_comms_compute_header_with_glued_labels(tmp_path):
    """comms.py at d26e7a0~1, --mode comms-compute: `{:>12}` BusBW(GB/s) then `{:>20}` TotalLatency(us):p50
    (20 characters) print glued; CompLatency(us):p50 and, with --kernel gemm, TFlops follow."""
    head = "\tCOMMS-RES" + ("{:>40}{:>18}{:>18}{:>12}{:>12}{:>12}{:>12}{:>15}{:>12}{:>20}{:>20}{:>15}".format(
        "size (B)", "nElementsPerRank", "Latency(us):p50", "p75", "p95", "Min", "Max", "AlgBW(GB/s)", "BusBW(GB/s)",
        "TotalLatency(us):p50", "CompLatency(us):p50", "TFlops"))
    assert "BusBW(GB/s)TotalLatency(us):p50" in head
    row = "\tCOMMS-RES-all_reduce-float{:>18}{:>18}{:>18}{:>12}{:>12}{:>12}{:>12}{:>15}{:>12}{:>20}{:>20}{:>15}".format(
        1048576, "262144", "120.5", "121.0", "125.2", "119.8", "126.1", "8.702", "13.053", "480.2", "350.1", "12.34560")
    f = tmp_path / "comms.log"
    f.write_text("\n".join(["PARAM COMM environment: {'world_size': 4, 'local_size': 4}", head, row]))
    (p,) = param.parse_runs(f)
    (r,) = p.rows
    assert (r["collective"], r["size_bytes"], r["busbw_gbps"], r["time_median_s"]) == \
        ("all_reduce", 1048576, 13.053, pytest.approx(120.5e-6))


# ----------------------------------------------------------------------------- the published logs

def _sizes_printed(path: Path) -> Counter:
    """Every non-zero size a data row of the file prints (an independent reading: one regex)."""
    rows = Counter()
    for ln in path.read_text().splitlines():
        ln = re.sub(r"^\[\d+,\d+\]<stdout>:", "", ln)
        if m := re.match(r"^\s+(\d+)\s+\d+\s+(?:float|half|double|bfloat16|int\w*|uint\w*|char)\s", ln):
            rows[int(m.group(1))] += int(m.group(1)) > 0
    return +rows


# file: [(collective, world, largest size, busbw out-of-place, in-place, #wrong, version, library)] per run,
# the figures SOURCES.md lists (None: the log prints N/A or an `error` column, not a count)
SOURCES = {
    "real-all_reduce-2x8-h100-mpirun.txt": [("all_reduce", 16, 8589934592, 338.82, 337.35, {0}, "", "")],
    "real-all_reduce-2x8-h100-mpirun-tag-output.txt": [("all_reduce", 16, 8589934592, 338.82, 337.35, {0}, "", "")],
    "real-dgx2-v100-12gpu-2019-format.txt": [
        ("all_gather_single", 12, 8589934560, None, None, {None}, "", ""),
        ("all_reduce", 12, 8589934592, 123.56, 123.57, {None}, "", "")],
    "real-rccl-2x8-mi355x-mpirun-all_reduce.txt": [
        ("all_reduce", 16, 17179869184, 385.98, 385.95, {0}, "2.17.9-develop:4a65e8d (rccl-tests)", "RCCL 2.27.7")],
    "real-rccl-1x8-mi355x-docker-alltoall.txt": [
        ("all_to_all_single", 8, 134217728, 322.22, None, {0, None}, "2.17.9-develop:2596ca5f71 (rccl-tests)",
         "RCCL 2.27.7")],
    "real-nccl-tests-2021-8xa100-alltoall-blank-redop.txt": [
        ("all_to_all_single", 8, 8589934592, 224.31, None, {None}, "", "")],
    "real-nccl-tests-2021-8xa100-broadcast-root-no-redop.txt": [
        ("broadcast", 8, 8589934592, 232.81, None, {None}, "", "")],
    "real-nccl-tests-2021-2x8-a100-efa-tag-output-all_reduce-error-col.txt": [
        ("all_reduce", 16, 4294967296, 43.81, 43.72, {None}, "", "2.9.9+cuda11.2")],
}
needs_peers = pytest.mark.skipif(not PEERS.is_dir(), reason=f"{PEERS} is absent: the published logs live beside the "
                                                             "checkout (../shared/peers), not in it")


@needs_peers
def test_every_published_log_is_listed_here():
    assert sorted(p.name for p in PEERS.glob("real-*.txt")) == sorted(SOURCES)


@needs_peers
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_published_log_imports_with_its_figures(name, tmp_path, capsys):
    f = PEERS / name
    runs = nccl_tests.parse_runs(f)  # no --collective
    assert len(runs) == len(SOURCES[name])
    got = Counter()
    for p, (coll, world, big, oop, ip, wrong, version, library) in zip(runs, SOURCES[name]):
        assert {r["collective"] for r in p.rows} == {coll} and p.world == world
        assert (p.version, p.nccl_version) == (version, library)
        at = {r["placement"]: r for r in p.rows if r["size_bytes"] == big}
        assert max(r["size_bytes"] for r in p.rows) == big
        if oop is not None:
            assert at["out-of-place"]["busbw_gbps"] == oop
        if ip is not None:
            assert at["in-place"]["busbw_gbps"] == ip
        assert {r["wrong"] for r in p.rows} == wrong
        got.update(r["size_bytes"] for r in p.rows if r["placement"] == "out-of-place")
    assert got == _sizes_printed(f)  # every non-zero size, once per run
    failed = name == "real-dgx2-v100-12gpu-2019-format.txt"  # its all_gather: `Out of bounds values : 4 FAILED`
    assert main(["import", "nccl-tests", str(f), "--out", str(tmp_path)]) == (1 if failed else 0), \
        capsys.readouterr().err


@needs_peers
def test_published_2019_all_gather_is_wrong_at_its_two_largest_sizes():
    ag, ar = nccl_tests.parse_runs(PEERS / "real-dgx2-v100-12gpu-2019-format.txt")
    assert sorted({r["size_bytes"] for r in ag.rows if r["degraded"]}) == [4294967280, 8589934560]
    assert {r["max_error"] for r in ag.rows if r["degraded"]} == {1.0}
    assert "nccl-tests' footer: Out of bounds values : 4 FAILED" in ag.notes
    assert not any(r["degraded"] for r in ar.rows)
