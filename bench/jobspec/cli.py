"""`distbench jobspec slurm|kubernetes|skypilot [options] -- distbench KIND ...`: write the job file to stdout
or to `--output FILE` (an existing file only with --force). Every check runs before anything is written."""

import argparse
import os
import shlex
import sys
from pathlib import Path

from bench.doctor.exclude import read_exclude
from bench.errors import BenchError
from bench.jobspec import emit, kubernetes, skypilot, slurm
from bench.jobspec.command import EXAMPLE, rank_command
from bench.jobspec.fabric import (FABRICS, GID_INDEX_DEFAULT, HCA_PLACEHOLDER, IFNAME_PLACEHOLDER, fabric_env,
                                  job_env)

TARGETS = ("slurm", "kubernetes", "skypilot")
DEFAULT_RESULTS = {"slurm": "results", "kubernetes": "/results", "skypilot": "results"}
DEFAULT_PORT = 29500

# One definition per option: a flag that several targets share has one help (tests/test_cli_vocabulary.py)
OPTIONS = {
    "--nodes": dict(type=int, required=True, metavar="N", help="number of nodes of the job (>= 1)"),
    "--gpus-per-node": dict(dest="gpus_per_node", type=int, required=True, metavar="G",
                            help="GPUs per node; one rank per GPU. 0: a CPU job of --tasks-per-node ranks a node"),
    "--tasks-per-node": dict(dest="tasks_per_node", type=int, metavar="T",
                             help="ranks per node of a CPU job (--gpus-per-node 0, or skypilot without "
                             "--accelerators); default 1"),
    "--job-name": dict(dest="job_name", default="distbench", metavar="NAME",
                       help="the job's name (Slurm job, JobSet, SkyPilot task); default distbench"),
    "--results": dict(metavar="DIR", help="directory the runs are written to: appended to the command as --out DIR "
                      "unless it has its own --out (default: results, under Kubernetes /results); Slurm writes its "
                      "log there too"),
    "--port": dict(metavar="PORT", help=f"rank 0's rendezvous port (default {DEFAULT_PORT}); slurm also takes "
                   "`job`: 20000 + the job id modulo 20000, for jobs that share nodes"),
    "--fabric": dict(choices=FABRICS, help="export the NCCL / libfabric variables this network needs (InfiniBand, "
                     "RoCE, AWS EFA, TCP sockets); docs/cluster.md says what each one does"),
    "--ifname": dict(metavar="NAMES", help=f"NCCL_SOCKET_IFNAME for --fabric, NCCL's syntax (ib0, =eth0, "
                     f"^docker,lo); default {IFNAME_PLACEHOLDER}, a placeholder: give the cluster's interface"),
    "--hca": dict(metavar="NAMES", help=f"NCCL_IB_HCA for --fabric ib / roce (mlx5_0:1,mlx5_1:1); default "
                  f"{HCA_PLACEHOLDER}, every port of every mlx5 card"),
    "--gid-index": dict(dest="gid_index", type=int, metavar="I",
                        help=f"NCCL_IB_GID_INDEX for --fabric roce; default {GID_INDEX_DEFAULT} (RoCE v2, IPv4)"),
    "--env": dict(action="append", default=[], metavar="NAME=VALUE",
                  help="export one more variable, or override one of --fabric's; repeat"),
    "--output": dict(metavar="FILE", help="file to write (default: stdout); an existing file only with --force"),
    "--force": dict(action="store_true", help="overwrite the --output file if it exists"),
    "--image": dict(metavar="IMAGE", help="container image the ranks run in, with distbench installed "
                    "(kubernetes: required; skypilot: resources.image_id docker:IMAGE)"),
}
SLURM = {
    "--partition": dict(metavar="NAME", help="#SBATCH --partition"),
    "--time": dict(metavar="TIME", help="#SBATCH --time, in Slurm's formats: MM, HH:MM:SS, D-HH:MM:SS, ..."),
    "--account": dict(metavar="NAME", help="#SBATCH --account"),
    "--exclusive": dict(action="store_true", help="#SBATCH --exclusive: no other job on the nodes"),
    "--container-image": dict(dest="container_image", metavar="IMAGE",
                              help="run each rank in this image with pyxis (srun --container-image); --results is "
                              "mounted at the same path"),
    "--exclude": dict(action="append", default=[], metavar="NODE,NODE",
                      help="#SBATCH --exclude: host names or hostlist expressions; repeat, or a comma list"),
    "--exclude-from": dict(dest="exclude_from", metavar="DOCTOR_RUN",
                           help="also exclude the nodes a `distbench doctor` run names (its run directory)"),
    "--srun-args": dict(dest="srun_args", default="", metavar="'OPTIONS'",
                        help="more srun options, one string: --srun-args='--cpu-bind=none --mpi=none'"),
}
KUBERNETES = {
    "--pvc": dict(metavar="CLAIM", help="a PersistentVolumeClaim (ReadWriteMany) mounted at --results; without "
                  "it the runs stay in the pods"),
    "--namespace": dict(metavar="NAME", help="the JobSet's namespace (default: kubectl's)"),
    "--cpu": dict(metavar="QUANTITY", help="CPU request of each pod, a Kubernetes quantity (e.g. 96)"),
    "--memory": dict(metavar="QUANTITY", help="memory request of each pod, a Kubernetes quantity (e.g. 1500Gi)"),
    "--resource": dict(action="append", default=[], metavar="NAME=COUNT",
                       help="one more resource limit per pod, e.g. vpc.amazonaws.com/efa=32; repeat"),
}
SKYPILOT = {
    "--accelerators": dict(metavar="TYPE:COUNT", help="resources.accelerators, TYPE:COUNT per node (H100:8); "
                           "one rank per GPU. Without it: a CPU task of --tasks-per-node ranks a node"),
    "--cloud": dict(metavar="CLOUD", help="resources.cloud (aws, gcp, azure, kubernetes, ...); default: any "
                    "SkyPilot may use"),
    "--setup": dict(metavar="COMMANDS", help="the task's setup commands, e.g. 'pip install -e .' with --workdir ."),
    "--workdir": dict(metavar="DIR", help="a local directory SkyPilot syncs to each node; run starts in it"),
}
TARGET_OPTIONS = {
    "slurm": ["--nodes", "--gpus-per-node", "--tasks-per-node", *SLURM],
    "kubernetes": ["--nodes", "--gpus-per-node", "--tasks-per-node", "--image", *KUBERNETES],
    "skypilot": ["--nodes", "--accelerators", "--tasks-per-node", "--cloud", "--image", "--setup", "--workdir"],
}
COMMON = ["--job-name", "--results", "--port", "--fabric", "--ifname", "--hca", "--gid-index", "--env", "--output",
          "--force"]
