"""The in-job readers on each format: NCCL kernels of real GPU traces (tests/data/injob, trimmed from
HolisticTraceAnalysis' test data: tests/data/injob/README.md), NCCL Inspector's JSON and Prometheus
output and flight recorder dumps (built from their writers' source where they cannot be produced
here: no GPU, no NCCL), and a real flight recorder dump of a gloo job made here."""

import gzip
import json
import pickle
from pathlib import Path

import pandas as pd
import pytest
from conftest import spawn

from bench.errors import BenchError
from bench.imports import flight_recorder, kineto, nccl_inspector
from bench.imports.injob import compare, read_bytes, summarize

DATA = Path(__file__).parent / "data" / "injob"
A100 = DATA / "hta-a100-nccl2.17-rank0.trace.json.gz"  # kernels carry the collective's metadata
A100_2022 = DATA / "hta-a100-2022-rank3.trace.json.gz"  # kernels linked to nccl:* spans by correlation


def _read(mod, path):
    return mod.read(path, read_bytes(path))


# ---- torch profiler traces of NCCL jobs ---------------------------------------------------------------

def test_nccl_kernels_with_their_metadata():
    r = _read(kineto, A100)
    assert (r.rank, r.world, r.backend, r.devices, r.nccl_version) == ("0", 2, "nccl", ["NVIDIA A100-PG509-200"],
                                                                       "2.17.1")
    assert not r.host_waits and "kernel's duration on the GPU" in r.timing
    s = summarize([r]).set_index(["collective", "dtype", "size_bytes"])
    # "In msg nelems" 6563840 floats, kernels of 2368.513, 2621.533 and 5807.89 us: median 2621.533 us
    row = s.loc[("all_reduce", "float32", 6563840 * 4)]
    assert row["calls"] == 3 and row["time_s"] == pytest.approx(2621.533e-6, rel=1e-12)
    assert row["busbw_gbps"] == pytest.approx(6563840 * 4 / 2621.533e-6 / 1e9 * 2 * (2 - 1) / 2, rel=1e-12)
    assert (row["group"], row["group_size"]) == ("default_pg", 2)  # pg_config of distributedInfo names group "0"
    assert s.loc[("broadcast", "int64", 53 * 8)]["calls"] == 3  # "dtype": "Long"


def test_kernels_linked_by_correlation_to_the_collective_around_their_launch():
    """A 2022 trace: kernels without metadata; each found through its cudaLaunchKernel (same
    correlation) inside an nccl:all_reduce span whose Input Dims (45310188 floats) size it."""
    r = _read(kineto, A100_2022)
    assert (r.rank, r.world) == ("3", 8)
    s = summarize([r]).set_index(["collective", "dtype", "size_bytes"])
    row = s.loc[("all_reduce", "float32", 45310188 * 4)]
    assert row["calls"] == 6 and row["group_size"] == 8 and row["time_s"] == pytest.approx(1833.5e-6, rel=1e-12)
    assert row["busbw_gbps"] == pytest.approx(45310188 * 4 / 1833.5e-6 / 1e9 * 2 * 7 / 8, rel=1e-12)
    assert "all_to_all_single" in set(s.reset_index()["collective"])  # nccl:all_to_all around SendRecv kernels


