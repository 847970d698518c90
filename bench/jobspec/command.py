"""The command each rank runs: what the user wrote after `--`, checked before any file is written.

It must start with `distbench`, a path ending in `/distbench`, or `PYTHON -m bench`, then name a benchmark
kind (`--debug` may come first). The launcher decides the world, so `--nproc` / `--world` are refused.
The results directory reaches it as `--out DIR` unless it has its own `--out`.
"""

import dataclasses
import re
from pathlib import PurePosixPath

from bench.errors import BenchError
from bench.kind import KINDS

EXAMPLE = "-- distbench collectives -c all_reduce --sizes 1M,64M"
PYTHON = re.compile(r"python[0-9.]*")  # python, python3, python3.11, /opt/venv/bin/python
WORLD_OPTIONS = ("--nproc", "--world")  # the launcher decides the world (bench.cli.configure)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankCommand:
    """`head` is how the user starts distbench (['distbench'], ['/opt/venv/bin/distbench'] or
    ['python3', '-m', 'bench']); `args` follow it: the kind and its options, `--out` included."""
    head: tuple[str, ...]
    args: tuple[str, ...]

    @property
    def argv(self) -> list[str]:
        return [*self.head, *self.args]

    def torchrun(self, launcher_args: list[str]) -> list[str]:
        """The same command under torchrun: `distbench` -> `torchrun`, `/x/bin/distbench` -> `/x/bin/torchrun`
        (the torchrun of that environment), `PY -m bench` -> `PY -m torch.distributed.run`; then
        `launcher_args -m bench` and the args (torchrun starts `python -m bench ...` on every local rank)."""
        if len(self.head) == 1:  # `distbench` or `.../distbench`: the torchrun beside it
            start = [self.head[0][:-len("distbench")] + "torchrun"]
        else:
            start = [self.head[0], "-m", "torch.distributed.run"]
        return [*start, *launcher_args, "-m", "bench", *self.args]


def out_of(args) -> str | None:
    """The value of `--out` / `--out=DIR` in args, else None."""
    for i, a in enumerate(args):
        if a == "--out" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--out="):
            return a.split("=", 1)[1]
    return None


def rank_command(command: list[str], results: str | None, default_results: str) -> tuple[RankCommand, str]:
    """(the checked command with --out, the results directory). `results` is --results (None: not given)."""
    command = command[1:] if command[:1] == ["--"] else list(command)
    if not command:
        raise BenchError(f"jobspec: no command after `--`; give the distbench command each rank runs, e.g. {EXAMPLE}")
    head_name = PurePosixPath(command[0]).name
    if head_name == "distbench":
        head, rest = command[:1], command[1:]
    elif PYTHON.fullmatch(head_name) and command[1:3] == ["-m", "bench"]:
        head, rest = command[:3], command[3:]
    else:
        raise BenchError(f"jobspec: the command after `--` starts with '{command[0]}'; it must start with "
                         f"`distbench`, a path ending in /distbench, or `python -m bench`, e.g. {EXAMPLE}")
    kind_at = 1 if rest[:1] == ["--debug"] else 0
    if len(rest) <= kind_at:
        raise BenchError(f"jobspec: the command `{' '.join(command)}` names no benchmark kind; allowed: "
                         f"{', '.join(KINDS.names())}")
    KINDS.get(rest[kind_at])  # an unknown kind: one line with a did-you-mean and the allowed kinds
    for a in rest:
        if a.split("=", 1)[0] in WORLD_OPTIONS:
            raise BenchError(f"jobspec: the command has '{a}'; under srun / torchrun the launcher decides the world "
                             "(--nodes and the ranks per node), so leave --nproc / --world out")
    own = out_of(rest)
    if own is not None and results is not None and own.rstrip("/") != results.rstrip("/"):
        raise BenchError(f"jobspec: the command writes to --out {own} but --results is {results}; give one of them")
    if own is not None:
        return RankCommand(head=tuple(head), args=tuple(rest)), own
    directory = results if results is not None else default_results
    return RankCommand(head=tuple(head), args=(*rest, "--out", directory)), directory
