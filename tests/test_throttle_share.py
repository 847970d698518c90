"""A case is flagged `throttled` by the share of its sampling instants at which
the clocks were cut (more than THROTTLED_SHARE), not by one such sample; and the gate says how
many cases it left undecided because of throttling. Samples are read through the fake pynvml."""

import pandas as pd
import pytest

from telemetry_fakes import fake_nvml, three_gpus
from test_compare_gate import TRUE, make_baseline, make_run
from test_gate_groups import _launches

from bench.regress.gate import gate, gate_ab
from bench.telemetry import nvml
from bench.telemetry.summary import THROTTLED_SHARE, summarize

TICKS = 20


def _case(capped: set[int], ticks: int = TICKS) -> dict:
    """One GPU read `ticks` times by the NVML probe; at the instants in `capped` it sits at its
    power cap with the SM clock cut below the application clock (a cut, nvml.throttled)."""
    g = three_gpus()[0]
    probe = nvml.GpuProbe(fake_nvml([g]), g, g.uuid, pids=set())
    out = []
    for i in range(ticks):
        g.reasons, g.sm_mhz = (0x4, 1500) if i in capped else (0x0, 1980)
        probe.read(float(i), out)
    node = {"host": "h", "node_rank": 0, "gpus": [g.uuid], "gpu_status": "", "ticks": ticks, "samples": out,
            "missing": {}}
    return summarize([node], 0.0, ticks * 0.1, 0.1)


def test_the_threshold_is_a_tenth():
    assert THROTTLED_SHARE == 0.10


@pytest.mark.parametrize("capped,want", [
    (set(), False),
    ({7}, False),  # one power-capped sample of 20 (5%): before the fix it flagged the whole case
    ({3, 4}, False),  # 10%: not more than the threshold
    ({3, 4, 5}, True),  # 15%
    (set(range(TICKS)), True),
])
def test_a_case_is_throttled_by_the_share_of_its_samples(capped, want):
    s = _case(capped)
    assert s["throttled"] is want
    assert s["throttle_reasons"] == ("sw_power_cap" if capped else "")  # every reason seen is still listed


def test_a_single_reading_that_is_cut_flags_the_case():
    assert _case({0}, ticks=1)["throttled"] is True  # a case shorter than the interval: 1 of 1


def test_an_instant_counts_when_any_gpu_of_the_node_is_cut():
    """Two GPUs, 10 instants; GPU-b is cut at 2 of them: 2 of 10 instants (20%) are throttled (the
    step waits for the slowest GPU), though only 2 of 20 device samples (10%) are."""
    s = []
    for t in range(10):
        s += [(float(t), "GPU-a", None, None, "clock_event_reasons", 0.0),
              (float(t), "GPU-b", None, None, "clock_event_reasons", float(0x8 if t < 2 else 0x0))]
    node = {"host": "h", "node_rank": 0, "gpus": ["GPU-a", "GPU-b"], "gpu_status": "", "ticks": 10,
            "samples": s, "missing": {}}
    assert summarize([node], 0.0, 1.0, 0.1)["throttled"] is True


NOTE = ("{n} of {total} gated case(s) left undecided because of throttling (telemetry `throttled`: "
        "clocks cut at more than 10% of the case's sampling instants): reported, not decided")


def test_the_gate_says_how_many_cases_throttling_left_undecided(tmp_path):
    base = make_baseline(tmp_path)
    hit = {k: True for k in list(TRUE)[:2]}
    v = gate(base, make_run(tmp_path / "cur", "cur", dict(TRUE), throttled=hit))
    assert v.exit_code == 0
    assert NOTE.format(n=2, total=12) in v.notes
    assert "  note: " + NOTE.format(n=2, total=12) in v.to_text()


def test_the_ab_gate_counts_cases_not_metrics():
    """A training case has two gated metrics (step time and peak memory): a throttled case is one
    case left undecided, not two."""
    base, cand = _launches("strategies", 4, "a", 1), _launches("strategies", 4, "b", 2)
    for df in (base, cand):
        df["peak_memory_bytes"] = 1e9
    throttled_ids = sorted(cand["case_id"].unique())[:3]
    cand["throttled"] = cand["case_id"].isin(throttled_ids)
    v = gate_ab(base, cand, "strategies")
    assert NOTE.format(n=3, total=12) in v.notes
    assert int((v.cases["verdict"] == "throttled").sum()) == 6  # 3 cases x 2 gated metrics
    assert isinstance(v.cases, pd.DataFrame)


# ---- a training case: the share over its timed steps, not its warm-up and check ---------------

def _node(capped: set[int], ticks: int, t0: float, node_rank: int = 0, host: str = "h") -> dict:
    """A node's sampler payload: one GPU read at t0 + 0.1 i (Unix seconds on that node's clock),
    cut at the instants in `capped`."""
    g = three_gpus()[0]
    probe = nvml.GpuProbe(fake_nvml([g]), g, g.uuid, pids=set())
    out = []
    for i in range(ticks):
        g.reasons, g.sm_mhz = (0x4, 1500) if i in capped else (0x0, 1980)
        probe.read(round(t0 + 0.1 * i, 6), out)
    return {"host": host, "node_rank": node_rank, "gpus": [g.uuid], "gpu_status": "", "ticks": ticks,
            "samples": out, "missing": {}}


