"""Capability probe: which (collective, dtype, op) a backend refuses, found before timing.

An error raised inside a live gloo group can hang the group's next collective, and a crash takes
the rank down, so we probe in a separate process at world size 1 with a private store, one
combination at a time, and cache the answer per (torch version, backend). NCCL is not probed:
it implements every op for every dtype we offer (PREMUL_SUM is not offered).

Run as `python -m bench.collectives.probe` with a JSON list of [collective, dtype, op] on stdin; prints
one JSON line per combination: [collective, dtype, op, null | "reason"].
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

PROBE_TIMEOUT_S = 120


def _cache_path(backend: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "distbench"
    return base / f"probe-{backend}-torch{torch.__version__}.json"


def _load_cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _key(combo) -> str:
    return "|".join(combo)


def unsupported(backend: str, combos: list[tuple[str, str, str]]) -> dict[tuple, str]:
    """{combo: reason} for every combo the backend refuses."""
    if backend != "gloo" or not combos:
        return {}
    path = _cache_path(backend)
    cache = _load_cache(path)
    todo = [c for c in combos if _key(c) not in cache]
    while todo:
        proc = subprocess.run([sys.executable, "-m", "bench.collectives.probe"], input=json.dumps(todo),
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        done = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
        for coll, dt, op, reason in done:
            cache[_key((coll, dt, op))] = reason
        if proc.returncode != 0 and len(done) < len(todo):
            # the combination in flight crashed the probe process: that is a refusal too
            cache[_key(todo[len(done)])] = f"crashed the probe process (exit {proc.returncode})"
        todo = [c for c in todo if _key(c) not in cache]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(cache, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs a re-probe next time
    return {c: cache[_key(c)] for c in combos if cache.get(_key(c))}


def _probe_main():
    import datetime  # lazy: only in the probe subprocess (python -m bench.collectives.probe)
    import warnings  # lazy: only in the probe subprocess (python -m bench.collectives.probe)

    import torch.distributed as dist  # lazy: only in the probe subprocess (python -m bench.collectives.probe)

    from bench.collectives import REGISTRY, Ctx  # lazy: only in the probe subprocess (python -m bench.collectives.probe)
    from bench.units import parse_dtype  # lazy: only in the probe subprocess (python -m bench.collectives.probe)

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    combos = json.loads(sys.stdin.read())
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    for coll_name, dt, op in combos:
        coll = REGISTRY.get(coll_name)
        c = Ctx(rank=0, world=1, count=4, dtype=parse_dtype(dt), device=torch.device("cpu"), op=op or None)
        try:
            b = coll.setup(c)
            work = coll.call(c, b, async_op=True)
            if work is not None:
                work.wait()
            reason = None
        except Exception as e:  # noqa: BLE001 - any refusal is the answer we want
            reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        print(json.dumps([coll_name, dt, op, reason]), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    _probe_main()
