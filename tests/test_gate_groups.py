"""Issue 18: the gate sees a regression confined to one group (a collective, an algorithm, a
strategy, a schedule) or one case, by taking out each launch's common factor; and it compares
like with like (exit 3 naming each differing setting); the A/B mode; the slowdown patterns.

Synthetic data follow the two-way model measured on the committed smoke baseline (docs/gate.md):
log time = case + launch + residual, the launch factor shared by every case of a launch.
"""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.errors import BenchError
from bench.regress import baseline as bl
from bench.regress import compare as cp
from bench.regress.compare import Rules, compare_rows
from bench.regress.gate import gate, gate_ab, settings_differences
from bench.results.store import write_json, write_parquet
from bench.timing import loop
from conftest import ROOT
from test_compare_gate import FakeRerun, _meta

MiB = 1 << 20
COMMITTED = ROOT / "results/baselines/cpu-amd-epyc-2c-gloo-w2-torch2.13"


def _committed_run(tmp: Path, rows: pd.DataFrame, run_id: str) -> Path:
    d = tmp / run_id
    write_parquet(rows.assign(run_id=run_id), d / "results.parquet")
    write_json({**_meta(run_id), "config": json.loads((COMMITTED / "meta.json").read_text())["config"]}, d / "meta.json")
    return d


def _doctored(tmp: Path, collective: str, factor: float) -> Path:
    """The committed baseline with every `collective` row's time x factor (busbw / factor)."""
    d = tmp / "doctored" / COMMITTED.name
    shutil.copytree(COMMITTED, d)
    r = pd.read_parquet(d / "results.parquet")
    hit = r["collective"] == collective
    r.loc[hit, "time_median_s"] *= factor
    r.loc[hit, "busbw_gbps"] /= factor
    write_parquet(r, d / "results.parquet")
    return d


def test_committed_baseline_doctored_2x_better_for_all_reduce_fails(tmp_path):
    """The issue's reproduction: every all_reduce row of the baseline 2x faster, the other
    collectives untouched; an unchanged run (one of the baseline's own launches, confirmed by
    another) passed before (8 of 12 cases unstable, the kind mean diluted to 1.19x)."""
    base = _doctored(tmp_path, "all_reduce", 0.5)
    r = pd.read_parquet(COMMITTED / "results.parquet")
    ids = sorted(r["run_id"].unique())
    run = _committed_run(tmp_path / "cur", r[r["run_id"] == ids[3]], "cur")

    def rerun(todo, meta):
        return _committed_run(tmp_path / "conf", r[r["run_id"] == ids[5]], "conf")

    v = gate(base, run, rerun=rerun)
    assert v.exit_code == 1, v.reason
    g = v.groups.set_index("group").loc["all_reduce"]
    assert g["verdict"] == "regression" and 1.6 < g["worse"] < 2.5
    assert "all_reduce" in v.reason
    text = v.to_text()
    assert "all_reduce" in text and "regression" in text
    # the undoctored committed baseline against the same launches passes
    assert gate(COMMITTED, run, rerun=rerun).exit_code == 0


def test_committed_baseline_two_way_decomposition_numbers():
    """The figures docs/gate.md quotes: launch factors sd ~0.10, residual sd 0.13 vs raw 0.16."""
    d = cp.decompose(pd.read_parquet(COMMITTED / "results.parquet"), "collectives")
    assert d["launch_sd"] == pytest.approx(0.103, abs=0.002)
    assert d["raw_sd"] == pytest.approx(0.162, abs=0.002)
    assert d["residual_sd"] == pytest.approx(0.130, abs=0.002)


# ---------------------------------------------------------------------------------------------
# one rule, every kind: synthetic launches with a large common factor and small residuals


def _kind_rows(kind: str):
    """(group column, [case key dicts], metric) for a kind, 12 cases in 3-4 groups."""
    if kind == "collectives":
        cases = [{"case_id": f"{c}.float32.sum.root-1.latency.w2", "collective": c, "size_bytes": s,
                  "placement": "in-place"} for c in ("all_reduce", "all_gather_single", "broadcast", "reduce")
                 for s in (4 * MiB, 16 * MiB, 64 * MiB)]
        return "case_id", cases, "time_median_s"
    if kind == "allreduce":
        cases = [{"case_id": f"allreduce.{a}.w2", "algorithm": a, "variant": "plain", "size_bytes": s,
                  "placement": "in-place"} for a in ("ring", "tree", "direct", "native") for s in (4 * MiB, 16 * MiB, 64 * MiB)]
        return "algorithm", cases, "time_median_s"
    if kind == "strategies":
        cases = [{"case_id": f"{st}.mlp.c{c}", "strategy": st, "model": "mlp", "chunks": c, "schedule": "", "checkpoint": "none",
                  "size_bytes": 0, "placement": ""} for st in ("ddp", "fsdp", "tp") for c in (1, 2, 4, 8)]
        return "strategy", cases, "step_median_s"
    cases = [{"case_id": f"pp.{sc}.c{c}", "strategy": "pipeline", "model": "mlp", "chunks": c, "schedule": sc,
              "checkpoint": "none", "size_bytes": 0, "placement": ""} for sc in ("gpipe", "1f1b", "interleaved")
             for c in (2, 4, 8, 16)]
    return "schedule", cases, "step_median_s"


