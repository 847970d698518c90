"""Telemetry sampled during every benchmark case (NVML + host). Contract used by every runner:

    tel = telemetry.start(job, info, writer)        # every rank, collectively; writer is None off rank 0
    with tel.case(case_id, size_bytes=..., placement=...) as tc:   # every rank, collectively
        ... timed work ...
    row.update(tc.summary)                           # on rank 0: per-case summary columns
    tel.close()                                      # every rank, at the end of the launch (local)

Energy over the timed span (bench.telemetry.energy): inside the case, every rank calls
`tc.energy.start(devices)` where its timed span begins and `tc.energy.stop(ops=..., ...)` where it
ends; each rank reads the energy counter of its own GPUs itself (exact edges, no sampler), and the
records reach rank 0 with the case's samples (the `energy_*` summary columns).

One sampler thread per node, on local rank 0, samples the GPUs of that node's ranks (found by
UUID / PCI bus id, see nvml.py) and the host, from case entry to case exit. On a normal exit
the node samplers' samples go to rank 0 (one gather_object), which writes them to the
`telemetry` table through the RunWriter and puts the case summary in `tc.summary`. If the body
raises, no collective is made: the sampler stops and the error goes on.

Off (`--no-telemetry`, suite field `telemetry = false`, or Telemetry() with no job): every call
is a no-op, no collective is made, and summaries are empty (the columns stay null).
Config fields read (with these defaults where a kind lacks them): telemetry = True,
telemetry_interval_s = 0.1. See docs/telemetry.md.
"""

import os
import socket
import time
from contextlib import contextmanager

from bench.telemetry import energy, nvml
from bench.telemetry.host import HostProbe
from bench.telemetry.sampler import Sampler
from bench.telemetry.summary import long_rows, summarize


class _Case:
    def __init__(self, span: energy.Span | None = None):
        self.summary: dict = {}  # rank 0: summary columns; elsewhere empty
        self.rows: list[dict] = []  # rank 0: the long rows written for this case
        self.energy = span or energy.Span(None, 0)  # this rank's timed span (no-op when telemetry is off)


def _dist():
    import torch.distributed as dist  # lazy: a launch's ranks only (metadata imports nvml from here for every reader)

    return dist if dist.is_available() and dist.is_initialized() else None


def _all_gather(obj) -> list:
    dist = _dist()
    if dist is None:
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _gather_to_0(obj) -> list | None:
    dist = _dist()
    if dist is None:
        return [obj]
    rank = dist.get_rank()
    out = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


