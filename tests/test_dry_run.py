"""`--dry-run` estimates each case from the stored runs of the same kind on the same machine class
(the median of the case's stored wall times, meta.json launches.*.case_s), else from the kind's
per-size budget, and names the cases it cannot estimate. Stored runs are fixtures (meta.json only),
made to fingerprint as this machine or as another; one real run checks that case_s is written."""

import dataclasses
import json
import os
import re

import torch

from bench.cli import main
from bench.results import fingerprint as fp
from bench.results import metadata
from bench.results.durations import same_machine, stored_case_seconds

KEY = "all_reduce.float32.sum.root-1.latency.w2@{}B"
ARGS = ["collectives", "--dry-run", "-c", "all_reduce", "--sizes", "1K,4K", "--nproc", "2", "--backend", "gloo"]


def stored_run(root, name, kind="collectives", case_s=None, cores=None, suite="s"):
    """A stored run's meta.json: one gloo launch at world 2 on this host (or on a host with `cores`)."""
    d = root / suite / name
    d.mkdir(parents=True)
    launch = {"world": 2, "backend": "gloo", "nodes": 1,
              "ranks": [{"host": "h", "cpu_model": metadata.cpu_model(), "cores": cores or os.cpu_count(),
                         "device": "cpu", "gpus": []}] * 2, "done": list(case_s or {})}
    if case_s is not None:
        launch["case_s"] = case_s
    (d / "meta.json").write_text(json.dumps({"run_id": name, "kind": kind, "suite": suite,
                                             "software": {"torch": torch.__version__}, "launches": {"2": launch}}))
    return d


def this_machine():
    return fp.of_this_machine([2], "gloo")


def dry_run(capsys, root, argv=ARGS) -> list[str]:
    assert main([*argv, "--out", str(root)]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_fixture_runs_fingerprint_as_this_machine(tmp_path):
    d = stored_run(tmp_path, "r1", case_s={})
    assert same_machine(fp.of_run(json.loads((d / "meta.json").read_text())), this_machine())
    other = stored_run(tmp_path, "r2", case_s={}, cores=(os.cpu_count() or 1) + 64)
    assert not same_machine(fp.of_run(json.loads((other / "meta.json").read_text())), this_machine())
    assert same_machine(this_machine(), dataclasses.replace(this_machine(), world="2+4"))  # the key names the world


def test_a_case_is_estimated_by_the_median_of_its_stored_runs_on_this_machine(tmp_path, capsys):
    for name, seconds in (("r1", 1.0), ("r2", 2.0), ("r3", 9.0)):
        stored_run(tmp_path, name, case_s={KEY.format(1024): seconds})
    lines = dry_run(capsys, tmp_path)
    assert f"  {KEY.format(1024)}  ~2.00 s (median of 3 stored run(s))" in lines
    budget = [ln for ln in lines if ln.startswith(f"  {KEY.format(4096)}  ~")]
    assert len(budget) == 1 and budget[0].endswith(" s (budget)")
    total = float(budget[0].split("~")[1].split()[0]) + 2.0
    summary = next(ln for ln in lines if ln.startswith("# estimated duration:"))
    assert summary.startswith(f"# estimated duration: {total:.1f} s (1 case(s) from stored runs on this machine "
                              f"({this_machine().slug()}) under {tmp_path}, 1 from the per-size budgets)")
    assert not any("without an estimate" in ln for ln in lines)


def test_runs_of_another_machine_another_kind_or_from_before_case_s_are_not_used(tmp_path, capsys):
    stored_run(tmp_path, "other-host", case_s={KEY.format(1024): 50.0}, cores=(os.cpu_count() or 1) + 64)
    stored_run(tmp_path, "other-kind", kind="allreduce", case_s={KEY.format(1024): 60.0})
    stored_run(tmp_path, "old", case_s=None)  # a run stored before case_s: its cases are unknown
    assert stored_case_seconds(tmp_path, "collectives", this_machine()) == {}
    lines = dry_run(capsys, tmp_path)
    assert [ln.split("(")[-1] for ln in lines if ln.startswith("  ")] == ["budget)", "budget)"]


def test_pipeline_cases_are_estimated_from_stored_runs_and_the_rest_are_named(tmp_path, capsys):
    argv = ["pipeline", "--dry-run", "--nproc", "2", "--backend", "gloo"]
    lines = dry_run(capsys, tmp_path / "empty", argv)
    keys = [ln.split()[0] for ln in lines if ln.endswith("(no estimate)")]
    assert keys and len(keys) == len([ln for ln in lines if ln.startswith("  ")])  # no budget: none estimated
    assert lines[-1] == (f"# {len(keys)} case(s) without an estimate (no stored run of the case on this machine): "
                         + ", ".join(keys))
    assert re.search(r"^# estimated duration: 0\.0 s \(0 case\(s\) from stored runs", lines[-2])

    stored_run(tmp_path, "p1", kind="pipeline", case_s={k: 3.0 for k in keys[1:]})
    stored_run(tmp_path, "p2", kind="pipeline", case_s={k: 5.0 for k in keys[1:]})
    lines = dry_run(capsys, tmp_path, argv)
    assert [ln for ln in lines if ln.startswith("  ")] == [f"  {keys[0]}  (no estimate)"] + [
        f"  {k}  ~4.00 s (median of 2 stored run(s))" for k in keys[1:]]
    assert lines[-2].startswith(f"# estimated duration: {4.0 * (len(keys) - 1):.1f} s ({len(keys) - 1} case(s) from "
                                "stored runs on this machine")
    assert lines[-1] == f"# 1 case(s) without an estimate (no stored run of the case on this machine): {keys[0]}"


def test_a_run_stores_each_finished_case_s_wall_time_and_the_next_dry_run_uses_it(tmp_path, capsys):
    assert main(["collectives", "-c", "all_reduce", "--sizes", "1K", "--nproc", "2", "--backend", "gloo",
                 "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    (meta,) = [json.loads(p.read_text()) for p in tmp_path.glob("*/*/meta.json")]
    case_s = meta["launches"]["2"]["case_s"]
    assert list(case_s) == [KEY.format(1024)] and case_s[KEY.format(1024)] > 0
    lines = dry_run(capsys, tmp_path)
    assert f"  {KEY.format(1024)}  ~{case_s[KEY.format(1024)]:.2f} s (median of 1 stored run(s))" in lines
