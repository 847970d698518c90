"""NCCL_ALGO / NCCL_PROTO verification: the TUNING log parser (several NCCL formats), the rows,
the FALLBACK lines of the summary, the variant launches' environment and the rank's placeholder."""

import os
import threading

import pandas as pd

from bench.allreduce import cases as ar_cases
from bench.allreduce import kind as ar_kind
from bench.allreduce.config import AllreduceConfig
from bench.allreduce.nccl_log import (
    ALGOS,
    allowed,
    log_env,
    parse,
    read_logs,
    safe_key,
    tuning_rows,
)
from bench.allreduce.summary import nccl_tuning_lines
from bench.results.schema import conform

OLD = """node-0:309:309 [0] NCCL INFO NCCL_ALGO set by environment to Tree
node-0:309:309 [0] NCCL INFO      1048576 Bytes -> Algo 1 proto 2 time 25.600000
node-0:309:309 [0] NCCL INFO 4 Bytes -> Algo 0 proto 0 time 5.1
"""
WITH_FUNC = """2: node-0:309:309 [0] NCCL INFO AllGather: 37756928 Bytes -> Algo 1 proto 2 time 2860.208008
2: node-0:309:309 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo 0 proto 2 time 28.1
"""
NAMES = """host:1:1 [1] NCCL INFO AllReduce: 4096 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..1}
host:1:1 [1] NCCL INFO AllReduce:  8388608 Bytes -> Algo Ring proto LL128 channel{Lo..Hi}={0..15}
host:1:1 [1] NCCL INFO Broadcast: 8388608 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..3}
host:1:1 [1] NCCL INFO AllReduce: 268435456 Bytes -> Algo NVLS proto Simple channel{Lo..Hi}={0..15}
"""
OPCOUNT = """h:1:1 [0] NCCL INFO AllGather: opCount 5 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0x3 [nranks=2] stream 0x4
h:1:1 [0] NCCL INFO 64 Bytes -> Algo 1 proto 0 time 3.0
h:1:1 [0] NCCL INFO AllReduce: opCount 6 sendbuff 0x1 recvbuff 0x2 count 262144 datatype 7 op 0 root 0 comm 0x3 [nranks=2] stream 0x4
h:1:1 [0] NCCL INFO 1048576 Bytes -> Algo 6 proto 1 time 9.0
"""


def test_parse_formats():
    assert parse(OLD) == [{"func": None, "size_bytes": 1048576, "algorithm": "Ring", "protocol": "Simple"},
                          {"func": None, "size_bytes": 4, "algorithm": "Tree", "protocol": "LL"}]
    assert [(t["func"], t["algorithm"]) for t in parse(WITH_FUNC)] == [("AllGather", "Ring"), ("AllReduce", "Tree")]
    assert [(t["size_bytes"], t["algorithm"], t["protocol"]) for t in parse(NAMES)] == [
        (4096, "Tree", "LL"), (8388608, "Ring", "LL128"), (8388608, "Ring", "Simple"), (268435456, "NVLS", "Simple")]
    got = parse(OPCOUNT)  # the function comes from the opCount line before the tuning line
    assert [(t["func"], t["size_bytes"], t["algorithm"], t["protocol"]) for t in got] == [
        ("AllGather", 64, "Ring", "LL"), ("AllReduce", 1048576, "PAT", "LL128")]
    assert parse("nothing here\nNCCL INFO comm 0x1 rank 0 nranks 2\n") == []


def test_allowed():
    assert allowed("Ring", "", ALGOS) and allowed("Ring", "ring", ALGOS) and not allowed("Ring", "Tree", ALGOS)
    assert allowed("Tree", "Ring,Tree", ALGOS) and not allowed("NVLS", "Ring,Tree", ALGOS)
    assert not allowed("NVLS", "^NVLS,CollNetDirect", ALGOS) and allowed("Ring", "^NVLS", ALGOS)
    assert allowed("Tree", "allreduce:tree;broadcast:ring", ALGOS)
    assert not allowed("Ring", "allreduce:tree;broadcast:ring", ALGOS)
    assert allowed("Ring", "broadcast:tree", ALGOS)  # set for another function only


