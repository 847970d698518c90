"""`distbench import nccl-tests`: every variant, nothing silently wrong.

Logs built here from nccl-tests' own printf formats (NVIDIA/nccl-tests at a0b82b2 unless said:
src/util.cu writeDeviceReport, writeResultHeader, writeBenchmarkLine*, writeTimestamp,
writePerIterReport; src/common.h TESTCHECK ` .. %s pid %d: Test failure %s:%d`) or from a real
published log (../shared/peers, read in place) with the lines nccl-tests prints added: a run that
finished and failed its check, logs without `#  Rank` lines, the options that change what a figure
means (-a -z -G -C -m -I), -S timestamps, -I per-iteration output (text and -J JSON) and alltoallv.
"""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.imports import nccl_tests
from bench.results.runs import state_of
from bench.results.store import load_run
from conftest import ROOT, one_line_error as _one_line_error

DATA = Path(__file__).parent / "data" / "imports"
TEXT = DATA / "all_reduce_perf-2.17.6.txt"  # nccl-tests 2.17.6, mpirun -np 8, 8 `#  Rank` lines
JSON = DATA / "all_reduce_perf-2.17.6.json"
PEERS = ROOT.parent / "shared" / "peers"
needs_peers = pytest.mark.skipif(not PEERS.is_dir(), reason=f"{PEERS} is absent: the published logs live beside the "
                                                             "checkout (../shared/peers), not in it")


def _set_wrong(line: str, oop: int, ip: int) -> str:
    """A data row with its two #wrong values replaced, right-aligned where nccl-tests prints them (%6g)."""
    toks = list(re.finditer(r"\S+", line))
    for m, v in ((toks[12], str(ip)), (toks[8], str(oop))):  # right to left: the earlier ends stay put
        line = line[:m.end() - len(v)] + v + line[m.end():]
    return line


