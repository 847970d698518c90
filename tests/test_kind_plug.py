"""Issue 19: a kind defined in tests/ (toy_kind.py) runs through every generic command with no
edit anywhere in bench/: run, show, report, compare, gate, history and preflight; and (issue 33)
with a results column of its own, which the schema takes from the kind (Kind.columns)."""

import importlib
import json

import pandas as pd
import pytest

from bench.cli import main
from bench.kind import KINDS
from conftest import ROOT


def schema_source() -> str:
    return (ROOT / "bench" / "results" / "schema.py").read_text()

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def toy():
    """The toy kind, registered for this module's tests only (other modules parametrize over the
    registry at collection time, and never see it)."""
    module = importlib.import_module("toy_kind")  # registers it (once per process)
    KINDS.register(module.KIND) if module.NAME not in KINDS else None
    yield module
    KINDS._items.pop(module.NAME, None)  # noqa: SLF001  (tests only: leave the registry as found)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, toy):
    toy_kind = toy
    root = tmp_path_factory.mktemp("toy")
    suite = root / "toy.toml"
    suite.write_text(f'kind = "{toy_kind.NAME}"\nworld = [2]\nsizes = ["4K", "64K"]\niters = 5\ntelemetry = false\n')
    dirs = []
    for _ in range(3):
        assert main([toy_kind.NAME, "--suite", str(suite), "--out", str(root / "results")]) == 0
        dirs.append(sorted((root / "results" / toy_kind.NAME).iterdir())[-1])
    return root, suite, dirs


def test_the_toy_kind_is_registered_and_in_the_cli(toy):
    assert toy.NAME in KINDS.names()


def test_run_and_show(runs, toy, capsys):
    toy_kind = toy
    _, _, dirs = runs
    meta = json.loads((dirs[0] / "meta.json").read_text())
    assert meta["kind"] == toy_kind.NAME and meta["state"] == "complete"
    capsys.readouterr()
    assert main(["show", str(dirs[0])]) == 0
    assert "# toy summary: 2 row(s)" in capsys.readouterr().out
    res = pd.read_parquet(dirs[0] / "results.parquet")
    assert (res["toy_adds_per_s"] > 0).all() and len(res) == 2  # its own column, stored


def test_its_column_is_in_the_schema_only_while_it_is_registered(toy):
    from bench.results.schema import TABLES

    assert TABLES["results"]["toy_adds_per_s"] == "float64"
    assert "toy_adds_per_s" not in schema_source()


def test_report_has_the_kinds_own_section(runs):
    root, _, dirs = runs
    assert main(["report", str(dirs[0]), "--output-dir", str(root / "report")]) == 0
    html = (root / "report" / "index.html").read_text()
    assert "Toy adds" in html and "1 toy run(s)" in html


def test_compare_and_gate(runs, capsys):
    root, _, dirs = runs
    assert main(["compare", str(dirs[0]), str(dirs[1])]) == 0
    out = capsys.readouterr().out
    assert "toy.add" in out
    base = root / "baseline"
    assert main(["baseline", "update", "--from", str(dirs[0]), str(dirs[1]), "--baseline", str(base)]) == 0
    capsys.readouterr()
    rc = main(["gate", "--baseline", str(base), "--current", str(dirs[2]), "--no-confirm", "--warn-only"])
    out = capsys.readouterr().out
    # two repeats of microsecond adds: the gate reads the toy's rows by its keys and metric, and
    # may find them too noisy to decide (3); it never fails to understand the kind (2)
    assert rc in (0, 3), out
    assert "toy.add" in out and "time_median_s" in out


def test_history_reads_the_kinds_own_metric(runs, toy, capsys):
    root, _, _ = runs
    capsys.readouterr()
    assert main(["history", "--out", str(root / "results"), "--kind", toy.NAME, "--case", "toy.add",
                 "--metric", "toy_adds_per_s", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["metric"] == "toy_adds_per_s" and len(doc["points"]) == 3  # one point per run


def test_preflight_asks_the_kind_for_memory(runs, toy, capsys):
    toy_kind = toy
    _, suite, _ = runs
    # 64 TiB (65536G) per rank cannot fit: the figure and the hint come from the toy kind's Memory answer
    capsys.readouterr()
    assert main([toy_kind.NAME, "--suite", str(suite), "--sizes", "4K,65536G", "--out", str(runs[0] / "none")]) == 2
    err = capsys.readouterr().err
    assert "the largest case (add at 70368744177664 B)" in err and "4K" in err, err
    assert not (runs[0] / "none" / toy_kind.NAME).exists()  # refused before any run directory