HELP = {"slurm": "an sbatch script: one task (rank) per GPU, srun with no wrapper",
        "kubernetes": "a JobSet manifest (jobset.x-k8s.io/v1alpha2): one pod per node, torchrun in each",
        "skypilot": "a SkyPilot task YAML: torchrun on every node from SkyPilot's variables"}


def add_parser(sub):
    p = sub.add_parser("jobspec", help="write the job file for a cluster you rent: a Slurm sbatch script, a "
                       "Kubernetes JobSet or a SkyPilot task, running a distbench command on every rank")
    targets = p.add_subparsers(dest="target", parser_class=type(p), required=True,
                               metavar="{" + ",".join(TARGETS) + "}")
    every = {**OPTIONS, **SLURM, **KUBERNETES, **SKYPILOT}
    for target in TARGETS:
        t = targets.add_parser(target, help=HELP[target], description=HELP[target])
        for flag in [*TARGET_OPTIONS[target], *COMMON]:
            t.add_argument(flag, **every[flag])
        t.add_argument("command", nargs=argparse.REMAINDER,
                       help=f"after `--`: the distbench command each rank runs, e.g. {EXAMPLE}")
        t.set_defaults(func=cmd_jobspec)
    return p


def _positive(flag: str, value: int, least: int = 1) -> int:
    if value < least:
        raise BenchError(f"jobspec: {flag} {value}: must be >= {least}")
    return value


def _ranks_per_node(args, gpus: int) -> int:
    if gpus and args.tasks_per_node is not None:
        raise BenchError(f"jobspec: --tasks-per-node {args.tasks_per_node} with {gpus} GPUs a node: a GPU job runs one "
                         "rank per GPU; leave --tasks-per-node out (or ask for 0 GPUs for a CPU job)")
    return gpus or _positive("--tasks-per-node", 1 if args.tasks_per_node is None else args.tasks_per_node)


def _port(args, target: str) -> str:
    value = str(DEFAULT_PORT) if args.port is None else args.port
    if target == "slurm" and value == slurm.PORT_FROM_JOB:
        return value
    if not value.isdigit() or not 1024 <= int(value) <= 65535:
        allowed = " or `job`" if target == "slurm" else ""
        raise BenchError(f"jobspec: --port {value}: allowed 1024 .. 65535{allowed}")
    return value


