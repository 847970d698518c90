"""`distbench doctor` (bench/doctor): the round schedule (every ordered pair exactly once, no rank
twice in a round), the statistics and the verdict on known matrices with planted outliers, the
group expectation's formula, bad input, and one real launch at world 4 on gloo (rows, schema,
show, report, exit code)."""

import itertools
import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from bench.doctor import compute as doctor_compute
from bench.doctor.config import DoctorConfig
from bench.doctor.kind import acceptance
from bench.doctor.schedule import INTER, INTRA, circle, node_pair_subrounds, nodes_of, rounds_for
from bench.doctor.summary import doctor_summary, thresholds_of
from bench.doctor.verdict import (Thresholds, compute_table, diagnose, expected_allreduce_s, fmt_bw, pair_matrix, robust,
                                  verdict_of)
from bench.errors import BenchError
from tests.conftest import run_cli
from tests.telemetry_fakes import FakeGpu, fake_nvml

LAYOUTS = [(1, 1), (1, 2), (1, 5), (2, 1), (3, 1), (4, 1), (2, 2), (2, 3), (3, 2), (3, 3), (4, 2), (5, 2), (4, 3),
           (5, 3), (8, 1), (8, 2), (6, 4), (7, 3)]


def _layout(m: int, k: int) -> list[list[int]]:
    return [list(range(i * k, (i + 1) * k)) for i in range(m)]


# ---- the schedule --------------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(0, 12))
def test_circle_pairs_every_index_once_and_no_index_twice_in_a_round(n):
    rounds = circle(n)
    assert len(rounds) == (0 if n < 2 else n - 1 if n % 2 == 0 else n)
    seen = Counter(p for r in rounds for p in r)
    assert set(seen) == set(itertools.combinations(range(n), 2)) and set(seen.values()) <= {1}
    for r in rounds:
        flat = [x for p in r for x in p]
        assert len(flat) == len(set(flat))


@pytest.mark.parametrize("m,k", LAYOUTS)
def test_every_ordered_pair_exactly_once_and_no_rank_twice_in_a_round(m, k):
    nodes = _layout(m, k)
    node_of = {r: i for i, n in enumerate(nodes) for r in n}
    rounds = rounds_for(nodes)
    # each round's pair (a, b) is measured a -> b then b -> a: the ordered pairs
    ordered = Counter(d for r in rounds for a, b in r.pairs for d in ((a, b), (b, a)))
    n = m * k
    assert set(ordered) == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert set(ordered.values()) <= {1}
    for r in rounds:
        flat = [x for p in r.pairs for x in p]
        assert len(flat) == len(set(flat)), f"a rank twice in round {r.index}"
        classes = {INTRA if node_of[a] == node_of[b] else INTER for a, b in r.pairs}
        assert classes == {r.link_class}
        assert r.flows == (k if r.link_class == INTER else 1)
    if m % 2 == 0 and k % 2 == 0 or (m, k) in ((2, 1), (4, 1), (8, 1)):
        assert len(rounds) == n - 1  # as many rounds as the plain circle method


@pytest.mark.parametrize("m,k", [(4, 2), (3, 2), (5, 3)])
def test_inter_rounds_share_every_node_link_among_the_same_number_of_flows(m, k):
    """In every inter round each node that takes part sends with exactly k flows (one per rank)."""
    nodes = _layout(m, k)
    node_of = {r: i for i, n in enumerate(nodes) for r in n}
    for r in rounds_for(nodes):
        if r.link_class != INTER:
            continue
        per_node_pair = Counter((node_of[a], node_of[b]) for a, b in r.pairs)
        assert set(per_node_pair.values()) == {k}


def test_uneven_nodes_and_subrounds():
    subs = node_pair_subrounds([0, 1], [2, 3, 4])
    assert len(subs) == 3 and sorted(p for s in subs for p in s) == [(a, b) for a in (0, 1) for b in (2, 3, 4)]
    nodes = [[0, 1, 2], [3], [4, 5]]
    ordered = Counter(d for r in rounds_for(nodes) for a, b in r.pairs for d in ((a, b), (b, a)))
    assert set(ordered) == {(a, b) for a in range(6) for b in range(6) if a != b} and set(ordered.values()) == {1}


