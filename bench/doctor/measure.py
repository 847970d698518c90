"""The doctor's units on every rank (torch): the pair rounds, the compute probe and the groups,
turned into rows on rank 0. bench.doctor.kind calls it only when a launch measures, so commands
that launch nothing (`--help`, `show`, `report`) never import torch."""

import socket
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from bench.doctor import fingerprint
from bench.doctor.compute import Matmul, flops, gpu_clocks, probe_shape
from bench.doctor.probe import node_groups, run_rounds, time_group
from bench.doctor.schedule import INTER, INTRA, nodes_of, rounds_for
from bench.timing.stats import algbw_gbps, summarize
from bench.units import parse_size

PLACEMENT = "p2p"


def _stats_row(launch, case_id: str, size: int, times: list[float]) -> dict:
    st = summarize(times)
    return {**launch.base_row(), "case_id": case_id, "size_bytes": size, "placement": PLACEMENT,
            **st.columns(), "samples": st.n, "iters": st.n, "warmup_iters": launch.job.config.warmup,
            "algbw_gbps": algbw_gbps(size, st.median_s)}


def _samples(launch, case_id: str, size: int, rank: int, times: list[float]) -> list[dict]:
    return [{"run_id": launch.run_id, "case_id": case_id, "size_bytes": size, "placement": PLACEMENT,
             "rank": rank, "iteration": i, "seconds": t} for i, t in enumerate(times)]


def _pairs(launch, nodes, hosts) -> dict:
    cfg, info = launch.job.config, launch.info
    rounds = rounds_for(nodes)
    sizes = (parse_size(cfg.small_bytes), parse_size(cfg.large_bytes))
    times, wrong = run_rounds(rounds, info.rank, info.device, sizes, cfg.reps, cfg.warmup, launch.comm.barrier)
    every = launch.comm.gather_object((times, wrong))
    if info.rank != 0:
        return {}
    times = {k: v for t, _ in every for k, v in t.items()}
    wrong = {k: v for _, w in every for k, v in w.items()}
    where = {p: (r.index, r.link_class, r.flows) for r in rounds for a, b in r.pairs for p in ((a, b), (b, a))}
    results, samples = [], []
    for (src, dst, size), ts in sorted(times.items()):
        rnd, cls, flows = where[(src, dst)]
        case = f"doctor.pair.{src}-{dst}"
        results.append({**_stats_row(launch, case, size, ts), "doctor_test": "pair", "src_rank": src, "dst_rank": dst,
                        "src_host": hosts[src], "dst_host": hosts[dst], "link_class": cls, "doctor_round": rnd,
                        "concurrent_flows": flows, "wrong": wrong.get((src, dst, size), 0), "checks": 1,
                        "collective": "sendrecv", "dtype": "float32"})
        samples += _samples(launch, case, size, src, ts)
    return {"results": results, "samples": samples}


def compute_mode(asked: str, device_type: str) -> str:
    """auto: every rank at once on GPUs (one each; heat and power shared as in a job), one rank at a
    time on CPUs (ranks may share cores: at once, a rank would measure its share of them)."""
    if asked != "auto":
        return asked
    return "all" if device_type == "cuda" else "each"


def _compute(launch, hosts) -> dict:
    cfg, info = launch.job.config, launch.info
    n, dtype, iters = probe_shape(info.device, cfg.compute_n, cfg.compute_iters)
    mode = compute_mode(cfg.compute_mode, info.device.type)
    probe = Matmul(info.device, n, dtype, iters)
    times: list[float] = []
    # repetitions outer, turns inner: a burst of load from outside hits one repetition of several
    # ranks, not every repetition of the rank whose turn it was
    for rep in range(1 + cfg.compute_reps):
        for turn in range(info.world) if mode == "each" else (None,):
            launch.comm.barrier()
            if turn in (None, info.rank):
                t = probe.rep()
                if rep >= 1:  # the first repetition warms up
                    times.append(t)
    every = launch.comm.gather_object((times, gpu_clocks(info.device)))
    if info.rank != 0:
        return {}
    results, samples = [], []
    for r, (ts, clocks) in enumerate(every):
        case = f"doctor.compute.{r}"
        row = _stats_row(launch, case, n * n * torch.empty((), dtype=dtype).element_size(), ts)
        results.append({**row, "doctor_test": "compute", "src_rank": r, "dst_rank": -1, "src_host": hosts[r],
                        "dst_host": "", "link_class": "", "gemm_n": n, "dtype": str(dtype).removeprefix("torch."),
                        "compute_gflops": flops(n) / row["time_median_s"] / 1e9, "mode": mode,
                        "algbw_gbps": None, **clocks})
        samples += _samples(launch, case, row["size_bytes"], r, ts)
    return {"results": results, "samples": samples}


def _groups(launch, nodes, names) -> dict:
    cfg, info = launch.job.config, launch.info
    size = parse_size(cfg.group_bytes)
    own, lead = node_groups(nodes)
    per_node = time_group(own, size, info.device, cfg.reps, cfg.warmup, launch.comm.barrier)
    leaders = time_group(lead, size, info.device, cfg.reps, cfg.warmup, launch.comm.barrier)
    every = launch.comm.gather_object((per_node, leaders))
    if info.rank != 0:
        return {}
    groups = [(name, ranks, 0) for name, ranks in zip(names, nodes)] + [("leaders", [r[0] for r in nodes], 1)]
    results = []
    for name, ranks, which in groups:
        if len(ranks) < 2:
            continue
        per_rep = np.max([every[r][which] for r in ranks], axis=0)  # the op is done when its slowest rank is
        results.append({**_stats_row(launch, f"doctor.group.{name}", size, list(per_rep)), "doctor_test": "group",
                        "src_rank": -1, "dst_rank": -1, "group_name": name, "group_ranks": ",".join(map(str, ranks)),
                        "link_class": INTRA if which == 0 else INTER, "collective": "all_reduce",
                        "dtype": "float32", "op": "sum", "rank_reduce": "max"})
    return {"results": results}


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def machine_id() -> str:
    """The running kernel's boot id: ranks on two 'nodes' that share it share one machine's cores
    (a simulated cluster's namespaces, containers); the host name where it cannot be read."""
    try:
        return BOOT_ID.read_text().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


def sharing_cores(machines: list[str], facts: list[dict], device_type: str) -> bool:
    """More CPU ranks on one machine (one kernel) than it has cores, whatever their host names say:
    the launch's own flag counts the ranks of a node, and a simulated cluster's nodes are one machine."""
    if device_type == "cuda":
        return False
    per = Counter(machines)
    return any(n > int(facts[machines.index(m)].get("cores") or 1) for m, n in per.items())


def measure_unit(unit, launch) -> dict:
    """Every rank: one unit (pairs | compute | groups); rows on rank 0."""
    hosts = launch.hosts
    names, nodes = nodes_of(hosts)
    shared = sharing_cores(launch.comm.gather_object(machine_id()), launch.facts, launch.info.device.type)
    with launch.tel.case(f"doctor.{unit.name}", size_bytes=0, placement=PLACEMENT) as tc:
        if unit.name == "pairs":
            tables = _pairs(launch, nodes, hosts)
        elif unit.name == "compute":
            tables = _compute(launch, hosts)
        elif unit.name == "fingerprint":
            tables = fingerprint.measure(launch, nodes, _stats_row)
        else:
            tables = _groups(launch, nodes, names)
    for row in tables.get("results", []):
        row.update(tc.summary)
        if shared and not row["oversubscribed"]:
            row.update(oversubscribed=True, degraded="oversubscribed: ranks of several nodes share one machine's cores")
    return tables
