"""Run metadata: what ran, where, with which software; stored as meta.json beside the tables."""

import os
import platform
import socket
import subprocess
import sys
import uuid
from datetime import datetime, timezone

import torch


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def git_info(cwd=None) -> dict:
    def git(*args):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)

    try:
        sha = git("rev-parse", "HEAD")
        if sha.returncode != 0:
            return {"git_sha": None, "git_dirty": None}
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return {"git_sha": sha.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"git_sha": None, "git_dirty": None}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nccl_env(env=os.environ) -> dict:
    return {k: v for k, v in sorted(env.items()) if k.startswith(("NCCL_", "TORCH_NCCL_"))}


def host_facts() -> dict:
    """This rank's host: gathered from every rank by the runner."""
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "uuid": str(getattr(p, "uuid", "")),
                         "total_memory_bytes": int(p.total_memory)})
    return {"host": socket.gethostname(), "cpu_model": cpu_model(), "cores": os.cpu_count(), "gpus": gpus}


def software() -> dict:
    nccl = None
    if torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - a torch built without NCCL
            nccl = None
    return {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": nccl, "platform": platform.platform()}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