def render(args) -> str:
    """The job file's text, from the parsed options; BenchError (one line) on any bad input."""
    _positive("--nodes", args.nodes)
    env = tuple(job_env(fabric_env(args.fabric, args.ifname, args.hca, args.gid_index), args.env))
    port = _port(args, args.target)
    return {"slurm": _slurm, "kubernetes": _kubernetes, "skypilot": _skypilot}[args.target](args, env, port)


def _slurm(args, env, port: str) -> str:
    gpus = _positive("--gpus-per-node", args.gpus_per_node, 0)
    command, results = rank_command(args.command, args.results, DEFAULT_RESULTS["slurm"])
    doctor = read_exclude(args.exclude_from) if args.exclude_from else []
    job = slurm.SlurmJob(
        nodes=args.nodes, gpus_per_node=gpus, tasks_per_node=_ranks_per_node(args, gpus),
        job_name=slurm.check_word("--job-name", args.job_name),
        results=slurm.check_results(results, args.container_image),
        partition=args.partition and slurm.check_word("--partition", args.partition),
        account=args.account and slurm.check_word("--account", args.account),
        time=args.time and slurm.check_time(args.time), exclusive=args.exclusive,
        exclude=slurm.merge_exclude(args.exclude, doctor),
        container_image=_no_space("--container-image", args.container_image),
        srun_args=tuple(_split("--srun-args", args.srun_args)), port=port, env=env)
    return slurm.script(job, command)


def _kubernetes(args, env, port: str) -> str:
    gpus = _positive("--gpus-per-node", args.gpus_per_node, 0)
    if not args.image:
        raise BenchError("jobspec kubernetes: give --image, the container image with distbench installed")
    command, results = rank_command(args.command, args.results, DEFAULT_RESULTS["kubernetes"])
    if not results.startswith("/"):
        raise BenchError(f"jobspec: --results '{results}': under Kubernetes an absolute path in the container "
                         "(where --pvc is mounted), e.g. /results")
    job = kubernetes.KubernetesJob(
        nodes=args.nodes, gpus_per_node=gpus, tasks_per_node=_ranks_per_node(args, gpus),
        job_name=kubernetes.check_name("--job-name", args.job_name, kubernetes.pod_suffix(args.nodes)),
        image=_no_space("--image", args.image), results=results, port=int(port),
        pvc=args.pvc and kubernetes.check_object_name("--pvc", args.pvc),
        namespace=args.namespace and kubernetes.check_object_name("--namespace", args.namespace),
        cpu=args.cpu and kubernetes.check_quantity("--cpu", args.cpu),
        memory=args.memory and kubernetes.check_quantity("--memory", args.memory),
        resources=kubernetes.parse_resources(args.resource), env=env)
    return emit.dump(kubernetes.manifest(job, command))


def _skypilot(args, env, port: str) -> str:
    gpus = skypilot.parse_accelerators(args.accelerators)[1] if args.accelerators else 0
    command, _ = rank_command(args.command, args.results, DEFAULT_RESULTS["skypilot"])
    spec = skypilot.SkyPilotTask(
        nodes=args.nodes, accelerators=args.accelerators, tasks_per_node=_ranks_per_node(args, gpus),
        job_name=slurm.check_word("--job-name", args.job_name), port=int(port),
        cloud=args.cloud and skypilot.check_cloud(args.cloud), image=_no_space("--image", args.image),
        setup=args.setup, workdir=args.workdir, env=env)
    return emit.dump(skypilot.task(spec, command))


def _no_space(flag: str, value: str | None) -> str | None:
    if value is not None and (not value or any(c.isspace() for c in value)):
        raise BenchError(f"jobspec: {flag} '{value}': an image name without spaces")
    return value


def _split(flag: str, value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as e:
        raise BenchError(f"jobspec: {flag} '{value}': {e} (give the options as you would type them to srun)") from None


def write(text: str, output: str | None, force: bool) -> None:
    """stdout, or the file: created only if absent unless force (never half-written: a temporary file beside
    it, then renamed)."""
    if output is None:
        sys.stdout.write(text)
        return
    path = Path(output)
    if path.is_dir():
        raise BenchError(f"jobspec: --output {output} is a directory; give a file name")
    if path.exists() and not force:
        raise BenchError(f"jobspec: --output {output} exists; give --force to overwrite it, or another name")
    if not path.parent.is_dir():
        raise BenchError(f"jobspec: --output {output}: the directory {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def cmd_jobspec(args) -> int:
    text = render(args)
    write(text, args.output, args.force)
    if args.output:
        print(f"distbench: wrote {args.output}", file=sys.stderr)
    return 0
