"""The calibration's launch-to-launch spread (bench.plan.fit.launch_spread): how far a
configuration's step moved between the launches that measured it, and the plan's runner-ups that
are nearer the pick than that spread."""

import json

import pytest

from bench.cli import main
from bench.plan import model as pl
from bench.plan.fit import Spread, launch_spread
from bench.plan.search import why

from plan_fixtures import CAL, observe, stored


def _at(o: pl.Observation, run: str, factor: float) -> pl.Observation:
    return pl.Observation(**{**o.__dict__, "run_id": run, "step_s": o.step_s * factor})


def test_a_launch_fast_or_slow_as_a_whole_is_no_spread():
    """Both configurations 20% slower in the second launch: the launch's factor, which reorders none."""
    a, b = observe("gpipe", 4), observe("1f1b", 8)
    obs = [_at(a, "r1", 1.0), _at(a, "r2", 1.2), _at(b, "r1", 1.0), _at(b, "r2", 1.2)]
    assert launch_spread(obs) == Spread(difference=pytest.approx(0.0, abs=1e-12), configs=2, launches=2)


def test_the_spread_is_how_far_two_launches_of_one_configuration_differ_once_factored():
    """a 10% slower in the second launch, b 10% faster: the launch's factor is their geometric mean,
    sqrt(1.1 x 0.9); each then moved by sqrt(1.1 / 0.9), 10.55%. gpipe m=8, measured in one launch,
    is left out; a NaN step is left out."""
    a, b, c = observe("gpipe", 4), observe("1f1b", 8), observe("gpipe", 8)
    obs = [_at(a, "r1", 1.0), _at(a, "r2", 1.1), _at(b, "r1", 1.0), _at(b, "r2", 0.9), _at(c, "r1", 1.0),
           _at(c, "r2", float("nan"))]
    assert launch_spread(obs) == Spread(difference=pytest.approx((1.1 / 0.9) ** 0.5 - 1), configs=2, launches=2)


def test_one_launch_per_configuration_has_no_spread():
    assert launch_spread(CAL) is None


def test_why_marks_a_runner_up_nearer_than_the_spread():
    def pred(schedule, step):
        c = pl.Candidate(stages=2, schedule=schedule, chunks=8, micro_batch=128)
        return pl.Prediction(candidate=c, step_s=step, samples_per_s=c.batch / step, bubble=0.1, peak_bytes=1.0,
                             extrapolated="")

    best, near = pred("1f1b", 1.0), pred("gpipe", 1.03)
    assert "best other schedule pp2 gpipe m=8 b=128: 1.03x slower (within the calibration's launch-to-launch " \
           "spread)" in why(best, [best, near], Spread(difference=0.04, configs=1, launches=2))
    assert "within" not in why(best, [best, near], Spread(difference=0.02, configs=1, launches=2))  # 3% against 2%
    assert "within" not in why(best, [best, near], None)


def test_the_plan_says_the_calibrations_spread_or_that_it_is_not_known(tmp_path, capsys):
    one = stored(tmp_path, "one", CAL)
    assert main(["plan", str(one)]) == 0
    assert "calibration launches: every configuration was measured in one launch, so the launch-to-launch spread " \
           "is not known; a near tie may be that launch's order (pool launches: --calibrate --launches N, or pass " \
           "several runs)" in capsys.readouterr().out
    # the second launch: the four gpipe cases 1.1x, the two 1f1b cases 0.9x; its factor over the first,
    # (1.1^4 x 0.9^2)^(1/6); a gpipe case then moved by 1.1 over it, (1.1 / 0.9)^(1/3): 6.9% (4 pairs of 6)
    two = stored(tmp_path, "two", [_at(o, "two", 1.1 if o.schedule == "gpipe" else 0.9) for o in CAL])
    assert main(["plan", str(one), str(two)]) == 0
    assert "calibration launch-to-launch spread: two launches of one configuration differ by a median 6.9%, each " \
           "launch's factor taken out (6 configuration(s), measured in up to 2 launches); a runner-up less than that " \
           "behind the pick is marked 'within the calibration's launch-to-launch spread'" in capsys.readouterr().out
    assert main(["plan", str(one), str(two), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["calibration"]["launch_spread"]
    assert got == {"difference": pytest.approx((1.1 / 0.9) ** (1 / 3) - 1), "configurations": 6, "launches": 2}
    assert main(["plan", str(one), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"]["launch_spread"] is None
