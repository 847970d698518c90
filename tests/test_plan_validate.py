"""`distbench plan --validate` (bench.plan.validate, plan_store): predicted against
measured on held-out runs, per launch and over launches, per sweep, stored as a run of its own."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bench.cli import main
from bench.plan import model as pl
from bench.plan.validate import over_launches, sweeps

from plan_fixtures import observe, CAL, observe_ckpt, CAL_CKPT, CPU_BOX, stored, held_run, stored_ckpt, observe_dp


def test_validate_prints_predicted_vs_measured_and_the_mape(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    held = stored(tmp_path, "held", [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})])
    assert main(["plan", str(cal), "--validate", str(held), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["prediction"] is True and len(got["cases"]) == 1
    assert got["step_mape_pct"] == pytest.approx(0.0, abs=1e-3)
    assert got["peak_mape_pct"] == pytest.approx(0.0, abs=1e-6)


def test_validation_is_stored_in_a_run_of_its_own_and_drawn_beside_the_run(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    (tmp_path / "results" / "pipeline").mkdir(parents=True)
    held = stored(tmp_path / "results" / "pipeline", "held",
                  [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})])
    assert main(["plan", str(cal), "--validate", str(held)]) == 0
    (mine,) = (tmp_path / "results" / "plan").iterdir()  # no --out: beside the validation run, results/plan/
    assert f"predictions stored in {mine} (a run of their own" in capsys.readouterr().out
    assert not (held / "plan_predictions.parquet").exists()
    got = pd.read_parquet(mine / "plan_predictions.parquet")
    assert got["role"].tolist()[0] == "validation" and got["case_id"].tolist()[0] == "1f1b.m4"
    rec = got[got["role"] == "recommended"]
    assert rec["rank"].tolist() == list(range(1, len(rec) + 1)) and rec["why"].iloc[0].startswith("why pp2")
    assert set(got["calibration_runs"]) == {"cal"}
    assert main(["report", str(held), str(mine), "--output-dir", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "pipeline_plan_predicted_vs_measured.png").exists()
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "planner recommendation (model predictions, best first)" in html


def test_each_validation_sweep_says_how_far_the_models_pick_is_from_the_measured_best():
    """Issue 22: the recommended configuration must be the measured best or within 5% of its
    throughput, per sweep (one run, one depth): the model's pick among the measured configurations,
    its measured throughput against the best measured one."""
    from bench.plan.validate import sweeps

    def row(stages, label, pred, meas):
        return {"run_id": "v", "stages": stages, "candidate": label, "chunks": 8, "micro_batch": 128,
                "predicted_step_s": pred, "measured_step_s": meas}

    got = sweeps([row(2, "a", 0.10, 0.125), row(2, "b", 0.11, 0.100), row(4, "c", 0.2, 0.2)])
    assert [(w["stages"], w["picked"], w["best"]) for w in got] == [(2, "a", "b"), (4, "c", "c")]
    assert got[0]["shortfall"] == pytest.approx(0.2) and got[1]["shortfall"] == 0.0
    assert got[0]["best_samples_per_s"] == pytest.approx(1024 / 0.1)


def test_several_validation_launches_are_also_judged_on_each_configurations_median(tmp_path, capsys):
    """A launch is fast or slow as a whole: one launch's MAPE carries its factor; the median over
    launches per configuration is the better measurement. Launches 0.9x, 1.0x and 1.2x the model:
    per launch 11.1%, 0.0%, 16.7%; the medians equal the model (0.0%)."""
    cal = stored(tmp_path, "cal4", [o for o in CAL if o.chunks != 4])
    runs = [held_run(tmp_path, f"v{i}", f) for i, f in enumerate((0.9, 1.0, 1.2))]
    assert main(["plan", str(cal), "--validate", *map(str, runs), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert len(got["cases"]) == 6
    launches = got["per_launch"]
    assert {k: v["step_mape_pct"] for k, v in launches.items()} == {
        "v0": pytest.approx(100 / 9), "v1": pytest.approx(0.0, abs=1e-6), "v2": pytest.approx(100 / 6)}
    assert {k: v["launch_factor"] for k, v in launches.items()} == {
        "v0": pytest.approx(0.9), "v1": pytest.approx(1.0), "v2": pytest.approx(1.2)}
    assert all(v["step_mape_factor_out_pct"] == pytest.approx(0.0, abs=1e-6) for v in launches.values())
    pooled = got["over_launches"]
    assert [(c["schedule"], c["launches"]) for c in pooled["cases"]] == [("gpipe", 3), ("1f1b", 3)]
    assert pooled["step_mape_pct"] == pytest.approx(0.0, abs=1e-6)
    assert [w["run_id"] for w in pooled["sweeps"]] == ["median of 3 launches"]
    assert main(["plan", str(cal), "--validate", *map(str, runs)]) == 0
    out = capsys.readouterr().out
    assert "launch v2: step time MAPE 16.7%; launch factor (geometric mean of measured / predicted) 1.200x, " \
           "MAPE with it taken out 0.0%" in out
    assert "over launches: each configuration measured in more than one validation launch, its median over them " \
           "(2 configuration(s))" in out


def test_one_validation_launch_has_no_over_launches_view(tmp_path, capsys):
    cal = stored(tmp_path, "cal4", [o for o in CAL if o.chunks != 4])
    assert main(["plan", str(cal), "--validate", str(held_run(tmp_path, "v0", 1.0)), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["over_launches"] is None


def test_a_checkpoint_mode_is_validated_against_its_own_runs(tmp_path, capsys):
    cal = stored_ckpt(tmp_path, "cal", CAL + CAL_CKPT)
    held = stored_ckpt(tmp_path, "held", [pl.Observation(**{**observe_ckpt("1f1b", 4).__dict__, "run_id": "held"})])
    assert main(["plan", str(cal), "--validate", str(held), "--format", "json", "--out", str(tmp_path / "out")]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [c["checkpoint"] for c in got["cases"]] == ["always"]
    assert got["step_mape_pct"] == pytest.approx(0.0, abs=1e-3) and got["peak_mape_pct"] == pytest.approx(0.0, abs=1e-3)
    stored_rows = pd.read_parquet(Path(got["predictions_dir"]) / "plan_predictions.parquet")
    assert set(stored_rows["checkpoint"].dropna()) == {"always"}


def test_a_data_parallel_case_is_validated_with_its_layouts_calibration(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL + [observe_dp("gpipe", m) for m in (2, 4, 8)] + [observe_dp("1f1b", 4)])
    held = stored(tmp_path, "held", [pl.Observation(**{**observe_dp("1f1b", 8).__dict__, "run_id": "held"})])
    assert main(["plan", str(cal), "--validate", str(held), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(c["dp"], c["candidate"]) for c in got["cases"]] == [(2, "pp2 dp2 1f1b m=8 b=64")]
    assert got["step_mape_pct"] == pytest.approx(0.0, abs=1e-3) and got["peak_mape_pct"] == pytest.approx(0.0, abs=1e-6)
    assert [w["layout"] for w in got["sweeps"]] == ["pp2 dp2"]


def test_layouts_measured_at_one_world_make_a_sweep_of_their_own():
    row = dict(run_id="a", micro_batch=64, chunks=8, checkpoint="never", schedule="1f1b")
    rows = [dict(row, stages=4, dp=1, micro_batch=128, candidate="pp4", predicted_step_s=1.0, measured_step_s=1.0),
            dict(row, run_id="b", stages=2, dp=2, candidate="pp2 dp2", predicted_step_s=0.9, measured_step_s=1.1)]
    got = {w["run_id"]: w for w in sweeps(rows)}
    assert set(got) == {"a", "b", "world 4 (every run)"}
    w = got["world 4 (every run)"]
    assert (w["picked"], w["best"], w["layout"]) == ("pp2 dp2", "pp4", "2 layouts")
    assert w["shortfall"] == pytest.approx(1 - (1024 / 1.1) / (1024 / 1.0))


def _launch_rows(measured: dict) -> list[dict]:
    """Rows of two configurations (a is predicted faster) measured in several launches:
    measured = {launch: (a's step, b's step)}."""
    base = dict(stages=2, dp=1, tp=1, fsdp=1, chunks=8, micro_batch=128, checkpoint="never", measured_bubble=0.1,
                predicted_bubble=0.1, measured_peak_bytes=1.0, predicted_peak_bytes=1.0, extrapolated="")
    return [dict(base, run_id=run, case_id=name, candidate=name, schedule=name, predicted_step_s=pred,
                 measured_step_s=steps[i])
            for run, steps in measured.items() for i, (name, pred) in enumerate((("a", 1.0), ("b", 1.1)))]


def test_a_pooled_sweeps_shortfall_says_whether_its_launches_resolve_it():
    """The model picks a; over four launches b's median is 6.8% faster (a 1.1 s, b 1.025 s), but b was
    faster in two launches of four: per launch (paired, a launch fast or slow as a whole moves both)
    the shortfall's 95% confidence interval holds 0, so the order is not resolved."""
    rows = _launch_rows({"l1": (1.0, 1.1), "l2": (1.2, 1.0), "l3": (1.0, 1.05), "l4": (1.3, 1.0)})
    (w,) = sweeps(over_launches(rows))
    assert (w["picked"], w["best"]) == ("a", "b") and w["shortfall"] == pytest.approx(1 - 1.025 / 1.1)
    per = [1 - 1.1 / 1.0, 1 - 1.0 / 1.2, 1 - 1.05 / 1.0, 1 - 1.0 / 1.3]  # 1 - b's step / a's step, per launch
    assert w["launches_paired"] == 4 and w["best_faster_in"] == 2
    assert w["launch_shortfall_median"] == pytest.approx(float(np.median(per)))
    logs = np.log([1.0 / 1.1, 1.2 / 1.0, 1.0 / 1.05, 1.3 / 1.0])  # log(a's step / b's step): > 0 where b is faster
    half = stats.t.ppf(0.975, 3) * logs.std(ddof=1) / 2
    assert w["shortfall_ci95"] == pytest.approx([1 - np.exp(-(logs.mean() - half)), 1 - np.exp(-(logs.mean() + half))])
    assert w["shortfall_ci95"][0] < 0 < w["shortfall_ci95"][1] and w["faster"] is None and w["resolved"] is False


