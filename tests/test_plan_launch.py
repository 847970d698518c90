"""`distbench plan` measuring its own runs (bench.plan.launch): --calibrate and --validate
alone launch their suites (faked here), A B B A when both, and refuse bad input before any launch."""

from pathlib import Path

import pytest

from bench.cli import main
from bench.plan import model as pl

from plan_fixtures import observe, CAL, CPU_BOX, stored, held_run


def test_validate_without_runs_measures_the_held_out_suite_first(tmp_path, capsys, monkeypatch):
    """--validate alone launches `distbench pipeline --suite plan-validate --model <calibrated>`
    and validates on the run it wrote (the launch is faked: it writes a held-out run)."""
    from bench.regress import launch as launch_mod

    cal = stored(tmp_path, "cal", CAL)
    calls = []

    def launch(cmd, **kw):  # bench.regress.launch._run: (exit code, stdout, stderr)
        calls.append(cmd)
        out = tmp_path / "out" / "plan-validate"
        out.mkdir(parents=True)
        d = stored(out, "20261204T000000Z-held", [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})])
        return 0, f"# results: {d}\n", ""

    monkeypatch.setattr(launch_mod, "_run", launch)
    assert main(["plan", str(cal), "--validate", "--out", str(tmp_path / "out")]) == 0
    assert calls[0][2:5] == ["bench", "pipeline", "--suite"] and calls[0][-4:] == ["--model", "mlp-pipe", "--out",
                                                                                 str(tmp_path / "out")]
    out = capsys.readouterr().out
    assert "validation: model predictions vs measured, 1 held-out case(s)" in out
    assert "step time MAPE 0.0%" in out


def test_launches_measures_that_many_validation_launches(tmp_path, capsys, monkeypatch):
    from bench.regress import launch as launch_mod

    cal = stored(tmp_path, "cal4", [o for o in CAL if o.chunks != 4])
    calls = []

    def launch(cmd, **kw):  # bench.regress.launch._run: (exit code, stdout, stderr)
        calls.append(cmd)
        out = tmp_path / "out" / "plan-validate"
        out.mkdir(parents=True, exist_ok=True)
        d = held_run(out, f"20261204T00000{len(calls)}Z-held", 1.0)
        return 0, f"# results: {d}\n", ""

    monkeypatch.setattr(launch_mod, "_run", launch)
    assert main(["plan", str(cal), "--validate", "--launches", "2", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert len(calls) == 2 and "(2 configuration(s))" in out


def test_launches_below_one_is_refused_before_anything_runs(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    assert main(["plan", str(cal), "--validate", "--launches", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--launches 0 is not a launch count; give an integer >= 1") and len(err.splitlines()) == 1


def test_calibrate_measures_the_calibration_first_and_pools_its_launches(tmp_path, capsys, monkeypatch):
    """--calibrate launches `distbench pipeline --suite plan-calibrate --model M` (--launches times,
    pooled) before planning; the launches are faked: each writes a calibration run."""
    from bench.regress import launch as launch_mod

    calls = []

    def launch(cmd, **kw):  # bench.regress.launch._run: (exit code, stdout, stderr)
        calls.append(cmd)
        out = tmp_path / "out" / "plan-calibrate"
        out.mkdir(parents=True, exist_ok=True)
        name = f"20261204T00000{len(calls)}Z-cal"
        d = stored(out, name, [pl.Observation(**{**o.__dict__, "run_id": name}) for o in CAL])
        return 0, f"# results: {d}\n", ""

    monkeypatch.setattr(launch_mod, "_run", launch)
    assert main(["plan", "--calibrate", "--model", "mlp-pipe", "--launches", "2", "--out", str(tmp_path / "out"),
                 "--schedules", "gpipe,1f1b", "--chunks", "2,4,8"]) == 0
    assert len(calls) == 2 and calls[0][2:5] == ["bench", "pipeline", "--suite"]
    assert calls[0][5].endswith("plan-calibrate.toml") and calls[0][-4:-2] == ["--model", "mlp-pipe"]
    assert f"calibrated on 12 case(s) of 2 run(s) on {CPU_BOX}, model mlp-pipe" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["plan"], "no calibration runs given; pass RUN_DIRs of distbench pipeline, or --calibrate"),
    (["plan", "{cal}", "--model", "mlp-pipe"], "--model mlp-pipe is what --calibrate measures"),
    (["plan", "--calibrate", "--model", "mlp-huge"], "unknown model preset 'mlp-huge'"),
    (["plan", "--calibrate", "--calibrate-suite", "nope"], "nope"),
    (["plan", "{cal}", "--validate", "--validate-suite", "nope"], "nope"),
])
def test_calibrate_refusals_come_before_any_launch(tmp_path, capsys, monkeypatch, argv, message):
    from bench.regress import launch as launch_mod

    monkeypatch.setattr(launch_mod, "_run", lambda cmd, **kw: pytest.fail(f"launched {cmd}"))
    cal = stored(tmp_path, "cal", CAL)
    argv = [a.format(cal=cal) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_calibrate_and_validate_interleave_their_launches_abba(tmp_path, capsys, monkeypatch):
    """--calibrate --validate --launches 2 measures calibrate, validate, validate, calibrate (A B B A):
    a host that drifts linearly over the launches drifts the same for both, so the calibration is
    not a launch older than what it is judged on. Every launch measures the calibrated model."""
    from bench.regress import launch as launch_mod

    calls = []

    def launch(cmd, **kw):  # bench.regress.launch._run: (exit code, stdout, stderr)
        calls.append(cmd)
        suite = Path(cmd[cmd.index("--suite") + 1]).stem
        out = tmp_path / "out" / suite
        out.mkdir(parents=True, exist_ok=True)
        name = f"20261204T00000{len(calls)}Z-{suite}"
        if suite == "plan-calibrate":
            d = stored(out, name, [pl.Observation(**{**o.__dict__, "run_id": name}) for o in CAL if o.chunks != 4])
        else:
            d = held_run(out, name, 1.0)
        return 0, f"# results: {d}\n", ""

    monkeypatch.setattr(launch_mod, "_run", launch)
    assert main(["plan", "--calibrate", "--model", "mlp-pipe", "--validate", "--launches", "2",
                 "--out", str(tmp_path / "out")]) == 0
    assert [Path(c[c.index("--suite") + 1]).stem for c in calls] == \
        ["plan-calibrate", "plan-validate", "plan-validate", "plan-calibrate"]
    assert all(c[c.index("--model") + 1] == "mlp-pipe" for c in calls)
    out = capsys.readouterr().out
    assert "launch order (A B B A): plan-calibrate, plan-validate, plan-validate, plan-calibrate" in out
    assert "(2 configuration(s))" in out
