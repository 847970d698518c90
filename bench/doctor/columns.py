"""The doctor kind's columns (docs/schema.md): what its results rows add, and its suspects table
(Kind.columns; bench.results.schema merges them). Its results rows are of three tests: `pair`
(one ordered pair of ranks at one size), `compute` (one rank's matmul probe) and `group` (one
group's all_reduce); raw per-repetition seconds go to the `samples` table."""

DOCTOR = {
    "doctor_test": "string",  # doctor: pair | compute | group
    "src_rank": "int64",  # doctor: pair: the sending rank; compute: the rank probed; group: -1
    "dst_rank": "int64",  # doctor: pair: the receiving rank; else -1
    "src_host": "string",  # doctor: the host (node) of src_rank
    "dst_host": "string",  # doctor: the host (node) of dst_rank
    "link_class": "string",  # doctor: pair: intra (same host) | inter (two hosts); else ""
    "doctor_round": "int64",  # doctor: pair: the round of the schedule it was measured in
    "concurrent_flows": "int64",  # doctor: pair: flows sharing the sender's node link during the measurement
    "gemm_n": "int64",  # doctor: compute: side of the square matmul
    "compute_gflops": "float64",  # doctor: compute: 2 n^3 / median matmul seconds / 1e9
    "gpu_sm_clock_mhz": "float64",  # doctor: compute on GPU: NVML SM clock right after the probe
    "gpu_app_clock_mhz": "float64",  # doctor: compute on GPU: NVML application SM clock
    "gpu_clock_reasons": "string",  # doctor: compute on GPU: NVML clock-event (throttle) reasons, comma list
    "gpu_throttled": "bool",  # doctor: compute on GPU: the reasons say the clocks were cut (bench.telemetry.nvml.throttled)
    "gpu_clock_note": "string",  # doctor: compute on GPU: why NVML could not say ("" when it could)
    "group_name": "string",  # doctor: group: node name (all_reduce within it) or 'leaders' (one rank per node)
    "group_ranks": "string",  # doctor: group: its ranks, comma list, in ring order
}

SUSPECTS = {  # the verdict, worst first; no rows: no suspect
    "run_id": "string",
    "position": "int64",  # 1 = the top suspect
    "suspect": "string",  # 'node node1', 'link node0 <-> node1', 'link rank 2 -> rank 5', 'rank 3 compute', ...
    "scope": "string",  # node | node-link | rank-link | latency | compute | group
    "factor": "float64",  # how many times worse than its class median
    "mads": "float64",  # MADs from the class median (inf: the class had no spread)
    "evidence": "string",  # one line
}

COLUMNS = {"results": DOCTOR, "doctor_suspects": SUSPECTS}