def _launches(kind, n, prefix, seed, launch_sd=0.15, resid_sd=0.03, slow=None):
    """n launches: each case's time = truth x launch factor (shared) x residual; slow(case) -> factor."""
    _, cases, metric = _kind_rows(kind)
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(n):
        f = math.exp(rng.normal(0, launch_sd))
        for i, c in enumerate(cases):
            t = 1e-3 * (i + 1) * f * math.exp(rng.normal(0, resid_sd)) * (slow(c) if slow else 1.0)
            rows.append({"run_id": f"{prefix}{r}", "kind": kind, "world": 2, **c, metric: t})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("kind", ["collectives", "allreduce", "strategies", "pipeline"])
def test_one_group_slower_is_a_group_regression_for_every_kind(kind):
    group_col, cases, metric = _kind_rows(kind)
    target = cases[0][group_col]
    base = _launches(kind, 8, "rep", 1)
    # raw between-launch noise (sd 0.15) makes every case's own band wider than 35%: unstable before
    same = compare_rows(base, _launches(kind, 1, "cur", 2), kind)
    assert (same.cases.query("metric == @metric")["verdict"] == "ok").all(), same.cases
    assert (same.groups["verdict"] == "ok").all()
    assert set(same.groups["group"]) == {cp.group_label(kind, c[group_col], [x[group_col] for x in cases]) for c in cases}
    slow = compare_rows(base, _launches(kind, 1, "cur", 2, slow=lambda c: 1.5 if c[group_col] == target else 1.0), kind)
    g = slow.groups.set_index("group")
    label = cp.group_label(kind, target, [x[group_col] for x in cases])
    assert g.loc[label, "verdict"] == "regression"
    assert 1.35 < g.loc[label, "worse"] < 1.65
    assert (g.drop(label)["verdict"] == "ok").all()  # the launch factor is a median: the rest stay put
    assert cp.reading(kind).group == group_col  # the kind says how its cases group (bench.kind.Reading)


def test_one_case_2x_is_a_case_regression_inside_the_launch_noise():
    base = _launches("collectives", 8, "rep", 3)
    key = ("broadcast.float32.sum.root-1.latency.w2", 16 * MiB)
    cur = _launches("collectives", 1, "cur", 4, slow=lambda c: 2.0 if (c["case_id"], c["size_bytes"]) == key else 1.0)
    c = compare_rows(base, cur, "collectives").cases.query("metric == 'time_median_s'")
    hit = (c["case_id"] == key[0]) & (c["size_bytes"] == key[1])
    assert c[hit]["verdict"].iloc[0] == "regression"
    assert (c[~hit]["verdict"] == "ok").all()


def test_uniform_slowdown_is_the_launch_factor_not_the_groups():
    base = _launches("collectives", 8, "rep", 5, launch_sd=0.05)
    cur = pd.concat([_launches("collectives", 1, f"cur{i}", 6 + i, launch_sd=0.05, slow=lambda c: 1.5) for i in range(2)])
    cmp = compare_rows(base, cur, "collectives")
    assert cmp.kinds.iloc[0]["verdict"] == "regression" and cmp.kinds.iloc[0]["launches"] == 2
    assert (cmp.groups["verdict"] == "ok").all()


def test_an_improved_group_does_not_make_the_others_regress():
    base = _launches("collectives", 8, "rep", 7)
    cur = _launches("collectives", 1, "cur", 8, slow=lambda c: 0.5 if c["collective"] == "all_reduce" else 1.0)
    cmp = compare_rows(base, cur, "collectives")
    g = cmp.groups.set_index("group")
    assert g.loc["all_reduce", "verdict"] == "improved"
    assert (g.drop("all_reduce")["verdict"] == "ok").all()
    assert not (cmp.cases["verdict"] == "regression").any()


# ---------------------------------------------------------------------------------------------
# A/B on the same machine: interleaved launches of both revisions, pooled two-sample bands


