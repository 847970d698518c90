"""Machine-class fingerprint: which results may be compared with which (docs/gate.md).

Two runs are comparable when these fields agree:

    device       cpu, or the GPU model (one name per node when they all agree)
    cores        CPU cores per node (CPU runs only; GPU runs carry gpus per node instead)
    gpus         GPUs per node (0 on CPU)
    nodes        hosts in the launch (the interconnect class: intra-node vs network)
    interconnect meta.json `interconnect`, else DISTBENCH_INTERCONNECT (e.g. "nvlink", "ib-ndr");
                 "" if neither is set (runs do not record it yet: set the variable where you gate)
    backend      gloo / nccl
    world        world size(s) of the run
    torch        torch major.minor
    nccl         NCCL major.minor ("" without NCCL)

The directory name of a baseline is the readable slug of these fields, e.g.
`cpu-amd-epyc-2c-gloo-w2-torch2.13` or `gpu-nvidia-h100-80gb-hbm3x8-2n-ib-ndr-nccl-w16-torch2.5-nccl2.21`.
"""

import os
import re
from dataclasses import asdict, dataclass, fields

from bench.results import metadata

FIELDS = ("device", "cores", "gpus", "nodes", "interconnect", "backend", "world", "torch", "nccl")


def _major_minor(version) -> str:
    m = re.match(r"(\d+)\.(\d+)", str(version or ""))
    return f"{m.group(1)}.{m.group(2)}" if m else ""


def _slug(text: str) -> str:
    s = re.sub(r"\(r\)|\(tm\)|cpu @.*$|processor", "", str(text).lower())
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return re.sub(r"-+", "-", s)[:48].strip("-") or "unknown"


@dataclass(frozen=True)
class Fingerprint:
    device: str  # "cpu" or the GPU model name
    cores: int  # CPU cores per node (the most any rank saw)
    gpus: int  # GPUs per node
    nodes: int
    interconnect: str
    backend: str
    world: str  # "2", or "2+4" for a run with several launches
    torch: str  # major.minor
    nccl: str  # major.minor, "" without NCCL
    cpu_model: str = ""  # part of the device class on CPU runs

    def slug(self) -> str:
        parts = []
        if self.device == "cpu":
            parts += ["cpu", _slug(self.cpu_model), f"{self.cores}c"]
        else:
            parts += ["gpu", f"{_slug(self.device)}x{self.gpus}"]
        if self.nodes > 1:
            parts.append(f"{self.nodes}n")
        if self.interconnect:
            parts.append(_slug(self.interconnect))
        parts += [self.backend, f"w{self.world}", f"torch{self.torch}"]
        if self.nccl:
            parts.append(f"nccl{self.nccl}")
        return "-".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Fingerprint":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def differences(a: Fingerprint, b: Fingerprint) -> list[str]:
    """Human-readable 'field: a vs b' for every field that differs (empty: comparable)."""
    out = []
    for f in (*FIELDS, "cpu_model"):
        va, vb = getattr(a, f), getattr(b, f)
        if f == "cpu_model" and a.device != "cpu":
            continue
        if va != vb:
            out.append(f"{f}: {va!r} vs {vb!r}")
    return out


def of_run(meta: dict) -> Fingerprint:
    """The fingerprint of a stored run, from its meta.json."""
    launches = list((meta.get("launches") or {}).values())
    ranks = [r for la in launches for r in la.get("ranks", [])]
    gpu_names = sorted({g.get("name", "") for r in ranks for g in r.get("gpus", []) if r.get("device", "cpu") != "cpu"})
    per_host_gpus: dict[str, set] = {}
    for r in ranks:
        for g in r.get("gpus", []):
            per_host_gpus.setdefault(r.get("host", ""), set()).add(g.get("uuid") or g.get("index"))
    uses_gpu = any(str(r.get("device", "cpu")).startswith("cuda") for r in ranks)
    software = meta.get("software") or {}
    backends = sorted({str(la.get("backend", "")) for la in launches} - {""})
    worlds = sorted({int(la.get("world", 0)) for la in launches if la.get("world")})
    cpu_models = sorted({r.get("cpu_model", "") for r in ranks} - {""})
    return Fingerprint(
        device="+".join(gpu_names) if uses_gpu and gpu_names else "cpu",
        cores=max((int(r.get("cores") or 0) for r in ranks), default=0),
        gpus=max((len(v) for v in per_host_gpus.values()), default=0) if uses_gpu else 0,
        nodes=max((int(la.get("nodes") or 1) for la in launches), default=1),
        interconnect=str(meta.get("interconnect") or os.environ.get("DISTBENCH_INTERCONNECT", "")),
        backend="+".join(backends) or "unknown",
        world="+".join(map(str, worlds)) or "0",
        torch=_major_minor(software.get("torch")),
        nccl=_major_minor(software.get("nccl")) if "nccl" in backends else "",
        cpu_model="+".join(cpu_models),
    )


def of_this_machine(worlds, backend: str | None = None) -> Fingerprint:
    """What a run on this host would be fingerprinted as (single node; before running anything)."""
    import torch  # lazy: CUDA facts of this host (the readers of stored runs do not import torch)

    cuda = torch.cuda.is_available()
    backend = backend if backend not in (None, "", "auto") else ("nccl" if cuda else "gloo")
    names = sorted({torch.cuda.get_device_properties(i).name for i in range(torch.cuda.device_count())}) if cuda else []
    soft = metadata.software()
    return Fingerprint(
        device="+".join(names) if cuda and names else "cpu",
        cores=os.cpu_count() or 0,
        gpus=torch.cuda.device_count() if cuda else 0,
        nodes=1,
        interconnect=os.environ.get("DISTBENCH_INTERCONNECT", ""),
        backend=backend,
        world="+".join(str(w) for w in sorted(set(worlds))),
        torch=_major_minor(soft.get("torch")),
        nccl=_major_minor(soft.get("nccl")) if backend == "nccl" else "",
        cpu_model=metadata.cpu_model(),
    )