def _facts(walls: list[tuple[float, float]], steps: int = 3) -> list[dict]:
    """Every rank's facts (two pipeline ranks) with its timed steps spread over its wall window."""
    from bench.training.replay import gpipe_order

    mem = {"memory_kind": "host", "peak_allocated_bytes": None, "peak_active_bytes": None,
           "peak_reserved_bytes": None, "device_used_bytes": None, "device_total_bytes": None,
           "host_peak_rss_bytes": 7, "host_peak_is_lifetime": False}
    out = []
    for r, (a, b) in enumerate(walls):
        cuts = [a + (b - a) * k / steps for k in range(steps + 1)]
        recs = [{"span": (0.0, 4.0), "wall": (cuts[k], cuts[k + 1]),
                 "spans": [("fwd", r, 0, float(r), r + 1.0), ("bwd", r, -1, 3.0 - r, 4.0 - r)], "waits": []}
                for k in range(steps)]
        out.append({"recs": recs, "mem": mem, "solo_s": float("nan"), "role": f"stages {r}", "degraded": "",
                    "devices": 1, "comm_in_compute": False, "order": gpipe_order(2, 1) if r == 0 else None,
                    "params": 10})
    return out


def _measured_row(monkeypatch, nodes: list[dict], walls: list, node_ranks: list[int]) -> dict:
    """bench.training.measure.measure on rank 0 of a fake launch: the case's telemetry window
    holds `nodes`' samples (whole case: check, warm-up, timed steps, solo steps), its ranks timed
    their steps within `walls` (one per rank)."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from bench.telemetry.summary import long_rows
    from bench.training import measure
    from bench.training.case import CaseSpec

    t0 = min(s[0] for n in nodes for s in n["samples"])
    t1 = max(s[0] for n in nodes for s in n["samples"])
    tc = SimpleNamespace(summary=summarize(nodes, t0, t1, 0.1), rows=long_rows(nodes, "r", "c", {}, t0), energy=None)

    @contextmanager
    def case(case_id, **keys):
        yield tc

    monkeypatch.setattr(measure, "measure_case", lambda *a, **k: {"facts": _facts(walls), "check": None, "loss": 1.0})
    monkeypatch.setattr(measure, "RunDir", SimpleNamespace(of=lambda cfg, run_id: SimpleNamespace(path=None)))
    base_row = {"run_id": "r", "suite": "s", "kind": "k", "world": 2, "nodes": len(set(node_ranks)), "backend": "gloo",
                "device_type": "cpu", "threads_per_rank": 1, "oversubscribed": False, "degraded": ""}
    launch = SimpleNamespace(tel=SimpleNamespace(case=case), job=SimpleNamespace(config=SimpleNamespace()), comm=None,
                             run_id="r", info=SimpleNamespace(rank=0), base_row=lambda: base_row,
                             hosts=["h"] * len(node_ranks), node_ranks=node_ranks, nodes=len(set(node_ranks)))
    case_spec = CaseSpec(strategy="pp", model="mlp-pipe", world=2, chunks=1, schedule="gpipe", batch=8)
    return measure.measure(case_spec, launch)["results"][0]


def test_a_training_case_is_not_flagged_by_its_warm_up(monkeypatch):
    """40 instants: the check and warm-up (the first 20) ran power-capped, the timed steps (instants
    20..29, Unix 1002.0..1002.9) did not. Over the whole case 50% were cut (flagged, before); over
    the timed steps none."""
    node = _node(set(range(20)), 40, 1000.0)
    row = _measured_row(monkeypatch, [node], [(1002.0, 1002.9), (1002.0, 1002.9)], [0, 0])
    assert row["throttled"] is False
    assert row["throttle_reasons"] == ""  # no reason seen in the timed steps


def test_a_throttled_timed_window_is_not_diluted_by_the_rest_of_the_case(monkeypatch):
    """2 of the 10 timed instants cut (20%: throttled), 2 of the case's 40 (5%: not, before)."""
    node = _node({22, 25}, 40, 1000.0)
    row = _measured_row(monkeypatch, [node], [(1002.0, 1002.9), (1002.0, 1002.9)], [0, 0])
    assert row["throttled"] is True and row["throttle_reasons"] == "sw_power_cap"
    assert row["case_start_unix_s"] == 1000.0  # the telemetry window itself is the whole case's


def test_timed_steps_shorter_than_the_interval_are_judged_by_the_instants_around_them(monkeypatch):
    """No sampling instant falls inside 1002.01..1002.05: the instants on either side of it
    (1002.0, cut, and 1002.1, not) judge it: 1 of 2 cut."""
    node = _node({20}, 40, 1000.0)
    row = _measured_row(monkeypatch, [node], [(1002.01, 1002.05), (1002.02, 1002.05)], [0, 0])
    assert row["throttled"] is True


def test_each_node_is_judged_on_its_own_clock(monkeypatch):
    """Two nodes whose clocks differ by 500 s: each node's instants are taken within the timed
    window its own ranks stamped. Node 1 (clock +500 s) was cut at 3 of its 10 timed instants: 3 of
    the 20 timed (node, instant) pairs (15%), though 3 of the case's 80 (4%, not flagged before)."""
    n0 = _node(set(), 40, 1000.0)
    n1 = _node({21, 23, 27}, 40, 1500.0, node_rank=1, host="h1")
    row = _measured_row(monkeypatch, [n0, n1], [(1002.0, 1002.9), (1502.0, 1502.9)], [0, 1])
    assert row["throttled"] is True
