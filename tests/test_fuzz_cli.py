"""Fuzzing the CLI's parser, the suite loader and config validation (issue 11, "Bad input").

Any argv given to `distbench <kind> ...` (up to configure(), not the launch) and any suite file
must give either a valid config or a BenchError, which main() prints as one line with exit
code 2; no other exception, no traceback. The options are read from the parser itself, so an
option added later is fuzzed too.
"""

import argparse
import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bench import cli  # noqa: E402
from bench.errors import BenchError  # noqa: E402
from bench.harness import KINDS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Deterministic in CI (the same examples every run); DISTBENCH_FUZZ_EXAMPLES=2000 fuzzes afresh, longer.
_MORE = int(os.environ.get("DISTBENCH_FUZZ_EXAMPLES", "0"))
FAST = settings(max_examples=_MORE or 60, deadline=None, suppress_health_check=list(HealthCheck),
                derandomize=not _MORE, database=None)

PARSER = cli.build_parser()


def _subparser(kind: str) -> argparse.ArgumentParser:
    sub = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[kind]


def _options(kind: str) -> list[tuple[str, bool]]:
    """(long option, takes a value) for every option of the kind's subcommand but --help."""
    out = []
    for a in _subparser(kind)._actions:
        if isinstance(a, argparse._HelpAction) or not a.option_strings or a.help == argparse.SUPPRESS:
            continue  # an old spelling (bench.options.deprecated) parses as its new one, fuzzed already
        opt = max(a.option_strings, key=len)
        out.append((opt, a.nargs != 0))
    return out


KIND_NAMES = [k.name for k in KINDS]
OPTIONS = {k: _options(k) for k in KIND_NAMES}
# Options whose value names a file or a run: fuzzed separately (random names would only miss).
PATHS = {"--suite", "--out", "--resume"}

# Numbers of every shape: negative, zero, tiny, absurd, non-finite, not numbers at all.
NUMBER = st.one_of(
    st.integers(min_value=-10**6, max_value=10**6).map(str),
    st.sampled_from(["0", "-0", "-1", "-5", "1", "2", "3", "0.5", "1.0000001", "-2.5", "1e308", "1e-308",
                     "nan", "inf", "-inf", "1" * 30, "9" * 5000, "99999999999999999999G", "8G", "64M", "1K",
                     "0K", "-1K", "1.5M", "1KiB", "1 M", "0x10", "1_000", "", " ", ",", "1,,2", "2,0", "4,-4"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=2**31 - 2, max_value=2**70).map(str),
)
WORD = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12)
LIST = st.lists(st.one_of(NUMBER, WORD), min_size=1, max_size=4).map(",".join)
VALUE = st.one_of(NUMBER, NUMBER, LIST, WORD)


@st.composite
def argvs(draw, kind: str):
    opts = [o for o in OPTIONS[kind] if o[0] not in PATHS]
    chosen = draw(st.lists(st.sampled_from(opts), min_size=1, max_size=6, unique=True))
    argv = [kind]
    for opt, takes in chosen:
        argv.append(f"{opt}={draw(VALUE)}" if takes else opt)
    return argv


def _finite(cfg):
    """A config that passed validation has no NaN / infinite number in it (they crash later)."""
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        for x in v if isinstance(v, tuple) else (v,):
            if isinstance(x, float):
                assert math.isfinite(x), (f.name, v)


def _configure(argv, file_text: str = ""):
    """What `distbench <argv>` does up to the launch. Returns the config, or None for a BenchError.
    The message is one line unless it echoes a value that has a line break in it (main() prints
    it on one line: see test_main_prints_one_line)."""
    try:
        args = PARSER.parse_args(argv)
        kind = KINDS.get(argv[0])
        cfg, backend, worlds = cli.configure(kind, args)
    except BenchError as e:
        text = str(e).strip()
        assert text, "an empty error message"
        if "\n" in text or "\r" in text:
            echoed = [*argv, file_text]
            assert any(c in x for x in echoed for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), \
                f"not one line: {text!r}"
        return None
    _finite(cfg)
    assert worlds and all(isinstance(w, int) and w >= 1 for w in worlds)
    return cfg


