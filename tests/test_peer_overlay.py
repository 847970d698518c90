"""Issue 31 item 6: the distbench vs nccl-tests / PARAM overlay pairs like with like. A size is
paired only where both rows measure the same case (collective, world, dtype, placement, size)
by the same definition (mode, rank reduction, blocking, op) on the same machine (device model and
nodes, from meta.json); the rest are drawn without a ratio, saying why. A latency-mode run (one
op per sample, max over ranks) against nccl-tests' back-to-back average reads low by design."""

from pathlib import Path

import pandas as pd
import pytest

from bench.collectives.plots import _peer_section, peer_ratios, peer_unpaired
from bench.report.plots.common import Section
from bench.report.plots.data import Entry
from bench.results.store import Run

H100 = {"launches": {"8": {"world": 8, "backend": "nccl", "nodes": 1, "ranks": [
    {"rank": r, "host": "n0", "device": f"cuda:{r}", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "index": r}]}
    for r in range(8)]}}}
A100 = {"launches": {"8": {**H100["launches"]["8"], "ranks": [
    {**r, "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "index": r["rank"]}]} for r in H100["launches"]["8"]["ranks"]]}}}


def rows(label, tool, mode, rank_reduce, busbw, machine=H100, op="sum"):
    df = pd.DataFrame({"collective": ["all_reduce"] * 2, "world": [8, 8], "dtype": ["float32"] * 2,
                       "placement": ["in-place"] * 2, "size_bytes": [1024, 2048], "_label": [label] * 2,
                       "_tool": [tool] * 2, "mode": [mode] * 2, "rank_reduce": [rank_reduce] * 2,
                       "blocking": [True] * 2, "op": [op] * 2, "busbw_gbps": busbw, "time_median_s": [1e-5, 2e-5]})
    from bench.collectives.plots import machine_of  # the machine as the overlay names it
    return df.assign(_machine=machine_of(machine))


NCCL = rows("theirs", "nccl-tests", "nccl-tests", "avg", [2.0, 10.0])


def test_a_latency_run_is_not_set_against_nccl_tests_back_to_back_average():
    latency = rows("mine", "distbench", "latency", "max", [3.0, 8.0])
    assert peer_ratios(latency, NCCL).empty  # was: ratios 1.5 and 0.8 of two different definitions
    why = peer_unpaired(latency, NCCL)
    assert why[["run", "peer_run", "collective", "world", "why"]].values.tolist() == [
        ["mine", "theirs", "all_reduce", 8, "mode latency vs nccl-tests; rank_reduce max vs avg"]]


def test_like_with_like_is_paired():
    same = rows("mine", "distbench", "nccl-tests", "avg", [3.0, 8.0])
    r = peer_ratios(same, NCCL)
    assert r[["size_bytes", "busbw_ratio", "time_ratio"]].values.tolist() == [[1024, 1.5, 1.0], [2048, 0.8, 1.0]]
    assert peer_unpaired(same, NCCL).empty


def test_another_machine_or_op_is_not_paired():
    other = rows("mine", "distbench", "nccl-tests", "avg", [3.0, 8.0], machine=A100)
    assert peer_ratios(other, NCCL).empty
    assert peer_unpaired(other, NCCL)["why"].tolist() == [
        "machine NVIDIA A100-SXM4-80GB, 1 node(s) vs NVIDIA H100 80GB HBM3, 1 node(s)"]
    maxed = rows("mine", "distbench", "nccl-tests", "avg", [3.0, 8.0], op="max")
    assert peer_ratios(maxed, NCCL).empty and peer_unpaired(maxed, NCCL)["why"].tolist() == ["op max vs sum"]


def _entry(label, df, meta, tool=""):
    res = df.drop(columns=["_label", "_tool", "_machine"])
    return Entry(label=label, run=Run(dir=Path(label), meta={**meta, **({"source": {"tool": tool}} if tool else {})},
                                      tables={"results": res}))


def test_the_report_draws_the_unpaired_without_a_ratio_and_says_why(tmp_path):
    latency = rows("mine", "distbench", "latency", "max", [3.0, 8.0])
    sec = Section("collectives", "Collectives")
    _peer_section(sec, [_entry("mine", latency, H100), _entry("theirs", NCCL, H100, "nccl-tests")], tmp_path)
    assert not any("ratio" in img.file for img in sec.images)
    assert [img.file for img in sec.images] == ["collectives_all_reduce_busbw_vs_peer_unpaired.png"]
    assert "no ratio: mode latency vs nccl-tests; rank_reduce max vs avg" in sec.images[0].alt
    caption, html = sec.tables[0]
    assert caption == "distbench vs nccl-tests: not compared (different definitions or machines)"
    assert "mode latency vs nccl-tests; rank_reduce max vs avg" in html
    assert any("only like with like" in n for n in sec.notes)


def test_the_report_pairs_like_with_like(tmp_path):
    same = rows("mine", "distbench", "nccl-tests", "avg", [3.0, 8.0])
    sec = Section("collectives", "Collectives")
    _peer_section(sec, [_entry("mine", same, H100), _entry("theirs", NCCL, H100, "nccl-tests")], tmp_path)
    assert [img.file for img in sec.images] == ["collectives_all_reduce_busbw_ratio_vs_peer.png"]
    assert sec.tables[0][0] == "distbench vs nccl-tests, per size (same definition and machine)"


@pytest.mark.parametrize("meta, want", [({}, "cpu, 1 node(s)"), (H100, "NVIDIA H100 80GB HBM3, 1 node(s)")])
def test_machine_names(meta, want):
    from bench.collectives.plots import machine_of
    assert machine_of(meta) == want