def test_host_only_nccl_trace_is_refused(tmp_path):
    """record_param_comms without kernels (CUDA activity not profiled): its span is the launch only."""
    doc = json.loads(gzip.decompress(A100.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]
    p = tmp_path / "host-only.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(BenchError, match="time the launch, not the collective"):
        _read(kineto, p)


# ---- NCCL Inspector ----------------------------------------------------------------------------------

def _inspector_line(rank, coll, size, us, source="kernel_gpu", n=2, comm="DP Group 0"):
    """One object as inspector_json.cc writes it (inspectorCommInfoDumpColl: header, metadata,
    coll_perf in that order; %lf doubles), one per line."""
    algbw = size * (n if coll in ("AllGather", "ReduceScatter") else 1) / 1e9 / (us * 1e-6)
    return json.dumps({
        "header": {"id": "0x7f8c496ae9f661", "comm_name": comm, "rank": rank, "n_ranks": n, "nnodes": 1},
        "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism":
                     "nccl_profiler_interface", "dump_timestamp_us": 1748030377748202, "hostname": "node-a",
                     "pid": 1000 + rank},
        "coll_perf": {"coll": coll, "coll_sn": 1, "coll_msg_size_bytes": size, "coll_exec_time_us": us,
                      "coll_timing_source": source, "coll_algobw_gbs": round(algbw, 6),
                      "coll_busbw_gbs": round(algbw, 6)}}, separators=(",", ":"))


def _inspector_logs(tmp_path) -> list[Path]:
    files = []
    for rank, times in ((0, (100, 120, 140)), (1, (110, 150, 170))):
        lines = [_inspector_line(rank, "AllReduce", 1 << 20, t) for t in times]
        lines += [_inspector_line(rank, "AllGather", 1 << 19, 60 + rank)]  # a rank's send: 512 KiB of 1 MiB
        lines += [_inspector_line(rank, "AllReduce", 4096, 900, source="collective_cpu")]
        lines += [json.dumps({"header": {"id": "0x1", "rank": rank, "n_ranks": 2, "nnodes": 1}, "metadata": {},
                              "p2p_perf": {"p2p": "Send", "p2p_sn": 1, "p2p_peer": 1 - rank,
                                           "p2p_msg_size_bytes": 64, "p2p_exec_time_us": 5}})]
        p = tmp_path / f"node-a-pid{1000 + rank}.log"
        p.write_text("\n".join(lines) + "\n")
        files.append(p)
    return files


def test_nccl_inspector_json_lines(tmp_path):
    """Built from plugins/profiler/inspector/inspector_json.cc (NVIDIA/nccl 5067397): the plugin cannot
    run here (no GPU, no NCCL)."""
    reads = [_read(nccl_inspector, p) for p in _inspector_logs(tmp_path)]
    assert [r.source for r in reads] == ["nccl-inspector"] * 2 and reads[0].hosts == ["node-a"]
    s = summarize(reads).set_index(["collective", "size_bytes"])
    ar = s.loc[("all_reduce", 1 << 20)]  # per rank medians 120 and 150 us
    assert (ar["time_rank_min_s"], ar["time_rank_max_s"], ar["slowest_rank"]) == \
        (pytest.approx(120e-6), pytest.approx(150e-6), "1")
    assert (ar["dtype"], ar["group"], ar["calls"]) == ("", "DP Group 0", 6)
    ag = s.loc[("all_gather_single", 1 << 20)]  # coll_msg_size_bytes x n_ranks
    assert ag["time_s"] == pytest.approx(61e-6)
    assert any("1 collective(s) timed by collective_cpu" == n for n in reads[0].notes)
    assert any("1 point-to-point operation(s) not compared" in n for n in reads[0].notes)
    assert reads[0].host_waits  # a collective_cpu time is host time


def test_nccl_inspector_pretty_printed_objects_read_too(tmp_path):
    """The README shows the objects indented; the plugin writes one per line: both read."""
    p = tmp_path / "pretty.log"
    p.write_text("\n".join(json.dumps(json.loads(_inspector_line(0, "Broadcast", 8192, 30)), indent=2)
                           for _ in range(2)))
    r = _read(nccl_inspector, p)
    assert [(c.collective, c.size_bytes, c.duration_s) for c in r.calls] == [("broadcast", 8192, 30e-6)] * 2


