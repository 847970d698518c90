"""The overlap kind: its figures (exact formulas), its parts (what each times, in which order), its
config and CLI errors, the CUDA path on a faked stream, and a real launch on 2 gloo ranks whose
stored figures are the formulas of its own raw samples."""

import math
import time
from contextlib import nullcontext

import numpy as np
import pytest
import torch

from bench.overlap import compute as ovc
from bench.overlap.figures import (exposed_share, hidden_share, ideal_hidden_share, overlap_efficiency, pair_columns,
                                   slowdown)
from bench.overlap.measure import pair_row_stats, rotation
from conftest import assert_usage_error, run_cli


def test_the_figures_are_their_definitions():
    # comm 10, compute 30, both 32: 8 of the 10 ms hidden
    assert hidden_share(10.0, 30.0, 32.0) == pytest.approx(0.8)
    assert overlap_efficiency(10.0, 30.0, 32.0) == pytest.approx(0.8)  # the shorter side is the comm
    assert ideal_hidden_share(10.0, 30.0) == 1.0
    # comm 40, compute 10, both 45: 5 saved of the 10 the shorter side could hide
    assert hidden_share(40.0, 10.0, 45.0) == pytest.approx(5 / 40)
    assert overlap_efficiency(40.0, 10.0, 45.0) == pytest.approx(0.5)
    assert ideal_hidden_share(40.0, 10.0) == pytest.approx(0.25)
    # unclamped: together slower than one after the other
    assert hidden_share(10.0, 10.0, 25.0) == pytest.approx(-0.5)
    assert overlap_efficiency(10.0, 10.0, 25.0) == pytest.approx(-0.5)
    assert slowdown(15.0, 10.0) == 1.5 and math.isnan(slowdown(1.0, 0.0)) and math.isnan(hidden_share(0.0, 1.0, 1.0))
    exposed, hidden = exposed_share(t_step=12.0, t_compute=9.0, t_comm_alone=4.0)
    assert (exposed, hidden) == (3.0, pytest.approx(0.25))
    cols = pair_columns(10.0, 30.0, 32.0, 11.0, 33.0)
    assert cols["comm_slowdown"] == pytest.approx(1.1) and cols["compute_slowdown"] == pytest.approx(1.1)
    assert cols["overlap_both_s"] == 32.0 and cols["hidden_share"] == pytest.approx(0.8)


def test_parts_rotate_and_repetitions_reduce_by_max_over_ranks():
    assert [rotation(r) for r in range(4)] == [("comm", "compute", "both"), ("compute", "both", "comm"),
                                               ("both", "comm", "compute"), ("comm", "compute", "both")]
    # two ranks x three repetitions: per repetition the max over ranks, then the median
    got = pair_row_stats({"comm": np.array([[1.0, 5.0, 3.0], [2.0, 1.0, 4.0]])})
    assert got == {"comm": 4.0}


class _Work:
    def __init__(self, log, seconds):
        self.log, self.seconds = log, seconds

    def wait(self):
        time.sleep(self.seconds)
        self.log.append("comm.wait")


def test_host_parts_start_the_compute_first_and_time_each_side():
    log = []
    hc = ovc.HostCompute(lambda: (log.append("compute"), time.sleep(0.02)), threads=1)
    try:
        comm = lambda a: (log.append(f"comm async={a}"), _Work(log, 0.005))[1]  # noqa: E731
        assert set(ovc.host_part("comm", comm, hc)) == {"comm"}
        assert set(ovc.host_part("compute", comm, hc)) == {"compute"}
        log.clear()
        both = ovc.host_part("both", comm, hc)
    finally:
        hc.close()
    assert set(both) == {"both", "both.comm", "both.compute"}
    assert log[0] in ("compute", "comm async=True") and "comm.wait" in log  # the compute woken, the comm issued
    assert both["both"] >= max(both["both.comm"], both["both.compute"]) - 1e-9  # until both finish


