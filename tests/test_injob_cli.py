"""`distbench injob` as a user meets it: a GPU trace beside a stored run of its machine (exact ratio, no
warning) and beside another machine's (a warning per difference), csv and json alike, one-line
errors with nothing written, and no torch imported (it launches nothing)."""

import io
import json
from pathlib import Path

import pandas as pd
import pytest
import report_fixtures as rf
from conftest import assert_usage_error, run_cli
from test_cli_imports import run_in_fresh_python
from test_injob_formats import PROM, _inspector_logs

DATA = Path(__file__).parent / "data" / "injob"
A100 = str(DATA / "hta-a100-nccl2.17-rank0.trace.json.gz")
SIZE = 6563840 * 4  # an all_reduce of the trace: kernels of 2368.513, 2621.533 and 5807.89 us


def a100_run(root: Path) -> Path:
    """A stored collectives run on the trace's machine (A100, NCCL 2.17, 2 ranks on one node)."""
    run_id = "20260101T000000Z-a100"
    rows = [{"run_id": run_id, "suite": "collectives", "kind": "collectives", "world": 2, "group_size": 2,
             "nodes": 1, "backend": "nccl", "device_type": "cuda", "collective": "all_reduce", "algorithm": "native",
             "case_id": f"all_reduce.float32.sum.root-1.{mode}.w2", "size_bytes": SIZE, "count": SIZE // 4,
             "dtype": "float32", "op": "sum", "root": -1, "placement": place, "mode": mode, "rank_reduce": "max",
             "time_median_s": t, "algbw_gbps": SIZE / t / 1e9, "busbw_gbps": SIZE / t / 1e9, "checks": 1, "wrong": 0}
            for place, mode, t in (("in-place", "latency", 2e-3), ("out-of-place", "latency", 3e-3),
                                   ("in-place", "nccl-tests", 1e-3))]
    meta = rf._meta(run_id, "collectives", "collectives")
    meta["software"].update(nccl="2.17.1")
    meta["launches"]["2"].update(backend="nccl", ranks=[
        {"rank": r, "host": "node-a", "device": "cuda", "gpus": [{"name": "NVIDIA A100-PG509-200", "index": r}]}
        for r in range(2)])
    return rf._write(root / "collectives" / run_id, {"results": rows}, meta)


def test_gpu_trace_beside_a_run_of_its_machine(tmp_path):
    run = a100_run(tmp_path / "results")
    p = run_cli("injob", A100, "--against", str(run), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["machine_warnings"] == [] and "warning" not in p.stderr
    row = next(r for r in doc["rows"] if r["collective"] == "all_reduce" and r["size_bytes"] == SIZE)
    # the in-place latency-mode row: the same placement as torch's all_reduce, latency before nccl-tests
    assert (row["bench_time_s"], row["bench_mode"], row["bench_placement"]) == (2e-3, "latency", "in-place")
    assert row["ratio"] == pytest.approx(2621.533e-6 / 2e-3, rel=1e-12) and row["note"] == ""
    others = [r for r in doc["rows"] if r["size_bytes"] != SIZE]
    assert others and all(r["ratio"] is None and r["note"] == "no benchmark row at this size" for r in others)
    csv = run_cli("injob", A100, "--against", str(run), "--format", "csv")
    df = pd.read_csv(io.StringIO(csv.stdout))
    assert list(df["ratio"].fillna(-1)) == [r["ratio"] if r["ratio"] is not None else -1 for r in doc["rows"]]


def test_another_machine_is_named_in_warnings(tmp_path):
    run = rf.collectives_run(tmp_path / "results")  # 2 gloo ranks on a CPU
    p = run_cli("injob", A100, "--against", str(run))
    assert p.returncode == 0, p.stderr
    warn = [ln for ln in p.stderr.splitlines() if ln.startswith("distbench: warning:")]
    assert warn == ["distbench: warning: machine class differs: the job ran on NVIDIA A100-PG509-200, the benchmark "
                    "on cpu; the ratio compares two machines",
                    "distbench: warning: machine class differs: the job's backend is nccl, the benchmark's gloo; the "
                    "ratio compares two machines"]


def test_the_in_job_figures_alone_without_against(tmp_path):
    p = run_cli("injob", *map(str, _inspector_logs(tmp_path)))
    assert p.returncode == 0, p.stderr
    assert "NCCL Inspector's coll_exec_time_us" in p.stdout and "bench us" not in p.stdout
    assert "1 collective(s) timed by collective_cpu" in p.stderr


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    empty, other, prom = tmp_path / "empty.json", tmp_path / "other.json", tmp_path / "gpu0.prom"
    empty.write_text("")
    other.write_text('{"hello": 1}')
    prom.write_text(PROM)
    log = str(_inspector_logs(tmp_path)[0])
    strategies = rf.strategies_run(tmp_path / "results")
    for argv, message in [
        ((str(tmp_path / "nope.json"),), "no such file"),
        ((str(empty),), "is empty"),
        ((str(other),), "neither a torch profiler trace, NCCL Inspector output nor a flight recorder dump"),
        ((A100, log), "give one kind per call"),
        ((A100, "--against", str(strategies)), "give a run of `distbench collectives`"),
        ((str(prom), "--save"), "Prometheus dumps hold size ranges"),
    ]:
        p = run_cli("injob", *argv, "--out", str(out))
        assert_usage_error(p.returncode, p.stderr, message, out)


def test_injob_imports_no_torch(tmp_path):
    run = a100_run(tmp_path / "results")
    seen = run_in_fresh_python([["injob", A100, "--against", str(run), "--save", "--out", str(tmp_path / "r")]],
                               tmp_path)
    assert [(s["rc"], s["torch"], s["matplotlib"]) for s in seen] == [(0, False, False)]
    saved = next((tmp_path / "r" / "injob").iterdir())
    meta = json.loads((saved / "meta.json").read_text())
    assert meta["launches"]["2"]["ranks"][0]["gpus"] == [{"name": "NVIDIA A100-PG509-200"}]
