"""The function every rank runs (under elastic_launch, torchrun or srun).

It sets up the rank (device, threads, process group with a finite timeout), records where it
runs, hands the cases to the runner of the job's kind, and writes what rank 0 collected.
"""

import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger("distbench")


@dataclass(frozen=True, kw_only=True)
class Job:
    kind: str  # collectives | allreduce | strategies | pipeline
    config: Any  # the kind's frozen config dataclass
    backend: str  # resolved: gloo | nccl
    world: int
    run_id: str | None  # None: rank 0 makes one (torchrun / Slurm)
    meta: dict = field(default_factory=dict)  # launcher-side facts (command line, git, notes)


# kind -> "module:function" run on every rank as fn(job, info, init_s) -> {"wrong", "run_id", "dir"}
RUNNERS = {
    "collectives": "bench.collectives.runner:run_all",
    "allreduce": "bench.allreduce.runner:run_all",
    "strategies": "bench.strategies.runner:run_all",
    "pipeline": "bench.strategies.runner:run_all",
}


def _runner(kind: str):
    import importlib

    mod, fn = RUNNERS[kind].split(":")
    return getattr(importlib.import_module(mod), fn)


def worker_main(job: Job) -> dict:
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch")
    t0 = time.perf_counter()
    from bench.distributed.env import init_rank

    info = init_rank(job.backend, job.config.timeout_s)
    init_s = time.perf_counter() - t0
    try:
        return _runner(job.kind)(job, info, init_s)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def rank_facts(info) -> dict:
    from bench.results.metadata import host_facts

    return {**host_facts(), "rank": info.rank, "local_rank": info.local_rank, "node_rank": info.node_rank,
            "threads": info.threads, "oversubscribed": info.oversubscribed,
            "device": str(info.device),
            "gpu_uuid": str(torch.cuda.get_device_properties(info.device).uuid)
            if info.device.type == "cuda" else None}


def shared_run_id(job: Job, info) -> str:
    """The launcher's run id, or one made by rank 0 and broadcast (torchrun / Slurm)."""
    from bench.results.metadata import new_run_id

    obj = [job.run_id or (new_run_id() if info.rank == 0 else None)]
    dist.broadcast_object_list(obj, src=0)
    return obj[0]


def start_meta(writer, job: Job, info, facts: list[dict], launch: dict):
    """Record this launch (one world size) in meta.json, keeping what earlier launches wrote."""
    from bench.results.metadata import nccl_env, software, utc_now

    hosts = sorted({f["host"] for f in facts})
    entry = {
        "world": info.world, "backend": info.backend, "nodes": len({f["node_rank"] for f in facts}),
        "node_ranks": sorted({f["node_rank"] for f in facts}), "hosts": hosts,
        "threads_per_rank": info.threads, "oversubscribed": any(f["oversubscribed"] for f in facts),
        "ranks": facts, "started_utc": utc_now(), "nccl_env": nccl_env(), **launch,
    }
    writer.update_meta(lambda m: {
        **{"software": software(), "suite": job.config.name, "kind": job.kind, "config": _plain(job.config)},
        **job.meta, **m, "run_id": writer.dir.name,
        "launches": {**m.get("launches", {}), str(info.world): entry},
    })


def _plain(cfg) -> dict:
    import dataclasses

    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}


@dataclass
class Launch:
    """What every runner needs first, on every rank: the warmed-up group, the shared run id and
    every rank's facts (hosts, node ranks, oversubscription)."""

    comm: Any
    first_s: float  # seconds of the first collective (lazy communicator creation)
    run_id: str
    facts: list

    @property
    def hosts(self) -> list:
        return [f["host"] for f in self.facts]

    @property
    def node_ranks(self) -> list:
        return [f["node_rank"] for f in self.facts]

    @property
    def nodes(self) -> int:
        return len(set(self.node_ranks))

    @property
    def oversubscribed(self) -> bool:
        return any(f["oversubscribed"] for f in self.facts)

    def base_row(self, info, suite: str, kind: str) -> dict:
        """The COMMON columns of bench.results.schema for this launch."""
        return {"run_id": self.run_id, "suite": suite, "kind": kind, "world": info.world, "nodes": self.nodes,
                "backend": info.backend, "device_type": info.device.type, "threads_per_rank": info.threads,
                "oversubscribed": self.oversubscribed, "degraded": "oversubscribed" if self.oversubscribed else ""}


def open_launch(job: Job, info) -> Launch:
    from bench.collectives.runner import Comm, warm_communicator

    comm = Comm(info)
    first_s = warm_communicator(comm)
    run_id = shared_run_id(job, info)
    return Launch(comm=comm, first_s=first_s, run_id=run_id, facts=comm.gather_object(rank_facts(info)))