def test_ab_unchanged_passes_and_one_collective_slower_fails():
    a = _launches("collectives", 5, "a", 11)
    b = _launches("collectives", 5, "b", 12)
    v = gate_ab(a, b, "collectives")
    assert v.exit_code == 0, v.reason
    slow = _launches("collectives", 5, "b", 13, slow=lambda c: 1.5 if c["collective"] == "all_reduce" else 1.0)
    v = gate_ab(a, slow, "collectives")
    assert v.exit_code == 1 and "all_reduce" in v.reason
    assert "band" in v.to_markdown() and "all_reduce" in v.to_markdown()


def test_ab_pooled_band_uses_both_arms():
    from scipy import stats

    b, c = [0.1, -0.1, 0.05, -0.05], [0.2, 0.0, 0.1, 0.14]
    est, band = cp.two_sample(b, c, 0.01, pooled=True)
    s = math.sqrt((3 * np.var(b, ddof=1) + 3 * np.var(c, ddof=1)) / 6)
    assert est == pytest.approx(np.mean(c) - np.mean(b))
    assert band == pytest.approx(stats.t.ppf(0.99, 6) * s * math.sqrt(1 / 4 + 1 / 4))


# ---------------------------------------------------------------------------------------------
# like with like


def test_settings_that_change_the_numbers_must_match(tmp_path):
    rows = pd.read_parquet(COMMITTED / "results.parquet")
    run = _committed_run(tmp_path / "cur", rows[rows["run_id"] == rows["run_id"].iloc[0]].assign(mode="throughput"), "cur")
    v = gate(COMMITTED, run)
    assert v.exit_code == 3
    assert "mode: 'latency' vs 'throughput'" in v.reason
    meta_a = {"config": {"modes": ["latency"], "blocking": 1, "budget_s": 0.3, "iters": 10, "dtypes": ["float32"]},
              "nccl_env": {"NCCL_ALGO": "Ring"}, "cluster": {"driver_version": "550.1"},
              "software": {"torch": "2.13.0", "nccl": "2.21.5"}}
    meta_b = json.loads(json.dumps(meta_a))
    meta_b["config"]["blocking"] = 0
    meta_b["config"]["budget_s"] = 0.5
    meta_b["nccl_env"] = {}
    meta_b["software"]["nccl"] = "2.20.3"
    diff = settings_differences(meta_a, pd.DataFrame(), meta_b, pd.DataFrame())
    assert "blocking: 1 vs 0" in diff and "budget_s: 0.3 vs 0.5" in diff
    assert "NCCL_ALGO: 'Ring' vs unset" in diff and "nccl: '2.21.5' vs '2.20.3'" in diff


# ---------------------------------------------------------------------------------------------
# slowdown injection selects cases


def test_slowdown_patterns(monkeypatch):
    monkeypatch.setenv("DISTBENCH_TEST_SLOWDOWN", "1.5")
    assert loop.slowdown_for("all_reduce", 4 * MiB) == 1.5
    monkeypatch.setenv("DISTBENCH_TEST_SLOWDOWN", "all_reduce=1.5")
    assert loop.slowdown_for("all_reduce", 4 * MiB) == 1.5 and loop.slowdown_for("broadcast", 4 * MiB) == 1.0
    monkeypatch.setenv("DISTBENCH_TEST_SLOWDOWN", "all_reduce@16M=2,broadcast=1.2")
    assert loop.slowdown_for("all_reduce", 16 * MiB) == 2.0 and loop.slowdown_for("all_reduce", 4 * MiB) == 1.0
    assert loop.slowdown_for("broadcast", 64 * MiB) == 1.2
    for bad in ("all_reduce=x", "0.5", "all_reduce@huge=2"):
        monkeypatch.setenv("DISTBENCH_TEST_SLOWDOWN", bad)
        with pytest.raises(BenchError, match="DISTBENCH_TEST_SLOWDOWN"):
            loop.slowdown_for("all_reduce", 4 * MiB)


# ---------------------------------------------------------------------------------------------
# `distbench gate --against REV`: a temporary worktree of REV, interleaved launches, cleaned up


def _repo(tmp: Path) -> Path:
    import subprocess

    repo = tmp / "repo"
    (repo / "suites").mkdir(parents=True)
    (repo / "suites/smoke.toml").write_text('kind = "collectives"\nname = "smoke"\n')
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, capture_output=True)
    return repo