@pytest.fixture(autouse=True)
def _no_launcher_env(monkeypatch, tmp_path):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
              "PMI_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)  # nothing a fuzzed --out / --suite names is near the checkout


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_fuzz_options(kind):
    @FAST
    @given(argvs(kind))
    def run(argv):
        _configure(argv)

    run()


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_fuzz_every_numeric_option_with_bad_numbers(kind):
    """Each option alone, with each of the classic bad numbers."""
    bad = ["-5", "0", "-1", "nan", "inf", "1e308", "9" * 5000, "99999999999999999999G", "", ",", "-0", "0.0"]
    for opt, takes in OPTIONS[kind]:
        if not takes or opt in PATHS:
            continue
        for v in bad:
            _configure([kind, f"{opt}={v}"])


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_fuzz_suite_and_path_options(kind, tmp_path):
    """--suite / --out / --resume with random names: a missing suite is a BenchError; --out and
    --resume are not touched before the launch."""
    @FAST
    @given(st.sampled_from([o for o, t in OPTIONS[kind] if o in PATHS and t]), WORD)
    def run(opt, value):
        _configure([kind, f"{opt}={value}"])

    run()


# ---- suite files -------------------------------------------------------------------------------

TOML_SCALAR = st.one_of(
    st.integers(min_value=-2**63, max_value=2**63 - 1), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), WORD, st.sampled_from(["1K", "-1K", "64M", "9" * 5000, "8G", "nan", "all", "gloo"]),
)
TOML_VALUE = st.one_of(TOML_SCALAR, st.lists(TOML_SCALAR, max_size=4))


def _toml_str(s: str) -> str:
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in s) + '"'


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    return "[" + ", ".join(_toml(x) for x in v) + "]"


def _fields(kind: str) -> list[str]:
    return [f.name for f in dataclasses.fields(KINDS.get(kind).config_class())]


@st.composite
def suites(draw, kind: str):
    names = _fields(kind) + ["kind", "bogus", "sizes", "world"]
    keys = draw(st.lists(st.sampled_from(names), max_size=6, unique=True))
    lines = []
    for k in keys:
        v = draw(st.sampled_from([kind, "collectives", "pipeline", 3])) if k == "kind" else draw(TOML_VALUE)
        lines.append(f"{k} = {_toml(v)}")
    if draw(st.booleans()):  # sometimes garbage: malformed TOML
        lines.append(draw(WORD))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_fuzz_suite_files(kind, tmp_path):
    path = tmp_path / "suite.toml"

    @FAST
    @given(suites(kind), st.one_of(st.none(), argvs(kind)))
    def run(text, argv):
        path.write_text(text, encoding="utf-8")
        _configure([*(argv or [kind]), f"--suite={path}"], text)

    run()


def test_suite_file_bytes_that_are_not_utf8(tmp_path):
    path = tmp_path / "suite.toml"
    path.write_bytes(b"kind = \"collectives\"\nname = \"\xff\xfe\"\n")
    assert _configure(["collectives", f"--suite={path}"]) is None
    d = tmp_path / "dir.toml"
    d.mkdir()
    assert _configure(["collectives", f"--suite={d}"]) is None


def test_negative_sizes_is_one_line_exit_2():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(k, None)
    p = subprocess.run([sys.executable, "-m", "bench", "collectives", "--sizes", "-5"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = (p.stdout + p.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("distbench: error:"), lines


def test_main_prints_one_line(capsys, monkeypatch):
    """A value with a line break in it still gives one line on stderr, exit 2 (bench.cli.main)."""
    monkeypatch.setattr(sys, "argv", ["distbench"])
    assert cli.main(["strategies", "--nproc=:\n2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("distbench: error:"), err


@pytest.mark.parametrize("argv, words", [
    (["collectives", "--timeout-s=inf"], "finite"),
    (["collectives", "--timeout-s=1e308"], "absurd"),
    (["collectives", "--sizes=" + "9" * 5000], "bad size"),
    (["collectives", "--max-bytes=99999999999999G"], "absurd"),
    (["collectives", "--step-factor=1e308", "--max-bytes=8G"], None),  # one size, no overflow
    (["collectives", "-b", "1", "-e", "8G", "--step-factor=1.0000001"], "4096 sizes"),
    (["collectives", "--dtypes=,"], "at least one"),
    (["strategies", "--strategies="], "at least one"),
    (["strategies", "--seed=" + str(2**70)], "absurd"),
    (["strategies", "--bucket-cap-mb=1e300"], "bucket_cap_mb"),
])
def test_fuzz_findings_stay_fixed(argv, words):
    """What fuzzing found (each crashed, hung or ran nothing before its fix)."""
    if words is None:
        assert _configure(argv) is not None
        return
    with pytest.raises(BenchError, match=words):
        cli.configure(KINDS.get(argv[0]), PARSER.parse_args(argv))