def _failed_run(text: str, size: int, wrong: tuple[int, int], failures: list[str]) -> str:
    """A finished run whose check failed, as nccl-tests prints it: #wrong at one size, the footer's
    `Out of bounds values : 4 FAILED` (writeResultFooter), and after the footer each process's
    TESTCHECK line (src/common.h) from main's `TESTCHECK(result)`."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.split()[:1] == [str(size)])
    lines[i] = _set_wrong(lines[i], *wrong)
    text = "\n".join(lines).replace("# Out of bounds values : 0 OK", "# Out of bounds values : 4 FAILED")
    return text.rstrip("\n") + "\n" + "\n".join(failures) + "\n"


# ----------------------------------------------------------------------------- a run that finished with wrong values

def test_set_wrong_keeps_the_columns():
    row = "     2097152        524288     float     sum      -1    29.82   70.33  123.07       0    29.29   71.59  125.29       0"
    out = _set_wrong(row, 96, 32)
    assert out.split()[8] == "96" and out.split()[12] == "32" and len(out) == len(row)
    assert [m.end() for m in re.finditer(r"\S+", out)] == [m.end() for m in re.finditer(r"\S+", row)]


def test_a_finished_run_that_failed_its_check_is_imported_with_its_wrong_counts(tmp_path, capsys):
    """nccl-tests 2.17.6 (src/common.cu at da0b547: main's TESTCHECK(result) is line 1100): footer,
    `#`, `# Collective test concluded`, `#`, writeErrors' empty line, then one line per process."""
    fails = [f" .. gpu-node-17 pid {81230 + p}: Test failure common.cu:1100" for p in range(8)]
    text = _failed_run(TEXT.read_text() + "\n", 2097152, (96, 32), fails)
    f = tmp_path / "all_reduce_perf.log"
    f.write_text(text)
    (p,) = nccl_tests.parse_runs(f)
    assert len(p.rows) == 26
    wrong = {(r["size_bytes"], r["placement"]): r["wrong"] for r in p.rows}
    assert wrong[(2097152, "out-of-place")] == 96 and wrong[(2097152, "in-place")] == 32
    assert sum(wrong.values()) == 128 and p.world == 8
    no = text.splitlines().index(fails[0]) + 1
    assert p.failure == f"line {no}: .. gpu-node-17 pid 81230: Test failure common.cu:1100 (and 7 more such line(s), " \
                        "one per process)"
    assert p.check_failed() == ["128 wrong element(s)", "Out of bounds values : 4 FAILED", p.failure]

    rc = main(["import", "nccl-tests", str(f), "--out", str(tmp_path / "res")])
    out = capsys.readouterr()
    assert rc == 1, out.err  # as a distbench run that found wrong results
    assert "nccl-tests says its own check failed (128 wrong element(s); Out of bounds values : 4 FAILED; line" in out.err
    run_dir = Path(out.out.strip().rsplit(": ", 1)[1])
    meta = json.loads((run_dir / "meta.json").read_text())
    src = meta["source"]["files"][0]
    assert src["failure"] == p.failure and src["checks_failed"] == p.check_failed()
    assert meta["launches"]["8"]["wrong"] == 128 and meta["launches"]["8"]["checks_failed"][0].endswith(
        "128 wrong element(s)")
    res = load_run(run_dir)["results"]
    assert res.loc[(res["size_bytes"] == 2097152) & (res["placement"] == "out-of-place"), "wrong"].tolist() == [96]
    assert state_of(run_dir, meta) == ("failed", "128 wrong element(s)")  # `distbench runs` lists it so


@needs_peers
def test_a_published_log_that_then_failed_keeps_its_figures_and_wrong_counts(tmp_path, capsys):
    """The real 2x8 H100 log (nccl-tests 2.13-2.17 layout, no version line) with the lines a failed
    check adds (src/common.cu at 51af557, NCCL 2.13 resync: TESTCHECK(run()) is line 806)."""
    real = (PEERS / "real-all_reduce-2x8-h100-mpirun.txt").read_text()
    pids = re.findall(r"Pid\s+(\d+) on (\S+)", real)
    fails = [f" .. {host} pid {pid}: Test failure common.cu:806" for pid, host in pids]
    f = tmp_path / "all_reduce.txt"
    f.write_text(_failed_run(real, 1048576, (96, 32), fails))
    (p,) = nccl_tests.parse_runs(f)
    at = {r["placement"]: r for r in p.rows if r["size_bytes"] == 1048576}
    assert (at["out-of-place"]["wrong"], at["in-place"]["wrong"]) == (96, 32)
    big = {r["placement"]: r["busbw_gbps"] for r in p.rows if r["size_bytes"] == 8589934592}
    assert big == {"out-of-place": 338.82, "in-place": 337.35} and p.world == 16 and len(p.rows) == 62
    assert "Test failure common.cu:806 (and 15 more such line(s), one per process)" in p.failure
    assert main(["import", "nccl-tests", str(f), "--out", str(tmp_path / "res")]) == 1


def test_a_run_cut_before_its_last_announced_size_is_still_aborted(tmp_path, capsys):
    """The run announced sizes up to maxBytes 128 MiB (the `# nThread` line) and stopped at 32 MiB."""
    lines = [ln for ln in TEXT.read_text().splitlines() if not ln.lstrip().startswith(("134217728", "# Out", "# Avg",
                                                                                        "# Coll"))]
    lines.append("gpu-node-17: Test NCCL failure common.cu:1013 'unhandled cuda error / cudaErrorLaunchTimeout'")
    f = tmp_path / "all_reduce.log"
    f.write_text("\n".join(lines))
    rc = main(["import", "nccl-tests", str(f), "--out", str(tmp_path / "res")])
    _one_line_error(capsys, rc, "the run of all_reduce_perf aborted after 12 size(s)", "Test NCCL failure common.cu:1013")


def test_a_run_that_printed_its_last_size_then_failed_without_its_footer_is_kept(tmp_path):
    """A failure after the last announced size (ncclCommDestroy, before writeResultFooter) leaves
    every figure; only the footer is missing."""
    lines = [ln for ln in TEXT.read_text().splitlines() if not ln.startswith(("# Out", "# Avg", "# Coll"))]
    lines.append("gpu-node-17: Test NCCL failure common.cu:1391 'unhandled system error / '")
    f = tmp_path / "all_reduce.log"
    f.write_text("\n".join(lines))
    (p,) = nccl_tests.parse_runs(f)
    assert len(p.rows) == 26 and p.failure.endswith("Test NCCL failure common.cu:1391 'unhandled system error / '")


# ----------------------------------------------------------------------------- the world without `#  Rank` lines

def _no_ranks(text: str, command: str | None) -> str:
    lines = [ln for ln in text.splitlines() if not ln.startswith("#  Rank")]
    if command is None:
        return "\n".join(lines[1:])
    return "\n".join([command, *lines[1:]])


@pytest.mark.parametrize("command,world", [
    ("$ mpirun -np 8 -H gpu-node-17:8 ./build/all_reduce_perf -b 8 -e 128M -f 4 -g 1", 8),
    ("$ mpirun -n 8 ./build/all_reduce_perf -b 8 -e 128M -f 4", 8),
    ("$ mpirun --np 8 ./build/all_reduce_perf -b 8 -e 128M -f 4", 8),
    ("$ mpirun -H a:4,b:4 ./build/all_reduce_perf -b 8 -e 128M -f 4", 8),
    ("$ mpirun -H a,b -N 4 ./build/all_reduce_perf -b 8 -e 128M -f 4", 8),
    ("$ srun -n 8 ./build/all_reduce_perf -b 8 -e 128M -f 4", 8),
    ("$ srun -n8 ./build/all_reduce_perf -b 8 -e 128M -f 4", 8),
    ("$ srun --ntasks=8 ./build/all_reduce_perf -b 8 -e 128M -f 4", 8),
    ("$ srun -N 2 --ntasks-per-node=4 --mpi=pmix ./build/all_reduce_perf -b 8 -e 128M -f 4", 8),
    ("$ srun --nodes=2 --ntasks-per-node 4 ./build/all_reduce_perf -b 8 -e 128M -f 4", 8),
])
def test_world_from_the_launcher_not_nthread_x_ngpus(tmp_path, command, world):
    f = tmp_path / "all_reduce.log"
    f.write_text(_no_ranks(TEXT.read_text(), command))
    (p,) = nccl_tests.parse_runs(f)
    assert p.world == world and {r["world"] for r in p.rows} == {world}
    assert {r["case_id"] for r in p.rows} == {f"all_reduce.float32.sum.root-1.nccl-tests.w{world}"}
    assert any(n.startswith(f"world {world} from the command line (") for n in p.notes), p.notes


def test_world_from_the_launcher_times_gpus_per_process(tmp_path):
    text = _no_ranks(TEXT.read_text(), "$ mpirun -np 2 ./build/all_reduce_perf -b 8 -e 128M -f 4 -g 4")
    f = tmp_path / "all_reduce.log"
    f.write_text(text.replace("nThread 1 nGpus 1", "nThread 1 nGpus 4"))
    assert nccl_tests.parse_runs(f)[0].world == 8


def test_world_from_busbw_over_algbw_when_unambiguous(tmp_path):
    """No command line, no rank lines: all_reduce's 2(n-1)/n at 175.70 GB/s -> 307.47 fits 8 only."""
    f = tmp_path / "out.log"
    f.write_text(_no_ranks(TEXT.read_text(), None))
    (p,) = nccl_tests.parse_runs(f)
    assert p.world == 8
    assert any(n.startswith("world 8 from busbw / algbw = 1.7500 at 134217728 B: all_reduce's bus factor fits 8 "
                            "ranks only") for n in p.notes), p.notes


def test_world_from_size_over_count(tmp_path):
    """all_gather prints size = count x bytes x ranks (src/all_gather.cu GetCollByteCount): exact."""
    text = _no_ranks(TEXT.read_text(), None).replace("all_reduce_perf", "all_gather_perf")
    rows = []
    for ln in text.splitlines():
        t = ln.split()
        if t and t[0].isdigit():  # count per rank: size / 4 B / 8 ranks; busbw = algbw x 7/8
            alg = float(t[6])
            ln = "%12s  %12s  %8s  %6s  %6s  %7s  %6s  %6.2f  %6s  %7s  %6s  %6.2f  %6s" % (
                t[0], int(t[0]) // 32, "float", "none", "-1", t[5], t[6], alg * 7 / 8, "0", t[9], t[10],
                float(t[10]) * 7 / 8, "0")
        rows.append(ln)
    f = tmp_path / "out.log"
    f.write_text("\n".join(rows))
    (p,) = nccl_tests.parse_runs(f)
    assert p.world == 8 and {r["collective"] for r in p.rows} == {"all_gather_single"}
    assert any("size / (count x bytes) = 8" in n for n in p.notes)


def test_mpi_log_without_rank_lines_is_never_world_1(tmp_path, capsys):
    """mpirun with a hostfile (no -np), nThread 1 x nGpus 1: the world is not 1. all_reduce's figures
    say 8; broadcast's (factor 1) cannot: refused, naming what was tried."""
    cmd = "$ mpirun --hostfile hosts ./build/all_reduce_perf -b 8 -e 128M -f 4"
    f = tmp_path / "all_reduce.log"
    f.write_text(_no_ranks(TEXT.read_text(), cmd))
    assert nccl_tests.parse_runs(f)[0].world == 8
    text = _no_ranks(TEXT.read_text(), cmd.replace("all_reduce", "broadcast")).replace("all_reduce_perf",
                                                                                      "broadcast_perf")
    text = "\n".join(re.sub(r"(\d+\s+\d+\s+float\s+)sum(\s+)-1", r"\1none\2 0", ln) for ln in text.splitlines())
    lines = []
    for ln in text.splitlines():
        t = ln.split()
        if t and t[0].isdigit():  # broadcast: busbw = algbw
            ln = ln.replace(t[7], t[6], 1) if t[7] != t[6] else ln
            ln = ln[::-1].replace(t[11][::-1], t[10][::-1], 1)[::-1]
        lines.append(ln)
    f2 = tmp_path / "broadcast.log"
    f2.write_text("\n".join(lines))
    rc = main(["import", "nccl-tests", str(f2), "--out", str(tmp_path / "res")])
    _one_line_error(capsys, rc, "does not say how many ranks ran; tried:", "Rank' lines (none), the command line "
                    "(mpirun without -np / -n", "busbw / algbw = 1.0000", "nThread x nGpus (1) counts one process "
                    "only; give --world N")
    assert [r["world"] for r in nccl_tests.parse_runs(f2, world=8)[0].rows][:1] == [8]


def test_a_world_the_figures_contradict_is_refused(tmp_path, capsys):
    """--world 4 for a log of 8 ranks without rank lines: busbw / algbw = 1.75 is not 2 x 3/4."""
    f = tmp_path / "out.log"
    f.write_text(_no_ranks(TEXT.read_text(), None))
    rc = main(["import", "nccl-tests", str(f), "--world", "4", "--out", str(tmp_path / "res")])
    _one_line_error(capsys, rc, "busbw / algbw = 1.7500 at 134217728 B is not all_reduce's bus factor at 4 ranks "
                    "(1.5000; world 4 from --world): it fits 8")
    g = tmp_path / "one.log"  # a single process by its command line, yet the figures are 8 ranks'
    g.write_text(_no_ranks(TEXT.read_text(), "$ ./build/all_reduce_perf -b 8 -e 128M -f 4 -g 1"))
    assert nccl_tests.parse_runs(g)[0].world == 8  # the figures decide over 'no launcher in front'


@needs_peers
def test_published_logs_without_their_rank_lines_keep_their_world(tmp_path):
    """Every published log, its `#  Rank` lines taken out: the same world from what is left."""
    for f in sorted(PEERS.glob("real-*.txt")):
        want = [p.world for p in nccl_tests.parse_runs(f)]
        g = tmp_path / f.name
        g.write_text("\n".join(ln for ln in f.read_text().splitlines() if not re.search(r"#\s+Rank\s+\d", ln)))
        try:
            got = [p.world for p in nccl_tests.parse_runs(g)]
        except BenchError as e:  # refused, never a wrong world
            assert "give --world N" in str(e), (f.name, str(e))
            continue
        assert got == want, f.name


# ----------------------------------------------------------------------------- options that change what a figure means

def test_options_from_the_command_line(tmp_path):
    base = TEXT.read_text()
    for extra, reduce_, opts in (("-a 0", "rank0", ""), ("--average=2", "min", ""), ("-a3", "max", ""),
                                 ("-z 1", "avg", "-z 1"), ("-G 10 -z 2", "avg", "-z 2"), ("-m 4", "avg", ""),
                                 ("-C 1 -R 1", "avg", "-C 1 -R 1")):
        text = base.replace("-f 4 -g 1", f"-f 4 -g 1 {extra}", 1)
        p = nccl_tests.parse_text(text, "x.txt")
        assert {r["rank_reduce"] for r in p.rows} == {reduce_}, extra
        # the log's own lines win: it prints graph: 0 and agg iters: 1 (nccl-tests ignores what its build lacks)
        assert {r["tool_options"] for r in p.rows} == {opts}, extra
    p = nccl_tests.parse_text(base.replace("-f 4 -g 1", "-f 4 -g 1 -G 10", 1), "x.txt")
    assert "-G 10 on the command line, but line 4: # nThread 1 nGpus 1" in " ".join(p.notes)
    assert p.options["-G"] == {"value": 0, "from": next(ln for ln in ["line 4: " + base.splitlines()[3]])}
    with pytest.raises(BenchError, match=r"-a 5 on its command line: nccl-tests documents -a 0 \(rank 0\), 1 "):
        nccl_tests.parse_text(base.replace("-f 4 -g 1", "-f 4 -g 1 -a 5", 1), "x.txt")


def test_options_from_the_logs_own_lines(tmp_path):
    base = TEXT.read_text()
    text = base.replace("graph: 0", "graph: 10").replace("agg iters: 1", "agg iters: 4").replace(
        "#\n# Using devices", "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes "
                              "barrier \n#\n# Using devices").replace(" time   algbw", "cputime   algbw")
    p = nccl_tests.parse_text(text, "x.txt")
    assert {r["tool_options"] for r in p.rows} == {"-z 3 -G 10 -C 1 -m 4"}
    assert {r["iters"] for r in p.rows} == {80}  # iters x agg iters
    assert p.options["-z"]["from"].startswith("line 5: # Blocking Enabled: wait and barrier after each outer")
    assert p.options["-C"]["from"].startswith("line 18: #       size")
    old = base.replace("#\n# Using devices", "# Blocking Enabled: wait for completion and barrier after each "
                                             "collective \n#\n# Using devices")  # before c78b8bf
    assert {r["tool_options"] for r in nccl_tests.parse_text(old, "x.txt").rows} == {"-z 1"}


def test_no_command_line_says_the_rank_reduction_is_assumed(tmp_path):
    text = "\n".join(TEXT.read_text().splitlines()[1:])
    p = nccl_tests.parse_text(text, "x.txt")
    assert {r["rank_reduce"] for r in p.rows} == {"avg"}
    assert p.options["-a"]["from"].startswith("assumed: nccl-tests' default")
    assert any(n.startswith("rank reduction: nccl-tests' default -a 1 (the average over ranks) assumed") for n in p.notes)
    p = nccl_tests.parse_text(TEXT.read_text(), "x.txt")
    assert p.options["-a"] == {"value": 1, "from": "nccl-tests' default: its command line has no -a"}
    assert not any("assumed" in n for n in p.notes)


def _import(capsys, f, out):
    rc = main(["import", "nccl-tests", str(f), "--out", str(out)])
    text = capsys.readouterr()
    assert rc == 0, text.err
    return Path(text.out.strip().rsplit(": ", 1)[1])


def _distbench_twin(imported: Path, root: Path, **set_) -> Path:
    """What `distbench collectives --mode nccl-tests` at world 8 stores for the same cases (its rows
    carry no tool_options), with columns set as given."""
    run = load_run(imported)
    res = run["results"].assign(run_id="20260101T000000Z-twin01", tool_options=pd.NA, **set_)
    meta = {k: v for k, v in run.meta.items() if k not in ("source", "notes")}
    meta.update(run_id="20260101T000000Z-twin01", suite="collectives", command_line="__main__.py collectives")
    d = root / "collectives" / "20260101T000000Z-twin01"
    d.mkdir(parents=True)
    res.to_parquet(d / "results.parquet", index=False)
    (d / "meta.json").write_text(json.dumps(meta))
    return d


@pytest.mark.parametrize("change,twin,why", [
    ("-f 4 -g 1 -z 1", {}, "tool_options: '-z 1' vs '' (26 case(s), e.g. all_reduce.float32.sum.root-1.nccl-tests"),
    ("-f 4 -g 1 -G 20", {}, None),  # the log prints graph: 0: not a difference
    ("-f 4 -g 1", {"rank_reduce": "max"}, "rank_reduce: 'avg' vs 'max'"),
    ("-f 4 -g 1 -a 3", {"rank_reduce": "avg"}, "rank_reduce: 'max' vs 'avg'"),
])
def test_compare_refuses_an_unlike_pair(tmp_path, capsys, change, twin, why):
    f = tmp_path / "all_reduce_perf.txt"
    f.write_text(TEXT.read_text().replace("-f 4 -g 1", change, 1))
    run_dir = _import(capsys, f, tmp_path / "r")
    mine = _distbench_twin(run_dir, tmp_path / "mine", **twin)
    rc = main(["compare", str(run_dir), str(mine), "--format", "json"])
    if why is None:
        assert rc == 0
        return
    line = _one_line_error(capsys, rc, "cannot compare", why)
    assert "26 case(s)" in line


def test_the_report_does_not_pair_unlike_tool_options():
    from bench.collectives.plots import peer_ratios, peer_unpaired
    own = pd.DataFrame({"collective": ["all_reduce"] * 2, "world": [8, 8], "dtype": ["float32"] * 2,
                        "placement": ["in-place"] * 2, "size_bytes": [1024, 2048], "_label": ["mine"] * 2,
                        "_tool": ["distbench"] * 2, "mode": ["nccl-tests"] * 2, "rank_reduce": ["avg"] * 2,
                        "blocking": [True] * 2, "op": ["sum"] * 2, "busbw_gbps": [3.0, 8.0],
                        "time_median_s": [1e-5, 2e-5], "tool_options": [None, None], "_machine": ["m"] * 2})
    peer = own.assign(_label="theirs", _tool="nccl-tests", tool_options="-G 10")
    assert peer_ratios(own, peer).empty
    assert peer_unpaired(own, peer)["why"].tolist() == ["tool_options - vs -G 10"]
    assert len(peer_ratios(own, peer.assign(tool_options=""))) == 2  # '' = nccl-tests' defaults = distbench's null


# ----------------------------------------------------------------------------- -S timestamps, -I per iteration, alltoallv

def _header(per_iter=False, stamp=True, wrong="#wrong") -> list[str]:
    """writeResultHeader at a0b82b2 (-S 1: `%*s` with tsPad 19 after the last column)."""
    if per_iter:
        return ["# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  "
                "%7s %*s" % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", wrong, "i_min", "i_max",
                             "i_p99", "i_cv%", "time", "algbw", "busbw", wrong, "i_min", "i_max", "i_p99", "i_cv%",
                             19 if stamp else 0, "timestamp" if stamp else "")]
    return ["# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", wrong, "time", "algbw", "busbw", wrong,
        19 if stamp else 0, "timestamp" if stamp else "")]