def test_a_failing_compute_action_raises_on_the_rank():
    hc = ovc.HostCompute(lambda: 1 / 0, threads=1)
    try:
        with pytest.raises(ZeroDivisionError):
            ovc.host_part("compute", lambda a: None, hc)
    finally:
        hc.close()


def test_the_cuda_part_times_each_side_with_events_on_its_own_stream(monkeypatch):
    """torch.cuda faked: events take scripted device times in record order (start, compute end on
    the side stream, comm end on the current stream)."""
    times = [0.0, 0.030, 0.012]  # start; compute ends at 30 ms (side stream); comm ends at 12 ms
    calls = []

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self, stream=None):
            calls.append(("record", "side" if stream is not None else "current"))
            self.t = times.pop(0)

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    class Side:
        def wait_event(self, e):
            calls.append(("side waits for start", e.t))

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("synchronize", None)))
    got = ovc.cuda_part("both", lambda a: None, lambda: calls.append(("compute", None)), Side())
    assert got == {"both": pytest.approx(0.030), "both.comm": pytest.approx(0.012), "both.compute": pytest.approx(0.030)}
    assert calls == [("record", "current"), ("side waits for start", 0.0), ("compute", None), ("record", "side"),
                     ("record", "current"), ("synchronize", None)]


@pytest.mark.parametrize("args,message", [
    (["-c", "all_reduce,bogus"], "collective 'bogus' is not one of all_reduce"),
    (["--compute", "fft"], "compute 'fft' is not one of gemm, sleep"),
    (["--training", "zero"], "training 'zero' is not one of ddp, fsdp"),
    (["--bucket-cap-mb", "1,x"], "--bucket-cap-mb '1,x' is not a comma list of numbers"),
    (["--bucket-cap-mb", "0"], "bucket_cap_mb 0.0 must be > 0"),
    (["--nproc", "1"], "world size 1 must be >= 2"),
    (["--compute-s", "0"], "compute_s 0.0 must be > 0"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, message):
    r = run_cli("overlap", "--out", str(tmp_path / "out"), *args, timeout=120)
    assert_usage_error(r.returncode, r.stderr, message, tmp_path / "out")


def test_units_name_their_cases():
    from bench.overlap.config import OverlapConfig
    from bench.overlap.kind import units

    cfg = OverlapConfig(collectives=("all_reduce",), sizes=("4K", "1M"), training=("ddp", "fsdp"), bucket_cap_mb=(1.0, 25.0))
    got, notes = units(cfg, 2, {})
    assert [u.key for u in got] == ["overlap.all_reduce.float32.gemm@4096B", "overlap.all_reduce.float32.gemm@1048576B",
                                    "overlap.ddp.mlp-pipe.bucket1MB", "overlap.ddp.mlp-pipe.bucket25MB",
                                    "overlap.fsdp.mlp-pipe.implicit", "overlap.fsdp.mlp-pipe.explicit"]
    assert notes == []


def test_a_real_launch_stores_figures_that_are_the_formulas_of_its_samples(tmp_path, capsys):
    from bench.cli import main
    from bench.results.schema import TABLES
    from bench.results.store import load_run

    r = run_cli("overlap", "--nproc", "2", "--backend", "gloo", "-c", "all_reduce", "--sizes", "4K", "--reps", "3",
                "--warmup", "0", "--compute", "sleep", "--compute-s", "0.005", "--training", "ddp",
                "--bucket-cap-mb", "1", "--steps", "5", "--model", "mlp-tiny", "--no-telemetry", "--out", str(tmp_path),
                timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run_dir = next((tmp_path / "overlap").iterdir())
    run = load_run(run_dir)
    res, samples = run["results"], run["overlap_samples"]
    assert list(res.columns) == list(TABLES["results"])
    pair = res[res["overlap_test"] == "pair"].iloc[0]
    med = {}
    for part, g in samples[samples["case_id"] == pair["case_id"]].groupby("part"):
        assert len(g) == 2 * 3  # every rank's every repetition
        med[part] = float(np.median(g.groupby("iteration")["seconds"].max()))
    assert set(med) == {"comm", "compute", "both", "both.comm", "both.compute"}
    assert pair["overlap_comm_s"] == med["comm"] and pair["overlap_both_s"] == med["both"]
    assert pair["hidden_share"] == pytest.approx(hidden_share(med["comm"], med["compute"], med["both"]))
    assert pair["compute_target_s"] == 0.005 and pair["overlap_compute"] == "sleep"
    ddp = res[res["overlap_test"] == "ddp"].iloc[0]
    # mlp-tiny: 4 Linear(32, 32) blocks and a head? Every parameter's gradient is in one bucket or another
    params = sum(p.numel() for p in __import__("bench.workloads", fromlist=["build_model"]).build_model(
        __import__("bench.workloads", fromlist=["get_spec"]).get_spec("mlp-tiny"), 0).parameters())
    assert sum(int(b) for b in ddp["bucket_bytes"].split(",")) == 4 * params and ddp["buckets"] >= 1
    assert ddp["overlap_exposed_s"] == pytest.approx(ddp["overlap_both_s"] - ddp["overlap_compute_s"])
    assert main(["show", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    assert "hidden = (comm + compute - both) / comm" in shown and "ddp bucket 1 MB" in shown
    assert main(["report", str(run_dir), "--output-dir", str(tmp_path / "rep")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "rep").rglob("*overlap-*.png"))
    assert any("hidden" in p for p in pngs) and any("ddp" in p for p in pngs)


def test_nccl_channel_counts_are_one_launch_each_under_the_ctas_variables(monkeypatch):
    import dataclasses

    from bench.errors import BenchError
    from bench.overlap.config import OverlapConfig
    from bench.overlap.kind import plan, units

    monkeypatch.delenv("RANK", raising=False)
    cfg = OverlapConfig(collectives=("all_reduce",), sizes=("1M",), training=(), nccl_ctas=(2, 16))
    p = plan(cfg, "nccl", (2,))
    assert [(lp.key, lp.env, lp.config.nccl_ctas) for lp in p.launches] == [
        ("2:ctas2", {"NCCL_MIN_CTAS": "2", "NCCL_MAX_CTAS": "2"}, (2,)),
        ("2:ctas16", {"NCCL_MIN_CTAS": "16", "NCCL_MAX_CTAS": "16"}, (16,))]
    assert [u.key for u in units(p.launches[1].config, 2, {})[0]] == ["overlap.all_reduce.float32.gemm.ctas16@1048576B"]
    with pytest.raises(BenchError, match="sets NCCL's channels and this run uses gloo"):
        plan(cfg, "gloo", (2,))
    assert len(plan(dataclasses.replace(cfg, nccl_ctas=()), "gloo", (2,)).launches) == 1


def test_fsdp_with_and_without_explicit_prefetch_is_measured(tmp_path):
    from bench.results.store import load_run

    r = run_cli("overlap", "--nproc", "2", "--backend", "gloo", "-c", "all_reduce", "--sizes", "4K", "--reps", "1",
                "--warmup", "0", "--compute", "sleep", "--compute-s", "0.001", "--training", "fsdp", "--steps", "5",
                "--model", "mlp-tiny", "--no-telemetry", "--out", str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = load_run(next((tmp_path / "overlap").iterdir()))["results"]
    fsdp = res[res["overlap_test"] == "fsdp"].set_index("prefetch")
    assert sorted(fsdp.index) == ["explicit", "implicit"]
    for p in ("explicit", "implicit"):
        row = fsdp.loc[p]
        assert row["overlap_exposed_s"] == pytest.approx(row["overlap_both_s"] - row["overlap_compute_s"])
        assert row["overlap_comm_s"] > 0 and row["iters"] == 5
