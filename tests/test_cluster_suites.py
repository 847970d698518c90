"""Suites ship as package data and resolve by name or path (issue 12), also from an installed
copy used outside the checkout."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.suite import resolve_suite, shipped_suites

ROOT = Path(__file__).resolve().parents[1]


def test_names_resolve_to_the_shipped_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the checkout: a relative 'suites/...' would not exist here
    assert resolve_suite("collectives", "collectives").read_text() == (ROOT / "suites/collectives.toml").read_text()
    assert resolve_suite("collectives-full.toml", "collectives").name == "collectives-full.toml"
    assert resolve_suite(None, "allreduce").name == "allreduce.toml"  # the kind's default
    assert {"collectives", "collectives-full"} <= set(shipped_suites("collectives"))
    assert "allreduce" not in shipped_suites("collectives")


def test_a_path_is_a_path(tmp_path, monkeypatch):
    own = tmp_path / "collectives.toml"  # same name as a shipped suite: the path wins
    own.write_text('kind = "collectives"\n')
    monkeypatch.chdir(tmp_path)
    assert resolve_suite("collectives.toml", "collectives") == Path("collectives.toml")
    assert resolve_suite(str(own), "collectives") == own
    assert resolve_suite(os.devnull, "collectives") == Path(os.devnull)


@pytest.mark.parametrize("value,message", [
    ("colectives", "unknown suite 'colectives' (did you mean 'collectives'?); shipped collectives suites: "),
    ("allreduce", "suite 'allreduce' is not a collectives suite"),
    ("nowhere/x.toml", "suite file 'nowhere/x.toml' not found; shipped collectives suites (by name): "),
])
def test_errors_list_the_shipped_names(value, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BenchError) as e:
        resolve_suite(value, "collectives")
    assert message in str(e.value) and "collectives-full" in str(e.value)


def test_a_real_install_ships_the_suites(tmp_path):
    """`pip install .` (not editable) into a target dir: the suites are inside, and resolve
    from another working directory."""
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "pyproject.toml", "README.md", "bench",
                            "suites"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        s, d = ROOT / f, src / f
        if not s.exists() and not s.is_symlink():
            continue
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_symlink():
            d.symlink_to(os.readlink(s))
        elif s.is_file():
            d.write_bytes(s.read_bytes())
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(target), str(src)], capture_output=True, text=True, timeout=300)
    if p.returncode != 0 and "No module named" in p.stderr:
        pytest.skip(f"pip/setuptools unavailable: {p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, p.stderr
    shipped = sorted(f.name for f in (target / "bench" / "suites").iterdir())
    assert shipped == sorted(f.name for f in (ROOT / "suites").glob("*.toml"))
    assert not (target / "bench" / "suites").is_symlink()  # real files in the install
    code = ("import bench.suite as s; p = s.resolve_suite('collectives-full', 'collectives'); "
            "print(s.__file__); print(p)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(target)},
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert out[0].startswith(str(target)) and out[1] == str(target / "bench" / "suites" / "collectives-full.toml")
