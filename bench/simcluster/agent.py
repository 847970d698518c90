"""torchrun as a simulated node runs it, with one line instead of the launcher's traceback.

`python -m bench.simcluster.agent TORCHRUN_ARGS...` is torch.distributed.run (the same parse_args
and run: torchrun's own agent, rendezvous and restarts), except how it ends when a worker fails:
torchrun's entry point raises ChildFailedError and Python prints its traceback and a failure table
on every node, after the rank has already said what went wrong in its own line. Here each failed
worker becomes one line, `distbench: simcluster: node1: rank 1 (local 0) exited 124`, and the agent
exits 1 as torchrun does; an agent stopped by a signal (simcluster stopping the other nodes after one
failed) exits 128 + the signal without a word. Its logger's own "failed (exitcode: ...)" and error-file lines are
quietened to CRITICAL: this line says the same. Any other error of the agent (a rendezvous that
never completes, bad arguments) is one line naming its type, exit 1.
"""

import logging
import socket
import sys

WORKER_LINE = "distbench: simcluster: {node}: rank {rank} (local {local}) exited {code}"
QUIET = ("torch.distributed.elastic.multiprocessing.api", "torch.distributed.elastic.multiprocessing.errors",
         "torch.distributed.elastic.multiprocessing.errors.error_handler")


def failure_lines(node: str, failures: dict) -> list[str]:
    """One line per failed worker, by global rank, from ChildFailedError.failures."""
    return [WORKER_LINE.format(node=node, rank=rank, local=f.local_rank, code=f.exitcode)
            for rank, f in sorted(failures.items())]


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException  # lazy: torch, only where the agent runs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError  # lazy: torch, as above
    from torch.distributed.run import parse_args, run  # lazy: torch, as above

    for name in QUIET:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    node = socket.gethostname()
    try:
        run(parse_args(argv))
    except ChildFailedError as e:
        for line in failure_lines(node, e.failures):
            print(line, file=sys.stderr, flush=True)
        return 1
    except SignalException as e:  # simcluster (or a person) stopped this node: its workers are stopped, nothing to say
        return 128 + int(e.sigval)
    except Exception as e:  # noqa: BLE001 - the agent's own failure, in one line
        print(f"distbench: simcluster: {node}: torchrun agent failed: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