class Telemetry:
    def __init__(self, job=None, info=None, writer=None, *, nvml_module=None, psutil_module=None,
                 clock=time.time, use_nvml: bool = True, energy_clock=time.perf_counter):
        cfg = getattr(job, "config", None)
        self.enabled = job is not None and info is not None and bool(getattr(cfg, "telemetry", True))
        self.interval_s = float(getattr(cfg, "telemetry_interval_s", 0.1))
        self.writer, self.info, self.clock = writer, info, clock
        self.sampler = None
        self.node: dict = {}
        self._nv = None
        self.meter = None  # this rank's energy counters (bench.telemetry.energy), when enabled
        if job is not None and writer is not None and not self.enabled:
            writer.update_meta(lambda m: {**m, "telemetry": {"enabled": False, "why": "turned off (--no-telemetry)"}})
        if not self.enabled:
            return
        if self.interval_s <= 0:
            raise ValueError(f"telemetry_interval_s must be > 0, got {self.interval_s}")
        self.meter = energy.Meter(nvml_module, use_nvml, clock=energy_clock)
        self.meter.gpus([info.device])  # NVML loaded and this rank's GPU found now, not inside a case
        me = {"rank": info.rank, "local_rank": info.local_rank, "node_rank": info.node_rank,
              "host": socket.gethostname(), "pid": os.getpid(), "cuda": nvml.cuda_identity(info.device)}
        peers = _all_gather(me)
        if info.local_rank == 0:
            self._setup_node([p for p in peers if p["node_rank"] == info.node_rank], nvml_module,
                             psutil_module, use_nvml)
        nodes = _gather_to_0(self.node or None)
        if writer is not None:
            self._write_meta([n for n in nodes if n])

    def _setup_node(self, peers, nvml_module, psutil_module, use_nvml):
        pids = {p["rank"]: p["pid"] for p in peers}
        idents = [p["cuda"] for p in peers if p["cuda"]]
        gpus, mapping = [], []
        nv, status = nvml.load(nvml_module) if use_nvml else (None, "NVML: disabled")
        if nv is not None and not idents:
            status = "no CUDA device in use (ranks run on cpu)"
            nvml.shutdown(nv)
        elif nv is not None:
            self._nv = nv
            gpus, mapping, status = self._map_gpus(nv, peers, set(pids.values()))
        host = HostProbe(pids, psutil_module)
        self.sampler = Sampler(gpus, host, self.interval_s, clock=self.clock)
        self.node = {"host": peers[0]["host"] if peers else socket.gethostname(), "node_rank": self.info.node_rank,
                     "gpus": [g.uuid for g in gpus], "gpu_status": status, "mapping": mapping}

    @staticmethod
    def _map_gpus(nv, peers, pids):
        try:
            devices = nvml.nvml_devices(nv)
        except Exception as e:  # noqa: BLE001
            return [], [], f"NVML: cannot list devices: {nvml.reason(e)}"
        if not devices:
            return [], [], "NVML: no GPU"
        gpus, mapping, failed = {}, [], []
        for p in peers:
            if not p["cuda"]:
                continue
            dev, how = nvml.resolve(p["cuda"], devices)
            mapping.append({"rank": p["rank"], "cuda_index": p["cuda"]["cuda_index"], "cuda_uuid": p["cuda"]["uuid"],
                            "nvml_uuid": dev["uuid"] if dev else None, "name": dev["name"] if dev else None,
                            "matched_by": how if dev else None, "why": None if dev else how})
            if dev is None:
                failed.append(how)
            elif dev["uuid"] not in gpus:
                gpus[dev["uuid"]] = nvml.GpuProbe(nv, dev["handle"], dev["uuid"], pids)
        status = "" if gpus else "NVML: " + "; ".join(failed)
        return list(gpus.values()), mapping, status

    def _write_meta(self, nodes: list[dict]):
        gpu_why = "; ".join(dict.fromkeys(n["gpu_status"] for n in nodes if n["gpu_status"]))
        world = str(self.info.world)
        entry = {"nodes": nodes, "gpu_metrics": gpu_why or "ok"}

        def change(m):
            t = dict(m.get("telemetry", {}))
            return {**m, "telemetry": {**t, "enabled": True, "interval_s": self.interval_s,
                                       "gpu_metrics": gpu_why or "ok",
                                       "launches": {**t.get("launches", {}), world: entry}}}

        self.writer.update_meta(change)

    @contextmanager
    def case(self, case_id: str, **keys):
        tc = _Case(energy.Span(self.meter, self.info.rank) if self.enabled else None)
        if not self.enabled:
            yield tc
            return
        t0 = self.clock()
        if self.sampler is not None:
            self.sampler.start()
        try:
            yield tc
        except BaseException:
            if self.sampler is not None:
                self.sampler.stop()
            raise
        samples = self.sampler.stop() if self.sampler is not None else []
        t1 = self.clock()
        payload = None
        if self.sampler is not None:
            missing = {(g.uuid, k): v for g in self.sampler.gpus for k, v in g.missing.items()}
            missing.update({(None, k): v for k, v in self.sampler.host.missing.items()})
            payload = {**{k: v for k, v in self.node.items() if k != "mapping"}, "ticks": self.sampler.ticks,
                       "samples": samples, "missing": missing}
        got = _gather_to_0({"node": payload, "energy": tc.energy.record})
        if self.info.rank != 0:
            return
        nodes = [g["node"] for g in got if g["node"]]
        tc.summary = {**summarize(nodes, t0, t1, self.interval_s), **energy.summarize([g["energy"] for g in got])}
        run_id = self.writer.dir.name if self.writer is not None else None
        tc.rows = long_rows(nodes, run_id, case_id, keys, t0)
        if self.writer is not None and tc.rows:
            self.writer.write_case({"telemetry": tc.rows})

    def close(self):
        """Stop any sampler and release NVML; local, no collective."""
        if self.sampler is not None and self.sampler.running:
            self.sampler.stop()
        if self._nv is not None:
            nvml.shutdown(self._nv)
            self._nv = None
        if self.meter is not None:
            self.meter.close()
        self.enabled = False


def start(job, info, writer, **kwargs) -> Telemetry:
    return Telemetry(job, info, writer, **kwargs)