def test_a_pooled_sweeps_shortfall_is_resolved_when_every_launch_agrees_within_a_narrow_interval():
    """b faster by 8%, 10% and 12% in three launches: the interval lies above 0."""
    rows = _launch_rows({"l1": (1.08, 1.00), "l2": (1.21, 1.10), "l3": (1.008, 0.90)})
    (w,) = sweeps(over_launches(rows))
    assert w["best_faster_in"] == 3 and w["launches_paired"] == 3
    logs = np.log([1.08, 1.1, 1.12])
    lo = 1 - np.exp(-(logs.mean() - stats.t.ppf(0.975, 2) * logs.std(ddof=1) / np.sqrt(3)))
    assert w["shortfall_ci95"][0] == pytest.approx(lo) and lo > 0
    assert w["faster"] == "best" and w["resolved"] is True


def test_the_paired_launches_may_resolve_the_order_the_other_way():
    """The medians over launches put b first (a 1.3 s, b 1.2 s: b's launches were the slow ones
    apart), while in every launch that measured both, a (the pick) was faster."""
    rows = _launch_rows({"l1": (1.00, 1.05), "l2": (1.30, 1.36), "l3": (1.40, 1.47)})
    rows += [dict(r, run_id=f"x{i}", measured_step_s=0.5) for i, r in enumerate(rows[1::2])]  # b alone, fast
    (w,) = sweeps(over_launches(rows))
    assert (w["picked"], w["best"], w["launches_paired"]) == ("a", "b", 3)
    assert w["best_faster_in"] == 0 and w["shortfall_ci95"][1] < 0
    assert w["faster"] == "pick" and w["resolved"] is True


