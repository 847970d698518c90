"""The energy columns through the readers: `distbench show` prints the figures per case and why
rows have none, `distbench compare` compares J/op and J/GB (lower is better, shown, not gated)
and leaves them out where no row has them, `distbench history --metric energy_per_op_j` reads
them, the report draws J/GB against message size, and the gpu-smoke energy check."""

import sys

import pandas as pd

from bench.cli import main
from bench.results.schema import SCHEMA_VERSION
from bench.results.store import write_json, write_parquet
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import gpu_smoke_energy as G  # noqa: E402 - tools/ is not a package

MiB = 1 << 20
CASE = "all_reduce.float32.sum.root-1.throughput.w2"
SHORT = "span 0.2 s < 1 s (10 x the counter's 100 ms update period): counter too coarse"


def _meta(run_id):
    ranks = [{"rank": r, "host": "vm", "cpu_model": "x", "cores": 2, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}], "device": "cuda"} for r in range(2)]
    return {"schema_version": SCHEMA_VERSION, "run_id": run_id, "suite": "smoke", "kind": "collectives",
            "config": {"name": "smoke", "world": [2]}, "started_utc": "2026-12-02T00:00:00+00:00",
            "git_sha": "abc", "git_dirty": False, "software": {"torch": "2.13.0", "nccl": None, "python": "3.11"},
            "launches": {"2": {"world": 2, "backend": "nccl", "nodes": 1, "ranks": ranks}}}


def _row(run_id, size, t, j_per_op, note=""):
    """A collectives row at world 2 (all_reduce: bus factor 1), its energy over a 2 s span."""
    ops = 2.0 / t
    e = None if note else j_per_op * ops
    return {"run_id": run_id, "suite": "smoke", "kind": "collectives", "case_id": CASE, "world": 2,
            "collective": "all_reduce", "size_bytes": size, "placement": "out-of-place", "mode": "throughput",
            "dtype": "float32", "op": "sum", "root": -1, "time_median_s": t, "busbw_gbps": size / t / 1e9,
            "bus_factor": 1.0, "wrong": 0, "device_type": "cuda", "gpus_sampled": 2, "gpu_energy_j": 900.0,
            "energy_j": e, "energy_span_s": 0.2 if note else 2.0, "energy_note": note,
            "energy_per_op_j": None if note else j_per_op,
            "energy_per_gb_j": None if note else j_per_op / (size * 1.0 * 2 / 1e9)}


def _run(root, run_id, j_per_op):
    d = root / run_id
    rows = [_row(run_id, MiB, 1e-4, None, note=SHORT), _row(run_id, 64 * MiB, 2e-3, j_per_op)]
    write_parquet(pd.DataFrame(rows), d / "results.parquet")
    write_json(_meta(run_id), d / "meta.json")
    return d


def test_show_prints_the_energy_per_case_and_why_rows_have_none(tmp_path, capsys):
    d = _run(tmp_path, "r1", 0.8)
    assert main(["show", str(d)]) == 0
    out = capsys.readouterr().out
    assert f"#    {CASE} at 64MB (out-of-place): 800 J over 2 s, 0.8 J/op, 5.96 J/GB" in out
    assert f"#  Energy: no figure in 1 of 2 rows: {SHORT}" in out


def test_compare_shows_joules_per_op_and_per_gb_lower_is_better(tmp_path, capsys):
    a, b = _run(tmp_path, "a", 0.8), _run(tmp_path, "b", 1.0)
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    import json

    cases = json.loads(capsys.readouterr().out)["cases"]
    got = {(c["size_bytes"], c["metric"]): c for c in cases}
    per_op = got[(64 * MiB, "energy_per_op_j")]
    assert per_op["ratio"] == 1.25 and per_op["lower_is_better"] and not per_op["gated"]
    assert got[(64 * MiB, "energy_per_gb_j")]["ratio"] == 1.25
    assert got[(MiB, "energy_per_op_j")]["verdict"] == "n/a"  # no figure at 1M: shown as such


def test_compare_leaves_out_energy_where_no_row_has_it(tmp_path, capsys):
    a, b = _run(tmp_path, "a", 0.8), _run(tmp_path, "b", 1.0)
    for d in (a, b):
        df = pd.read_parquet(d / "results.parquet")
        df[["energy_j", "energy_per_op_j", "energy_per_gb_j"]] = None
        df["energy_note"] = "no GPU: the rank runs on cpu"
        write_parquet(df, d / "results.parquet")
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "energy" not in out and "time_median_s" in out


