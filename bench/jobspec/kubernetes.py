"""A JobSet (kubernetes-sigs/jobset, jobset.x-k8s.io/v1alpha2): one pod per node, torchrun in each.

Why JobSet: it needs only the JobSet controller, and its headless service gives every pod a stable DNS
name, `<jobset>-<replicatedJob>-<job index>-<pod index>.<jobset>` (spec.network.enableDNSHostnames), so the
first pod's name is the rendezvous endpoint before any pod runs: torchrun's c10d rendezvous needs nothing
else. The pods of the one replicated job are an Indexed Job of N completions (parallelism N).
"""

import dataclasses
import re

from bench.errors import BenchError
from bench.jobspec.command import RankCommand

API_VERSION = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "workers"
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # RFC 1035: the JobSet's headless service is named after it
RFC1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # a namespace's or a claim's name
QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")  # Kubernetes resource.Quantity
RESOURCE_NAME = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource


@dataclasses.dataclass(frozen=True, kw_only=True)
class KubernetesJob:
    nodes: int
    gpus_per_node: int
    tasks_per_node: int
    job_name: str
    image: str
    results: str  # an absolute path in the container: --out, and where --pvc is mounted
    port: int = 29500
    pvc: str | None = None
    namespace: str | None = None
    cpu: str | None = None
    memory: str | None = None
    resources: tuple[tuple[str, str], ...] = ()  # extra limits, e.g. (vpc.amazonaws.com/efa, 32)
    env: tuple[tuple[str, str], ...] = ()


def check_name(flag: str, value: str, longest_suffix: str = "") -> str:
    """A DNS label of at most 63 characters, with the longest suffix Kubernetes adds to it."""
    if not DNS_LABEL.fullmatch(value) or len(value + longest_suffix) > 63:
        extra = f" (with '{longest_suffix}' added for the last pod's host name)" if longest_suffix else ""
        raise BenchError(f"jobspec: {flag} '{value}': a Kubernetes name: lower-case letters, digits and '-', starting "
                         f"with a letter, at most 63 characters{extra}")
    return value


def check_object_name(flag: str, value: str) -> str:
    if not RFC1123_LABEL.fullmatch(value) or len(value) > 63:
        raise BenchError(f"jobspec: {flag} '{value}': a Kubernetes name: lower-case letters, digits and '-', "
                         "at most 63 characters")
    return value


def pod_suffix(nodes: int) -> str:
    return f"-{REPLICATED_JOB}-0-{nodes - 1}"


def check_quantity(flag: str, value: str) -> str:
    if not QUANTITY.fullmatch(value):
        raise BenchError(f"jobspec: {flag} '{value}': a Kubernetes quantity, e.g. 32, 500m, 256Gi")
    return value


def parse_resources(items: list[str]) -> tuple[tuple[str, str], ...]:
    out = {}
    for item in items:
        name, eq, count = item.partition("=")
        if not eq or not RESOURCE_NAME.fullmatch(name) or not QUANTITY.fullmatch(count):
            raise BenchError(f"jobspec: --resource '{item}': give NAME=COUNT, e.g. vpc.amazonaws.com/efa=32, "
                             "rdma/ib=1")
        if name == GPU_RESOURCE:
            raise BenchError(f"jobspec: --resource '{item}': {GPU_RESOURCE} comes from --gpus-per-node")
        out[name] = count
    return tuple(out.items())


def master_host(job: KubernetesJob) -> str:
    """The first pod's DNS name through the JobSet's headless service (named after the JobSet)."""
    return f"{job.job_name}-{REPLICATED_JOB}-0-0.{job.job_name}"


def _escape(arg: str) -> str:
    """Kubernetes expands $(VAR) in a container's command; `$$` keeps a literal `$`."""
    return arg.replace("$(", "$$(")


def manifest(job: KubernetesJob, command: RankCommand) -> dict:
    launcher = ["--nnodes", str(job.nodes), "--nproc-per-node", str(job.tasks_per_node),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{master_host(job)}:{job.port}",
                "--rdzv-id", job.job_name]
    limits = {GPU_RESOURCE: job.gpus_per_node} if job.gpus_per_node else {}
    limits.update(dict(job.resources))
    requests = {k: v for k, v in (("cpu", job.cpu), ("memory", job.memory)) if v is not None}
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    # /dev/shm from memory: NCCL's shared-memory transport needs more than a container's default 64 MiB
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    if job.pvc:
        mounts.append({"name": "results", "mountPath": job.results})
        volumes.append({"name": "results", "persistentVolumeClaim": {"claimName": job.pvc}})
    container = {"name": "distbench", "image": job.image,
                 "command": [_escape(a) for a in command.torchrun(launcher)],
                 "env": [{"name": "PYTHONUNBUFFERED", "value": "1"},
                         *({"name": k, "value": v} for k, v in job.env)],
                 "ports": [{"containerPort": job.port, "name": "rendezvous"}],
                 "volumeMounts": mounts}
    if resources:
        container["resources"] = resources
    metadata = {"name": job.job_name}
    if job.namespace:
        metadata["namespace"] = job.namespace
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": 0},  # a failed rank fails the run: a benchmark is not restarted
            "replicatedJobs": [{
                "name": REPLICATED_JOB,
                "replicas": 1,
                "template": {"spec": {
                    "parallelism": job.nodes,
                    "completions": job.nodes,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container], "volumes": volumes}},
                }},
            }],
        },
    }