def test_a_sweep_of_one_launch_or_with_the_pick_best_has_no_launch_test():
    rows = _launch_rows({"l1": (1.0, 1.1)})
    (w,) = sweeps(rows)
    assert w["launches_paired"] == 0 and w["shortfall_ci95"] is None and w["resolved"] is None
    (w,) = sweeps(over_launches(_launch_rows({"l1": (1.0, 1.1), "l2": (1.0, 1.2)})))
    assert w["picked"] == w["best"] == "a" and w["shortfall"] == 0.0 and w["resolved"] is None


def test_a_pick_and_best_that_share_one_launch_have_no_launch_test():
    """a in l1, l2; b in l2, l3: each pooled over two launches, one of them shared."""
    rows = [r for r in _launch_rows({"l1": (1.3, 9.9), "l2": (1.3, 1.0), "l3": (9.9, 1.0)})
            if (r["run_id"], r["candidate"]) not in {("l1", "b"), ("l3", "a")}]
    (w,) = sweeps(over_launches(rows))
    assert (w["picked"], w["best"]) == ("a", "b")
    assert w["launches_paired"] == 1 and w["shortfall_ci95"] is None and w["resolved"] is None

def test_validate_writes_its_predictions_into_a_run_of_its_own_never_into_the_runs_it_reads(tmp_path, capsys):
    """Was: plan_predictions.parquet written into every validated run directory."""
    cal = stored(tmp_path, "cal", CAL)
    held = stored(tmp_path, "held", [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})])
    before = {p: p.read_bytes() for d in (cal, held) for p in sorted(d.iterdir())}
    assert main(["plan", str(cal), "--validate", str(held), "--out", str(tmp_path / "out"), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {p: p.read_bytes() for d in (cal, held) for p in sorted(d.iterdir())} == before
    (mine,) = (tmp_path / "out" / "plan").iterdir()
    assert got["predictions_dir"] == str(mine)
    assert sorted(p.name for p in mine.iterdir()) == ["meta.json", "plan_predictions.parquet"]
    meta = json.loads((mine / "meta.json").read_text())
    assert (meta["kind"], meta["suite"], meta["run_id"]) == ("pipeline", "plan", mine.name)
    assert meta["plan"] == {"calibration_runs": ["cal"], "calibration_machine": CPU_BOX, "validation_runs": [str(held)],
                            "predicted_for": CPU_BOX}
    rows = pd.read_parquet(mine / "plan_predictions.parquet")
    assert set(rows["run_id"]) == {"held"} and set(rows["calibration_machine"]) == {CPU_BOX}
    assert rows.loc[rows["role"] == "validation", "measured_machine"].tolist() == [CPU_BOX]


def test_the_printed_sweep_says_whether_its_launches_resolve_the_shortfall(capsys):
    from bench.plan.cli import _print_errors

    rows = over_launches(_launch_rows({"l1": (1.0, 1.1), "l2": (1.2, 1.0), "l3": (1.0, 1.05), "l4": (1.3, 1.0)}))
    _print_errors(rows, sweeps(rows))
    out = capsys.readouterr().out
    assert "the model picks a (measured 931 samples/s), the measured best is b (999): 6.8% short (the best faster " \
           "in 2 of 4 launches that measured both; per launch median 5.8% short, 95% CI of the shortfall -22.4% to " \
           "29.7%: " in out
    assert "not resolved, within the launch-to-launch spread); Kendall tau -1.00" in out
