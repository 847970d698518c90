"""The regression gate's logic on synthetic runs with known shifts and noise (no ranks launched).

Both directions, the unstable exemption, the geometric-mean rule, the confirmation re-run (mocked),
wrong results, throttled cases, fingerprint mismatch, a baseline of an older schema version,
baseline history, the CLI's exit codes, --min-busbw, the pytest-benchmark export.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.errors import BenchError
from bench.regress import baseline as bl
from bench.regress.compare import Rules, band_log, compare_rows, worse_log
from bench.collectives.acceptance import min_busbw_failures, parse_min_busbw
from bench.regress.gate import gate, narrowing_args
from bench.results import fingerprint as fp
from bench.results.schema import SCHEMA_VERSION
from bench.results.store import write_json, write_parquet

MiB = 1 << 20
SIZES = (4 * MiB, 16 * MiB, 64 * MiB)
COLLS = ("all_reduce", "all_gather_single", "broadcast", "reduce")
# 12 cases: 4 collectives x 3 sizes, one baseline time each (seconds)
TRUE = {(c, s): 1e-3 * (i + 1) * s / MiB for i, c in enumerate(COLLS) for s in SIZES}


def _meta(run_id, cores=2, cpu="AMD EPYC", kind="collectives", schema=SCHEMA_VERSION, torch_v="2.13.0+cpu"):
    ranks = [{"rank": r, "host": "vm", "cpu_model": cpu, "cores": cores, "gpus": [], "device": "cpu"} for r in range(2)]
    return {"schema_version": schema, "run_id": run_id, "suite": "smoke", "kind": kind,
            "config": {"name": "smoke", "world": [2]}, "started_utc": "2026-12-02T00:00:00+00:00",
            "git_sha": "abc", "git_dirty": False, "software": {"torch": torch_v, "nccl": None, "python": "3.11"},
            "launches": {"2": {"world": 2, "backend": "gloo", "nodes": 1, "ranks": ranks}}}


def make_run(root: Path, run_id: str, times: dict, wrong=None, throttled=None, **meta_kw) -> Path:
    """A stored collectives run with the given median times per (collective, size)."""
    d = root / run_id
    rows = []
    for (coll, size), t in times.items():
        case_id = f"{coll}.float32.sum.root-1.latency.w2"
        rows.append({"run_id": run_id, "suite": "smoke", "kind": "collectives", "case_id": case_id, "world": 2,
                     "collective": coll, "size_bytes": size, "placement": "in-place", "time_median_s": t,
                     "busbw_gbps": size / t / 1e9, "wrong": (wrong or {}).get((coll, size), 0),
                     "throttled": (throttled or {}).get((coll, size), None)})
    write_parquet(pd.DataFrame(rows), d / "results.parquet")
    samples = [{"run_id": run_id, "case_id": r["case_id"], "size_bytes": r["size_bytes"], "placement": "in-place",
                "rank": k, "iteration": i, "seconds": r["time_median_s"] * (1 + 0.01 * i)}
               for r in rows for k in range(2) for i in range(-2, 3)]
    write_parquet(pd.DataFrame(samples), d / "samples.parquet")
    write_json(_meta(run_id, **meta_kw), d / "meta.json")
    return d


def noisy(rng, sigma, scale=1.0, truth=TRUE):
    return {k: v * scale * math.exp(rng.normal(0, sigma)) for k, v in truth.items()}


def make_baseline(tmp: Path, repeats=8, sigma=0.03, seed=0, per_case_sigma=None, exact=False, **meta_kw) -> Path:
    """R repeats with log-normal noise; exact=True: every case's repeat logs are one standardized
    pattern (sd exactly sigma, mean 0) in a different order per case, so launches do not co-vary."""
    rng = np.random.default_rng(seed)
    z = np.linspace(-1, 1, repeats)
    z = (z - z.mean()) / (z.std(ddof=1) if repeats > 1 else 1)
    orders = {k: rng.permutation(repeats) for k in TRUE}
    runs = []
    for r in range(repeats):
        t = {k: v * math.exp(sigma * z[orders[k][r]]) for k, v in TRUE.items()} if exact else noisy(rng, sigma)
        for k, s in (per_case_sigma or {}).items():
            t[k] = TRUE[k] * math.exp(s * z[orders[k][r]] if exact else rng.normal(0, s))
        runs.append(make_run(tmp / "runs", f"rep{r}", t, **meta_kw))
    return bl.write(tmp / "baselines", runs, "record", suite_path="suites/smoke.toml")


class FakeRerun:
    """Stands in for the fresh-launch re-run: records what it was asked for and returns a run."""

    def __init__(self, root: Path, times: dict):
        self.root, self.times, self.calls = root, times, []

    def __call__(self, todo: pd.DataFrame, meta: dict) -> Path:
        self.calls.append(todo.copy())
        return make_run(self.root, f"confirm{len(self.calls)}", self.times)


# ---------------------------------------------------------------------------------------------
# statistics


def test_band_is_the_t_prediction_bound():
    x = np.log([1.0, 1.1, 0.95, 1.05, 1.0])
    x = x - x.mean()
    from scipy import stats

    want = stats.t.ppf(0.99, 4) * np.std(x, ddof=1) * math.sqrt(1 + 1 / 5)
    assert band_log(x, 0.01) == pytest.approx(want)
    assert math.isnan(band_log([0.0], 0.01))


def test_worse_ratio_both_directions():
    assert worse_log(1.0, 1.5, lower_is_better=True) == pytest.approx(math.log(1.5))  # slower time: worse
    assert worse_log(1.0, 1.5, lower_is_better=False) == pytest.approx(-math.log(1.5))  # more busbw: better
    assert math.isnan(worse_log(0.0, 1.0, True))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.5, 2.0), min_size=2, max_size=10), st.integers(0, 9), st.floats(0.01, 100.0))
def test_a_baseline_repeat_itself_is_never_a_regression(values, pick, scale):
    """Samuelson: a repeat is within (R-1)/sqrt(R) s of the mean, inside the t bound for R <= 10;
    and the verdict does not depend on units (scale)."""
    times = {("all_reduce", 4 * MiB): 1.0}
    base = pd.DataFrame([{"run_id": f"r{i}", "case_id": "c", "size_bytes": 4 * MiB, "placement": "in-place", "world": 2,
                          "time_median_s": v * scale, "busbw_gbps": 1 / (v * scale)} for i, v in enumerate(values)])
    cur = base.iloc[[pick % len(values)]].assign(run_id="now")
    cmp = compare_rows(base, cur, "collectives", Rules(max_band=math.inf, max_case_band=math.inf))
    assert set(cmp.cases["verdict"]) <= {"ok", "improved"}
    assert times


@settings(max_examples=40, deadline=None)
@given(st.floats(1.0, 3.0), st.floats(0.0, 0.05))
def test_directions_are_mirror_images(factor, sigma):
    """time x f and busbw / f give the same verdict; the reverse shift gives `improved`."""
    rng = np.random.default_rng(1)
    vals = [math.exp(rng.normal(0, sigma)) for _ in range(8)]
    base = pd.DataFrame([{"run_id": f"r{i}", "case_id": "c", "size_bytes": 4 * MiB, "placement": "in-place",
                          "world": 2, "time_median_s": v, "busbw_gbps": 1 / v} for i, v in enumerate(vals)])
    center = math.exp(np.mean(np.log(vals)))
    slow = pd.DataFrame([{"case_id": "c", "size_bytes": 4 * MiB, "placement": "in-place", "world": 2,
                          "time_median_s": center * factor, "busbw_gbps": 1 / (center * factor)}])
    fast = slow.assign(time_median_s=center / factor, busbw_gbps=factor / center)
    c1 = compare_rows(base, slow, "collectives").cases.set_index("metric")["verdict"]
    c2 = compare_rows(base, fast, "collectives").cases.set_index("metric")["verdict"]
    assert c1["time_median_s"] == c1["busbw_gbps"]
    flip = {"regression": "improved", "improved": "regression"}
    assert c2["time_median_s"] == flip.get(c1["time_median_s"], c1["time_median_s"])
    if factor > 1.5 and sigma < 0.03:
        assert c1["time_median_s"] == "regression"


# ---------------------------------------------------------------------------------------------
# the gate on synthetic runs


@pytest.mark.slow
def test_unchanged_code_passes_and_slowdown_fails(tmp_path):
    base = make_baseline(tmp_path)
    rng = np.random.default_rng(42)
    false_alarms = 0
    for i in range(10):
        run = make_run(tmp_path / "cur", f"same{i}", noisy(rng, 0.03))
        v = gate(base, run, rerun=FakeRerun(tmp_path / "conf", noisy(rng, 0.03)))
        false_alarms += v.exit_code != 0
    assert false_alarms == 0
    caught = 0
    for i in range(10):
        run = make_run(tmp_path / "cur", f"slow{i}", noisy(rng, 0.03, scale=1.5))
        v = gate(base, run, rerun=FakeRerun(tmp_path / "conf", noisy(rng, 0.03, scale=1.5)))
        caught += v.exit_code == 1
    assert caught == 10
    assert v.status == "regression" and "confirmed" in v.reason
    # a uniform slowdown is the launch's common factor (issue 18): the cases, each taken relative to
    # its launch, are ok; the ratios show the slowdown
    assert v.kinds.set_index("metric").loc["time_median_s", "verdict"] == "regression"
    assert (v.to_frame().query("metric == 'time_median_s'")["ratio"] > 1.3).all()


def test_bigger_is_better_metric_reports_drop(tmp_path):
    base = make_baseline(tmp_path)
    run = make_run(tmp_path / "cur", "slow", {k: v * 2 for k, v in TRUE.items()})
    v = gate(base, run, rerun=None)
    bus = v.to_frame().query("metric == 'busbw_gbps'")
    assert (bus["worse"] > 1.9).all() and (bus["ratio"] < 0.6).all()  # busbw halved: 2x worse
    assert v.exit_code == 1 and "unconfirmed" in v.reason


def test_improvement_is_not_a_failure(tmp_path):
    base = make_baseline(tmp_path)
    run = make_run(tmp_path / "cur", "fast", {k: v / 2 for k, v in TRUE.items()})
    v = gate(base, run)
    assert v.exit_code == 0
    assert (v.to_frame().query("gated")["ratio"] < 0.6).all()
    assert v.kinds.iloc[0]["verdict"] == "improved"


def test_unstable_case_cannot_fail_alone(tmp_path):
    wild = ("broadcast", 4 * MiB)
    base = make_baseline(tmp_path, per_case_sigma={wild: 0.4}, exact=True)
    times = dict(TRUE)
    times[wild] = TRUE[wild] * 3.0
    run = make_run(tmp_path / "cur", "cur", times)
    v = gate(base, run)
    f = v.to_frame().query("gated").set_index("case_id")
    assert f.loc["broadcast.float32.sum.root-1.latency.w2"].set_index("size_bytes").loc[4 * MiB, "verdict"] == "unstable"
    assert v.exit_code == 0, v.reason
    assert any("unstable" in n for n in v.notes)


def test_geometric_mean_catches_uniform_shift_inside_every_case_band(tmp_path):
    base = make_baseline(tmp_path, sigma=0.08, exact=True)  # every case band +29%
    run = make_run(tmp_path / "cur", "cur", {k: v * 1.2 for k, v in TRUE.items()})
    rerun = FakeRerun(tmp_path / "conf", {k: v * 1.2 for k, v in TRUE.items()})
    v = gate(base, run, rerun=rerun)
    gated = v.to_frame().query("gated")
    assert not (gated["verdict"] == "regression").any()  # every case, relative to its launch, is ok ...
    assert v.kinds.iloc[0]["verdict"] == "regression"  # ... the launch's common factor (geometric mean) is not
    assert v.exit_code == 1
    assert len(rerun.calls) == 1 and len(rerun.calls[0]) == len(TRUE)  # the whole kind was re-run


def test_confirmation_rerun_clears_a_one_off(tmp_path):
    base = make_baseline(tmp_path)
    times = dict(TRUE)
    spike = ("all_gather_single", 16 * MiB)
    times[spike] = TRUE[spike] * 2.0
    run = make_run(tmp_path / "cur", "cur", times)
    rerun = FakeRerun(tmp_path / "conf", dict(TRUE))
    v = gate(base, run, rerun=rerun)
    assert v.exit_code == 0, v.reason
    assert len(rerun.calls) == 1
    asked = rerun.calls[0]
    # the flagged case and every other case of its metric's geometric mean (the kind is judged on both launches)
    asked_keys = set(zip(asked["case_id"], asked["size_bytes"].astype(int)))
    assert ("all_gather_single.float32.sum.root-1.latency.w2", 16 * MiB) in asked_keys
    assert len(asked_keys) == len(TRUE)
    row = v.cases.query("metric == 'time_median_s' and case_id.str.startswith('all_gather') and size_bytes == @MiB * 16")
    assert row.iloc[0]["first_verdict"] == "regression" and row.iloc[0]["verdict"] == "ok"
    assert "after a confirmation re-run" in v.reason


def test_confirmation_rerun_keeps_a_real_regression(tmp_path):
    base = make_baseline(tmp_path)
    times = dict(TRUE)
    k = ("all_gather_single", 16 * MiB)
    times[k] = TRUE[k] * 2.0
    run = make_run(tmp_path / "cur", "cur", times)
    v = gate(base, run, rerun=FakeRerun(tmp_path / "conf", times))
    assert v.exit_code == 1 and "1 case(s) regressed" in v.reason


def test_warn_only_exits_zero(tmp_path):
    base = make_baseline(tmp_path)
    run = make_run(tmp_path / "cur", "slow", {k: v * 2 for k, v in TRUE.items()})
    v = gate(base, run, warn_only=True)
    assert v.exit_code == 0 and v.status == "regression" and "WARN" in v.headline()


def test_wrong_results_fail_outright_without_rerun(tmp_path):
    base = make_baseline(tmp_path)
    run = make_run(tmp_path / "cur", "cur", dict(TRUE), wrong={("reduce", 4 * MiB): 3})
    rerun = FakeRerun(tmp_path / "conf", dict(TRUE))
    v = gate(base, run, rerun=rerun)
    assert v.exit_code == 1 and v.status == "wrong" and not rerun.calls


def test_throttled_cases_are_reported_not_decided(tmp_path):
    base = make_baseline(tmp_path)
    k = ("reduce", 64 * MiB)
    times = dict(TRUE)
    times[k] = TRUE[k] * 3
    run = make_run(tmp_path / "cur", "cur", times, throttled={k: True})
    v = gate(base, run)
    assert v.exit_code == 0
    assert "throttled" in set(v.to_frame()["verdict"])
    assert any("throttled" in n for n in v.notes)


def test_fingerprint_mismatch_is_exit_3_with_the_field(tmp_path):
    base = make_baseline(tmp_path)
    run = make_run(tmp_path / "cur", "cur", dict(TRUE), cores=64)
    v = gate(base, run)
    assert v.exit_code == 3 and "cores" in v.reason and "2 vs 64" in v.reason
    v = gate(tmp_path / "baselines", run)  # a root: the closest is named, with the differing field
    assert v.exit_code == 3 and "cores" in v.reason and "closest" in v.reason
    run = make_run(tmp_path / "cur", "cur2", dict(TRUE), torch_v="2.14.1")
    assert "torch" in gate(base, run).reason


def test_baseline_of_older_schema_is_exit_3_with_a_clear_message(tmp_path):
    base = make_baseline(tmp_path)
    meta = json.loads((base / "meta.json").read_text())
    meta["schema_version"] = SCHEMA_VERSION - 1
    (base / "meta.json").write_text(json.dumps(meta))
    v = gate(base, make_run(tmp_path / "cur", "cur", dict(TRUE)))
    assert v.exit_code == 3
    assert f"schema version {SCHEMA_VERSION - 1}" in v.reason and "re-record" in v.reason


def test_no_repeats_no_band_is_undecidable(tmp_path):
    base = make_baseline(tmp_path, repeats=1)
    v = gate(base, make_run(tmp_path / "cur", "cur", {k: v * 2 for k, v in TRUE.items()}))
    assert v.exit_code == 3 and "cannot decide" in v.reason


def test_no_common_case_is_exit_3(tmp_path):
    base = make_baseline(tmp_path)
    v = gate(base, make_run(tmp_path / "cur", "cur", {("barrier", 8): 1e-5}))
    assert v.exit_code == 3 and "no case" in v.reason


def test_rules_file_tolerances(tmp_path):
    p = tmp_path / "x.gate.toml"
    p.write_text('tolerance = 0.2\nsmall_bytes = "64K"\n[cases]\n"broadcast.*@4194304" = 0.5\n')
    r = Rules.load(p)
    assert r.tolerance_for("broadcast.float32.none.root0.latency.w2", 4 * MiB) == 0.5
    assert r.tolerance_for("broadcast.float32.none.root0.latency.w2", 16 * MiB) == 0.2
    assert r.tolerance_for("all_reduce.x", 1024) == r.small_tolerance
    p.write_text("tolerence = 0.2\n")
    with pytest.raises(BenchError, match="unknown key 'tolerence'"):
        Rules.load(p)


def test_baseline_history_is_appended(tmp_path):
    base = make_baseline(tmp_path, repeats=3)
    runs = [make_run(tmp_path / "new", f"n{i}", dict(TRUE)) for i in range(3)]
    bl.write(tmp_path / "baselines", runs, "update")
    meta = json.loads((base / "meta.json").read_text())
    assert meta["generation"] == 2 and [h["action"] for h in meta["history"]] == ["record", "update"]
    hist = pd.read_parquet(base / "history.parquet")
    assert sorted(hist["generation"].unique()) == [1, 2] and len(hist) == 2 * 3 * len(TRUE)
    assert set(pd.read_parquet(base / "results.parquet")["run_id"]) == {"n0", "n1", "n2"}
    assert "band" in (base / "cases.csv").read_text()
    other = make_run(tmp_path / "other", "o", dict(TRUE), cores=8)
    with pytest.raises(BenchError, match="another machine class"):
        bl.write(tmp_path / "baselines", [runs[0], other], "update")


def test_fingerprint_slug_and_differences():
    a = fp.of_run(_meta("x"))
    assert a.slug() == "cpu-amd-epyc-2c-gloo-w2-torch2.13"
    b = fp.of_run(_meta("y", cpu="Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz", cores=112))
    assert b.slug().startswith("cpu-intel-xeon-platinum-8480-112c")
    diff = fp.differences(a, b)
    assert any(d.startswith("cores") for d in diff) and any(d.startswith("cpu_model") for d in diff)
    gpu = _meta("g")
    for r in gpu["launches"]["2"]["ranks"]:
        r.update(device=f"cuda:{r['rank']}", gpus=[{"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i}"} for i in range(8)])
    gpu["launches"]["2"]["backend"] = "nccl"
    gpu["software"]["nccl"] = "2.21.5"
    assert fp.of_run(gpu).slug() == "gpu-nvidia-h100-80gb-hbm3x8-nccl-w2-torch2.13-nccl2.21"


def test_narrowing_args_for_confirmation():
    cur = pd.DataFrame([{"case_id": "a", "size_bytes": 4 * MiB, "placement": "in-place", "world": 2, "collective": "all_reduce"},
                        {"case_id": "b", "size_bytes": 16 * MiB, "placement": "in-place", "world": 2, "collective": "broadcast"}])
    todo = cur.iloc[[1]][["case_id", "size_bytes", "placement", "world"]].astype(str)
    assert narrowing_args("collectives", todo, cur) == ["-c", "broadcast", "--sizes", str(16 * MiB)]


# ---------------------------------------------------------------------------------------------
# --min-busbw (nccl-tests' NCCL_TESTS_MIN_BW), CLI, export


def test_min_busbw_failures():
    rows = pd.DataFrame([{"collective": c, "world": 2, "size_bytes": s, "busbw_gbps": bw}
                         for c, bw in (("all_reduce", 10.0), ("broadcast", 30.0)) for s in (1024, *SIZES)]
                        + [{"collective": "all_reduce", "world": 2, "size_bytes": 1024, "busbw_gbps": 0.001}])
    assert min_busbw_failures(rows, 5.0) == []
    fails = min_busbw_failures(rows, 20.0)
    assert [f.collective for f in fails] == ["all_reduce"] and fails[0].sizes == 3  # 1 KiB is not a large size
    assert "below --min-busbw 20" in str(fails[0])
    assert [f.collective for f in min_busbw_failures(rows, {"broadcast": 40, "*": 1})] == ["broadcast"]
    assert min_busbw_failures(rows, {"reduce": 99}) == []
    assert parse_min_busbw("50") == 50.0
    assert parse_min_busbw("all_reduce=40,*=10") == {"all_reduce": 40.0, "*": 10.0}
    with pytest.raises(BenchError):
        parse_min_busbw("fast")


def _cli(*argv):
    from bench.cli import main

    return main(list(argv))


def test_cli_exit_codes_and_formats(tmp_path, capsys):
    base = make_baseline(tmp_path)
    same = make_run(tmp_path / "cur", "same", dict(TRUE))
    slow = make_run(tmp_path / "cur", "slow", {k: v * 2 for k, v in TRUE.items()})
    md = tmp_path / "summary.md"
    assert _cli("gate", "--baseline", str(base), "--current", str(same), "--markdown", str(md)) == 0
    assert md.read_text().startswith("## gate: PASS")
    assert _cli("gate", "--baseline", str(base), "--current", str(slow), "--no-confirm") == 1
    assert _cli("gate", "--baseline", str(base), "--current", str(slow), "--no-confirm", "--warn-only") == 0
    other = make_run(tmp_path / "cur", "other", dict(TRUE), cores=4)
    assert _cli("gate", "--baseline", str(tmp_path / "baselines"), "--current", str(other)) == 3
    capsys.readouterr()
    assert _cli("gate", "--baseline", str(base), "--current", str(same), "--suite", "x.toml") == 2
    assert "exactly one" in capsys.readouterr().err
    assert _cli("compare", str(base), str(slow), "--format", "xml") == 2
    assert _cli("compare", str(base), str(slow), "--format", "json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert {k["verdict"] for k in doc["kinds"]} == {"regression"}  # a uniform 2x: the launch factor
    assert {c["verdict"] for c in doc["cases"] if c["gated"]} == {"ok"} and "groups" in doc
    assert _cli("compare", str(base), str(slow), "--format", "markdown") == 0
    out = capsys.readouterr().out
    assert "| case |" in out and "geomean time_median_s" in out


def test_results_cli_does_not_import_bench_cli():
    src = Path(__file__).resolve().parents[1] / "bench" / "results" / "cli.py"
    assert "bench.cli" not in src.read_text()


def test_export_pytest_benchmark_reads_back(tmp_path):
    from pytest_benchmark.stats import Stats

    from bench.results.export import to_pytest_benchmark

    run = make_run(tmp_path, "r1", dict(TRUE))
    doc = to_pytest_benchmark(run)
    assert len(doc["benchmarks"]) == len(TRUE) and doc["commit_info"]["id"] == "abc"
    b = doc["benchmarks"][0]
    assert len(b["stats"]["data"]) == 5  # per-iteration max over 2 ranks
    s = Stats()
    for x in b["stats"]["data"]:
        s.update(x)
    assert b["stats"]["median"] == pytest.approx(s.median) and b["stats"]["median"] == pytest.approx(1e-3 * 4)
    out = tmp_path / "0001_run.json"
    out.write_text(json.dumps(doc))
    cmd = [sys.executable, "-m", "pytest_benchmark", "compare", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "all_reduce.float32.sum.root-1.latency.w2" in proc.stdout


def test_band_for_a_mean_of_two_launches():
    from scipy import stats
    x = [0.1, -0.05, 0.02, -0.07, 0.0]
    want = stats.t.ppf(0.99, 4) * np.std(x, ddof=1) * math.sqrt(1 / 2 + 1 / 5)
    assert band_log(x, 0.01, launches=2) == pytest.approx(want)


def test_screening_and_two_launch_mean_catch_a_uniform_slowdown_one_launch_cannot(tmp_path):
    """Launch-level noise (every case of a launch moves together, sd 0.12 in log): a uniform 1.4x
    slowdown is inside the one-launch band at alpha (+46%), so without a re-run it passes; the
    screen (alpha 0.10) flags it and the mean of two launches (band +33%) confirms it."""
    z = np.linspace(-1, 1, 8)
    z = (z - z.mean()) / z.std(ddof=1)
    runs = [make_run(tmp_path / "runs", f"rep{r}", {k: v * math.exp(0.12 * z[r]) for k, v in TRUE.items()})
            for r in range(8)]
    base = bl.write(tmp_path / "baselines", runs, "record", suite_path="suites/smoke.toml")
    slow = {k: v * 1.4 for k, v in TRUE.items()}
    assert gate(base, make_run(tmp_path / "cur", "cur", slow)).exit_code == 0  # one launch at alpha: inside
    v = gate(base, make_run(tmp_path / "cur2", "cur2", slow), rerun=FakeRerun(tmp_path / "conf", slow))
    assert v.exit_code == 1, v.reason
    k = v.kinds.set_index("metric").loc["time_median_s"]
    assert k["launches"] == 2 and k["verdict"] == "regression" and 0.30 < k["band"] < 0.35
    unchanged = gate(base, make_run(tmp_path / "cur3", "cur3", dict(TRUE)),
                     rerun=FakeRerun(tmp_path / "conf3", dict(TRUE)))
    assert unchanged.exit_code == 0, unchanged.reason


def test_a_case_never_flagged_in_the_first_launch_cannot_be_confirmed(tmp_path):
    """Seen in gate_eval on unchanged code (all_gather_single@16M: first launch ok, 'regression'
    after the re-run): the better of two launches is judged against a launch factor taken from
    both, which moves a case nobody flagged. A case regression needs the first launch beyond the
    screen too (both launches beyond the threshold)."""
    base = make_baseline(tmp_path)
    flagged = ("all_gather_single", 16 * MiB)
    quiet = ("broadcast", 64 * MiB)
    times = dict(TRUE)
    times[flagged] = TRUE[flagged] * 2.0  # the screen flags this one: every case is re-run
    run = make_run(tmp_path / "cur", "cur", times)
    again = {k: v * 0.6 for k, v in TRUE.items()}  # a fast confirmation launch ...
    again[quiet] = TRUE[quiet]  # ... in which one case, ok in the first launch, stays put
    v = gate(base, run, rerun=FakeRerun(tmp_path / "conf", again))
    row = v.cases.query("metric == 'time_median_s' and case_id.str.startswith('broadcast') and size_bytes == @MiB * 64")
    assert row.iloc[0]["first_verdict"] == "ok"
    assert row.iloc[0]["verdict"] == "ok", v.reason


def test_a_group_never_flagged_in_the_first_launch_cannot_be_confirmed(tmp_path):
    """Seen in tools/gate_eval.py on unchanged code (stored mode, run 9 of 10): the first launch's
    screen flagged one case (all_gather_single@16M); its group was 1.08x, inside the screen's band
    (+9%). The confirmation launch alone had the group at 1.17x, so the mean of both (1.12x) passed
    the two-launch band (+12%) and failed the gate. The re-run confirms what the screen flagged; it
    does not discover: a kind or group regression needs the first launch's screen to flag it too."""
    base = make_baseline(tmp_path)
    times = dict(TRUE)
    times[("broadcast", 64 * MiB)] = TRUE[("broadcast", 64 * MiB)] * 2.0  # the screen flags this case only
    again = {k: v * (1.5 if k[0] == "all_gather_single" else 1.0) for k, v in TRUE.items()}
    v = gate(base, make_run(tmp_path / "cur", "cur", times), rerun=FakeRerun(tmp_path / "conf", again))
    g = v.groups.set_index("group").loc["all_gather_single"]
    assert g["first_verdict"] == "ok" and g["verdict"] == "ok", v.reason
    assert v.exit_code == 0, v.reason
    # the same group flagged by the first launch's screen and confirmed by the fresh one stands
    slow = {k: v * (1.5 if k[0] == "all_gather_single" else 1.0) for k, v in TRUE.items()}
    v = gate(base, make_run(tmp_path / "cur2", "cur2", slow), rerun=FakeRerun(tmp_path / "conf2", slow))
    assert v.exit_code == 1 and v.groups.set_index("group").loc["all_gather_single", "verdict"] == "regression", v.reason
