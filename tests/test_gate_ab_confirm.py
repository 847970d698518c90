"""The same-machine A/B gate confirms what its first pairs flag before it fails.

CI refused a submission that changed no collective code: `make gate-ab` against the last landed
main exited 1 on unchanged collectives. Replayed on 30 launches of unchanged code on the 2-core
host (docs/measurements/2026-12-07-gate-ab-confirm.md), one set of P = 5 pairs flags about 1 in
100 times (the launch factor, a group or a case), and with nothing to confirm, the flag failed
CI. These tests feed the A/B runner launches of unchanged code whose first pairs are unlucky (a
one-off all_reduce deviation in the candidate's launches) and launches with a real, lasting
slowdown; the gate passes the first and fails the second.
"""

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from bench.regress import ab
from bench.regress.gate import PASS, REGRESSION, gate_ab
from test_compare_gate import make_run, noisy
from test_gate_groups import _launches, _repo


def _fake(tmp: Path, rng, slow_until: int | None, factor: float = 1.3):
    """A `run` for gate_against: every launch unchanged code with 3% noise, except the candidate's
    launches among the first `slow_until` launches, whose all_reduce cases are x
    factor (None: every candidate launch, a lasting slowdown)."""
    calls = []

    def run(kind, suite, out, cwd=None, env=None, ok_codes=(0,)):
        base = cwd is not None
        calls.append("base" if base else "candidate")
        t = noisy(rng, 0.03)
        if not base and (slow_until is None or len(calls) <= slow_until):
            t = {k: v * (factor if k[0] == "all_reduce" else 1.0) for k, v in t.items()}
        return make_run(tmp / "runs", f"{calls[-1][0]}{len(calls)}", t)

    return run, calls


def test_a_deviation_only_the_first_pairs_show_is_not_a_regression(tmp_path, monkeypatch):
    """The defect: the first pairs alone flag all_reduce (here a deviation of its candidate
    launches that the fresh pairs do not show, as when unchanged code meets unlucky launches),
    and nothing confirmed it."""
    monkeypatch.chdir(_repo(tmp_path))
    run, calls = _fake(tmp_path, np.random.default_rng(1), slow_until=2 * 5)
    v = ab.gate_against("HEAD", "suites/smoke.toml", pairs=5, out=tmp_path / "out", run=run, log=lambda m: None)
    assert v.exit_code == PASS, v.reason
    assert len(calls) == 2 * 5 + 2 * 5  # the 5 pairs, then 5 fresh pairs to confirm
    assert "not confirmed" in v.reason and "all_reduce" in v.reason
    g = v.groups.set_index("group")
    assert g.loc["all_reduce", "verdict"] == "ok" and g.loc["all_reduce", "first_verdict"] == "regression"
    assert "ok (pairs 1-5: regression)" in v.to_text()
    assert v.confirmation["pairs"] == "6-10"


def test_a_lasting_slowdown_is_confirmed_and_fails(tmp_path, monkeypatch):
    monkeypatch.chdir(_repo(tmp_path))
    run, calls = _fake(tmp_path, np.random.default_rng(2), slow_until=None, factor=1.5)
    v = ab.gate_against("HEAD", "suites/smoke.toml", pairs=3, out=tmp_path / "out", run=run, log=lambda m: None)
    assert v.exit_code == REGRESSION, v.reason
    assert "all_reduce" in v.reason and "confirmed by 3 fresh pairs" in v.reason
    assert len(calls) == 2 * 3 + 2 * 3
    # the fresh pairs continue the alternation: over all six pairs each revision goes first three times
    pairs = [tuple(calls[i:i + 2]) for i in range(0, len(calls), 2)]
    assert pairs.count(("base", "candidate")) == pairs.count(("candidate", "base")) == 3
    assert v.to_text().rstrip().splitlines()[-1] == v.headline()  # the verdict is the last line a CI log shows


def test_without_confirmation_the_first_pairs_flag_stands(tmp_path, monkeypatch):
    """--no-confirm: the one look decides, as the gate did before."""
    monkeypatch.chdir(_repo(tmp_path))
    run, calls = _fake(tmp_path, np.random.default_rng(1), slow_until=2 * 5)
    v = ab.gate_against("HEAD", "suites/smoke.toml", pairs=5, out=tmp_path / "out", run=run, log=lambda m: None,
                        confirm=False)
    assert v.exit_code == REGRESSION and "all_reduce" in v.reason and not v.confirmation
    assert len(calls) == 2 * 5


