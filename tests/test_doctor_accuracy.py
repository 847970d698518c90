"""tools/doctor_accuracy.py without running it (every run is a simulated cluster: never in tests):
the interleaved order, the commands, reading the verdict, matching names, the table."""

import argparse
import importlib.util
import sys

import pandas as pd
import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("doctor_accuracy", ROOT / "tools/doctor_accuracy.py")
da = importlib.util.module_from_spec(spec)
spec.loader.exec_module(da)


def _args(*argv):
    a = argparse.Namespace(reps=2, ranks_per_node=2, link="1gbit", slow_link_rate="200mbit", slow_node_rate="100mbit",
                           quota="rank5=25%", doctor_args="--reps 3 --no-groups", timeout_s=60, jsonl=None,
                           nodes=4, scenarios=list(da.SCENARIOS))
    for k, v in (x.split("=", 1) for x in argv):
        setattr(a, k, v)
    return a


def test_scenarios_interleave_and_inject_what_they_say():
    assert da.schedule(2) == ["healthy", "link", "node", "compute"] * 2
    scs = da.scenarios(_args())
    assert {k: (s.args, s.injected) for k, s in scs.items()} == {
        "healthy": ((), None),
        "link": (("--link-of", "node0-node2=200mbit"), "link node0 <-> node2"),
        "node": (("--link-of", "node1=100mbit"), "node node1"),
        "compute": (("--cpu-quota-of", "rank5=25%"), "rank 5 compute"),
    }
    assert da.command(_args(), scs["link"]) == [
        sys.executable, "-m", "bench", "simcluster", "--nodes", "4", "--ranks-per-node", "2", "--link", "1gbit",
        "--link-of", "node0-node2=200mbit", "--", "distbench", "doctor", "--reps", "3", "--no-groups"]


def test_a_sweep_slice_at_three_nodes():
    """--nodes and --scenarios: the sensitivity study's slices (docs/doctor.md)."""
    a = _args(*["quota=rank2=25%"])
    a.nodes, a.scenarios = 3, ["healthy", "node"]
    scs = da.scenarios(a)
    assert list(scs) == ["healthy", "node"] and da.command(a, scs["node"])[5] == "3"
    assert da.schedule(2, ["healthy", "node"]) == ["healthy", "node", "healthy", "node"]
    recs = [{"scenario": "node", "suspects": ["node node1"], "wall_s": 5.0}]
    assert [r["scenario"] for r in da.tally(recs, scs)] == ["healthy", "node"]  # only the chosen ones


@pytest.mark.parametrize("argv,message", [(["--nodes", "2"], "--nodes 2: allowed 3 .. 8"),
                                          (["--scenarios", "node,bogus"], "--scenarios bogus: allowed")])
def test_bad_sweep_options(argv, message, capsys):
    assert da.main(argv) == 2
    assert message in capsys.readouterr().err


def test_bad_options_are_one_line_exit_2(capsys):
    assert da.main(["--quota", "rank4=25%"]) == 2  # 4 nodes x 1 rank: ranks 0 .. 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown rank or node in --cpu-quota-of 'rank4'" in err[0], err


def test_the_verdict_is_read_top_first(monkeypatch):
    table = pd.DataFrame({"position": [2, 1], "suspect": ["link rank 0 -> rank 2", "link node2 <-> node0"]})
    monkeypatch.setattr(da, "load_run", lambda d: type("Run", (), {"tables": {"doctor_suspects": table}})())
    assert da.suspects("x") == ["link node2 <-> node0", "link rank 0 -> rank 2"]
    assert da.top_suspect("x") == "link node2 <-> node0"
    monkeypatch.setattr(da, "load_run", lambda d: type("Run", (), {"tables": {}})())
    assert da.top_suspect("x") is None


@pytest.mark.parametrize("name, injected, same", [
    ("link node2 <-> node0", "link node0 <-> node2", True),
    ("Node  node1", "node node1", True),
    ("rank 3 compute", "rank 3 compute", True),
    ("rank 2 compute", "rank 3 compute", False),
    ("node node1", None, False),
    (None, None, True),
    (None, "node node1", False),
])
def test_names_are_matched(name, injected, same):
    assert da.same_suspect(name, injected) is same


def test_the_table():
    scs = da.scenarios(_args())
    records = [
        {"scenario": "healthy", "suspects": [], "wall_s": 10.0},
        {"scenario": "healthy", "suspects": ["node node3"], "wall_s": 12.0},
        {"scenario": "link", "suspects": ["link node2 <-> node0", "node node2"], "wall_s": 11.0},
        {"scenario": "link", "suspects": None, "wall_s": 3.0},  # no verdict: counted apart
        {"scenario": "node", "suspects": ["node node1"], "wall_s": 20.0},
        {"scenario": "compute", "suspects": ["rank 1 compute"], "wall_s": 9.0},
    ]
    rows = da.tally(records, scs)
    assert [(r["scenario"], r["runs"], r["right"], r["false"], r["failed"], r["wall_s"]) for r in rows] == [
        ("healthy", 2, 1, 1, 0, 11.0), ("link", 2, 1, 1, 1, 11.0), ("node", 1, 1, 0, 0, 20.0),
        ("compute", 1, 0, 1, 0, 9.0)]
    md = da.markdown(rows).splitlines()
    assert md[0].startswith("| scenario | fault injected | runs | top suspect == injected | false suspects |")
    assert md[3] == "| link | node0-node2 at 200mbit | 2 | 1 / 1 | 1 | 1 | 11.0 |"


def test_the_run_directory_is_the_last_results_line(tmp_path):
    out = f"x\n{da.RESULTS_LINE}{tmp_path}/a\n{da.RESULTS_LINE}{tmp_path}/b\n"
    assert da.run_dir_of(out) == f"{tmp_path}/b" and da.run_dir_of("nothing") is None
    assert da.run_dir_of(f"{da.RESULTS_LINE}results/doctor/x\n") == str(ROOT / "results/doctor/x")
