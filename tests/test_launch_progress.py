"""Loops of fresh launches (the A/B gate's pairs, bisect's pairs, a baseline's repeats, plan's
calibration and validation launches) print `[n/N] <launch> done, elapsed E s, ETA R s` on stderr
after each launch, on a terminal or not (bench.timing.progress, the harness's own line). The
launches are faked; time is frozen so the lines are exact."""

import io
import re
from pathlib import Path

import pytest

from bench.plan import launch as plan_launch
from bench.regress import ab
from bench.regress import baseline as bl
from bench.regress import bisect as bs
from bench.regress import history as hs

LINE = re.compile(r"^\[(\d+)/(\d+)\] (.+) done, elapsed (\d+) s, ETA (\d+) s$")


class _Tty(io.StringIO):
    def isatty(self):
        return True


def patch_stderr(monkeypatch, terminal: bool):
    """stderr as a pipe or as a terminal (a loop of launches writes the same plain lines to both), and a
    clock where each call to time.monotonic is 10 s later. In the test's body: pytest resets
    sys.stderr after a fixture's set-up."""
    err = _Tty() if terminal else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr("time.monotonic", lambda: float(next(clock)))
    return err


TERMINAL = pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])


def progress_lines(err) -> list[tuple]:
    text = err.getvalue()
    assert "\r" not in text
    return [LINE.match(line).groups() for line in text.splitlines() if line.startswith("[")]


@TERMINAL
def test_gate_ab_pairs_print_a_line_per_launch(tmp_path, terminal, monkeypatch):
    stderr = patch_stderr(monkeypatch, terminal)
    def fake_run(kind, suite, out, cwd=None, env=None, ok_codes=(0,)):
        return tmp_path / "run"

    ab.run_pairs("collectives", tmp_path / "s.toml", tmp_path / "tree", 2, tmp_path / "out", log=lambda m: None,
                 run=fake_run)
    lines = progress_lines(stderr)
    assert [(n, t, what) for n, t, what, *_ in lines] == [
        ("1", "4", "gate A/B pair 1/2 base launch"), ("2", "4", "gate A/B pair 1/2 candidate launch"),
        ("3", "4", "gate A/B pair 2/2 candidate launch"), ("4", "4", "gate A/B pair 2/2 base launch")]
    assert [(el, eta) for *_, el, eta in lines] == [("10", "30"), ("20", "20"), ("30", "10"), ("40", "0")]


@TERMINAL
def test_bisect_pairs_print_a_line_per_launch(tmp_path, terminal, monkeypatch):
    stderr = patch_stderr(monkeypatch, terminal)
    from test_history import fake_run

    good, cand = tmp_path / "good", tmp_path / "cand"
    good.mkdir()
    cand.mkdir()
    m = bs.measure("collectives", None, tmp_path / "s.toml", good, cand, "0123456789abcdef", 3, tmp_path / "out",
                   hs.Target(group="all_reduce"), run=fake_run, log=lambda m: None)
    assert len(m.pair_ratios) == 3
    lines = progress_lines(stderr)
    assert [what for _, _, what, *_ in lines] == [
        "bisect 0123456789ab: pair 1/3: GOOD launch", "bisect 0123456789ab: pair 1/3: this commit launch",
        "bisect 0123456789ab: pair 2/3: this commit launch", "bisect 0123456789ab: pair 2/3: GOOD launch",
        "bisect 0123456789ab: pair 3/3: GOOD launch", "bisect 0123456789ab: pair 3/3: this commit launch"]
    assert [(n, t) for n, t, *_ in lines] == [(str(i), "6") for i in range(1, 7)]


@TERMINAL
def test_baseline_record_prints_a_line_per_repeat(tmp_path, terminal, monkeypatch):
    stderr = patch_stderr(monkeypatch, terminal)
    monkeypatch.setattr(bl, "suite_kind", lambda suite: "collectives")
    monkeypatch.setattr(bl, "run_suite", lambda kind, suite, out: tmp_path / "run")
    monkeypatch.setattr(bl, "write", lambda root, runs, how, **kw: Path(root))
    bl.record("suites/smoke.toml", 3, root=tmp_path / "baselines", log=lambda m: None)
    assert progress_lines(stderr) == [("1", "3", "baseline repeat 1/3", "10", "20"),
                                      ("2", "3", "baseline repeat 2/3", "20", "10"),
                                      ("3", "3", "baseline repeat 3/3", "30", "0")]


@TERMINAL
def test_plan_launches_print_a_line_per_launch(tmp_path, terminal, monkeypatch, capsys):
    stderr = patch_stderr(monkeypatch, terminal)
    launches = plan_launch.planned(1, "plan-calibrate", "plan-validate")  # C V
    measured = []
    monkeypatch.setattr(plan_launch, "measure", lambda one, model, out: measured.append(one.role) or tmp_path / one.role)
    runs = plan_launch.measure_all(launches, "mlp-pipe", str(tmp_path))
    assert runs == [tmp_path / "C", tmp_path / "V"] and measured == ["C", "V"]
    assert [what for _, _, what, *_ in progress_lines(stderr)] == [
        "plan calibration launch plan-calibrate", "plan validation launch plan-validate"]
    assert capsys.readouterr().out.splitlines() == ["plan: measuring plan-calibrate", "plan: measuring plan-validate"]
