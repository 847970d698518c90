"""A SkyPilot task: `num_nodes` nodes, `resources`, an optional `setup`, and a `run` that starts torchrun on
every node from SkyPilot's own variables (SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS: one IP a line, the head
node's first; SKYPILOT_NUM_NODES, SKYPILOT_NUM_GPUS_PER_NODE), a static rendezvous at the head node.
"""

import dataclasses
import re
import shlex

from bench.errors import BenchError
from bench.jobspec.command import RankCommand

ACCELERATORS = re.compile(r"([A-Za-z0-9_.-]+)(?::([0-9]+))?")  # H100:8, A100-80GB:8, L4 (one)
CLOUD = re.compile(r"[A-Za-z0-9_-]+")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SkyPilotTask:
    nodes: int
    accelerators: str | None  # "H100:8"; None: a CPU task of tasks_per_node ranks a node
    tasks_per_node: int
    job_name: str
    port: int = 29500
    cloud: str | None = None
    image: str | None = None
    setup: str | None = None
    workdir: str | None = None
    env: tuple[tuple[str, str], ...] = ()


def parse_accelerators(value: str) -> tuple[str, int]:
    m = ACCELERATORS.fullmatch(value)
    if not m or (m.group(2) is not None and int(m.group(2)) < 1):
        raise BenchError(f"jobspec: --accelerators '{value}': give TYPE:COUNT per node, as SkyPilot does, "
                         "e.g. H100:8, A100-80GB:8, L4:1")
    return m.group(1), int(m.group(2) or 1)


def check_cloud(value: str) -> str:
    if not CLOUD.fullmatch(value):
        raise BenchError(f"jobspec: --cloud '{value}': a SkyPilot cloud name, e.g. aws, gcp, azure, kubernetes")
    return value


def run_script(spec: SkyPilotTask, command: RankCommand) -> str:
    """bash: the head node's IP, then torchrun on this node. SkyPilot's variables are expanded on the node;
    every word of the user's command is quoted as it was given."""
    nproc = '"$SKYPILOT_NUM_GPUS_PER_NODE"' if spec.accelerators else str(spec.tasks_per_node)
    plain = command.torchrun([])  # [*start, "-m", "bench", *args]
    start = plain[:len(plain) - len(command.args) - 2]
    return "\n".join([
        "set -euo pipefail",
        "# the head node's IP: the first line of SKYPILOT_NODE_IPS (as SkyPilot's distributed examples take it)",
        'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
        f'{shlex.join(start)} --nnodes "$SKYPILOT_NUM_NODES" --nproc-per-node {nproc} \\',
        f'  --node-rank "$SKYPILOT_NODE_RANK" --master-addr "$MASTER_ADDR" --master-port {spec.port} \\',
        "  -m bench " + shlex.join(command.args),
    ]) + "\n"


def task(spec: SkyPilotTask, command: RankCommand) -> dict:
    """The task YAML's data, in SkyPilot's field order: name, workdir, num_nodes, resources, envs, setup, run."""
    resources = {}
    if spec.cloud:
        resources["cloud"] = spec.cloud
    if spec.accelerators:
        resources["accelerators"] = spec.accelerators
    if spec.image:
        resources["image_id"] = f"docker:{spec.image}"
    out = {"name": spec.job_name}
    if spec.workdir:
        out["workdir"] = spec.workdir
    out["num_nodes"] = spec.nodes
    if resources:
        out["resources"] = resources
    if spec.env:
        out["envs"] = dict(spec.env)
    if spec.setup:
        out["setup"] = spec.setup if spec.setup.endswith("\n") else spec.setup + "\n"
    out["run"] = run_script(spec, command)
    return out
