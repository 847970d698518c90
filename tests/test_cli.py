"""bench/cli.py and bench/options.py: every kind and every reader command is a subcommand (a
module that fails to import is an error, not a missing subcommand); bad input is one line
naming the value and what is allowed, exit code 2, no traceback, nothing under results/ touched."""

import argparse
import json
import subprocess
import sys

import pytest

from bench import cli
from bench.cli import COMMANDS, build_parser, main
from bench.errors import BenchError
from bench.harness import KINDS
from conftest import ROOT, fake_eight_gpus, run_cli, torchrun_2x8


def _subcommands(parser) -> set[str]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(action.choices)


def _command_names(module) -> set[str]:
    sub = argparse.ArgumentParser().add_subparsers()
    module.add_parser(sub)
    return set(sub.choices)


def test_parser_has_every_kind_and_every_command():
    names = _subcommands(build_parser())
    assert KINDS.names() and set(KINDS.names()) <= names
    for module in COMMANDS:
        got = _command_names(module)
        assert got, f"{module.__name__} adds no subcommand"
        assert got <= names, module.__name__
    assert "list" in names


BROKEN_IMPORT = """
import importlib.abc, json, sys

class Broken(importlib.abc.MetaPathFinder):
    name = None

    def find_spec(self, name, path, target=None):
        if name == self.name:
            raise ImportError("broken on purpose: " + name)

finder = Broken()
sys.meta_path.insert(0, finder)
out = {}
for module in sys.argv[1:]:
    for m in [m for m in sys.modules if m == "bench" or m.startswith("bench.")]:
        del sys.modules[m]
    finder.name = module
    try:
        import bench.cli
        bench.cli.build_parser()
        out[module] = "imported"
    except ImportError as e:
        out[module] = str(e)
print(json.dumps(out))
"""


def test_a_module_that_fails_to_import_is_an_error():
    """The CLI imports every kind and command module at start-up: a broken one stops
    `distbench` with its ImportError instead of silently dropping its subcommand. (One
    interpreter, the bench modules dropped and re-imported with each module broken in turn.)"""
    modules = [*(k.module for k in KINDS), *(m.__name__ for m in COMMANDS)]
    p = subprocess.run([sys.executable, "-c", BROKEN_IMPORT, *modules], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {m: f"broken on purpose: {m}" for m in modules}


def test_list_shows_every_registered_unit(capsys):
    from bench.allreduce import REGISTRY as ALGORITHMS
    from bench.collectives import REGISTRY as COLLECTIVES
    from bench.training import REGISTRY as STRATEGIES

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = {tuple(line.split()[:2]) for line in lines}
    for what, registry in (("collective", COLLECTIVES), ("algorithm", ALGORITHMS), ("strategy", STRATEGIES),
                           ("kind", KINDS)):
        assert {(what, n) for n in registry.names()} <= shown, what


def test_malformed_suite_names_file_and_key(tmp_path, capsys):
    suite = tmp_path / "bad.toml"
    suite.write_text('kind = "collectives"\nname = "x"\nsizez = ["1K"]\n')
    assert main(["collectives", "--suite", str(suite), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"suite file '{suite}': unknown key 'sizez' (did you mean 'sizes'?)" in err
    suite.write_text('kind = "collectives"\nworld = "two"\n')
    assert main(["collectives", "--suite", str(suite)]) == 2
    assert f"suite file '{suite}': key 'world': expected an integer, got 'two'" in capsys.readouterr().err
    suite.write_text('kind = "collectives"\nworld = [2\n')
    assert main(["collectives", "--suite", str(suite)]) == 2
    assert "malformed TOML" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_existing_results_are_untouched(tmp_path, capsys):
    out = tmp_path / "results"
    (out / "collectives" / "old").mkdir(parents=True)
    keep = out / "collectives" / "old" / "results.parquet"
    keep.write_bytes(b"precious")
    assert main(["collectives", "--out", str(out), "-c", "nope"]) == 2
    assert keep.read_bytes() == b"precious"
    assert sorted(p.name for p in (out / "collectives").iterdir()) == ["old"]


def test_no_traceback_from_a_real_process(tmp_path):
    p = run_cli("collectives", "--sizes", "1Q", "--out", str(tmp_path))
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "Traceback" not in p.stderr
    assert p.stderr.startswith("distbench: error: bad size '1Q'")


def test_argparse_errors_are_one_line_too(capsys):
    assert main(["collectives", "--iters", "many"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid int value: 'many'" in err[0]


def test_world_list_and_launcher_world(monkeypatch, capsys, tmp_path):
    """--nproc 1,2 asks for two launches; under torchrun a different --nproc is refused."""
    kind = KINDS.get("collectives")
    args = build_parser().parse_args(["collectives", "--nproc", "1,2", "--sizes", "1K", "-c", "all_reduce"])
    cfg, backend, worlds = cli.configure(kind, args)
    assert worlds == (1, 2) and backend == "gloo"
    for k, v in {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "0",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(k, v)
    rc = main(["collectives", "--nproc", "2", "--sizes", "1K", "--out", str(tmp_path / "r")])
    assert rc == 2 and "does not match the launcher's world size 4" in capsys.readouterr().err


def _torchrun_2x8(monkeypatch, rank: int):
    """`torchrun --nnodes 2 --nproc-per-node 8` on a node of 8 GPUs (faked), global rank `rank`."""
    fake_eight_gpus(monkeypatch)
    for k, v in torchrun_2x8(rank).items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("name", KINDS.names())
def test_every_kind_takes_the_launchers_world_on_two_nodes_of_eight(name, monkeypatch, capsys):
    """Issue 12: each kind runs at the launcher's world 16 with nccl (was: 'needs 16 GPUs per node',
    or 'runs at world 2'); what cannot run there is left out or refused with the reason."""
    _torchrun_2x8(monkeypatch, 9)
    extra = {"pipeline": ["--stages", "16", "--chunks", "16", "--model", "mlp-large"]}.get(name, [])
    cfg, backend, worlds = cli.configure(KINDS.get(name), build_parser().parse_args([name, *extra]))
    assert backend == "nccl" and worlds == (16,)
    if name == "strategies":  # the suite's tp (4 heads) and pp (chunks 4 < 16 stages) cannot run at 16
        assert "ddp" in cfg.strategies and "pp" not in cfg.strategies
        assert "left out pp: schedule 1f1b needs chunks >= stages" in capsys.readouterr().err


def test_pipeline_suite_at_a_launcher_world_it_cannot_fill_says_what_to_pass(monkeypatch):
    _torchrun_2x8(monkeypatch, 0)
    with pytest.raises(BenchError, match=r"world 16 is not stages x tp of this suite: pp\(2\) = 2 != world\(16\); pass --stages 16"):
        cli.configure(KINDS.get("pipeline"), build_parser().parse_args(["pipeline"]))


def test_a_strategy_asked_for_alone_that_cannot_run_is_refused(monkeypatch):
    _torchrun_2x8(monkeypatch, 0)
    with pytest.raises(BenchError, match="1f1b needs chunks >= stages"):
        cli.configure(KINDS.get("strategies"), build_parser().parse_args(["strategies", "-s", "pp"]))
