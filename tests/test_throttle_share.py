"""Issue 31 item 9: a case is flagged `throttled` by the share of its sampling instants at which
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