def _log(program: str, rows: list[str], header: list[str], world: int = 4, extra=()) -> str:
    ranks = ["#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s" % (
        r, 0, 100 + r, "node-a", r, 0, r, 0, "NVIDIA H100 80GB HBM3") for r in range(world)]
    return "\n".join(["# nccl-tests version 2.19.6 nccl-headers=22903 nccl-library=22903",
                      f"# Collective test starting: {program}",
                      "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 1 iters: "
                      "20 agg iters: 1 validation: 1 graph: 0 unalign: 0", *extra, "#", "# Using devices", *ranks,
                      "#", *header, *rows, "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 40.1 ", "#",
                      f"# Collective test concluded: {program}", "#", ""])


def test_timestamps_are_read(tmp_path):
    """-S 1 (a62c975, 2.17.6): writeTimestamp `%21s` after the in-place block: two words."""
    rows = []
    for i, s in enumerate((1048576, 2097152, 4194304)):
        t = 20.0 + s / 1e5
        alg = s / t / 1e3
        rows.append("%12li  %12li  %8s  %6s  %6s" % (s, s // 4, "float", "sum", "-1")
                    + ("  %7.2f  %6.2f  %6.2f  %6g" % (t, alg, alg * 1.5, 0)) * 2
                    + "%21s" % f"2026-07-09 10:1{i}:0{i}")
    f = tmp_path / "ar.log"
    f.write_text(_log("all_reduce_perf", rows, _header()))
    (p,) = nccl_tests.parse_runs(f)
    assert len(p.rows) == 6 and p.rows[-1]["busbw_gbps"] == round(4194304 / (20 + 41.94304) / 1e3 * 1.5, 2)
    assert p.stamps == {"first": "2026-07-09 10:10:00", "last": "2026-07-09 10:12:02", "rows": 3,
                        "clock": "the host's local time, no zone (nccl-tests -S 1: strftime %Y-%m-%d %H:%M:%S)"}
    assert p.options["-S"]["value"] == 1 and p.rows[0]["tool_options"] == ""


def test_per_iteration_text_columns_and_timestamps(tmp_path):
    """-I 1 with -S 1: i_min i_max i_p99 i_cv% after each block, the timestamp after the in-place one."""
    row = ("%12li  %12li  %8s  %6s  %6s" % (1048576, 262144, "float", "sum", "-1")
           + "  %7s  %6s  %6s  %6g  %7s  %7s  %7s  %7s" % ("40.00", "26.21", "39.32", 0, "38.10", "45.20", "45.20", "4.20")
           + "  %7s  %6s  %6s  %6g  %7s  %7s  %7s  %7s" % ("39.00", "26.89", "40.33", 0, "37.90", "41.00", "41.00", "2.50")
           + "%21s" % "2026-07-09 10:10:00")
    extra = ["# Per-Iteration Report: CUDA event timing; i_* uses max over process rows; summary skips first 2 "
             "iterations "]
    f = tmp_path / "ar.log"
    f.write_text(_log("all_reduce_perf", [row], _header(per_iter=True), extra=extra))
    (p,) = nccl_tests.parse_runs(f)
    oop, ip = p.rows
    assert (oop["time_median_s"], oop["time_min_s"], oop["time_max_s"], oop["time_cv"]) == (
        pytest.approx(40e-6), pytest.approx(38.10e-6), pytest.approx(45.20e-6), pytest.approx(0.042))
    assert ip["time_cv"] == pytest.approx(0.025) and oop["tool_options"] == "-I 1"
    assert p.options["-K"] == {"value": 2, "from": "line 4: " + extra[0].rstrip()}


def _per_iter_json(tmp_path) -> Path:
    """The -J file of a -I 1 run: every result carries out_of_place_per_iter / in_place_per_iter
    (util.cu writePerIterReport: times_us, one per iteration; the stats over those after -K)."""
    doc = json.loads(JSON.read_text())
    doc["args"] += ["-I", "1"]
    doc["config"]["per_iter_timing"] = "true"
    for k, r in enumerate(doc["results"]):
        for key in ("out_of_place", "in_place"):
            times = [r[key]["time"] * (1 + 0.01 * ((i * 7 + k) % 5)) for i in range(20)]
            r[f"{key}_per_iter"] = {"skipped_iterations": 0, "min_us": min(times), "max_us": max(times),
                                    "avg_us": sum(times) / 20, "p50_us": sorted(times)[10], "p95_us": sorted(times)[18],
                                    "p99_us": max(times), "stdev_us": 0.5, "cv_pct": 1.5, "times_us": times}
    f = tmp_path / "ar.json"
    f.write_text(json.dumps(doc))
    return f


def test_per_iteration_json_is_imported_as_raw_samples(tmp_path, capsys):
    f = _per_iter_json(tmp_path)
    p = nccl_tests.parse(f)
    assert len(p.samples) == 26 * 20 and {r["samples"] for r in p.rows} == {20}
    assert {r["tool_options"] for r in p.rows} == {"-I 1"}
    run_dir = _import(capsys, f, tmp_path / "r")
    run = load_run(run_dir)
    s, res = run["samples"], run["results"]
    doc = json.loads(f.read_text())
    r9 = doc["results"][9]["in_place_per_iter"]
    row = res[(res["size_bytes"] == doc["results"][9]["size"]) & (res["placement"] == "in-place")].iloc[0]
    got = s[(s["size_bytes"] == row["size_bytes"]) & (s["placement"] == "in-place")].sort_values("iteration")
    assert got["seconds"].tolist() == pytest.approx([t * 1e-6 for t in r9["times_us"]], rel=1e-12)
    assert set(got["case_id"]) == {row["case_id"]} and got["rank"].isna().all()
    assert row["time_min_s"] == pytest.approx(r9["min_us"] * 1e-6) and row["time_cv"] == pytest.approx(0.015)
    assert json.loads((run_dir / "meta.json").read_text())["source"]["files"][0]["samples"] == 520


def test_json_options_and_failed_check(tmp_path, capsys):
    doc = json.loads(JSON.read_text())
    doc["args"] += ["-z", "2", "-a", "3"]
    doc["config"]["blocking_collectives"] = "true"
    doc["results"][4]["out_of_place"]["nwrong"] = 7.0
    doc["out_of_bounds"] = {"count": 1, "okay": "false"}
    f = tmp_path / "ar.json"
    f.write_text(json.dumps(doc))
    p = nccl_tests.parse(f)
    assert {r["tool_options"] for r in p.rows} == {"-z 2"} and {r["rank_reduce"] for r in p.rows} == {"max"}
    assert p.check_failed() == ["7 wrong element(s)", "out_of_bounds.count 1"]
    assert main(["import", "nccl-tests", str(f), "--out", str(tmp_path / "r")]) == 1


def _alltoallv_rows(world: int, factor: float) -> list[str]:
    """src/alltoallv.cu, generated pattern: count = per-peer elements (16-byte aligned), size = the
    busiest rank's bytes, algbw = size / time, busbw = algbw x (n - 1) / n; in-place unchecked (N/A)."""
    rows = []
    for s in (1048576, 2097152, 4194304):
        t = 10.0 + s / 2e5
        alg = s / t / 1e3
        body = "  %7.2f  %6.2f  %6.2f  %6g" % (t, alg, alg * factor, 0) + "  %7.2f  %6.2f  %6.2f    N/A" % (
            t, alg, alg * factor)
        rows.append("%12li  %12li  %8s  %6s  %6s" % (s - 16 * world, s // 4 // world, "float", "none", "-1") + body)
    return rows


def test_alltoallv(tmp_path, capsys):
    f = tmp_path / "a2av.log"
    f.write_text(_log("alltoallv_perf", _alltoallv_rows(4, 3 / 4), _header(stamp=False)))
    (p,) = nccl_tests.parse_runs(f)
    assert {r["collective"] for r in p.rows} == {"alltoallv"} and len(p.rows) == 6
    assert {r["case_id"] for r in p.rows} == {"alltoallv.float32.none.root-1.nccl-tests.w4"}
    assert [r["wrong"] for r in p.rows if r["placement"] == "in-place"] == [None] * 3
    assert p.rows[-1]["bus_factor"] == pytest.approx(0.75, abs=0.001)
    _import(capsys, f, tmp_path / "r")
    g = tmp_path / "bad.log"  # busbw = algbw: not alltoallv's factor at 4 ranks
    g.write_text(_log("alltoallv_perf", _alltoallv_rows(4, 1.0), _header(stamp=False)))
    with pytest.raises(BenchError, match=r"is not alltoallv's bus factor at 4 ranks \(0\.7500"):
        nccl_tests.parse_runs(g)


def test_launcher_prefixes_set_a_floor_on_the_world(tmp_path, capsys):
    """OpenMPI --tag-output prefixes `[1,7]<stdout>:`: at least 8 processes printed; `-np 2` cannot be."""
    lines = _no_ranks(TEXT.read_text(), "$ mpirun -np 2 ./build/all_reduce_perf -b 8 -e 128M -f 4").splitlines()
    f = tmp_path / "all_reduce.log"
    f.write_text("\n".join(f"[1,{7 if k == 2 else 0}]<stdout>:{ln}" for k, ln in enumerate(lines)))
    rc = main(["import", "nccl-tests", str(f), "--out", str(tmp_path / "res")])
    _one_line_error(capsys, rc, "world 2 from the command line (mpirun -np 2)", "show at least 8 process(es)")
