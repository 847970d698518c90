"""`distbench plan` on stored runs (bench.plan.cli, plan_runs, plan_search): it ranks
the candidates, says they are predictions and why the best won, and refuses bad input in one line."""

import json

import pandas as pd
import pytest

from bench.cli import main

from plan_fixtures import (
    OVERHEAD, CAL, CAL_CKPT, observe_linked, CPU_BOX, stored, stored_ckpt, stored_sendrecv, ALLREDUCE,
    observe_dp,
)


def test_plan_recommends_from_stored_runs_and_says_they_are_predictions(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "1,2,4,8", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PREDICTIONS of the pipeline model")
    assert (f"calibrated on 6 case(s) of 1 run(s) on {CPU_BOX}, model mlp-pipe; overhead per action pp2 1f1b 50 us, "
            "pp2 gpipe 50 us") in out
    assert len([ln for ln in out.splitlines() if ln[:2].strip().isdigit()]) == 3
    assert "not a candidate: pp2 1f1b m=1: needs chunks >= stages" in out


def test_a_schedule_without_split_backward_has_missing_stage_times_not_an_error(tmp_path, capsys):
    """distbench pipeline stores I / W per stage as a string column, missing (<NA>) for schedules that
    do not split the backward (gpipe, 1f1b): the planner reads them as absent."""
    cal = stored(tmp_path, "cal", CAL)
    res = pd.read_parquet(cal / "results.parquet")
    for col in ("stage_bwd_input_s", "stage_bwd_weight_s"):
        res[col] = pd.array([None] * len(res), dtype="string")
    res.to_parquet(cal / "results.parquet")
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "1,2,4,8", "--top", "3"]) == 0
    assert capsys.readouterr().out.startswith("PREDICTIONS of the pipeline model")


