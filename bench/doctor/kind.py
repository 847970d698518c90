"""The `doctor` kind: find the slow link, rank or node of a cluster, with evidence (docs/doctor.md).

Three units, on every rank: `pairs` (bandwidth and latency of every ordered pair of ranks, in the
rounds of bench.doctor.schedule), `compute` (a fixed matmul per rank) and `groups` (all_reduce
within each node and across one rank per node). After the launch the verdict
(bench.doctor.verdict) is stored as the `doctor_suspects` table; suspects found exit 1.
"""

import socket
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench.doctor.columns import COLUMNS
from bench.doctor.compute import flops, gpu_clocks, probe_shape, time_matmul
from bench.doctor.config import DoctorConfig
from bench.doctor.probe import node_groups, run_rounds, time_group
from bench.doctor.schedule import INTER, INTRA, nodes_of, rounds_for
from bench.doctor.summary import DoctorLive, doctor_summary, thresholds_of
from bench.doctor.verdict import verdict_of
from bench.kind import KINDS, Kind, Memory, Metric, Reading, Report, drawn_by
from bench.options import overrides
from bench.results.store import RunWriter, load_run
from bench.timing.stats import algbw_gbps, summarize
from bench.units import parse_size

PLACEMENT = "p2p"


@dataclass(frozen=True)
class Unit:
    name: str  # pairs | compute | groups
    world: int

    @property
    def key(self) -> str:
        return f"doctor.{self.name}.w{self.world}"

    @property
    def label(self) -> str:
        return self.name


def add_options(p):
    p.add_argument("--small-bytes", dest="small_bytes", default=None, help="latency size (default 4K)")
    p.add_argument("--large-bytes", dest="large_bytes", default=None, help="bandwidth size (default 4M)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per ordered pair and size (default 7)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up: untimed repetitions before them (default 1)")
    p.add_argument("--compute-n", dest="compute_n", type=int, default=None,
                   help="matmul side (default 0: 512 fp32 on CPU, 8192 bf16 on GPU)")
    p.add_argument("--compute-reps", dest="compute_reps", type=int, default=None, help="timed repetitions per rank")
    p.add_argument("--compute-iters", dest="compute_iters", type=int, default=None,
                   help="matmuls per repetition (default 0: 32 on CPU, 50 on GPU)")
    p.add_argument("--compute-mode", dest="compute_mode", default=None,
                   help="each (one rank at a time) | all (at once) | auto (all on GPU, each on CPU)")
    p.add_argument("--no-groups", dest="groups", action="store_const", const=False, default=None,
                   help="skip the group all_reduces")
    p.add_argument("--group-bytes", dest="group_bytes", default=None, help="group all_reduce size (default 1M)")
    p.add_argument("--mad-k", dest="mad_k", type=float, default=None, help="outlier: more than K MADs (default 4)")
    p.add_argument("--min-shortfall", dest="min_shortfall", type=float, default=None,
                   help="bandwidth outlier: also this share below the class median (default 0.3)")
    p.add_argument("--latency-excess", dest="latency_excess", type=float, default=None,
                   help="latency outlier: also this share above the class median (default 1.0)")
    p.add_argument("--latency-verdict", dest="latency_verdict", default=None,
                   help="on | off | auto (default: judged unless ranks share cores)")
    p.add_argument("--compute-excess", dest="compute_excess", type=float, default=None,
                   help="compute outlier: also this share above the median rank (default 0.3)")
    p.add_argument("--group-factor", dest="group_factor", type=float, default=None,
                   help="a group all_reduce slower than this x its expectation is a suspect (default 0: shown only)")


def options(args) -> dict:
    ov = overrides(args, ("reps", "warmup", "compute_n", "compute_reps", "compute_iters", "groups", "mad_k", "min_shortfall",
                          "latency_excess", "compute_excess", "group_factor"))
    for name in ("small_bytes", "large_bytes", "group_bytes", "compute_mode", "latency_verdict"):  # one value each, not lists
        if getattr(args, name, None) is not None:
            ov[name] = args.__dict__[name]
    return ov


def units(cfg: DoctorConfig, world: int, meta: dict):
    names = ("pairs", "compute", "groups") if cfg.groups else ("pairs", "compute")
    return [Unit(n, world) for n in names], []


