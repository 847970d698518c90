"""Per-case summaries (columns joined into result rows) and long telemetry rows, from what each
node's sampler sent to rank 0.

A node payload: {"host", "node_rank", "gpus": [uuid], "gpu_status": "" or why there are no GPU
metrics, "ticks": sampling instants, "samples": [(t, uuid, rank, core, metric, value)],
"missing": {(uuid or None, metric): reason}}.

`gpu_energy_j` is the energy counter's last minus first value over the case window, warm-up
included (not a sum of power samples); PCIe and NVLink bytes are counter differences too. The
`energy_*` columns cover the timed span only, read on the ranks themselves (bench.telemetry.energy).
Power is the sum over GPUs of each GPU's mean draw; utilization means are over all GPUs' samples.
"""

from collections import defaultdict

from bench.telemetry.nvml import REASON_BITS, throttled

COUNTERS = {"energy_j": "gpu_energy_j", "pcie_tx_bytes": "gpu_pcie_tx_bytes", "pcie_rx_bytes": "gpu_pcie_rx_bytes",
            "nvlink_tx_bytes": "gpu_nvlink_tx_bytes", "nvlink_rx_bytes": "gpu_nvlink_rx_bytes"}

# Per-case telemetry summary joined into results rows (docs/telemetry.md); bench.results.schema takes
# them from here (the sampler owns its columns).
# Null where nothing was read (GPU columns on a CPU-only host, everything under --no-telemetry).
TELEMETRY_SUMMARY = {
    "telemetry_samples": "int64",  # sampling instants (the node with the most)
    "telemetry_interval_s": "float64",
    "case_start_unix_s": "float64",  # the sampled window, time.time() on rank 0's host
    "case_end_unix_s": "float64",
    "gpus_sampled": "int64",
    "gpu_mem_used_peak_bytes": "int64",  # max over GPUs and samples (whole device)
    "gpu_mem_total_bytes": "int64",  # per GPU (the largest)
    "gpu_proc_mem_peak_bytes": "int64",  # the benchmark's own processes on one GPU, max
    "gpu_util_mean_pct": "float64",
    "gpu_util_max_pct": "float64",
    "gpu_mem_util_mean_pct": "float64",
    "gpu_mem_util_max_pct": "float64",
    "gpu_power_mean_w": "float64",  # sum over GPUs of each one's mean draw
    "gpu_energy_j": "float64",  # sum over GPUs of the energy counter difference over the case window, warm-up included (energy_j: the timed span)
    "energy_j": "float64",  # NVML energy counter over the timed span only (not warm-up), summed over the case's GPUs (one reading per GPU); null: see energy_note
    "energy_span_s": "float64",  # the timed span the energy figures cover (the longest GPU's), seconds
    "energy_per_op_j": "float64",  # energy_j / ops issued in the timed span (collectives, allreduce)
    "energy_per_gb_j": "float64",  # energy_j per 1e9 bus bytes: ops x size_bytes x bus_factor x ranks (the bytes of busbw, every rank's)
    "energy_per_step_j": "float64",  # energy_j / timed training steps
    "energy_per_sample_j": "float64",  # energy_j / samples of the timed steps (steps x global batch)
    "energy_note": "string",  # why the energy figures are null (no counter, span shorter than 1 s, counter still); "" when given
    "gpu_temp_max_c": "float64",
    "gpu_sm_clock_mean_mhz": "float64",
    "gpu_mem_clock_mean_mhz": "float64",
    "gpu_pcie_tx_bytes": "float64",
    "gpu_pcie_rx_bytes": "float64",
    "gpu_nvlink_tx_bytes": "float64",
    "gpu_nvlink_rx_bytes": "float64",
    "throttled": "bool",  # clocks cut at more than THROTTLED_SHARE (10%) of the sampling instants (null: none read)
    "throttle_reasons": "string",  # names seen, comma-separated
    "host_cpu_util_mean_pct": "float64",  # over cores and samples, all nodes
    "host_cpu_util_max_pct": "float64",  # the busiest core's busiest sample
    "rank_rss_peak_bytes": "int64",  # max over ranks and samples
    "host_load1_max": "float64",
    "telemetry_missing": "string",  # why GPU columns are null, and metrics that could not be read
}

COLUMNS = TELEMETRY_SUMMARY  # the summary columns, with their pandas dtypes
# A case is `throttled` when the clocks were cut (nvml.throttled) at MORE than this share of its
# sampling instants (an instant counts when any GPU of its node was cut: a step or collective waits
# for the slowest GPU). Why a tenth: a share x of the case's time at (1 - c) of the clock makes
# compute-bound work 1 / (1 - x c) times as long, so at x = 10% even a 50% cut is 1.05x, half the
# gate's 10% case tolerance; while one power-capped sample (any(), before) flagged most GPU
# training cases and left them undecided by the gate. A case read once (shorter than the
# interval) is 0% or 100%.
THROTTLED_SHARE = 0.10



def _mean(xs):
    return sum(xs) / len(xs) if xs else None


def _max(xs):
    return max(xs) if xs else None


def _int(x):
    return None if x is None else int(x)


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASON_BITS.items() if mask & bit] + (
        [f"0x{mask & ~sum(REASON_BITS):x}"] if mask & ~sum(REASON_BITS) else [])


