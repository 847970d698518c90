"""--profile: torch.profiler traces per rank and case, labelled, outside the timed region, and the
breakdown read back from a Chrome trace (bench/timing/profile.py)."""

import pytest
import json

import pandas as pd
from conftest import assert_usage_error, run_cli

from bench.timing.profile import trace_breakdown, trace_file


def _ev(name, ts_us, dur_us, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts_us, "dur": dur_us, "pid": 1, "tid": 1}


def test_trace_breakdown_exact(tmp_path):
    """Span 0..100 us (two labelled steps); compute 10..30 and 40..50 (nested ops count once);
    comm 25..35 (overlaps compute 25..30) and a gloo async span 60..70; idle the rest."""
    events = [
        _ev("case@step0", 0, 50, "user_annotation"), _ev("case@step1", 50, 50, "user_annotation"),
        _ev("ProfilerStep#2", 0, 200, "user_annotation"),  # the label, not ProfilerStep, bounds the span
        _ev("aten::mm", 10, 20), _ev("aten::add", 12, 5), _ev("aten::mul", 40, 10),
        _ev("c10d::send", 25, 10), _ev("gloo:recv", 60, 10, "user_annotation"),
        _ev("aten::mm", 150, 10),  # outside the labelled steps
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    b = trace_breakdown(p, label="case@")
    assert b["steps"] == 2
    assert abs(b["span_s"] - 100e-6) < 1e-12
    assert abs(b["compute_s"] - 30e-6) < 1e-12
    assert abs(b["comm_s"] - 20e-6) < 1e-12
    assert abs(b["exposed_comm_s"] - 15e-6) < 1e-12  # 30..35 and 60..70
    assert abs(b["idle_s"] - 55e-6) < 1e-12
    assert abs(b["compute_s"] + b["exposed_comm_s"] + b["idle_s"] - b["span_s"]) < 1e-12
    calls_only = trace_breakdown(p, label="case@", backend_spans=False)
    assert abs(calls_only["comm_s"] - 10e-6) < 1e-12 and abs(calls_only["idle_s"] - 65e-6) < 1e-12
    whole = trace_breakdown(p)  # no label: the ProfilerStep events
    assert abs(whole["span_s"] - 200e-6) < 1e-12


def test_trace_file_name_is_safe(tmp_path):
    p = trace_file(tmp_path, "a/b c@1M", 3)
    assert p.parent == tmp_path / "traces" and p.name == "a_b_c@1M.rank3.json"


@pytest.mark.slow
def test_profile_collectives_writes_labelled_traces_per_rank(tmp_path):
    out = tmp_path / "res"
    p = run_cli("collectives", "-c", "all_reduce", "--sizes", "4K,64K", "--nproc", "2", "--budget-s", "0.005",
                "--warmup", "1", "--iters", "3", "--profile-size", "64K", "--no-telemetry", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    run = next((out / "collectives").iterdir())
    traces = sorted((run / "traces").glob("*.json"))
    assert [t.name.rsplit(".", 2)[-2] for t in traces] == ["rank0", "rank1"], traces
    res = pd.read_parquet(run / "results.parquet")
    at = res.set_index("size_bytes")["profile_trace"]
    assert pd.isna(at[4096]) and (run / at[65536]).exists()  # only the asked size is traced
    for t in traces:
        events = json.loads(t.read_text())["traceEvents"]
        case_id = res["case_id"].iloc[0]
        labels = [e for e in events if e.get("name") == f"{case_id}@65536B"]
        assert len(labels) == 3  # active=3 of the wait/warmup/active schedule
        assert any("allreduce" in e.get("name", "") or "all_reduce" in e.get("name", "") for e in events
                   if e.get("name") != f"{case_id}@65536B")
        b = trace_breakdown(t, label=case_id)
        assert b["steps"] == 3 and b["comm_s"] > 0 and b["span_s"] > 0


def test_profile_bad_size_is_a_usage_error(tmp_path):
    out = tmp_path / "res"
    p = run_cli("collectives", "--profile-size", "lots", "--out", str(out))
    assert_usage_error(p.returncode, p.stderr, "lots", out)
    p = run_cli("pipeline", "--profile", "2", "--out", str(out))
    assert_usage_error(p.returncode, p.stderr, "profile 2 must be 0 or 1", out)
