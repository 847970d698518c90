"""`distbench injob` on real gloo jobs: a DDP job this test profiles on 2 ranks (its gradient buckets are
the all_reduce sizes read back, exactly), the traces `distbench strategies --profile 1` writes, and the
in-job / benchmark ratio per size against a `distbench collectives` run made here."""

import json

import pandas as pd
import pytest
from conftest import run_cli, spawn

from bench.imports import kineto
from bench.imports.injob import read_bytes, summarize

STEPS = 3
WEIGHTS = [(256, 1024), (1024, 512), (512, 768)]  # Linear(in, out, bias=False): every weight >= 1 MiB


def _ddp_job(info, out_dir: str, steps: int) -> dict:
    """One rank: a 3-layer bias-free MLP under DDP(bucket_cap_mb=1), `steps` steps under the profiler
    (record_shapes=True: gloo's spans carry their sizes); DDP's own account of its buckets."""
    import torch  # lazy: in the spawned rank only
    from torch.nn.parallel import DistributedDataParallel as DDP  # lazy: in the spawned rank only

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(i, o, bias=False) for i, o in WEIGHTS])
    ddp = DDP(model, bucket_cap_mb=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            ddp(torch.randn(4, WEIGHTS[0][0])).sum().backward()
    path = f"{out_dir}/ddp.rank{info.rank}.json"
    prof.export_chrome_trace(path)
    log = ddp._get_ddp_logging_data()
    ints = lambda text: [int(x) for x in str(text).split(",") if x.strip()]  # noqa: E731
    return {"path": path, "first": ints(log["bucket_sizes"]), "rebuilt": ints(log["rebuilt_bucket_sizes"])}


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    res = spawn(_ddp_job, 2, str(out), STEPS, timeout_s=60.0)
    return [res[r] for r in sorted(res)]


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory, ddp_job):
    """A distbench collectives run of all_reduce at the buckets' sizes, 2 gloo ranks."""
    out = tmp_path_factory.mktemp("bench")
    sizes = ",".join(str(s) for s in sorted(set(ddp_job[0]["rebuilt"])))
    p = run_cli("collectives", "-c", "all_reduce", "--sizes", sizes, "--nproc", "2", "--budget-s", "0.005",
                "-w", "1", "-n", "3", "--no-telemetry", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    return next((out / "collectives").iterdir())


def test_ddp_buckets_are_the_all_reduce_sizes_read_from_the_trace(ddp_job):
    weights = [i * o * 4 for i, o in WEIGHTS]
    for facts in ddp_job:
        # bucket_cap_mb=1 and every weight >= 1 MiB: after the first step each weight is a bucket, last layer first
        assert facts["rebuilt"] == weights[::-1]
        r = kineto.read(facts["path"], read_bytes(facts["path"]))
        got = sorted(c.size_bytes for c in r.calls if c.collective == "all_reduce")
        # the first step reduces DDP's first buckets, every later step the rebuilt ones
        assert got == sorted(facts["first"] + facts["rebuilt"] * (STEPS - 1))
        assert {(c.dtype, c.group, c.group_size) for c in r.calls if c.collective == "all_reduce"} == \
            {("float32", "default_pg", 2)}
        assert r.backend == "gloo" and r.devices == [] and r.host_waits
        assert all(c.duration_s > 0 for c in r.calls)


def _span_medians(path) -> dict[int, float]:
    """size in bytes -> this rank's median gloo:all_reduce span (seconds), read straight from the JSON."""
    events = json.loads(open(path).read())["traceEvents"]
    rows = [{"size": e["args"]["Input Dims"][0][0] * 4, "dur": e["dur"] * 1e-6} for e in events
            if e.get("name") == "gloo:all_reduce"]
    return pd.DataFrame(rows).groupby("size")["dur"].median().to_dict()


def test_summary_is_per_rank_median_then_spread_over_ranks(ddp_job):
    reads = [kineto.read(f["path"], read_bytes(f["path"])) for f in ddp_job]
    s = summarize(reads).set_index(["collective", "size_bytes"])
    per_rank = [_span_medians(f["path"]) for f in ddp_job]
    for size in ddp_job[0]["rebuilt"]:
        row = s.loc[("all_reduce", size)]
        meds = [m[size] for m in per_rank]
        assert row["time_rank_min_s"] == pytest.approx(min(meds), rel=1e-12)
        assert row["time_rank_max_s"] == pytest.approx(max(meds), rel=1e-12)
        assert row["time_s"] == row["time_rank_max_s"]
        assert row["calls"] == 2 * (STEPS - 1) and row["ranks"] == 2
        assert row["slowest_rank"] == str(meds.index(max(meds)))
        assert row["busbw_gbps"] == pytest.approx(size / row["time_s"] / 1e9 * 2 * (2 - 1) / 2, rel=1e-12)


def test_ratio_per_size_against_a_collectives_run(ddp_job, bench_run, tmp_path):
    p = run_cli("injob", *[f["path"] for f in ddp_job], "--against", str(bench_run), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    bench = pd.read_parquet(bench_run / "results.parquet")
    assert doc["machine_warnings"] == [] and doc["in_job"]["host_waits"] is True
    rows = {r["size_bytes"]: r for r in doc["rows"] if r["collective"] == "all_reduce"}
    for size in ddp_job[0]["rebuilt"]:
        r = rows[size]
        b = bench[(bench["size_bytes"] == size) & (bench["placement"] == "in-place")].iloc[0]
        assert r["bench_time_s"] == b["time_median_s"] and r["bench_case_id"] == b["case_id"]
        assert r["bench_busbw_gbps"] == b["busbw_gbps"]
        assert r["ratio"] == pytest.approx(r["time_s"] / b["time_median_s"], rel=1e-12)
        assert r["note"] == ""
    first = sum(ddp_job[0]["first"])  # the first step's single bucket: no benchmark row at its size
    assert rows[first]["ratio"] is None and rows[first]["note"] == "no benchmark row at this size"
    table = run_cli("injob", *[f["path"] for f in ddp_job], "--against", str(bench_run))
    assert table.returncode == 0 and "INCLUDING host-side waits" in table.stdout
    assert "no benchmark row at this size" in table.stdout


def test_saved_in_job_run_is_drawn_beside_the_benchmark(ddp_job, bench_run, tmp_path):
    out = tmp_path / "results"
    p = run_cli("injob", *[f["path"] for f in ddp_job], "--against", str(bench_run), "--save", "--out", str(out))
    assert p.returncode == 0, p.stderr
    saved = next((out / "injob").iterdir())
    meta = json.loads((saved / "meta.json").read_text())
    assert meta["kind"] == "collectives" and meta["source"]["tool"] == "torch-profiler"
    assert meta["launches"]["2"]["ranks"][0]["device"] == "cpu" and meta["launches"]["2"]["backend"] == "gloo"
    res = pd.read_parquet(saved / "results.parquet")
    assert set(res["mode"]) == {"injob"} and set(res["device_type"]) == {"cpu"}
    rep = run_cli("report", str(bench_run), str(saved), "--output-dir", str(tmp_path / "report"))
    assert rep.returncode == 0, rep.stderr
    html = (tmp_path / "report" / "index.html").read_text()
    assert "torch-profiler" in html and "mode latency vs injob" in html  # side by side, no ratio: why


@pytest.mark.slow
def test_traces_of_distbench_strategies_profile(tmp_path):
    """`distbench strategies -s ddp --profile 1` traces: the one DDP bucket (mlp-tiny fits in 25 MB) is
    every all_reduce read back, 3 active profiled steps per rank."""
    from bench.workloads.models import build_model  # lazy: torch, for this test only
    from bench.workloads.specs import get_spec  # lazy: with build_model

    out = tmp_path / "res"
    p = run_cli("strategies", "-s", "ddp", "--models", "mlp-tiny", "--nproc", "2", "--profile", "1", "--steps", "5",
                "--warmup", "1", "--no-telemetry", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    traces = sorted(next((out / "strategies").iterdir()).glob("traces/*.json"))
    params = sum(t.numel() * t.element_size() for t in build_model(get_spec("mlp-tiny"), 0).parameters())
    for path in traces:
        r = kineto.read(path, read_bytes(path))
        assert [c.size_bytes for c in r.calls if c.collective == "all_reduce"] == [params] * 3