def test_nodes_of_groups_ranks_by_host_in_first_rank_order():
    assert nodes_of(["b", "b", "a", "a", "b"]) == (["b", "a"], [[0, 1, 4], [2, 3]])


# ---- the statistics and the verdict on known matrices ------------------------------------------------

def matrix(m: int, k: int, inter=100e6, intra=1000e6, lat=50e-6, noise=0.0, seed=0, slow=None) -> pd.DataFrame:
    """A pair matrix of m nodes of k ranks; `slow(src, dst, src_node, dst_node) -> factor` lowers a bandwidth."""
    rng = np.random.default_rng(seed)
    rows = []
    for a, b in itertools.permutations(range(m * k), 2):
        na, nb = f"node{a // k}", f"node{b // k}"
        bw = (intra if na == nb else inter) * (1 + noise * rng.standard_normal())
        if slow:
            bw *= slow(a, b, na, nb)
        rows.append({"src": a, "dst": b, "src_node": na, "dst_node": nb, "cls": INTRA if na == nb else INTER,
                     "flows": 1 if na == nb else k, "bw": bw, "lat": lat * (1 + noise * abs(rng.standard_normal()))})
    return pd.DataFrame(rows)


def compute(n: int, t=0.01, noise=0.0, seed=0, slow_rank=None, factor=1.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ts = [t * (1 + noise * rng.standard_normal()) * (factor if r == slow_rank else 1.0) for r in range(n)]
    return pd.DataFrame({"rank": range(n), "node": [f"node{r // 2}" for r in range(n)], "t": ts})


TH = Thresholds()


def test_robust_median_and_scaled_mad():
    med, mad = robust([1.0, 2.0, 3.0, 4.0, 100.0])
    assert med == 3.0 and mad == pytest.approx(1.4826)  # |x - 3| = 2,1,0,1,97 -> median 1
    assert all(math.isnan(x) for x in robust([]))


def test_a_healthy_cluster_with_noise_has_no_suspect():
    for seed in range(20):
        for m, k in ((4, 2), (4, 1), (2, 4), (3, 3)):
            assert diagnose(matrix(m, k, noise=0.08, seed=seed), compute(m * k, noise=0.05, seed=seed), TH) == []


def test_a_planted_slow_inter_node_link_is_the_top_suspect_with_exact_evidence():
    slow = matrix(4, 2, slow=lambda a, b, na, nb: 0.5 if {na, nb} == {"node1", "node2"} else 1.0)
    (top,) = diagnose(slow, compute(8), TH)
    assert top.name == "link node1 <-> node2" and top.scope == "node-link" and top.factor == pytest.approx(2.0)
    assert top.evidence == ("link node1 <-> node2: 50 MB/s, median of 12 directed node pairs 100 MB/s, "
                            "inf MADs (the class has no spread) below (-50%)")
    assert sorted(top.explains) == sorted((a, b) for a in (2, 3, 4, 5) for b in (2, 3, 4, 5) if a // 2 != b // 2)


def test_one_direction_of_a_link_is_named_with_its_direction():
    slow = matrix(4, 2, noise=0.03, slow=lambda a, b, na, nb: 0.4 if (na, nb) == ("node0", "node3") else 1.0)
    (top,) = diagnose(slow, compute(8), TH)
    assert top.name == "link node0 -> node3" and "(one direction: node3 -> node0 " in top.evidence


@pytest.mark.parametrize("k", [1, 2])
def test_a_planted_slow_node_is_the_top_suspect_and_explains_its_pairs(k):
    slow = matrix(4, k, noise=0.05, seed=3, slow=lambda a, b, na, nb: 0.3 if "node2" in (na, nb) and na != nb else 1.0)
    found = diagnose(slow, compute(4 * k), TH)
    assert [s.name for s in found] == ["node node2"]
    assert found[0].evidence.startswith("node node2: ") and "with its fastest peer" in found[0].evidence
    assert len(found[0].explains) == 2 * 3 * k * k  # every inter-node pair that touches it


def test_a_planted_slow_rank_compute_is_the_top_suspect_and_explains_its_pairs():
    # the slow rank's pairs are slow too (its CPU moves their bytes): explained by its compute
    pairs = matrix(4, 2, noise=0.05, seed=1, slow=lambda a, b, na, nb: 0.5 if 5 in (a, b) else 1.0)
    found = diagnose(pairs, compute(8, noise=0.03, slow_rank=5, factor=2.5), TH)
    assert [s.name for s in found] == ["rank 5 compute"]
    assert found[0].evidence.startswith("rank 5 (node2) compute: ") and "median of 8 ranks" in found[0].evidence


def test_a_planted_rank_pair_outlier_within_its_class():
    pairs = matrix(2, 4, noise=0.02, seed=2, slow=lambda a, b, na, nb: 0.2 if (a, b) == (1, 6) else 1.0)
    (top,) = diagnose(pairs, compute(8), TH)
    assert top.name == "link rank 1 -> rank 6" and "median of inter-node pairs" in top.evidence


def test_intra_and_inter_pairs_are_never_compared():
    """Inter-node pairs 10x slower than intra-node ones are a class of their own, not outliers."""
    assert diagnose(matrix(2, 4, inter=10e6, intra=1000e6), compute(8), TH) == []


def test_the_relative_floor_keeps_a_tiny_mad_from_flagging_noise():
    """No spread at all (MAD 0), one pair 20% low: many MADs, but under the 30% floor."""
    pairs = matrix(4, 2, slow=lambda a, b, na, nb: 0.8 if (a, b) == (0, 7) else 1.0)
    assert diagnose(pairs, compute(8), TH) == []
    assert [s.name for s in diagnose(pairs, compute(8), Thresholds(min_shortfall=0.1))] == ["link rank 0 -> rank 7"]


def test_latency_outliers_are_judged_unless_ranks_shared_cores():
    pairs = matrix(4, 2)
    pairs.loc[(pairs["src"] == 0) & (pairs["dst"] == 3), "lat"] = 500e-6
    assert [s.name for s in diagnose(pairs, compute(8), TH)] == ["latency rank 0 -> rank 3"]
    assert diagnose(pairs, compute(8), TH, oversubscribed=True) == []
    assert len(diagnose(pairs, compute(8), Thresholds(latency_verdict="on"), oversubscribed=True)) == 1


def test_expected_ring_allreduce_from_the_pair_matrix():
    """2 (n-1) alpha + 2 (n-1)/n S / B; B = the slowest ring hop's bandwidth x its flows."""
    pairs = matrix(2, 2, inter=100e6, intra=1000e6, lat=10e-6)
    # ring 0 -> 2 -> 1 -> 3 -> 0: inter hops only, 100 MB/s x 2 flows
    assert expected_allreduce_s([0, 2], 1_000_000, pairs) == pytest.approx(2 * 10e-6 + 1_000_000 / 200e6)
    assert expected_allreduce_s([0, 1, 2, 3], 4_000_000, pairs) == pytest.approx(6 * 10e-6 + 1.5 * 4_000_000 / 200e6)
    assert math.isnan(expected_allreduce_s([0], 1, pairs))


def test_fmt_bw_is_in_mb_per_s():
    assert fmt_bw(92e6) == "92 MB/s" and fmt_bw(118.4e6) == "118 MB/s"


# ---- the compute probe's GPU facts (faked NVML) and the machine check --------------------------------

def test_gpu_clocks_read_from_a_faked_nvml(monkeypatch):
    gpu = FakeGpu("GPU-aaaa1111-0000-0000-0000-000000000000", (0, 0x1A, 0))
    gpu.sm_mhz, gpu.app_sm_mhz, gpu.reasons = 1410, 1980, 0x8 | 0x4
    monkeypatch.setattr(doctor_compute.nvml, "cuda_identity", lambda d: {
        "cuda_index": 0, "uuid": gpu.uuid[4:], "pci": gpu.pci, "name": gpu.name, "visible": None})
    cuda = SimpleNamespace(type="cuda", index=0)
    out = doctor_compute.gpu_clocks(cuda, fake_nvml([gpu]))
    assert out == {"gpu_sm_clock_mhz": 1410.0, "gpu_app_clock_mhz": 1980.0, "gpu_clock_reasons": "sw_power_cap,hw_slowdown",
                   "gpu_throttled": True, "gpu_clock_note": ""}
    gpu.unsupported.add("nvmlDeviceGetApplicationsClock")
    assert doctor_compute.gpu_clocks(cuda, fake_nvml([gpu]))["gpu_clock_note"] == "not supported"
    assert doctor_compute.gpu_clocks(cuda, fake_nvml([gpu], init_error=12))["gpu_clock_note"] == "NVML: library not found"
    assert doctor_compute.gpu_clocks(SimpleNamespace(type="cpu")) == {}


def test_probe_shape_and_flops():
    assert doctor_compute.probe_shape(SimpleNamespace(type="cpu")) == (512, doctor_compute.torch.float32, 32)
    assert doctor_compute.probe_shape(SimpleNamespace(type="cuda"), 1024, 3) == (1024, doctor_compute.torch.bfloat16, 3)
    assert doctor_compute.flops(512) == 2 * 512 ** 3


def test_ranks_of_several_nodes_on_one_machine_share_its_cores():
    from bench.doctor.measure import sharing_cores

    facts = [{"cores": 2}] * 8
    assert sharing_cores(["boot"] * 8, facts, "cpu")  # a simulated cluster: 8 ranks, one kernel, 2 cores
    assert not sharing_cores([f"m{r // 2}" for r in range(8)], facts, "cpu")  # 4 machines of 2 cores
    assert not sharing_cores(["boot"] * 8, facts, "cuda")


# ---- bad input: one line, exit 2 -----------------------------------------------------------------------

@pytest.mark.parametrize("field,value,message", [
    ("reps", 0, "reps 0 must be >= 1"),
    ("large_bytes", "2K", "large_bytes 2K must be larger than small_bytes 4K"),
    ("small_bytes", "2", "small_bytes '2' must be at least 4 bytes"),
    ("compute_mode", "some", "compute_mode 'some' is not one of auto, each, all"),
    ("min_shortfall", 1.5, "min_shortfall 1.5 must be < 1"),
    ("mad_k", 0.0, "mad_k 0.0 must be > 0"),
    ("latency_verdict", "maybe", "latency_verdict 'maybe' is not one of auto, on, off"),
    ("group_factor", -1.0, "group_factor -1.0 must be >= 0"),
    ("compute_statistic", "mean", "compute_statistic 'mean' is not one of min, median"),
])
def test_bad_config_is_refused(field, value, message):
    with pytest.raises(BenchError, match=message.replace("(", r"\(")):
        DoctorConfig(**{field: value})


@pytest.mark.parametrize("args,message", [
    (["--reps", "0"], "distbench: error: reps 0 must be >= 1"),
    (["--large-bytes", "lots"], "distbench: error: bad size 'lots'"),
    (["--compute-mode", "turbo"], "distbench: error: compute_mode 'turbo' is not one of auto, each, all"),
    (["--mad-k", "x"], "distbench: error: argument --mad-k: invalid float value: 'x'"),
])
def test_bad_options_are_one_line_exit_2(args, message, capsys, tmp_path):
    from bench.cli import main

    assert main(["doctor", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # nothing written


# ---- a stored run: verdict, show, acceptance (exit 1) ----------------------------------------------------

def _rows(pairs: pd.DataFrame, comp: pd.DataFrame, large=4 << 20, small=4096) -> pd.DataFrame:
    rows = []
    for r in pairs.itertuples():
        for size, t in ((large, large / r.bw), (small, r.lat)):
            rows.append({"doctor_test": "pair", "src_rank": r.src, "dst_rank": r.dst, "src_host": r.src_node,
                         "dst_host": r.dst_node, "link_class": r.cls, "concurrent_flows": r.flows, "size_bytes": size,
                         "time_median_s": t, "oversubscribed": False})
    for r in comp.itertuples():
        rows.append({"doctor_test": "compute", "src_rank": r.rank, "src_host": r.node, "time_median_s": r.t,
                     "size_bytes": 0, "oversubscribed": False})
    return pd.DataFrame(rows)


def test_pair_matrix_from_rows_and_acceptance_exit_1():
    pairs = matrix(4, 2, slow=lambda a, b, na, nb: 0.5 if {na, nb} == {"node1", "node2"} else 1.0)
    res = _rows(pairs, compute(8))
    back = pair_matrix(res)
    for col in ("src", "dst", "src_node", "dst_node", "cls", "flows"):
        assert back[col].tolist() == pairs[col].tolist(), col
    assert np.allclose(back["bw"], pairs["bw"]) and np.allclose(back["lat"], pairs["lat"])
    run = SimpleNamespace(tables={"results": res}, meta={"config": DoctorConfig().__dict__})
    cfg = DoctorConfig()
    assert acceptance(run, cfg) == ["doctor: 1 suspect(s); the top one: link node1 <-> node2: 50 MB/s, median of "
                                    "12 directed node pairs 100 MB/s, inf MADs (the class has no spread) below (-50%)"]
    text = doctor_summary(run)
    assert "# verdict: 1 suspect(s), worst first:\n#  1. link node1 <-> node2: 50 MB/s" in text
    healthy = SimpleNamespace(tables={"results": _rows(matrix(4, 2), compute(8))}, meta={"config": {}})
    assert acceptance(healthy, cfg) == [] and doctor_summary(healthy).endswith("# verdict: no suspect")
    assert thresholds_of({"config": {"mad_k": 6, "latency_verdict": "on"}}) == Thresholds(mad_k=6.0, latency_verdict="on")
    assert verdict_of(None, TH) == []


# ---- one real launch: world 4 on gloo -------------------------------------------------------------------

FAST = ["--world", "4", "--backend", "gloo", "--reps", "2", "--warmup", "1", "--large-bytes", "64K",
        "--small-bytes", "1K", "--compute-n", "64", "--compute-iters", "2", "--compute-reps", "2",
        "--group-bytes", "16K", "--no-telemetry"]


@pytest.mark.slow  # a launch of 4 ranks plus the CLI's start: 15-40 s on a busy 2-core machine
def test_a_real_launch_at_world_4_stores_the_matrix_and_show_and_report_draw_it(tmp_path, capsys):
    from bench.cli import main
    from bench.results.schema import TABLES
    from bench.results.store import load_run

    # thresholds no noise can cross (a healthy verdict whatever the machine's load): exit 0
    r = run_cli("doctor", *FAST, "--out", str(tmp_path), "--min-shortfall", "0.99", "--compute-excess", "1000",
                "--latency-verdict", "off", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "# verdict: no suspect" in r.stdout
    run_dir = next((tmp_path / "doctor").iterdir())
    run = load_run(run_dir)
    res = run["results"]
    assert list(res.columns) == list(TABLES["results"])
    pairs = res[res["doctor_test"] == "pair"]
    assert len(pairs) == 4 * 3 * 2  # every ordered pair at both sizes
    assert sorted(set(zip(pairs["src_rank"], pairs["dst_rank"]))) == [(a, b) for a in range(4) for b in range(4) if a != b]
    assert set(pairs["size_bytes"]) == {1024, 65536} and set(pairs["link_class"]) == {"intra"}
    assert (pairs["wrong"] == 0).all() and (pairs["samples"] == 2).all()
    assert (pairs["algbw_gbps"] == pairs["size_bytes"] / pairs["time_median_s"] / 1e9).all()
    comp = res[res["doctor_test"] == "compute"]
    assert sorted(comp["src_rank"]) == [0, 1, 2, 3] and set(comp["gemm_n"]) == {64}
    assert np.allclose(comp["compute_gflops"], 2 * 64 ** 3 / comp["time_median_s"] / 1e9)
    groups = res[res["doctor_test"] == "group"]
    assert groups["group_ranks"].tolist() == ["0,1,2,3"]  # one node: its group; no leaders group of one rank
    samples = run["samples"]
    assert len(samples[samples["case_id"].str.startswith("doctor.pair.")]) == 4 * 3 * 2 * 2
    assert "doctor_suspects" not in run.tables  # no suspect: no rows
    assert main(["show", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    assert "# verdict: no suspect" in shown and "# bandwidth MB/s, row = sender, column = receiver:" in shown
    assert main(["report", str(run_dir), "--output-dir", str(tmp_path / "rep")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "rep").rglob("doctor-*.png"))
    assert len(pngs) == 2 and any("bandwidth" in p for p in pngs) and any("latency" in p for p in pngs)


def test_heatmaps_outline_the_suspects(tmp_path):
    from bench.doctor.plots import section

    pairs = matrix(4, 2, slow=lambda a, b, na, nb: 0.5 if {na, nb} == {"node1", "node2"} else 1.0)
    run = SimpleNamespace(tables={"results": _rows(pairs, compute(8))}, meta={"config": {}})
    sec = section([SimpleNamespace(label="r1", run=run)], tmp_path)
    assert [i.file for i in sec.images] == ["doctor-bandwidth-r1.png", "doctor-latency-r1.png"]
    assert all((tmp_path / i.file).stat().st_size > 0 for i in sec.images)
    assert "link node1 &lt;-&gt; node2" in sec.tables[0][1]


def test_the_report_headline_is_the_latest_runs_bandwidth_heatmap_and_verdict(tmp_path):
    from bench.doctor.plots import headline

    pairs = matrix(4, 2, slow=lambda a, b, na, nb: 0.5 if {na, nb} == {"node1", "node2"} else 1.0)
    sick = SimpleNamespace(tables={"results": _rows(pairs, compute(8))}, meta={"config": {}})
    well = SimpleNamespace(tables={"results": _rows(matrix(4, 2), compute(8))}, meta={"config": {}})
    sec = headline([SimpleNamespace(label="old", run=well, baseline=False),
                    SimpleNamespace(label="new", run=sick, baseline=False)], tmp_path)
    assert [i.file for i in sec.images] == ["headline-doctor-bandwidth-new.png"]
    assert len(sec.tables) == 1 and "link node1 &lt;-&gt; node2" in sec.tables[0][1]
    sec = headline([SimpleNamespace(label="new", run=well, baseline=False)], tmp_path)
    assert "no suspect" in sec.tables[0][1]
    empty = SimpleNamespace(tables={"results": _rows(matrix(4, 2), compute(8)).iloc[0:0]}, meta={"config": {}})
    assert headline([SimpleNamespace(label="e", run=empty, baseline=False)], tmp_path).missing == ["no doctor pair rows"]


def test_the_matmul_probe_runs_on_one_thread_and_restores_the_thread_count():
    import torch

    before = torch.get_num_threads()
    probe = doctor_compute.Matmul(torch.device("cpu"), 32, torch.float32, 2)
    assert probe.rep() > 0 and torch.get_num_threads() == before
    assert torch.equal(probe.out, probe.a @ probe.b)


def test_the_compute_probe_runs_at_once_on_gpus_and_in_turns_on_cpus():
    from bench.doctor.measure import compute_mode

    assert compute_mode("auto", "cuda") == "all" and compute_mode("auto", "cpu") == "each"
    assert compute_mode("all", "cpu") == "all" and compute_mode("each", "cuda") == "each"


def _rounds_on_two_fake_nodes(info, sizes):
    """Every rank of a world-4 gloo group: the pair rounds and the groups as if ranks 0,1 and 2,3 were
    two nodes (the layout is what the schedule is given; the host names do not matter to it)."""
    import torch
    import torch.distributed as dist

    from bench.doctor.probe import node_groups, run_rounds, time_group

    nodes = [[0, 1], [2, 3]]
    rank = dist.get_rank()
    times, wrong = run_rounds(rounds_for(nodes), rank, torch.device("cpu"), sizes, 2, 1, dist.barrier)
    own, lead = node_groups(nodes)
    per_node = time_group(own, 4096, torch.device("cpu"), 2, 1, dist.barrier)
    leaders = time_group(lead, 4096, torch.device("cpu"), 2, 1, dist.barrier)
    return {"times": times, "wrong": wrong, "per_node": per_node, "leaders": leaders}


@pytest.mark.slow  # a spawn of 4 ranks: 5-20 s on a busy 2-core machine
def test_pair_rounds_and_groups_on_two_fake_nodes_at_world_4():
    from tests.conftest import spawn

    out = spawn(_rounds_on_two_fake_nodes, 4, (256, 8192))
    times = {k: v for r in range(4) for k, v in out[r]["times"].items()}
    assert sorted(times) == sorted((a, b, s) for a in range(4) for b in range(4) if a != b for s in (256, 8192))
    assert all(len(v) == 2 and min(v) > 0 for v in times.values())
    wrong = {k: v for r in range(4) for k, v in out[r]["wrong"].items()}
    assert set(wrong) == set(times) and set(wrong.values()) == {0}
    assert [len(out[r]["per_node"]) for r in range(4)] == [2, 2, 2, 2]
    assert [len(out[r]["leaders"]) for r in range(4)] == [2, 0, 2, 0]  # ranks 0 and 2 lead their nodes


def test_compute_uses_each_rank_s_best_repetition_by_default():
    """Rank 1 had a burst of outside load in most repetitions (median high, best fine): not a suspect;
    rank 3 is slow in every repetition (a quota): the suspect, by its best one."""
    rows = pd.DataFrame({"doctor_test": "compute", "src_rank": range(4), "src_host": ["n0", "n1", "n2", "n3"],
                         "time_min_s": [4e-3, 4.1e-3, 3.9e-3, 9.5e-3], "time_median_s": [5e-3, 11e-3, 5e-3, 10e-3]})
    best = diagnose(pair_matrix(None), compute_table(rows), TH)
    assert [s.name for s in best] == ["rank 3 compute"] and "9.5 ms per matmul (min of its repetitions)" in best[0].evidence
    assert compute_table(rows, "median")["t"].tolist() == [5e-3, 11e-3, 5e-3, 10e-3]


@pytest.mark.slow  # a launch of 4 ranks: 15-40 s on a busy 2-core machine
def test_suspects_exit_1_through_the_harness_and_are_stored(tmp_path):
    """Thresholds every difference crosses: the ranks slower than the median rank are compute
    suspects; the run exits 1, says so on stderr, and stores them as doctor_suspects."""
    from bench.results.store import load_run

    r = run_cli("doctor", *FAST, "--out", str(tmp_path), "--mad-k", "1e-9", "--compute-excess", "1e-9",
                "--min-shortfall", "0.99", "--latency-verdict", "off", timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "distbench: doctor: " in r.stderr and "suspect(s); the top one: rank " in r.stderr
    run = load_run(next((tmp_path / "doctor").iterdir()))
    table = run["doctor_suspects"]
    assert list(table["position"]) == list(range(1, len(table) + 1)) and set(table["scope"]) == {"compute"}
    assert len(table) >= 1 and (table["factor"] >= 1).all()


def test_the_summary_of_a_run_without_rows_says_no_suspect():
    text = doctor_summary(SimpleNamespace(tables={}, meta={}))
    assert text.startswith("# doctor: 0 rank(s) on 0 node(s) ()") and text.endswith("# verdict: no suspect")


def test_a_link_slow_both_ways_is_named_in_node_order_whichever_way_is_slower():
    slow = matrix(4, 2, slow=lambda a, b, na, nb: {("node2", "node0"): 0.2, ("node0", "node2"): 0.4}.get((na, nb), 1.0))
    (top,) = diagnose(slow, compute(8), TH)
    assert top.name == "link node0 <-> node2"
    pairs = matrix(2, 4, slow=lambda a, b, na, nb: 0.3 if {a, b} == {1, 6} else 1.0)
    assert [s.name for s in diagnose(pairs, compute(8), TH)] == ["link rank 1 <-> rank 6"]


@pytest.mark.parametrize("m,k,s", [(3, 1, 0.6), (3, 2, 0.6), (3, 1, 0.55), (4, 1, 0.6), (8, 1, 0.6), (3, 1, 0.65)])
def test_a_slow_node_is_found_at_any_cluster_size_its_peers_not_diluted(m, k, s):
    """Issue 47: at 3 nodes the healthy nodes' medians took in their pairs with the slow one
    ((s + 1) / 2 each), so a node at 0.6x read 25% below them and passed the 30% floor. Each
    node is now judged against the pairs that do not touch it (leave one out)."""
    slow = matrix(m, k, noise=0.02, seed=5, slow=lambda a, b, na, nb: s if "node2" in (na, nb) and na != nb else 1.0)
    found = diagnose(slow, compute(m * k), TH)
    assert [x.name for x in found] == ["node node2"]
    assert found[0].factor == pytest.approx(1 / s, rel=0.05)
    assert f"pairs that do not touch it" in found[0].evidence


@pytest.mark.parametrize("k,s", [(1, 0.5), (1, 0.7), (2, 0.5), (1, 0.3)])
def test_a_slow_pair_at_three_nodes_is_a_link_not_a_node(k, s):
    """Each end of a slow link has half its pairs slow; it is not a slow node, because its other
    peer is as fast as ever (a node is judged by its fastest peer)."""
    slow = matrix(3, k, noise=0.02, seed=5, slow=lambda a, b, na, nb: s if {na, nb} == {"node0", "node2"} else 1.0)
    assert [x.name for x in diagnose(slow, compute(3 * k), TH)] == ["link node0 <-> node2"]


def test_the_node_floor_is_its_own():
    """A node 25% slow: below the node floor (20%), above nothing else; --node-shortfall 0.3 hides it."""
    slow = matrix(4, 1, noise=0.01, seed=5, slow=lambda a, b, na, nb: 0.75 if "node2" in (na, nb) and na != nb else 1.0)
    assert [x.name for x in diagnose(slow, compute(4), TH)] == ["node node2"]
    assert diagnose(slow, compute(4), Thresholds(node_shortfall=0.3)) == []


def test_the_ping_pong_leaves_the_peers_late_start_out(monkeypatch):
    """The peer leaves the barrier `lag` seconds after this rank: a single timed round trip read
    (lag + rtt) / 2 as the one-way latency. One untimed trip, then PING_TRIPS timed: rtt / 2."""
    from bench.doctor import probe

    rtt, lag, clock, calls = 100e-6, 5e-3, [0.0], []

    def recv(buf, peer):
        clock[0] += rtt / 2 + (lag if not calls else 0.0)  # the first reply waits for the late peer
        calls.append("recv")

    def send(buf, peer):
        clock[0] += rtt / 2

    class Timer:
        def start(self):
            self.t0 = clock[0]
            calls.append("start")

        def stop(self):
            return clock[0] - self.t0

    monkeypatch.setattr(probe.dist, "send", send)
    monkeypatch.setattr(probe.dist, "recv", recv)
    one_way = probe._ping_pong(0, 1, True, None, Timer())
    assert one_way == pytest.approx(rtt / 2)  # was (lag + rtt) / 2 = 2.55 ms for a 50 us link
    assert calls == ["recv", "start"] + ["recv"] * probe.PING_TRIPS
    calls.clear()
    assert probe._ping_pong(1, 0, False, None, Timer()) is None
    assert calls == ["recv"] * (probe.PING_TRIPS + 1)  # the peer answers the untimed trip and every timed one