def missing_text(nodes: list[dict]) -> str:
    """'NVML: library not found' or 'energy_j: not supported; ...' (deduplicated over GPUs)."""
    parts = []
    for n in nodes:
        if n.get("gpu_status"):
            parts.append(n["gpu_status"] if len(nodes) == 1 else f"{n['host']}: {n['gpu_status']}")
    seen = {}
    for n in nodes:
        for (_uuid, metric), why in sorted(n.get("missing", {}).items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            seen.setdefault(f"{metric}: {why}", None)
    return "; ".join(dict.fromkeys(parts + list(seen)))


def summarize(nodes: list[dict], t0: float, t1: float, interval_s: float) -> dict:
    """The summary columns for one case (every key of COLUMNS; None where nothing was read)."""
    per_dev = defaultdict(lambda: defaultdict(list))  # (host, uuid) -> metric -> [(t, v)]
    host = defaultdict(list)  # metric -> [v]
    gpus = 0
    for n in nodes:
        gpus += len(n.get("gpus", []))
        for t, uuid, _rank, _core, metric, v in n.get("samples", []):
            if uuid is None:
                host[metric].append(v)
            else:
                per_dev[(n["host"], uuid)][metric].append((t, v))

    def vals(metric):
        return [v for d in per_dev.values() for _t, v in d.get(metric, [])]

    s = {k: None for k in COLUMNS}
    s.update(telemetry_samples=max((n.get("ticks", 0) for n in nodes), default=0), telemetry_interval_s=interval_s,
             case_start_unix_s=t0, case_end_unix_s=t1, gpus_sampled=gpus,
             gpu_mem_used_peak_bytes=_int(_max(vals("mem_used_bytes"))),
             gpu_mem_total_bytes=_int(_max(vals("mem_total_bytes"))),
             gpu_proc_mem_peak_bytes=_int(_max(vals("proc_mem_used_bytes"))),
             gpu_util_mean_pct=_mean(vals("gpu_util_pct")), gpu_util_max_pct=_max(vals("gpu_util_pct")),
             gpu_mem_util_mean_pct=_mean(vals("mem_util_pct")), gpu_mem_util_max_pct=_max(vals("mem_util_pct")),
             gpu_temp_max_c=_max(vals("temperature_c")),
             gpu_sm_clock_mean_mhz=_mean(vals("sm_clock_mhz")), gpu_mem_clock_mean_mhz=_mean(vals("mem_clock_mhz")),
             host_cpu_util_mean_pct=_mean(host["cpu_util_pct"]), host_cpu_util_max_pct=_max(host["cpu_util_pct"]),
             rank_rss_peak_bytes=_int(_max(host["rss_bytes"])), host_load1_max=_max(host["load1"]))
    powers = [_mean([v for _t, v in d["power_w"]]) for d in per_dev.values() if d.get("power_w")]
    s["gpu_power_mean_w"] = sum(powers) if powers and len(powers) == len(per_dev) else None
    for metric, col in COUNTERS.items():
        s[col] = counter_delta(per_dev, metric)
    masks = [int(v) for v in vals("clock_event_reasons")]
    if masks:
        seen = 0
        for m in masks:
            seen |= m
        s["throttled"] = throttled_share(per_dev) > THROTTLED_SHARE  # cuts only
        s["throttle_reasons"] = ",".join(reason_names(seen))
    s["telemetry_missing"] = missing_text(nodes)
    return s


def throttled_share(per_dev) -> float:
    """The share of sampling instants, (node, time) pairs that read the clock-event reasons of
    some GPU, at which at least one GPU of that node had its clocks cut (nvml.throttled)."""
    cut: dict[tuple, bool] = {}
    for (host, _uuid), m, sm, app, t in _reason_samples(per_dev):
        cut[(host, t)] = cut.get((host, t), False) or throttled(m, sm, app)
    return sum(cut.values()) / len(cut) if cut else 0.0


def _reason_samples(per_dev):
    """((host, uuid), mask, SM clock, application SM clock, time) of every sample that read the
    reasons; the clocks of the same device at the same instant (one probe reads them together),
    None when not read."""
    for dev, d in per_dev.items():
        sm, app = dict(d.get("sm_clock_mhz", [])), dict(d.get("app_sm_clock_mhz", []))
        for t, m in d.get("clock_event_reasons", []):
            yield dev, int(m), sm.get(t), app.get(t), t


def counter_delta(per_dev, metric: str):
    """Sum over GPUs of last - first; None unless every GPU has two readings and none went back."""
    if not per_dev:
        return None
    total = 0.0
    for d in per_dev.values():
        pts = sorted(d.get(metric, []))
        if len(pts) < 2 or pts[-1][1] < pts[0][1]:  # not read, or the counter was reset
            return None
        total += pts[-1][1] - pts[0][1]
    return total


def long_rows(nodes: list[dict], run_id: str, case_id: str, keys: dict, t0: float) -> list[dict]:
    """The telemetry table's rows: one per sampled value, one per missing metric (value null)."""
    rows = []
    for n in nodes:
        base = {"run_id": run_id, "case_id": case_id, **keys, "host": n["host"], "node_rank": n["node_rank"]}
        rows.extend({**base, "device_uuid": uuid, "rank": rank, "core": core, "time_s": t, "metric": metric,
                     "value": v, "reason": None} for t, uuid, rank, core, metric, v in n.get("samples", []))
        if n.get("gpu_status"):
            rows.append({**base, "device_uuid": None, "rank": None, "core": None, "time_s": t0,
                         "metric": "gpu_metrics", "value": None, "reason": n["gpu_status"]})
        for (uuid, metric), why in n.get("missing", {}).items():
            rows.append({**base, "device_uuid": uuid, "rank": None, "core": None, "time_s": t0,
                         "metric": metric, "value": None, "reason": why})
    return rows