def estimate_s(cfg: DoctorConfig, unit: Unit) -> float:
    """Seconds, generously: a round is 2 phases x 2 sizes x (warmup + reps) barriers and transfers."""
    if unit.name == "pairs":
        return (unit.world + 1) * 4 * (cfg.warmup + cfg.reps) * 0.05
    if unit.name == "compute":
        return unit.world * (cfg.compute_reps + 1) * 0.5
    return 2 * (cfg.warmup + cfg.reps) * 0.2


def need(cfg: DoctorConfig, world: int) -> tuple[int, str]:
    n = cfg.compute_n or 512
    pairs = 2 * (parse_size(cfg.small_bytes) + parse_size(cfg.large_bytes))
    return max(pairs, 3 * n * n * 4, parse_size(cfg.group_bytes)), "the pair buffers and the matmul"


def fits(cfg: DoctorConfig, world: int, budget: float) -> list[str]:
    return [f"--large-bytes {parse_size(cfg.large_bytes) // 4}"] if budget > 0 else []


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


def _compute(launch, hosts) -> dict:
    cfg, info = launch.job.config, launch.info
    n, dtype, iters = probe_shape(info.device, cfg.compute_n, cfg.compute_iters)
    mode = cfg.compute_mode if cfg.compute_mode != "auto" else ("all" if info.device.type == "cuda" else "each")
    times: list[float] = []
    for turn in range(info.world if mode == "each" else 1):
        launch.comm.barrier()
        if mode == "all" or turn == info.rank:
            times = time_matmul(info.device, n, dtype, cfg.compute_reps, iters)
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


def measure(unit: Unit, launch) -> dict:
    """Every rank; rows on rank 0."""
    hosts = launch.hosts
    names, nodes = nodes_of(hosts)
    shared = sharing_cores(launch.comm.gather_object(machine_id()), launch.facts, launch.info.device.type)
    with launch.tel.case(f"doctor.{unit.name}", size_bytes=0, placement=PLACEMENT) as tc:
        if unit.name == "pairs":
            tables = _pairs(launch, nodes, hosts)
        elif unit.name == "compute":
            tables = _compute(launch, hosts)
        else:
            tables = _groups(launch, nodes, names)
    for row in tables.get("results", []):
        row.update(tc.summary)
        if shared and not row["oversubscribed"]:
            row.update(oversubscribed=True, degraded="oversubscribed: ranks of several nodes share one machine's cores")
    return tables


def finish(run_dir, cfg: DoctorConfig):
    """After the launch: the verdict of the stored rows, as the `doctor_suspects` table (replaced,
    never appended: a resumed run judges all its rows again)."""
    run = load_run(run_dir)
    suspects = verdict_of(run.tables.get("results"), thresholds_of(run.meta, cfg))
    (run.dir / "doctor_suspects.parquet").unlink(missing_ok=True)
    rows = [{"run_id": run.meta.get("run_id"), "position": i, "suspect": s.name, "scope": s.scope, "factor": s.factor,
             "mads": s.mads, "evidence": s.evidence} for i, s in enumerate(suspects, 1)]
    RunWriter.at(run_dir, part_prefix="verdict-").write_case({"doctor_suspects": rows})


def acceptance(run, cfg) -> list[str]:
    """Suspects found: exit 1 (a pre-job health check fails)."""
    suspects = verdict_of(run.tables.get("results"), thresholds_of(run.meta, cfg))
    if not suspects:
        return []
    return [f"doctor: {len(suspects)} suspect(s); the top one: {suspects[0].evidence}"]


KIND = KINDS.register(Kind(
    module=__name__, name="doctor", help="find the slow link, rank or node of a cluster, with evidence "
                                         "(pair matrix, compute probe, groups; exit 1 when suspects are found)",
    config=DoctorConfig, columns=COLUMNS, tables=("results", "samples", "telemetry", "doctor_suspects"),
    add_options=add_options, options=options, units=units, measure=measure, finish=finish, acceptance=acceptance,
    estimate_s=estimate_s, memory=Memory(need=need, fits=fits),
    read=Reading(metrics=(Metric("time_median_s", True, True), Metric("algbw_gbps", False, False)),
                 group="doctor_test"),
    report=Report(title="Doctor: pair matrix and suspects", section=drawn_by("bench.doctor.plots", "section"),
                  summary=doctor_summary, live=DoctorLive),
))
