"""The command line as the README shows it (issue 37): `gate --against REV` and `bisect` default to
the smoke suite, the internal `bisect-step` is hidden from the top-level help, options say their
defaults, and the progress line reaches a stream that is not a terminal (CI logs, `| tee`)."""

import io
import re

import pytest

from bench.cli import build_parser, main
from bench.harness.rank import Progress

AB_SUITE = "suites/smoke.toml"  # what `make gate-ab` runs


def _help(*argv) -> str:
    parser = build_parser()
    for name in argv:  # walk down to the subcommand's parser
        (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        parser = action.choices[name]
    return " ".join(parser.format_help().split())


# ---- 1. gate --against and bisect run the smoke suite unless told otherwise ------------------

def test_gate_against_without_suite_runs_the_smoke_suite(monkeypatch, capsys):
    from bench.regress import ab, gate as gt

    seen = {}

    def fake(rev, suite, **kw):
        seen.update(rev=rev, suite=str(suite), pairs=kw["pairs"])
        return gt.Verdict(exit_code=0, status="pass", reason="fake")

    monkeypatch.setattr(ab, "gate_against", fake)
    assert main(["gate", "--against", "HEAD~1"]) == 0, capsys.readouterr().err
    assert seen == {"rev": "HEAD~1", "suite": AB_SUITE, "pairs": ab.DEFAULT_PAIRS}
    assert "default suites/smoke.toml" in _help("gate")


def test_gate_without_against_still_needs_current_or_suite(capsys):
    assert main(["gate"]) == 2
    assert "give exactly one of --current RUN and --suite FILE" in capsys.readouterr().err


def test_bisect_without_suite_runs_the_smoke_suite(monkeypatch, capsys):
    from bench.regress import bisect as bs

    seen = {}

    class Found:
        def to_text(self):
            return "fake\n"

    def fake(good, bad, suite, target, **kw):
        seen.update(good=good, bad=bad, suite=str(suite), group=target.group)
        return Found()

    monkeypatch.setattr(bs, "bisect", fake)
    assert main(["bisect", "HEAD~4", "HEAD", "--group", "all_reduce"]) == 0, capsys.readouterr().err
    assert seen == {"good": "HEAD~4", "bad": "HEAD", "suite": AB_SUITE, "group": "all_reduce"}
    assert "default suites/smoke.toml" in _help("bisect")


# ---- 2. the internal bisect-step is not in the top-level help, and still runs -----------------

def test_bisect_step_is_hidden_but_callable():
    text = _help()
    assert "bisect-step" not in text and "git bisect run calls it" not in text and "SUPPRESS" not in text
    assert "bisect" in text
    args = build_parser().parse_args(["bisect-step", "spec.json"])
    assert args.spec == "spec.json" and callable(args.func)


# ---- 3. options that had no help, or hid their defaults ----------------------------------------

@pytest.mark.parametrize("kind", ["pipeline", "strategies"])
def test_seed_has_help_with_its_default(kind):
    assert re.search(r"--seed SEED .*default 0", _help(kind)), _help(kind)


def test_show_run_dir_has_help():
    text = _help("show")
    assert re.search(r"RUN_DIR +a run directory", text), text


def test_plan_chunks_and_top_state_their_defaults():
    text = _help("plan")
    assert re.search(r"--chunks CHUNKS .*\(default 1,2,4,8,16\)", text), text
    assert re.search(r"--top TOP .*\(default 5\)", text), text


# ---- 4. progress in any stream -----------------------------------------------------------------

class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_when_stderr_is_not_a_terminal_is_a_plain_line_per_case(monkeypatch):
    err = io.StringIO()  # a pipe, a CI log, `| tee`
    monkeypatch.setattr("sys.stderr", err)
    p = Progress(3)
    for k in ("a@1K", "a@4K", "a@16K"):
        p.tick(k)
    text = err.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 3 and text.endswith("\n")
    for n, (line, k) in enumerate(zip(lines, ("a@1K", "a@4K", "a@16K")), 1):
        assert line.startswith(f"[{n}/3] {k} done, elapsed ") and ", ETA " in line, line
    assert lines[-1].endswith("ETA 0 s")


def test_progress_on_a_terminal_is_the_carriage_return_line(monkeypatch):
    """Rewritten in place, and the cursor left at the start of the line: the case's table row that
    follows on stdout overwrites it instead of being appended after it (which, seen in a terminal,
    pushed every row right by the progress text and wrapped it)."""
    err = _Tty()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr("time.monotonic", lambda: 100.0)
    p = Progress(2)
    p.tick("a@1K")
    p.tick("a@4K")
    assert err.getvalue() == "\r\x1b[K[1/2] elapsed 0 s, ETA 0 s\r\r\x1b[K[2/2] elapsed 0 s, ETA 0 s\n"