def test_rows_keep_all_reduce_at_measured_sizes_and_flag_fallback():
    rows = tuning_rows("r1", "2:NCCL_ALGO=Tree", [OLD, WITH_FUNC, NAMES], sizes={1048576, 4096, 8388608})
    assert all(r["launch"] == "2:NCCL_ALGO=Tree" and r["variant"] == "NCCL_ALGO=Tree" for r in rows)
    got = {(r["size_bytes"], r["algorithm_chosen"], r["protocol_chosen"]): (r["matches_asked"], r["calls"]) for r in rows}
    assert got == {(1048576, "Ring", "Simple"): (False, 1), (1048576, "Tree", "Simple"): (True, 1),
                   (4096, "Tree", "LL"): (True, 1), (8388608, "Ring", "LL128"): (False, 1)}  # no Broadcast, no 4 B
    assert all(r["algorithm_asked"] == "Tree" and r["protocol_asked"] == "" and r["log_files"] == 3 for r in rows)
    proto = tuning_rows("r1", "2:NCCL_PROTO=LL128", [NAMES], sizes=None)
    assert {(r["size_bytes"], r["matches_asked"]) for r in proto} == {(4096, False), (8388608, True), (268435456, False)}
    df = conform(pd.DataFrame(rows), "nccl_tuning")  # every key is a schema column
    assert len(df) == 4


def test_read_logs_maps_directories_to_launches(tmp_path):
    key = "2:NCCL_ALGO=Tree"
    d = tmp_path / "nccl" / safe_key(key)
    d.mkdir(parents=True)
    (d / "host.11.log").write_text(OLD)
    (d / "host.12.log").write_text("")
    meta = {"run_id": "r1", "launches": {"2": {}, key + ":probe": {}, key: {}, "2:NCCL_PROTO=LL": {}}}
    results = [{"variant": "NCCL_ALGO=Tree", "world": 2, "size_bytes": 1048576},
               {"variant": "", "world": 2, "size_bytes": 4}]
    rows = read_logs(tmp_path, meta, results)
    assert [(r["launch"], r["size_bytes"], r["algorithm_chosen"], r["matches_asked"], r["log_files"]) for r in rows] \
        == [(key, 1048576, "Ring", False, 2)]


def test_summary_lines():
    fallback = tuning_rows("r1", "2:NCCL_ALGO=Tree", [OLD], sizes={1048576})
    lines = nccl_tuning_lines([{"backend": "nccl", "variant": "NCCL_ALGO=Tree"}], fallback)
    assert lines == ["#  asked NCCL_ALGO=Tree, NCCL chose Ring at 1M: FALLBACK (launch 2:NCCL_ALGO=Tree)"]
    ok = tuning_rows("r1", "2:NCCL_ALGO=Ring", [OLD], sizes={1048576})
    assert "every variant ran as asked" in nccl_tuning_lines([{"backend": "nccl"}], ok)[0]
    assert nccl_tuning_lines([{"backend": "gloo", "variant": ""}], []) == ["#  NCCL: no NCCL tuning log (not nccl)"]
    assert "NOT verified" in nccl_tuning_lines([{"backend": "nccl", "variant": "NCCL_ALGO=Tree"}], [])[0]


def test_log_env_keeps_user_values():
    assert log_env("2:NCCL_ALGO=Tree", {}) == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING",
                                              "NCCL_DEBUG_FILE": "{run_dir}/nccl/2_NCCL_ALGO_Tree/%h.%p.log"}
    user = {"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "INIT,COLL", "NCCL_DEBUG_FILE": "/x/%p"}
    assert log_env("2:NCCL_ALGO=Tree", user) == {"NCCL_DEBUG_SUBSYS": "INIT,COLL,TUNING"}
    assert log_env("k", {"NCCL_DEBUG_SUBSYS": "ALL"}).get("NCCL_DEBUG_SUBSYS") is None


def test_variant_launches_log_tuning(monkeypatch):
    for v in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "TORCHELASTIC_RUN_ID", "SLURM_PROCID"):
        monkeypatch.delenv(v, raising=False)
    cfg = AllreduceConfig(algorithms=("native",), nccl_algos=("Tree",), nccl_protos=(), sizes=("1M",), world=(2,))
    plan = ar_cases.plan(cfg, "nccl", (2,))
    base, probe, variant = plan.launches
    assert base.env == {}
    # issue 17 item 7: NCCL logs its choice in a short probe launch; the timed launch runs without logging
    assert probe.key == "2:NCCL_ALGO=Tree:probe" and probe.config.nccl_probe
    assert probe.env == {"NCCL_ALGO": "Tree", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING",
                         "NCCL_DEBUG_FILE": "{run_dir}/nccl/2_NCCL_ALGO_Tree/%h.%p.log"}
    assert variant.key == "2:NCCL_ALGO=Tree" and not variant.config.nccl_probe
    assert variant.env == {"NCCL_ALGO": "Tree"}