def test_history_reads_joules_per_op(tmp_path, capsys):
    for i, j in enumerate((0.8, 0.9, 1.0)):
        _run(tmp_path / "smoke", f"run{i}", j)
    assert main(["history", "--out", str(tmp_path), "--case", CASE, "--metric", "energy_per_op_j", "--format", "json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["metric"] == "energy_per_op_j" and [p["value"] for p in doc["points"]] == [0.8, 0.9, 1.0]


def test_the_report_draws_joules_per_gb_against_size(tmp_path):
    from bench.report.plots.common import Section
    from bench.report.plots.energy import per_gb_vs_size

    df = pd.DataFrame([_row("r", MiB, 1e-4, None, note=SHORT), _row("r", 64 * MiB, 2e-3, 0.8),
                       _row("r", 16 * MiB, 6e-4, 0.3)])
    sec = Section("collectives", "Collectives")
    per_gb_vs_size(sec, df, [], tmp_path, "all_reduce")
    assert [i.file for i in sec.images] == ["energy_all_reduce_per_gb_vs_size.png"]
    assert (tmp_path / sec.images[0].file).stat().st_size > 0
    assert SHORT in sec.images[0].caption
    empty = Section("collectives", "Collectives")
    per_gb_vs_size(empty, df.iloc[:1], [], tmp_path, "all_reduce")
    assert empty.images == [] and empty.missing == [f"all_reduce: no energy per GB: {SHORT}"]


# ---- tools/gpu_smoke_energy.py: the energy check of `make gpu-smoke`

def _good():
    return pd.DataFrame([_row("r", MiB, 1e-4, None, note=SHORT), _row("r", 64 * MiB, 2e-3, 0.8)])


def test_smoke_energy_check_passes_good_rows_and_says_what_it_verified():
    problems, facts = G.check_energy(_good(), gpu=True)
    assert problems == [] and facts == ["energy: 1 of 2 rows with figures (0.8 J/op, 5.96 J/GB at 64MB); "
                                        "1 without: span shorter than 1 s"]


def test_smoke_energy_check_fails_on_wrong_data():
    bad = _good()
    bad.loc[1, ["energy_j", "energy_per_op_j", "energy_per_gb_j"]] = None  # a 2 s span on a GPU with the counter
    bad.loc[1, "energy_note"] = "counter did not move on GPU-a over 2 s"
    assert G.check_energy(bad, gpu=True)[0] == [
        "energy absent on a GPU with the counter over a 2 s span (64MB out-of-place): counter did not move on GPU-a over 2 s"]
    bad = _good()
    bad.loc[1, "energy_per_op_j"] = -0.1
    assert G.check_energy(bad, gpu=True)[0] == [
        "energy_per_op_j -0.1 <= 0 (64MB out-of-place)",
        "energy_per_gb_j x bus bytes per op 0.8 J != energy_per_op_j -0.1 J (64MB out-of-place)"]
    bad = _good()
    bad.loc[1, "energy_per_gb_j"] = 5e6
    assert G.check_energy(bad, gpu=True)[0] == [
        "energy_per_gb_j 5e+06 J/GB outside [0.01, 1e+05] (64MB out-of-place)",
        "energy_per_gb_j x bus bytes per op 6.71e+05 J != energy_per_op_j 0.8 J (64MB out-of-place)"]
    bad = _good()
    bad.loc[1, "energy_j"] = 2000.0  # more than the whole case window's 900 J
    assert ("energy_j 2e+03 J > the case window's gpu_energy_j 900 J + one counter period (100 J) (64MB out-of-place)"
            in G.check_energy(bad, True)[0])
    bad = _good()
    bad.loc[0, "energy_note"] = ""  # no figure and no reason
    assert G.check_energy(bad, gpu=True)[0] == ["energy absent without a reason (1MB out-of-place)"]
    bad = _good()
    bad.loc[1, ["energy_j", "energy_per_op_j", "energy_per_gb_j", "energy_span_s"]] = [20000.0, 20.0, 149.0, 2.0]
    assert "mean power 5e+03 W per GPU outside [5, 1.5e+03] W (64MB out-of-place)" in G.check_energy(bad, True)[0]


def test_smoke_energy_check_can_demand_a_figure():
    rows = _good().iloc[:1]
    assert G.check_energy(rows, gpu=True, need_figure=True)[0] == [
        f"no row with an energy figure on a GPU with the counter: {SHORT}"]
