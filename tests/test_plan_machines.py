"""Issue 31 item 5: the machine of every calibration, validation and prediction
(bench.plan.runs, plan_fit, plan_validate)."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.plan import model as pl
from bench.plan import fit as pf

from plan_fixtures import (
    order_of, observe, CAL, observe_linked, machine_meta, CPU_BOX, stored, stored_sendrecv, H100, GPU_BOX,
)


def test_calibration_cases_of_two_machines_are_refused():
    gpu = [pl.Observation(**{**o.__dict__, "machine": GPU_BOX, "run_id": "gpu"}) for o in CAL[:3]]
    cpu = [pl.Observation(**{**o.__dict__, "machine": CPU_BOX}) for o in CAL[3:]]
    want = f"calibration runs were measured on different machines: {GPU_BOX} (gpu); {CPU_BOX} (cal); " \
           "calibrate on runs of one machine"
    with pytest.raises(BenchError, match=re.escape(want)):
        pf.fit(gpu + cpu, order_of)
    assert pf.fit(cpu, order_of).machine == CPU_BOX


def test_observations_carry_the_machine_their_run_was_measured_on(tmp_path):
    from bench.plan.runs import observations

    gpu = stored(tmp_path, "gpu", CAL[:1], machine_meta(H100, nodes=2, world=4))
    cpu = stored(tmp_path, "cpu", CAL[:1])
    assert [o.machine for o in observations([gpu, cpu])] == [f"{H100}, nccl, 2 node(s)", CPU_BOX]


def test_plan_names_the_machine_every_prediction_was_calibrated_on(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "4,8", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["calibration"]["machine"] == CPU_BOX
    assert {p["calibrated_on"] for p in got["recommended"]} == {CPU_BOX}
    assert {p["predicted_for"] for p in got["recommended"]} == {CPU_BOX}
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "4,8"]) == 0
    assert f"calibrated on 6 case(s) of 1 run(s) on {CPU_BOX}, model mlp-pipe" in capsys.readouterr().out


def test_a_cpu_calibration_does_not_silently_validate_gpu_runs(tmp_path, capsys):
    """Was: a CPU calibration ranked and judged GPU runs without a word."""
    cal = stored(tmp_path, "cal", CAL)
    held = stored(tmp_path, "held", [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})],
                  machine_meta(H100))
    assert main(["plan", str(cal), "--validate", str(held), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        f"distbench: error: validation run held was measured on {GPU_BOX}, the calibration on {CPU_BOX}; "
        "pass runs of the calibration's machine, or say which machine it predicts with --target-machine RUN_DIR "
        "(or --target-p2p RUN_DIR: the other machine's link)")
    assert not (tmp_path / "out").exists()


def test_another_machine_is_validated_when_the_user_maps_it(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    held = stored(tmp_path, "held", [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})],
                  machine_meta(H100))
    assert main(["plan", str(cal), "--validate", str(held), "--target-machine", str(held), "--format", "json",
                 "--out", str(tmp_path / "out")]) == 0
    case = json.loads(capsys.readouterr().out)["cases"][0]
    assert (case["calibrated_on"], case["predicted_for"], case["measured_on"]) == (CPU_BOX, GPU_BOX, GPU_BOX)
    assert case["extrapolated"] == f"calibrated on {CPU_BOX}, predicted for {GPU_BOX} (--target-machine)"


def test_a_p2p_run_of_another_machine_than_the_calibration_is_refused(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    gpu_link = stored_sendrecv(tmp_path, "link", machine=machine_meta(H100))
    assert main(["plan", str(cal), "--p2p", str(gpu_link)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        f"distbench: error: --p2p run link was measured on {GPU_BOX}, the calibration on {CPU_BOX}; --p2p is the "
        "calibration machine's link (another machine's: --target-p2p)")


def test_target_p2p_maps_the_calibration_to_its_machine(tmp_path, capsys):
    """--target-p2p names the machine predicted for: validation runs of that machine are accepted
    (e.g. calibrated on one node, validated on two, with the link between them)."""
    obs = [observe_linked(s, m) for s, m in (("gpipe", 1), ("gpipe", 2), ("gpipe", 4), ("gpipe", 8),
                                              ("1f1b", 2), ("1f1b", 8))]
    cal = stored(tmp_path, "cal", obs)
    here = stored_sendrecv(tmp_path, "here")
    two = machine_meta(nodes=2)
    there = stored_sendrecv(tmp_path, "there", alpha=2e-3, bytes_per_s=1e8, machine=two)
    held = stored(tmp_path, "held", [pl.Observation(**{**observe_linked("1f1b", 4).__dict__, "run_id": "held"})], two)
    assert main(["plan", str(cal), "--p2p", str(here), "--target-p2p", str(there), "--validate", str(held),
                 "--format", "json", "--out", str(tmp_path / "out")]) == 0
    got = json.loads(capsys.readouterr().out)
    case = got["cases"][0]
    far = "cpu AMD EPYC 7B13 (2 cores), gloo, 2 node(s)"
    assert (case["calibrated_on"], case["predicted_for"], case["measured_on"]) == (CPU_BOX, far, far)
    assert case["predicted_step_s"] == pytest.approx(observe_linked("1f1b", 4, link=pl.Link(
        alpha_s=2e-3, beta_s_per_byte=1 / 1e8, source="there", sizes=(1024, 2**26))).step_s, rel=1e-5)  # with the target's link
    rec = pd.read_parquet(Path(got["predictions_dir"]) / "plan_predictions.parquet").query("role == 'recommended'")
    assert set(rec["predicted_for"]) == {far} and rec["extrapolated"].str.contains("p2p from there").all()