class _Stop(Exception):
    pass


def test_rank_puts_the_run_dir_into_nccl_debug_file(monkeypatch, tmp_path):
    """worker_main resolves the placeholder (and makes the folder) before init_process_group."""
    from bench.harness.session import Job
    from bench.harness import rank

    seen = {}

    def fake_init(backend, timeout_s):
        seen["file"] = os.environ.get("NCCL_DEBUG_FILE")
        raise _Stop()

    monkeypatch.setattr(rank, "init_rank", fake_init)
    monkeypatch.setenv("NCCL_DEBUG_FILE", "{run_dir}/nccl/2_NCCL_ALGO_Tree/%h.%p.log")
    cfg = AllreduceConfig(out=str(tmp_path), sizes=("1M",), world=(2,))
    job = Job(kind=ar_kind.KIND, config=cfg, backend="nccl", world=2, run_id="RID", meta={})
    errors = []

    def target():  # not the main thread: worker_main installs no signal handlers there
        try:
            rank.worker_main(job)
        except _Stop:
            pass
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    assert not errors, errors
    want = tmp_path / "allreduce" / "RID" / "nccl" / "2_NCCL_ALGO_Tree"
    assert seen["file"] == f"{want}/%h.%p.log" and want.is_dir()


# NCCL >= 2.23 prints the tuning line with ncclAlgoToString / ncclProtoToString (NCCL
# src/enqueue.cc:822, src/collectives.cc:95-127): upper case with underscores, "Unknown" otherwise.
UPPER = """h:7:7 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo COLLNET_DIRECT proto SIMPLE channel{Lo..Hi}={0..15}
h:7:7 [0] NCCL INFO AllReduce: 16777216 Bytes -> Algo COLLNET_CHAIN proto LL128 channel{Lo..Hi}={0..15}
h:7:7 [0] NCCL INFO AllReduce: 33554432 Bytes -> Algo NVLS_TREE proto SIMPLE channel{Lo..Hi}={0..15}
h:7:7 [0] NCCL INFO AllReduce: 67108864 Bytes -> Algo Unknown proto Unknown channel{Lo..Hi}={0..15}
h:7:7 [0] NCCL INFO 4096 Bytes -> Algo 9 proto 5 time 3.0
"""


def test_names_as_nccl_prints_them_and_unknown():
    got = [(t["size_bytes"], t["algorithm"], t["protocol"]) for t in parse(UPPER)]
    assert got == [(8388608, "CollNetDirect", "Simple"), (16777216, "CollNetChain", "LL128"),
                   (33554432, "NVLSTree", "Simple"), (67108864, "unknown", "unknown"), (4096, "unknown", "unknown")]
    rows = tuning_rows("r1", "2:NCCL_ALGO=CollNetDirect", [UPPER], sizes={8388608, 67108864})
    assert {(r["size_bytes"], r["matches_asked"]) for r in rows} == {(8388608, True), (67108864, False)}
    assert allowed("NVLSTree", "nvls_tree", ALGOS) and not allowed("unknown", "^NVLS", ALGOS)


def test_parser_knows_every_name_nccl_accepts():
    from bench.allreduce.config import NCCL_ALGOS, NCCL_PROTOS
    from bench.allreduce.nccl_log import PROTOS

    # NCCL src/init.cc:53-55 (ncclAlgoStr, ncclProtoStr): the names NCCL_ALGO / NCCL_PROTO accept
    assert ALGOS == ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
    assert PROTOS == ("LL", "LL128", "Simple")
    assert set(NCCL_ALGOS) == set(ALGOS) - {"PAT"} and set(NCCL_PROTOS) == set(PROTOS)
