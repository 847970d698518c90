"""The sbatch script: one task (rank) per GPU, `srun <the rank command>`, no wrapper.

distbench reads srun's own variables on each task (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, and the first
host of SLURM_JOB_NODELIST as MASTER_ADDR: bench/distributed/env.py), so the script needs nothing but bash
and srun. `bash -n` checks it in tests/test_jobspec.py.
"""

import dataclasses
import re
import shlex

from bench.errors import BenchError
from bench.jobspec.command import RankCommand

# sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes,
# days-hours:minutes:seconds (the sbatch man page), or no limit
TIME_FORMATS = (r"\d+", r"\d+:[0-5]?\d", r"\d+:[0-5]?\d:[0-5]?\d", r"\d+-(?:[01]?\d|2[0-3])",
                r"\d+-(?:[01]?\d|2[0-3]):[0-5]?\d", r"\d+-(?:[01]?\d|2[0-3]):[0-5]?\d:[0-5]?\d")
TIME = re.compile("|".join(f"(?:{f})" for f in TIME_FORMATS) + "|UNLIMITED|INFINITE")
WORD = re.compile(r"[A-Za-z0-9_.+-]+(?:,[A-Za-z0-9_.+-]+)*")  # a partition, an account, a job name (comma lists)
HOST = re.compile(r"[A-Za-z0-9_.\[\]-]+")  # a host name or a hostlist expression: node[01-04]
PORT_FROM_JOB = "job"
PORT_FROM_JOB_SHELL = "$((20000 + SLURM_JOB_ID % 20000))"  # two jobs sharing a node get different ports


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlurmJob:
    nodes: int
    gpus_per_node: int
    tasks_per_node: int  # ranks per node: gpus_per_node, or the CPU job's --tasks-per-node
    job_name: str
    results: str  # the runs' directory: --out of the command and the home of the job's log
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    exclusive: bool = False
    exclude: tuple[str, ...] = ()
    container_image: str | None = None
    srun_args: tuple[str, ...] = ()
    port: str = "29500"  # a number, or PORT_FROM_JOB
    env: tuple[tuple[str, str], ...] = ()


def check_time(value: str) -> str:
    if not TIME.fullmatch(value):
        raise BenchError(f"jobspec: --time '{value}': allowed Slurm's formats MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, "
                         "D-HH:MM:SS (e.g. 90, 01:30:00, 1-12:00:00) or UNLIMITED")
    return value


def check_word(flag: str, value: str) -> str:
    if not WORD.fullmatch(value):
        raise BenchError(f"jobspec: {flag} '{value}': allowed letters, digits and . _ + - (a comma list where "
                         "Slurm takes one)")
    return value


def merge_exclude(given: list[str], from_doctor: list[str]) -> tuple[str, ...]:
    """--exclude (comma lists, repeatable) then the doctor run's nodes, each host once, in that order."""
    hosts: list[str] = []
    for item in [*given, *from_doctor]:
        for host in (h.strip() for h in item.split(",")):
            if not HOST.fullmatch(host):
                raise BenchError(f"jobspec: --exclude host '{host}': give host names or hostlist expressions "
                                 "(node2, node[05-07]), separated by commas")
            if host not in hosts:
                hosts.append(host)
    return tuple(hosts)


def check_results(results: str, container_image: str | None) -> str:
    if any(c.isspace() or c in "%$'\"\\" for c in results):
        raise BenchError(f"jobspec: --results '{results}': a literal directory path, without spaces, quotes, '$' or "
                         "'%' (sbatch expands no variable in --output and reads '%' as a pattern)")
    if container_image and not results.startswith("/"):
        raise BenchError(f"jobspec: --results '{results}' with --container-image: give an absolute path on the "
                         "shared filesystem (it is mounted at the same path inside the container)")
    return results


def script(job: SlurmJob, command: RankCommand) -> str:
    """The sbatch script, every line determined by the options."""
    ranks = job.nodes * job.tasks_per_node
    what = f"{job.gpus_per_node} GPU(s), one rank per GPU" if job.gpus_per_node else \
        f"{job.tasks_per_node} CPU rank(s)"
    lines = ["#!/bin/bash",
             f"# distbench jobspec slurm: {job.nodes} node(s) x {what}: {ranks} ranks.",
             f"# Submit with `sbatch FILE` after `mkdir -p {job.results}` (sbatch writes its log there).",
             f"#SBATCH --job-name={job.job_name}",
             f"#SBATCH --nodes={job.nodes}",
             f"#SBATCH --ntasks-per-node={job.tasks_per_node}"]
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    for flag, value in (("partition", job.partition), ("account", job.account), ("time", job.time)):
        if value is not None:
            lines.append(f"#SBATCH --{flag}={value}")
    if job.exclusive:
        lines.append("#SBATCH --exclusive")
    if job.exclude:
        lines.append(f"#SBATCH --exclude={','.join(job.exclude)}")
    # a benchmark half run on a node that failed is not started again on its own: its finished cases are
    # kept, and `--resume RUN_ID` in a new job completes it (a requeued job would start a new run)
    lines.append("#SBATCH --no-requeue")
    lines += [f"#SBATCH --output={job.results}/slurm-%j.out",
              "set -euo pipefail",
              "",
              "# Each task is one rank: distbench reads SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS, and takes",
              "# MASTER_ADDR from the first host of SLURM_JOB_NODELIST.",
              f"export MASTER_PORT={PORT_FROM_JOB_SHELL if job.port == PORT_FROM_JOB else job.port}"]
    if job.env:
        lines.append("# the network's variables (--fabric, --env): docs/cluster.md says what each one does")
        lines += [f"export {name}={shlex.quote(value)}" for name, value in job.env]
    srun = ["srun", "--kill-on-bad-exit=1"]
    if job.container_image:
        srun += [f"--container-image={job.container_image}", f"--container-mounts={job.results}:{job.results}"]
    srun += job.srun_args
    lines += ["", shlex.join([*srun, *command.argv])]
    return "\n".join(lines) + "\n"