@pytest.mark.parametrize("argv, message", [
    (["plan", "{missing}"], "run directory '{missing}' does not exist"),
    (["plan", "{cal}", "--chunks", "4,x"], "chunks '4,x' is not a comma list of integers"),
    (["plan", "{cal}", "--schedules", "gpipe,zb"], "unknown schedule 'zb'"),
    (["plan", "{cal}", "--validate", "{cal}"], "--validate runs are all calibration runs or configurations"),
    (["plan", "{cal}", "--format", "csv"], "argument --format: invalid choice: 'csv'"),
    (["plan", "{empty}"], "has no pipeline cases"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    paths = {"missing": tmp_path / "nope", "cal": stored(tmp_path, "cal", CAL), "empty": tmp_path / "empty"}
    (tmp_path / "empty").mkdir()
    pd.DataFrame([{"run_id": "e", "case_id": "c", "time_median_s": 1.0}]).to_parquet(tmp_path / "empty" / "results.parquet")
    argv = [a.format(**paths) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message.format(**paths) in err


def test_plan_ranks_checkpoint_modes_under_a_memory_limit(tmp_path, capsys):
    cal = stored_ckpt(tmp_path, "cal", CAL + CAL_CKPT)
    limit = 120 * 2**20 + 2048 * 1024
    assert main(["plan", str(cal), "--schedules", "gpipe", "--chunks", "8", "--memory-limit", str(limit),
                 "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(p["schedule"], p["checkpoint"]) for p in got["recommended"]] == [("gpipe", "always")]
    assert [(p["schedule"], p["checkpoint"]) for p in got["over_memory_limit"]] == [("gpipe", "never")]
    assert main(["plan", str(cal), "--schedules", "gpipe", "--chunks", "8", "--checkpoint", "never"]) == 0
    out = capsys.readouterr().out
    assert "pp2 gpipe m=8 b=128" in out and "ckpt=always" not in out


@pytest.mark.parametrize("mode, message", [
    ("sometimes", "checkpoint mode 'sometimes' is not one of: always, except_last, never"),
    ("except_last", "checkpoint mode except_last was not calibrated (have never)"),
])
def test_a_checkpoint_mode_that_cannot_be_planned_is_one_line(tmp_path, capsys, mode, message):
    assert main(["plan", str(stored(tmp_path, "cal", CAL)), "--checkpoint", mode]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_why_states_the_checkpoint_trade_off(tmp_path, capsys):
    cal = stored_ckpt(tmp_path, "cal", CAL + CAL_CKPT)
    assert main(["plan", str(cal), "--schedules", "gpipe", "--chunks", "8", "--memory-limit",
                 str(120 * 2**20 + 2048 * 1024)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("why "))
    assert line.startswith("why pp2 gpipe m=8 b=128 ckpt=always: predicted bubble")
    assert "checkpoint never: " in line and "x the throughput, peak 124 MiB against 121 MiB" in line


def test_plan_with_a_p2p_run_calibrates_the_link_and_predicts_another(tmp_path, capsys):
    obs = [observe_linked(s, m) for s, m in (("gpipe", 1), ("gpipe", 2), ("gpipe", 4), ("gpipe", 8),
                                              ("1f1b", 2), ("1f1b", 8))]
    cal = stored(tmp_path, "cal", obs)
    here, there = stored_sendrecv(tmp_path, "here"), stored_sendrecv(tmp_path, "there", alpha=2e-3, bytes_per_s=1e8)
    argv = ["plan", str(cal), "--schedules", "1f1b", "--chunks", "4", "--p2p", str(here)]
    assert main([*argv, "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["calibration"]["overhead_per_action_s"]["pp2 gpipe"] == pytest.approx(OVERHEAD, rel=1e-5)
    assert got["calibration"]["p2p"]["beta_bytes_per_s"] == pytest.approx(2e9, rel=1e-6)
    assert got["recommended"][0]["predicted_step_s"] == pytest.approx(observe_linked("1f1b", 4).step_s, rel=1e-5)
    assert main([*argv, "--target-p2p", str(there)]) == 0
    out = capsys.readouterr().out
    assert "p2p between pipeline ranks (alpha-beta, 2048 bytes per sample at a stage boundary): calibrated " \
           "alpha 30.0 us, beta 2.00 GB/s (here); predicted with alpha 2000.0 us, beta 0.10 GB/s (there)" in out
    assert "extrapolated: p2p from there, not the calibration's link (here)" in out


@pytest.mark.parametrize("argv, message", [
    (["plan", "{cal}", "--p2p", "{cal}"], "has no sendrecv cases; measure the link with"),
    (["plan", "{cal}", "--target-p2p", "{cal}"], "--target-p2p needs --p2p"),
])
def test_p2p_refusals_are_one_line(tmp_path, capsys, argv, message):
    cal = stored(tmp_path, "cal", CAL)
    assert main([a.format(cal=cal) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_a_sharded_or_tensor_parallel_run_is_a_measured_layout_not_read_as_a_deeper_pipeline(tmp_path, capsys):
    """A `distbench pipeline --fsdp 2` run at world 4 is pp 2 x fsdp 2: its world is not its pipeline
    depth. Beside pipeline runs it is a measured composed layout (predicted as measured); alone it is
    refused in one line (the planner calibrates on pipelines and pp x dp)."""
    cal = stored(tmp_path, "cal", CAL)
    res = pd.read_parquet(cal / "results.parquet")
    res["pp_degree"], res["dp_degree"], res["fsdp_degree"], res["tp_degree"] = res["world"], 1, 1, 1
    res.loc[0, ["world", "fsdp_degree"]] = [4, 2]
    res.to_parquet(cal / "results.parquet")
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "2,4"]) == 0
    out = capsys.readouterr().out
    assert "measured composed layouts (predicted as measured at their pipeline depth): pp2 fsdp2 (1 case(s))" in out
    assert " pp4 " not in out and "host cost of the composed layouts at other depths (fitted): fsdp2 host cost" in out
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "2,4", "--format", "json"]) == 0
    host = json.loads(capsys.readouterr().out)["calibration"]["host_cost"]
    assert list(host) == ["fsdp2"] and set(host["fsdp2"]) == {"compute", "collectives", "layouts", "runs"}
    assert host["fsdp2"]["layouts"] == ["pp2 fsdp2"]
    res[res["fsdp_degree"] == 2].to_parquet(cal / "results.parquet")
    assert main(["plan", str(cal)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "calibration runs hold composed layouts (pp2 fsdp2) and no pipeline" in err


def test_the_pipeline_depth_is_read_from_pp_degree_where_the_run_has_it(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    res = pd.read_parquet(cal / "results.parquet")
    res["pp_degree"], res["dp_degree"], res["fsdp_degree"], res["tp_degree"] = res["world"], 1, 1, 1
    res.to_parquet(cal / "results.parquet")
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "2,4", "--format", "json"]) == 0
    assert {p["stages"] for p in json.loads(capsys.readouterr().out)["recommended"]} == {2}


def test_plan_ranks_pipeline_and_data_parallel_layouts_at_a_world(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL + [observe_dp("gpipe", m) for m in (2, 4, 8)] + [observe_dp("1f1b", 4)])
    assert main(["plan", str(cal), "--world", "4", "--dp", "1,2", "--schedules", "gpipe,1f1b", "--chunks", "2,4,8",
                 "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {(p["stages"], p["dp"]) for p in got["recommended"]} == {(2, 2)}
    assert all(p["micro_batch"] == 1024 // (2 * p["chunks"]) and p["extrapolated"] == "" for p in got["recommended"])
    assert got["calibration"]["overhead_per_step_s"] == {"pp2": pytest.approx(0.0, abs=1e-9),
                                                          "pp2 dp2": pytest.approx(ALLREDUCE, rel=1e-4)}
    assert main(["plan", str(cal), "--world", "3"]) == 2
    assert ("no candidate at world 3: worlds are stages x dp x fsdp x tp (--stages 2, --dp 1,2, --fsdp 1, --tp 1)"
            in capsys.readouterr().err)
