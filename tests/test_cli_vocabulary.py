"""One option vocabulary across every subcommand (bench.options.VOCABULARY): a flag name means one
thing wherever it appears, every option has help, --format's choices are enumerated, and every old
spelling still parses as its new one with a one-line note. The walk covers every subcommand
build_parser() has, so a new one is checked as soon as it is registered."""

import argparse
import collections
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.cli import build_parser, main
from bench.options import VOCABULARY, _Deprecated

ROOT = Path(__file__).resolve().parents[1]


def walk(parser, path=()):
    """(subcommand path, its parser) for the top level and every subcommand, recursively."""
    yield path, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from walk(sub, (*path, name))


def options(deprecated=False):
    """(path, action) of every option (not -h), the deprecated aliases only when asked."""
    for path, p in walk(build_parser()):
        for a in p._actions:
            if a.option_strings and not isinstance(a, argparse._HelpAction) \
                    and isinstance(a, _Deprecated) == deprecated:
                yield path, p, a


def test_the_walk_reaches_every_subcommand():
    paths = {" ".join(path) for path, _ in walk(build_parser())}
    assert {"collectives", "allreduce", "pipeline", "strategies", "report", "runs", "show", "history", "bisect",
            "baseline record", "baseline update", "gate", "compare", "export", "import nccl-tests", "plan",
            "telemetry-overhead", "simcluster", "doctor"} <= paths


def test_one_meaning_per_flag_name():
    """A flag that two subcommands define differently is in VOCABULARY, with its meaning in every help."""
    seen = collections.defaultdict(list)
    for path, _, a in options():
        for flag in a.option_strings:
            seen[flag].append((" ".join(path), a.dest, a.help))
    problems = []
    for flag, uses in sorted(seen.items()):
        if len({(dest, help_) for _, dest, help_ in uses}) > 1 and flag not in VOCABULARY:
            problems.append(f"{flag} has several definitions but no entry in bench.options.VOCABULARY: {uses}")
        if flag in VOCABULARY:
            problems += [f"{flag} in '{cmd}' does not say '{VOCABULARY[flag]}': {help_!r}" for cmd, _, help_ in uses
                         if VOCABULARY[flag].lower() not in (help_ or "").lower()]
            if len({dest.rstrip("s") for _, dest, _ in uses}) > 1:  # one field (singular or plural) per name
                problems.append(f"{flag} sets different fields: {sorted({d for _, d, _ in uses})}")
    assert problems == []
    assert sorted(set(VOCABULARY) - set(seen)) == []  # the table names only flags in use


@pytest.mark.parametrize("flag,meaning", [("--out", "results root"), ("--output-dir", "directory"),
                                          ("--output", "file")])
def test_the_output_names(flag, meaning):
    """--out is always a results root (writers and readers), a report or plot directory --output-dir,
    a single file --output; no old name of these stays in use, and `-o` is only export's --output."""
    assert VOCABULARY[flag] == meaning
    used = {o: a for _, _, a in options() for o in a.option_strings}
    assert not {"--root", "--keep", "--json", "--interval-s", "--roots"} & set(used)
    assert [(" ".join(path)) for path, _, a in options() if "-o" in a.option_strings] == ["export"]


def test_every_option_has_help():
    missing = [f"{' '.join(path)} {a.option_strings}" for path, _, a in options() if not a.help]
    assert missing == []
    # help=SUPPRESS (left out of --help) only for the old spellings
    hidden = [f"{' '.join(path)} {a.option_strings}" for path, _, a in options() if a.help == argparse.SUPPRESS]
    assert hidden == []
    positionals = [f"{' '.join(path)} {a.dest}" for path, p in walk(build_parser()) for a in p._actions
                   if not a.option_strings and not isinstance(a, argparse._SubParsersAction) and not a.help]
    assert positionals == []


def test_format_choices_are_enumerated():
    formats = [(" ".join(path), a.choices) for path, _, a in options() if "--format" in a.option_strings]
    assert len(formats) >= 8
    assert [cmd for cmd, choices in formats if not choices] == []


def test_a_bad_format_is_one_line(capsys):
    assert main(["runs", "--format", "xml"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("distbench: error: argument --format: invalid choice: 'xml'")


def _required(p):
    """argv that satisfies a subcommand's required options and positionals."""
    argv = []
    for a in p._actions:
        if a.option_strings and a.required:
            argv += [a.option_strings[0], "1"]
        elif not a.option_strings and a.nargs not in ("*", "?", argparse.REMAINDER) \
                and not isinstance(a, argparse._SubParsersAction):
            argv += ["X"] * (a.nargs if isinstance(a.nargs, int) else 1)
    return argv


DEPRECATED = [(path, p, a) for path, p, a in options(deprecated=True)]


def test_the_old_spellings_are_listed():
    old = {(" ".join(path), a.option_strings[0], a.use) for path, _, a in DEPRECATED}
    assert {("report", "--root", "--out"), ("report", "-o", "--output-dir"), ("runs", "--root", "--out"),
            ("history", "--root", "--out"), ("history", "-o", "--output-dir"), ("bisect", "--keep", "--out"),
            ("baseline record", "--root", "--baseline-root"), ("baseline update", "--root", "--baseline-root"),
            ("collectives", "--root", "--root-rank"), ("collectives", "--roots", "--root-ranks"),
            ("collectives", "--profile", "--profile-size"), ("allreduce", "--profile", "--profile-size"),
            ("telemetry-overhead", "--interval-s", "--telemetry-interval-s"),
            ("telemetry-overhead", "--json", "--format json --output FILE")} <= old


@pytest.mark.parametrize("path,parser,alias", DEPRECATED,
                         ids=[f"{' '.join(path)} {a.option_strings[0]}" for path, _, a in DEPRECATED])
def test_an_old_spelling_parses_as_the_new_one_with_a_note(path, parser, alias, capsys):
    value = [] if alias.nargs == 0 else ["7"]
    base = _required(parser)
    old = parser.parse_args([*base, alias.option_strings[0], *value])
    err = capsys.readouterr().err
    assert err == f"distbench: note: {alias.option_strings[0]} is deprecated, use {alias.use}\n"
    if alias.use in parser._option_string_actions:  # one new option: the same namespace
        assert vars(old) == vars(parser.parse_args([*base, alias.use, *value]))
        assert capsys.readouterr().err == ""
    else:
        assert getattr(old, alias.dest) == "7"
    assert alias.option_strings[0] not in parser.format_help().split()


def test_old_spellings_work_end_to_end(tmp_path, capsys):
    """`runs --root DIR` still lists DIR (an empty results root), with the note first."""
    (tmp_path / "results").mkdir()
    assert main(["runs", "--root", str(tmp_path / "results")]) == 0
    out, err = capsys.readouterr()
    assert err == "distbench: note: --root is deprecated, use --out\n"
    assert f"under {tmp_path / 'results'}" in out


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_targets_use_the_vocabulary():
    """`make gpu-smoke ARGS=...` passes ARGS on; `make bench` reports on the results root with --out."""
    def dry(*argv):
        return subprocess.run(["make", "-n", "--no-print-directory", *argv, "PYTHON_BIN=python"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout

    assert "python tools/gpu_smoke.py --checks plan --out x" in dry("gpu-smoke", "ARGS=--checks plan --out x")
    assert "python -m bench report --out results" in dry("bench")