def test_gate_against_rev_interleaves_in_a_temporary_worktree(tmp_path, monkeypatch):
    import subprocess

    from bench.regress import ab
    from test_compare_gate import TRUE, make_run, noisy

    repo = _repo(tmp_path)
    monkeypatch.chdir(repo)
    monkeypatch.setenv("DISTBENCH_TEST_SLOWDOWN", "all_reduce=1.5")
    rng = np.random.default_rng(0)
    calls = []

    def fake_run(kind, suite, out, cwd=None, env=None, ok_codes=(0,)):
        base = cwd is not None
        calls.append({"base": base, "suite": Path(suite), "cwd": cwd, "pythonpath": env.get("PYTHONPATH"),
                      "slowdown": env.get("DISTBENCH_TEST_SLOWDOWN"), "tree_has_suite": base and (Path(cwd) / "suites/smoke.toml").exists()})
        t = noisy(rng, 0.03)
        if not base:
            t = {k: v * (1.5 if k[0] == "all_reduce" else 1.0) for k, v in t.items()}
        return make_run(tmp_path / "runs", f"{'a' if base else 'b'}{len(calls)}", t)

    v = ab.gate_against("HEAD", "suites/smoke.toml", pairs=4, out=tmp_path / "out", run=fake_run, log=lambda m: None)
    # A B, B A, A B, B A, then (flagged) 4 fresh pairs the same way
    assert [c["base"] for c in calls] == [True, False, False, True] * 4
    for c in calls:
        if c["base"]:
            assert c["pythonpath"] == str(c["cwd"]) and c["slowdown"] is None and c["tree_has_suite"]
            assert c["suite"] == Path(c["cwd"]) / "suites/smoke.toml"  # REV's own copy of the suite
        else:
            assert c["slowdown"] == "all_reduce=1.5"
    assert v.exit_code == 1 and "all_reduce" in v.reason, v.reason
    assert "against" in v.to_text() and "all_reduce" in v.to_markdown()
    assert not Path(calls[0]["cwd"]).exists()  # the worktree is gone ...
    listed = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True).stdout
    assert len(listed.strip().splitlines()) == 1  # ... and unregistered
    assert TRUE


def test_gate_against_a_missing_rev_is_exit_3(tmp_path, monkeypatch):
    from bench.regress import ab

    monkeypatch.chdir(_repo(tmp_path))
    v = ab.gate_against("0123456789abcdef0123456789abcdef01234567", "suites/smoke.toml", pairs=3,
                        run=lambda *a, **k: pytest.fail("nothing may run"), log=lambda m: None)
    assert v.exit_code == 3 and "cannot check out" in v.reason


def test_gate_against_cli_usage_errors(tmp_path, monkeypatch, capsys):
    from bench.regress import cli as rcli
    import argparse

    monkeypatch.chdir(_repo(tmp_path))
    parser = argparse.ArgumentParser()
    rcli.add_parser(parser.add_subparsers())
    for argv, msg in ((["gate", "--pairs", "3", "--suite", "suites/smoke.toml"], "--against"),
                      (["gate", "--against", "HEAD", "--current", "x"], "--suite"),
                      (["gate", "--against", "HEAD", "--suite", "suites/smoke.toml", "--pairs", "2"], "at least 3")):
        args = parser.parse_args(argv)
        with pytest.raises(BenchError, match=msg):
            args.func(args)


# ---------------------------------------------------------------------------------------------
# tools/gate_eval.py's doctored baselines (the script itself times launches: never run in tests)


def _gate_eval():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gate_eval", ROOT / "tools/gate_eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("scenario, column, value, key, cfg, field", [
    ("other-mode", "mode", "throughput", "modes", ["throughput"], "mode"),
    ("other-blocking", "blocking", False, "blocking", 0, "blocking")])
def test_gate_eval_other_settings_are_exit_3_naming_them(tmp_path, scenario, column, value, key, cfg, field):
    ge = _gate_eval()
    dest = tmp_path / scenario / COMMITTED.name
    ge.other_setting(COMMITTED, dest, column, value, key, cfg)
    rows = pd.read_parquet(COMMITTED / "results.parquet")
    run = _committed_run(tmp_path / "cur", rows[rows["run_id"] == rows["run_id"].iloc[0]], "cur")
    v = gate(dest, run)
    assert v.exit_code == 3 and f"{field}" in v.reason, v.reason
    assert ge.parse_scenarios("doctored,one-case") == ["doctored", "one-case"]
    with pytest.raises(SystemExit) as e:
        ge.parse_scenarios("one-case,nope")
    assert e.value.code == 2


def test_gate_eval_doctors_one_collective_only(tmp_path):
    ge = _gate_eval()
    dest = tmp_path / "doc" / COMMITTED.name
    ge.doctor(COMMITTED, dest, 0.5, collective="all_reduce")
    a, b = pd.read_parquet(COMMITTED / "results.parquet"), pd.read_parquet(dest / "results.parquet")
    hit = a["collective"] == "all_reduce"
    assert np.allclose(b.loc[hit, "time_median_s"], a.loc[hit, "time_median_s"] * 0.5)
    assert np.allclose(b.loc[~hit, "time_median_s"], a.loc[~hit, "time_median_s"])