def test_a_clean_first_look_runs_no_fresh_pairs(tmp_path, monkeypatch):
    monkeypatch.chdir(_repo(tmp_path))
    run, calls = _fake(tmp_path, np.random.default_rng(3), slow_until=0)
    v = ab.gate_against("HEAD", "suites/smoke.toml", pairs=3, out=tmp_path / "out", run=run, log=lambda m: None)
    assert v.exit_code == PASS and not v.confirmation
    assert len(calls) == 2 * 3


def test_confirm_ab_rule_each_level():
    """A launch factor, a group or a case stands only when the first pairs and the fresh pairs
    alone both flag it; the table shows all pairs together."""
    from bench.regress.ab import confirm_ab

    a1 = _launches("collectives", 5, "a", 21, launch_sd=0.02)
    a2 = _launches("collectives", 5, "c", 22, launch_sd=0.02)
    slow = lambda c: 1.5 if c["collective"] == "all_reduce" else 1.0  # noqa: E731
    b1 = _launches("collectives", 5, "b", 23, launch_sd=0.02, slow=slow)
    lasting = _launches("collectives", 5, "d", 24, launch_sd=0.02, slow=slow)
    gone = _launches("collectives", 5, "e", 25, launch_sd=0.02)
    first = gate_ab(a1, b1, "collectives")
    assert first.exit_code == REGRESSION
    both = lambda fresh: confirm_ab(first, gate_ab(a2, fresh, "collectives"),  # noqa: E731
                                    gate_ab(pd.concat([a1, a2]), pd.concat([b1, fresh]), "collectives"), pairs=(5, 5))
    v = both(lasting)
    assert v.exit_code == REGRESSION and v.groups.set_index("group").loc["all_reduce", "verdict"] == "regression"
    assert v.cases["first_verdict"].notna().all() and v.cases["fresh_verdict"].notna().all()  # every row joined
    v = both(gone)
    assert v.exit_code == PASS
    assert not (v.cases["verdict"] == "regression").any() and not (v.groups["verdict"] == "regression").any()
    assert (v.groups.set_index("group").loc["all_reduce", "first_verdict"]) == "regression"
    assert v.repeats == 10  # the table is over all ten launches of each revision


def test_confirm_ab_needs_the_same_item_flagged_twice():
    """Two different one-off flags (the first pairs one case, the fresh pairs another) are not a
    confirmation of either."""
    from bench.regress.ab import confirm_ab

    a = _launches("collectives", 5, "a", 31, launch_sd=0.02, resid_sd=0.01)
    a2 = _launches("collectives", 5, "c", 32, launch_sd=0.02, resid_sd=0.01)
    keys = [("all_reduce", 16 << 20), ("broadcast", 64 << 20)]
    hit = lambda k: (lambda c: 2.0 if (c["collective"], c["size_bytes"]) == k else 1.0)  # noqa: E731
    b1 = _launches("collectives", 5, "b", 33, launch_sd=0.02, resid_sd=0.01, slow=hit(keys[0]))
    b2 = _launches("collectives", 5, "d", 34, launch_sd=0.02, resid_sd=0.01, slow=hit(keys[1]))
    first, fresh = gate_ab(a, b1, "collectives"), gate_ab(a2, b2, "collectives")
    assert first.exit_code == fresh.exit_code == REGRESSION
    v = confirm_ab(first, fresh, gate_ab(pd.concat([a, a2]), pd.concat([b1, b2]), "collectives"), pairs=(5, 5))
    assert v.exit_code == PASS, v.reason
    assert math.isfinite(v.kinds.iloc[0]["worse"])