PROM = """\
nccl_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="node-a",gpu="GPU0",comm_name="DP Group 0",\
n_nodes="1",nranks="2",collective="AllReduce",message_size="1-2MB",algo_proto="Ring_ll"} 10.5
nccl_collective_exec_time_microseconds{version="v5.1",slurm_job_id="unknown",node="node-a",gpu="GPU0",\
comm_name="DP Group 0",n_nodes="1",nranks="2",collective="AllReduce",message_size="1-2MB",algo_proto="Ring_ll"} 200
nccl_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="node-a",gpu="GPU0",comm_name="DP Group 0",\
n_nodes="1",nranks="2",collective="AllReduce",message_size="3-4KB",algo_proto="Ring_ll"} 0.1
nccl_collective_exec_time_microseconds{version="v5.1",slurm_job_id="unknown",node="node-a",gpu="GPU0",\
comm_name="DP Group 0",n_nodes="1",nranks="2",collective="AllReduce",message_size="3-4KB",algo_proto="Ring_ll"} 40
nccl_p2p_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="node-a",gpu="GPU0",comm_name="DP Group 0",\
n_nodes="1",nranks="2",p2p_operation="Send",message_size="512-513MB"} 464.9
nccl_p2p_exec_time_microseconds{version="v5.1",slurm_job_id="unknown",node="node-a",gpu="GPU0",\
comm_name="DP Group 0",n_nodes="1",nranks="2",p2p_operation="Send",message_size="512-513MB"} 1154.87
"""


def test_nccl_inspector_prometheus_ranges_against_benchmark_sizes(tmp_path):
    """Built from inspector_prom.cc (inspectorPromWriteCollBucket, '%.6g'; the size label of
    inspectorPromFormatMessageSizeRange): a range matches the one benchmark size inside it."""
    p = tmp_path / "nccl_inspector_metrics_GPU-0a1b.prom"
    p.write_text(PROM)
    r = _read(nccl_inspector, p)
    assert r.source == "nccl-inspector-prometheus"
    assert sorted((c.size_bytes, c.size_max_bytes, c.duration_s) for c in r.calls) == \
        [(3 << 10, 4 << 10, 40e-6), (1 << 20, 2 << 20, 200e-6)]
    bench = pd.DataFrame([{"collective": "all_reduce", "size_bytes": s, "world": 2, "group_size": 2,
                           "dtype": "float32", "placement": "in-place", "op": "sum", "mode": "latency",
                           "rank_reduce": "max", "case_id": "c", "time_median_s": 100e-6, "busbw_gbps": 1.0}
                          for s in (1 << 20, 4 << 20)])
    rows = compare(summarize([r]), bench).set_index("size_bytes")
    assert rows.loc[1 << 20, "ratio"] == pytest.approx(2.0)
    assert "size range 1048576..2097151 B; benchmark at 1048576 B" in rows.loc[1 << 20, "note"]
    assert rows.loc[3 << 10, "note"] == "no benchmark row in this size range"
    assert any("1 point-to-point metric(s)" in n for n in r.notes)


# ---- flight recorder -----------------------------------------------------------------------------

def _fr_entry(i, name, in_sizes, out_sizes, ms, state="completed", dtype="Float", pg=("0", "default_pg")):
    """One entry with the keys FlightRecorder.hpp defines and dump_json / getCollectiveTrace write."""
    e = {"record_id": i, "pg_id": 0, "process_group": pg, "thread_name": "pt_main_thread", "thread_id": "1",
         "collective_seq_id": i + 1, "p2p_seq_id": 0, "op_id": i + 1, "profiling_name": name,
         "time_created_ns": 1796684133041394911 + i, "input_sizes": in_sizes, "input_dtypes": [dtype],
         "output_sizes": out_sizes, "output_dtypes": [dtype], "state": state,
         "time_discovered_started_ns": 1, "time_discovered_completed_ns": 2, "retired": True,
         "timeout_ms": 600000, "is_p2p": False}
    if ms is not None:
        e["duration_ms"] = ms
    return e


def _fr_dump(entries) -> dict:
    return {"version": "2.10", "comm_lib_version": "2.21.5", "pg_status": {},
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}, "entries": entries}


