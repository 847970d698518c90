"""The calibration's launch-to-launch spread (bench.pipeline.plan_fit.launch_spread): how far a
configuration's step moved between the launches that measured it, and the plan's runner-ups that
are nearer the pick than that spread."""

import json

import pytest

from bench.cli import main
from bench.pipeline import plan as pl
from bench.pipeline.plan_fit import Spread, launch_spread
from bench.pipeline.plan_search import why

from plan_fixtures import CAL, observe, stored


def _at(o: pl.Observation, run: str, factor: float) -> pl.Observation:
    return pl.Observation(**{**o.__dict__, "run_id": run, "step_s": o.step_s * factor})


def test_the_spread_is_the_median_deviation_from_each_configurations_median_over_launches():
    """gpipe m=4 in two launches (1.0x, 1.2x: median 1.1x, each 1/11 from it), 1f1b m=8 in three
    (1.0x, 1.0x, 1.3x: median 1.0x; 0, 0, 0.3), gpipe m=8 in one (left out): median of
    1/11, 1/11, 0, 0, 0.3."""
    a, b, c = observe("gpipe", 4), observe("1f1b", 8), observe("gpipe", 8)
    obs = [_at(a, "r1", 1.0), _at(a, "r2", 1.2), _at(b, "r1", 1.0), _at(b, "r2", 1.0), _at(b, "r3", 1.3),
           _at(c, "r1", 1.0)]
    assert launch_spread(obs) == Spread(mad=pytest.approx(1 / 11), configs=2, launches=3)


def test_one_launch_per_configuration_has_no_spread():
    assert launch_spread(CAL) is None


def test_why_marks_a_runner_up_nearer_than_the_spread():
    def pred(schedule, step):
        c = pl.Candidate(stages=2, schedule=schedule, chunks=8, micro_batch=128)
        return pl.Prediction(candidate=c, step_s=step, samples_per_s=c.batch / step, bubble=0.1, peak_bytes=1.0,
                             extrapolated="")

    best, near = pred("1f1b", 1.0), pred("gpipe", 1.03)
    assert "best other schedule pp2 gpipe m=8 b=128: 1.03x slower (within the calibration's launch-to-launch " \
           "spread)" in why(best, [best, near], Spread(mad=0.02, configs=1, launches=2))
    assert "within" not in why(best, [best, near], Spread(mad=0.01, configs=1, launches=2))  # 3% against 2%
    assert "within" not in why(best, [best, near], None)


def test_the_plan_says_the_calibrations_spread_or_that_it_is_not_known(tmp_path, capsys):
    one = stored(tmp_path, "one", CAL)
    assert main(["plan", str(one)]) == 0
    assert "calibration launches: every configuration was measured in one launch, so the launch-to-launch spread " \
           "is not known; a near tie may be that launch's order (pool launches: --calibrate --launches N, or pass " \
           "several runs)" in capsys.readouterr().out
    two = stored(tmp_path, "two", [_at(o, "two", 1.1) for o in CAL])
    assert main(["plan", str(one), str(two)]) == 0
    assert "calibration launch-to-launch spread: a configuration's step lay a median 4.8% from its median over " \
           "launches (6 configuration(s), measured in up to 2 launches); a runner-up less than twice that behind " \
           "the pick is marked 'within the calibration's launch-to-launch spread'" in capsys.readouterr().out
    assert main(["plan", str(one), str(two), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["calibration"]["launch_spread"]
    assert got == {"mad": pytest.approx(0.1 / 2.1), "configurations": 6, "launches": 2}
    assert main(["plan", str(one), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"]["launch_spread"] is None
