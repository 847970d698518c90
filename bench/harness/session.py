"""One launch's shared state on every rank: the warmed-up group, the run id every rank agrees
on, every rank's facts, and what the launch records in meta.json."""

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from bench.distributed.comm import Comm, warm_communicator
from bench.distributed.env import RankInfo
from bench.results.metadata import cluster_facts, host_facts, nccl_env, new_run_id, software, utc_now


@dataclass(frozen=True, kw_only=True)
class Job:
    """What the launcher hands every rank: one launch of one run."""

    kind: Any  # the bench.harness.Kind (module-level functions: it pickles by reference)
    config: Any  # the kind's frozen config dataclass
    backend: str  # resolved: gloo | nccl
    world: int
    run_id: str | None  # None: rank 0 makes one (torchrun / Slurm)
    meta: dict = dataclasses.field(default_factory=dict)  # launcher-side facts (command line, git, notes)
    launch_key: str = ""  # meta.json `launches` key; "" = str(world)
    part_prefix: str = ""  # prefix of this launch's part files; "" = f"w{world}-"
    skip: frozenset = frozenset()  # unit keys already on disk (--resume, --keep-going)


def rank_facts(info: RankInfo) -> dict:
    return {**host_facts(), "rank": info.rank, "local_rank": info.local_rank, "node_rank": info.node_rank,
            "threads": info.threads, "oversubscribed": info.oversubscribed, "device": str(info.device),
            "gpu_uuid": str(torch.cuda.get_device_properties(info.device).uuid)
            if info.device.type == "cuda" else None}


def shared_run_id(job: Job, info: RankInfo) -> str:
    """The launcher's run id, or one made by rank 0 and broadcast (torchrun / Slurm)."""
    obj = [job.run_id or (new_run_id() if info.rank == 0 else None)]
    dist.broadcast_object_list(obj, src=0)
    return obj[0]


@dataclass
class Launch:
    """What every kind's measure() gets: the rank, the warmed-up group, the run id, every rank's
    facts, the telemetry window and the COMMON columns of this launch's rows."""

    info: RankInfo
    comm: Comm
    first_s: float  # seconds of the first collective (lazy communicator creation)
    init_s: float  # seconds of init_process_group
    run_id: str
    facts: list
    job: Job
    tel: Any = None  # bench.telemetry.Telemetry: `with launch.tel.case(case_id, **keys) as tc`

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

    @property
    def oversubscribed_note(self) -> str:
        """The one wording of the oversubscription flag (rows, meta.json notes, summaries)."""
        i = self.info
        return (f"OVERSUBSCRIBED at world {i.world}: {i.local_world} ranks x {i.threads} thread(s) on {i.cores} "
                "cores; times include time-sharing of the cores, not only the work measured")

    def describe(self) -> str:
        i = self.info
        return (f"world={i.world} nodes={self.nodes} backend={i.backend} device={i.device.type} "
                f"threads/rank={i.threads}{' OVERSUBSCRIBED' if self.oversubscribed else ''}")

    def base_row(self) -> dict:
        """The COMMON columns of bench.results.schema for this launch."""
        i = self.info
        return {"run_id": self.run_id, "suite": self.job.config.name, "kind": self.job.kind.name, "world": i.world,
                "nodes": self.nodes, "backend": i.backend, "device_type": i.device.type, "threads_per_rank": i.threads,
                "oversubscribed": self.oversubscribed, "degraded": "oversubscribed" if self.oversubscribed else ""}


def open_launch(job: Job, info: RankInfo, init_s: float) -> Launch:
    """Every rank, collectively: warm the group up, agree on the run id, gather every rank's facts."""
    comm = Comm(info)
    first_s = warm_communicator(comm)
    run_id = shared_run_id(job, info)
    return Launch(info=info, comm=comm, first_s=first_s, init_s=init_s, run_id=run_id,
                  facts=comm.gather_object(rank_facts(info)), job=job)


def plain(cfg) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}


def start_meta(writer, launch: Launch, key: str, facts: dict):
    """Record this launch in meta.json under `key`, keeping what earlier launches wrote."""
    job, info = launch.job, launch.info
    entry = {
        "world": info.world, "backend": info.backend, "nodes": launch.nodes,
        "node_ranks": sorted(set(launch.node_ranks)), "hosts": sorted(set(launch.hosts)),
        "threads_per_rank": info.threads, "oversubscribed": launch.oversubscribed, "ranks": launch.facts,
        "started_utc": utc_now(), "nccl_env": nccl_env(), "init_process_group_s": launch.init_s,
        "first_collective_s": launch.first_s, **facts,
    }
    writer.update_meta(lambda m: {
        **{"software": software(), "cluster": cluster_facts(), "suite": job.config.name, "kind": job.kind.name, "config": plain(job.config)},
        **job.meta, **m, "run_id": writer.dir.name,
        "launches": {**m.get("launches", {}), key: {**entry, "done": m.get("launches", {}).get(key, {}).get("done", [])}},
    })


def finish_meta(writer, key: str, **facts):
    """Mark launch `key` finished in meta.json, with its totals."""
    writer.run.finish_launch(key, **facts)
