"""The command after `distbench simcluster ... --`, as the launcher on each node runs it."""

import re
from pathlib import Path

from bench.errors import BenchError


def inner_argv(command: list[str]) -> list[str]:
    """What torchrun runs, from the command after `--`: `distbench KIND ...` and `python -m MOD ...`
    become `-m bench KIND ...` / `-m MOD ...`; a script `x.py ...` stays as it is."""
    if not command:
        raise BenchError("simcluster: no command after `--`; e.g. distbench simcluster --nodes 2 --link 500mbit "
                         "-- distbench collectives -c all_reduce --sizes 1M")
    head, rest = command[0], command[1:]
    if Path(head).name == "distbench" or command[:3] == ["python", "-m", "bench"]:
        rest = rest if Path(head).name == "distbench" else rest[2:]
        if rest[:1] == ["simcluster"]:
            raise BenchError("simcluster: the command inside a simulated cluster cannot be simcluster itself")
        return ["-m", "bench", *rest]
    if re.fullmatch(r"python[0-9.]*", Path(head).name) and len(rest) >= 2 and rest[0] == "-m":
        return ["-m", *rest[1:]]
    if head.endswith(".py"):
        return command
    raise BenchError(f"simcluster: cannot run '{head}' under torchrun; give `distbench KIND ...`, "
                     "`python -m MODULE ...` or a script `path.py ...`")
