"""Readers take bad paths calmly (issue 23): report, show, compare, gate, export, runs and import, on a
missing, wrong-type, unreadable, corrupt or unwritable path, print one line naming the path and
what is wrong with it, exit 2 (gate: 3 only where docs/gate.md says: nothing comparable), and name
the real problem first. Tried as a new user would: a matrix of commands x bad paths, in process."""

import json
import os
import shutil
from pathlib import Path

import pytest

from bench.cli import main

DATA = Path(__file__).parent / "data" / "imports"


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    t = tmp_path_factory.mktemp("bad")
    rc = main(["import", "nccl-tests", str(DATA / "all_reduce_perf-2.17.6.txt"), "--out", str(t / "results")])
    assert rc == 0
    good = next((t / "results" / "import-nccl-tests").iterdir())
    (t / "file.txt").write_text("hello")
    (t / "empty").mkdir()
    (t / "baselines").mkdir()

    def run_like(name, meta: bytes | None, parquet: bytes | None, meta_dir=False):
        d = t / name / "suite" / "r1"
        d.mkdir(parents=True)
        if meta_dir:
            (d / "meta.json").mkdir()  # unreadable as a file, whoever runs the test (root reads any mode)
        elif meta is not None:
            (d / "meta.json").write_bytes(meta)
        if parquet is not None:
            (d / "results.parquet").write_bytes(parquet)
        return d

    good_meta, good_pq = (good / "meta.json").read_bytes(), (good / "results.parquet").read_bytes()
    return {
        "good": good, "root": t,
        "missing": t / "nope",
        "file": t / "file.txt",
        "not-a-run": t / "empty",
        "meta-not-json": run_like("c1", b"{not json", good_pq[:50]),
        "meta-a-list": run_like("c2", b"[1, 2]", None),
        "meta-unreadable": run_like("c3", None, b"PAR1 garbage", meta_dir=True),
        "parquet-corrupt": run_like("c4", good_meta, b"PAR1 garbage PAR1"),
        "parquet-truncated": run_like("c5", good_meta, good_pq[: len(good_pq) // 2]),
    }


COMMANDS = {
    "report": lambda p, g, t: ["report", str(p), "--output-dir", str(t / "rep")],
    "report --baseline": lambda p, g, t: ["report", str(g), "--baseline", str(p), "--output-dir", str(t / "rep")],
    "show": lambda p, g, t: ["show", str(p)],
    "compare A": lambda p, g, t: ["compare", str(p), str(g)],
    "compare B": lambda p, g, t: ["compare", str(g), str(p)],
    "gate --current": lambda p, g, t: ["gate", "--current", str(p), "--baseline", str(t / "baselines")],
    "export": lambda p, g, t: ["export", str(p)],
}
# what each bad path must be called (the real problem, first)
SAYS = {
    "missing": "does not exist",
    "file": "file",
    "not-a-run": "no meta.json",
    "meta-not-json": "meta.json",
    "meta-a-list": "meta.json",
    "meta-unreadable": "meta.json",
    "parquet-corrupt": "results.parquet",
    "parquet-truncated": "results.parquet",
}


def _one_line(capsys):
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("#")]
    assert len(err) == 1, err
    assert err[0].startswith("distbench: error: ") and "internal error" not in err[0], err[0]
    return err[0]


@pytest.mark.parametrize("kind", sorted(SAYS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_reader_on_a_bad_path(command, kind, paths, capsys):
    p = paths[kind]
    rc = main(COMMANDS[command](p, paths["good"], paths["root"]))
    line = _one_line(capsys)
    assert rc == 2, line
    assert str(p) in line and SAYS[kind] in line, line


@pytest.mark.parametrize("kind", ["missing", "file", "not-a-run", "meta-not-json", "meta-a-list"])
def test_runs_and_report_root(kind, paths, capsys):
    """A results root: missing / a file: one line, 2; one holding bad runs: listed, never an internal error."""
    p = paths[kind] if kind in ("missing", "file") else paths[kind].parent.parent
    rc = main(["runs", "--out", str(p)])
    if kind in ("missing", "file"):
        line = _one_line(capsys)
        assert rc == 2 and str(p) in line and SAYS[kind] in line, line
    else:
        assert rc == 0 and "internal error" not in capsys.readouterr().err


def test_a_missing_baseline_is_called_missing_before_the_run_is_read(paths, capsys):
    """`gate --current EMPTY_RUN --baseline MISSING` names the missing baseline, not 'no results rows'."""
    rc = main(["gate", "--current", str(paths["meta-a-list"]), "--baseline", str(paths["missing"])])
    line = _one_line(capsys)
    assert rc == 2 and f"--baseline '{paths['missing']}' does not exist" in line


@pytest.mark.parametrize("kind,says", [("file", "is a file"), ("good", "is a run, not a baseline"),
                                       ("meta-not-json", "cannot be read")])
def test_gate_baseline_of_the_wrong_kind(kind, says, paths, capsys):
    rc = main(["gate", "--current", str(paths["good"]), "--baseline", str(paths[kind])])
    line = _one_line(capsys)
    assert rc == 2 and str(paths[kind]) in line and says in line, line


def test_gate_with_no_stored_baseline_is_3(paths, capsys):
    """docs/gate.md: no baseline for this fingerprint is 'nothing comparable', exit 3, not an error."""
    rc = main(["gate", "--current", str(paths["good"]), "--baseline", str(paths["root"] / "baselines")])
    out = capsys.readouterr()
    assert rc == 3 and "NO COMPARABLE BASELINE" in out.out and "error" not in out.err


UNWRITABLE = {
    "report --output-dir FILE": (lambda g, t: ["report", str(g), "--output-dir", str(t / "file.txt")], "is a file"),
    "report --output-dir under a file": (lambda g, t: ["report", str(g), "--output-dir", str(t / "file.txt" / "r")], "cannot be written"),
    "export -o DIR": (lambda g, t: ["export", str(g), "-o", str(t / "empty")], "is a directory"),
    "export -o under a file": (lambda g, t: ["export", str(g), "-o", str(t / "file.txt" / "x.json")],
                               "is not a directory"),
    "gate --markdown under a file": (lambda g, t: ["gate", "--current", str(g), "--baseline", str(t / "baselines"),
                                                   "--markdown", str(t / "file.txt" / "x.md")], "is not a directory"),
    "import --out FILE": (lambda g, t: ["import", "param", str(DATA / "param-comms-all_reduce.log"), "--out",
                                        str(t / "file.txt")], "is a file"),
    "import --out under a file": (lambda g, t: ["import", "param", str(DATA / "param-comms-all_reduce.log"), "--out",
                                                str(t / "file.txt" / "r")], "cannot write"),
}


@pytest.mark.parametrize("case", sorted(UNWRITABLE))
def test_unwritable_output(case, paths, capsys):
    argv, says = UNWRITABLE[case]
    rc = main(argv(paths["good"], paths["root"]))
    line = _one_line(capsys)
    named = paths["root"] / ("empty" if case.endswith("DIR") else "file.txt")
    assert rc == 2 and says in line and str(named) in line, line


@pytest.mark.parametrize("tool", ["nccl-tests", "param"])
@pytest.mark.parametrize("kind", ["missing", "not-a-run"])
def test_import_of_a_bad_path(tool, kind, paths, capsys):
    rc = main(["import", tool, str(paths[kind]), "--out", str(paths["root"] / "imp")])
    line = _one_line(capsys)
    assert rc == 2 and str(paths[kind]) in line and ("no such file" if kind == "missing" else "is a directory") in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files of any mode")
def test_import_of_an_unreadable_file(tmp_path, capsys):
    f = tmp_path / "log.txt"
    shutil.copy(DATA / "all_reduce_perf-2.17.6.txt", f)
    f.chmod(0)
    rc = main(["import", "nccl-tests", str(f), "--out", str(tmp_path / "r")])
    line = _one_line(capsys)
    assert rc == 2 and str(f) in line and "cannot read it" in line
    json.dumps(line)  # one plain line


def test_a_path_the_system_refuses_is_named(paths, capsys, monkeypatch):
    """Wherever a reader meets a path it may not read (EACCES deep in pyarrow or pathlib), the one
    line names that path and the system's reason, exit 2: never an internal error."""
    import bench.report.cli as report_cli

    def refuse(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(Path(path) / "results.parquet"))

    monkeypatch.setattr(report_cli, "load_run", refuse)
    rc = main(["show", str(paths["good"])])
    line = _one_line(capsys)
    assert rc == 2 and f"'{paths['good'] / 'results.parquet'}': Permission denied" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads directories of any mode")
@pytest.mark.parametrize("command", ["show", "compare A", "export", "report"])
def test_an_unreadable_run_directory(command, paths, tmp_path, capsys):
    d = tmp_path / "s" / "r"
    shutil.copytree(paths["good"], d)
    d.chmod(0)
    try:
        rc = main(COMMANDS[command](d, paths["good"], tmp_path))
        line = _one_line(capsys)
        assert rc == 2 and str(d) in line, line
    finally:
        d.chmod(0o755)