def test_flight_recorder_nccl_dump_pickle_and_json(tmp_path):
    """Built from torch/csrc/distributed/c10d/FlightRecorder.hpp / FlightRecorderDetail.hpp (dump:
    pickle; dump_json): an NCCL job with TORCH_NCCL_ENABLE_TIMING=1 cannot run here."""
    entries = [_fr_entry(0, "nccl:all_reduce", [[1024, 256]], [[1024, 256]], 0.5),
               _fr_entry(1, "nccl:all_reduce", [[1024, 256]], [[1024, 256]], 0.7),
               _fr_entry(2, "nccl:_allgather_base", [[1000]], [[4000]], 0.2, dtype="BFloat16"),
               _fr_entry(3, "nccl:all_reduce", [[8]], [[8]], None),  # not timed
               _fr_entry(4, "nccl:all_reduce", [[8]], [[8]], 1.0, state="started"),
               {**_fr_entry(5, "nccl:send", [[8]], [[8]], 0.1), "is_p2p": True}]
    (tmp_path / "nccl_trace_rank_3").write_bytes(pickle.dumps(_fr_dump(entries)))
    (tmp_path / "fr_rank_3.json").write_text(json.dumps(_fr_dump(entries)))
    for name in ("nccl_trace_rank_3", "fr_rank_3.json"):
        r = _read(flight_recorder, tmp_path / name)
        assert r.rank == "3" and r.nccl_version == "2.21.5" and r.backend == "nccl"
        assert sorted((c.collective, c.size_bytes, c.dtype, c.group_size, c.duration_s) for c in r.calls) == [
            ("all_gather_single", 8000, "bfloat16", 4, 0.2e-3),
            ("all_reduce", 1 << 20, "float32", 4, 0.5e-3), ("all_reduce", 1 << 20, "float32", 4, 0.7e-3)]
        assert r.notes == ["1 entries not compared: no duration_ms (the flight recorder times NCCL collectives "
                           "only with TORCH_NCCL_ENABLE_TIMING=1; gloo's entries carry none)",
                           "1 entries not compared: not completed when dumped (scheduled or started)",
                           "1 point-to-point entries not compared: not one collective of a size"]


def test_flight_recorder_pickle_that_asks_for_a_class_is_refused(tmp_path):
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps({"version": "2.10", "entries": [], "x": Path("/")}))
    with pytest.raises(BenchError, match="plain data only"):
        _read(flight_recorder, p)


def _fr_gloo_job(info, out_dir: str) -> str:
    import torch  # lazy: in the spawned rank only
    import torch.distributed as dist  # lazy: in the spawned rank only

    t = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(t)
    dist.all_gather_into_tensor(torch.empty(1000 * info.world), t)
    path = f"{out_dir}/fr_trace_rank_{info.rank}"
    with open(path, "wb") as f:
        f.write(torch._C._distributed_c10d._dump_fr_trace())
    return path


def test_flight_recorder_dump_of_a_real_gloo_job(tmp_path, monkeypatch):
    """torch's own pickle read by the data-only unpickler: gloo's entries have sizes and no duration_ms,
    so nothing is compared and the notes say why."""
    import torch._C._distributed_c10d as c10d  # lazy: torch for this test only

    if not hasattr(c10d, "_dump_fr_trace"):
        pytest.skip("this torch has no _dump_fr_trace (a gloo flight recorder)")
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "100")
    paths = spawn(_fr_gloo_job, 2, str(tmp_path), timeout_s=60.0)
    r = _read(flight_recorder, Path(paths[1]))
    assert r.rank == "1" and r.backend == "gloo" and r.calls == []
    assert r.notes == ["4 entries not compared: no duration_ms (the flight recorder times NCCL collectives only "
                       "with TORCH_NCCL_ENABLE_TIMING=1; gloo's entries carry none)"]
