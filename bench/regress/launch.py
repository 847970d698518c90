"""Fresh launches of a suite, for whatever judges or fits on them (the gate's confirmation runs and
baselines, the A/B gate, bisect, `plan --calibrate / --validate`): the one place that starts
`python -m bench KIND --suite S --out OUT` in a process of its own and finds the run it wrote, and
the one place that says in which order two sides launch.

The run a launch wrote is the path rank 0 prints after RESULTS_LINE (bench.harness.run.close_run),
never "the newest run under OUT": two launches writing under one root cannot be told apart by time.
"""

import subprocess
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.results.rundir import RESULTS_LINE


def interleaved(rounds: int, a="A", b="B", start: int = 0) -> list:
    """A B, B A, A B, ...: each side goes first in half the rounds, so a position effect (the second
    launch of a pair running on a warmer or busier machine) and linear drift cancel (docs/gate.md).
    start: rounds already run, which this sequence continues (the A/B's fresh pairs)."""
    return [arm for i in range(start, start + rounds) for arm in ((a, b) if i % 2 == 0 else (b, a))]


def _run(cmd: list[str], *, stream: bool, timeout_s: float | None, cwd, env) -> tuple:
    """(exit code, stdout, stderr). stream: show the launch's output as it runs (stderr is not
    captured then: ""), else keep both quiet and return them."""
    if not stream:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=cwd, env=env)
        return proc.returncode, proc.stdout, proc.stderr
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=cwd, env=env) as proc:
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line)
        rc = proc.wait(timeout=timeout_s)
    return rc, "".join(lines), ""


def run_suite(kind: str, suite_path, out, extra_args=(), timeout_s: float | None = 900, quiet: bool = True,
              ok_codes=(0,), cwd=None, env=None, stream: bool = False) -> Path:
    """`python -m bench <kind> --suite S --out OUT [extra]` in a fresh process; the run directory.
    ok_codes: exit codes accepted (the gate accepts 1, wrong results, and fails on them itself).
    cwd / env: where and with what environment (the A/B gate runs another revision's tree).
    quiet=False echoes the end of the launch's output afterwards; stream=True shows it as it runs."""
    cmd = [sys.executable, "-m", "bench", kind, "--suite", str(suite_path), *extra_args, "--out", str(out)]
    if stream:
        print(f"# launching: {' '.join(cmd[1:])}", flush=True)
    try:
        rc, stdout, stderr = _run(cmd, stream=stream, timeout_s=timeout_s, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        raise BenchError(f"`{' '.join(cmd)}` did not finish in {timeout_s:.0f} s") from None
    found = [ln[len(RESULTS_LINE):].strip() for ln in stdout.splitlines() if ln.startswith(RESULTS_LINE)]
    if not quiet and not stream:
        sys.stderr.write(stdout[-4000:])
    if not found or rc not in ok_codes:
        tail = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]
        what = "without a results directory" if not found else "(a failed run cannot be used)"
        raise BenchError(f"`{' '.join(cmd)}` exited {rc} {what}: {tail}")
    path = Path(found[-1])
    return path if path.is_absolute() or cwd is None else Path(cwd) / path
