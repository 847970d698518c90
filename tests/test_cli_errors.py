"""Bad input: one line naming the value and what is allowed, exit code 2, no traceback, and
nothing under results/ touched."""

import pytest

from bench.cli import main
from conftest import assert_usage_error, run_cli

CASES = [
    (["-c", "all_reduse"], "unknown collective 'all_reduse' (did you mean 'all_reduce'?)"),
    (["--sizes", "4X"], "bad size '4X'"),
    (["-b", "1M", "-e", "1K"], "min bytes 1048576 > max bytes 1024"),
    (["-f", "1"], "step factor 1.0 must be > 1"),
    (["--nproc", "0"], "world size 0 must be >= 1"),
    (["--nproc", "two"], "bad world size 'two'"),
    (["--backend", "nccl"], "backend 'nccl' needs CUDA"),
    (["--backend", "mpi"], "unknown backend 'mpi'"),
    (["--dtype", "float33"], "unknown dtype 'float33' (did you mean 'float32'?)"),
    (["--op", "avgg"], "unknown reduce op 'avgg' (did you mean 'avg'?)"),
    (["--mode", "latncy"], "unknown timing mode 'latncy' (did you mean 'latency'?)"),
    (["--root", "5", "--nproc", "2", "-c", "broadcast"], "root 5 is not a rank at world size 2"),
    (["--dtype", "int32", "--op", "avg", "-c", "all_reduce"], "backend gloo cannot do op 'avg' on int32"),
]


@pytest.mark.parametrize("argv,message", CASES, ids=[c[1][:30] for c in CASES])
def test_bad_input_is_one_line_exit_2(argv, message, tmp_path, capsys):
    out = tmp_path / "results"
    rc = main(["collectives", "--out", str(out), "--sizes", "1K", *argv] if "--sizes" not in argv and "-b" not in argv
              else ["collectives", "--out", str(out), *argv])
    assert_usage_error(rc, capsys.readouterr().err, message, out)


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