def test_confirm_ab_a_lasting_one_case_slowdown_is_confirmed_as_a_case():
    """One case 1.25x in every candidate launch, too little to move its group (3 cases) beyond
    10%: the case itself is flagged by both looks and stands (the rows join on the full key)."""
    from bench.regress.ab import confirm_ab

    key = ("all_gather_single", 64 << 20)
    hit = lambda c: 1.25 if (c["collective"], c["size_bytes"]) == key else 1.0  # noqa: E731
    kw = dict(launch_sd=0.02, resid_sd=0.01)
    a1, a2 = _launches("collectives", 5, "a", 41, **kw), _launches("collectives", 5, "c", 42, **kw)
    b1, b2 = _launches("collectives", 5, "b", 43, slow=hit, **kw), _launches("collectives", 5, "d", 44, slow=hit, **kw)
    first, fresh = gate_ab(a1, b1, "collectives"), gate_ab(a2, b2, "collectives")
    v = confirm_ab(first, fresh, gate_ab(pd.concat([a1, a2]), pd.concat([b1, b2]), "collectives"), pairs=(5, 5))
    assert v.exit_code == REGRESSION and "1 case(s) regressed" in v.reason
    c = v.cases.query("metric == 'time_median_s'")
    hit_rows = c["case_id"].str.startswith(key[0] + ".") & (c["size_bytes"] == key[1])
    assert list(c[hit_rows]["verdict"]) == ["regression"] and (c[~hit_rows]["verdict"] == "ok").all()
    assert not (v.groups["verdict"] == "regression").any()


def test_confirm_ab_fresh_pairs_that_cannot_be_judged_leave_the_flag_standing_unconfirmed():
    """Fresh pairs measured with other settings (not comparable) confirm nothing and clear nothing:
    the first pairs' flag stands, marked unconfirmed (as a failed re-run of the stored gate)."""
    from bench.regress.ab import confirm_ab

    slow = lambda c: 1.5 if c["collective"] == "all_reduce" else 1.0  # noqa: E731
    a1, b1 = _launches("collectives", 5, "a", 51), _launches("collectives", 5, "b", 52, slow=slow)
    first = gate_ab(a1, b1, "collectives")
    a2 = _launches("collectives", 5, "c", 53).assign(mode="throughput")
    b2 = _launches("collectives", 5, "d", 54, slow=slow).assign(mode="latency")
    fresh = gate_ab(a2, b2, "collectives", base_meta={}, cand_meta={})
    assert fresh.status == "not-comparable", fresh.reason
    v = confirm_ab(first, fresh, gate_ab(pd.concat([a1, a2]), pd.concat([b1, b2]), "collectives"), pairs=(5, 5))
    assert v.exit_code == REGRESSION and "unconfirmed" in v.reason and "all_reduce" in v.reason


def test_no_confirm_reaches_the_a_b(monkeypatch, tmp_path):
    """`distbench gate --against REV --no-confirm` runs the A/B without fresh pairs."""
    from bench.regress import cli as rcli
    import argparse

    seen = {}

    def fake(rev, suite, **kw):
        seen.update(kw)
        return gate_ab(_launches("collectives", 3, "a", 61), _launches("collectives", 3, "b", 62), "collectives")

    monkeypatch.chdir(_repo(tmp_path))
    monkeypatch.setattr(ab, "gate_against", fake)
    parser = argparse.ArgumentParser()
    rcli.add_parser(parser.add_subparsers())
    for argv, want in ((["gate", "--against", "HEAD", "--suite", "suites/smoke.toml", "--no-confirm"], False),
                       (["gate", "--against", "HEAD", "--suite", "suites/smoke.toml"], True)):
        args = parser.parse_args(argv)
        assert args.func(args) == PASS
        assert seen["confirm"] is want


def test_confirm_ab_joins_groups_on_their_full_name_not_the_shown_one():
    """A group's shown name is shortened only when no two groups would share it, per look: a look
    with another case set can show `reduce.float32...` where the other shows `reduce`. The
    confirmation still pairs the group's rows."""
    from bench.regress.ab import confirm_ab

    slow = lambda c: 1.5 if c["collective"] == "all_reduce" else 1.0  # noqa: E731
    a1, a2 = _launches("collectives", 5, "a", 71), _launches("collectives", 5, "c", 72)
    b1, b2 = _launches("collectives", 5, "b", 73, slow=slow), _launches("collectives", 5, "d", 74, slow=slow)
    first, fresh = gate_ab(a1, b1, "collectives"), gate_ab(a2, b2, "collectives")
    shown = fresh.groups.assign(group=fresh.groups["_group"])  # the fresh look shows the full names
    fresh = replace(fresh, groups=shown)
    v = confirm_ab(first, fresh, gate_ab(pd.concat([a1, a2]), pd.concat([b1, b2]), "collectives"), pairs=(5, 5))
    assert v.exit_code == REGRESSION
    assert v.groups.set_index("group").loc["all_reduce", "verdict"] == "regression"
