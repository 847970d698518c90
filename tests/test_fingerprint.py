"""`distbench doctor --cluster-fingerprint`: the collectives the planner prices, at the placements the
layouts need, stored with the doctor's run; and `distbench plan --cluster-fingerprint` reading it (its
collective rows as --comm, its inter-node pairs as the target's p2p link)."""

import json

import pandas as pd
import pytest

from bench.doctor.fingerprint import placements
from conftest import assert_usage_error, run_cli
from plan_fixtures import machine_meta

SIZES = (65536, 2097152)


def test_placements_are_the_groups_a_layout_runs():
    assert placements([[0, 1], [2, 3]]) == {"node": [[0, 1], [2, 3]], "cross": [[0, 2], [1, 3]],
                                            "world": [[0, 1, 2, 3]]}
    assert placements([[0, 1, 2, 3]]) == {"node": [[0, 1, 2, 3]]}  # one node: cross and world would repeat it
    assert placements([[0], [1], [2], [3]]) == {"cross": [[0, 1, 2, 3]]}  # one rank per node: cross is the world


def test_a_fingerprint_needs_two_sizes(tmp_path):
    r = run_cli("doctor", "--cluster-fingerprint", "--cluster-fingerprint-sizes", "1M", "--out", str(tmp_path / "o"), timeout=120)
    assert_usage_error(r.returncode, r.stderr, "fingerprint_sizes ['1M']: give two sizes or more", tmp_path / "o")


def _fingerprint_run(tmp_path, name="fp"):
    """A stored doctor --cluster-fingerprint run of 2 nodes x 2 ranks: pair rows and collective rows."""
    d = tmp_path / name
    d.mkdir()
    rows = [{"run_id": name, "case_id": f"doctor.pair.{a}-{b}", "doctor_test": "pair", "collective": "sendrecv",
             "world": 4, "nodes": 2, "size_bytes": s, "link_class": cls, "src_rank": a, "dst_rank": b,
             "time_median_s": (1e-4 if cls == "inter" else 1e-5) + s * (1e-8 if cls == "inter" else 1e-9)}
            for a, b, cls in ((0, 1, "intra"), (0, 2, "inter"), (1, 3, "inter")) for s in (4096, 1 << 20)]
    rows += [{"run_id": name, "case_id": f"doctor.fingerprint.all_reduce.{p}", "doctor_test": "collective",
              "collective": "all_reduce", "world": 4, "nodes": 2, "group_size": n, "groups": k, "group_scope": scope,
              "mode": "throughput", "size_bytes": s, "time_median_s": a + s * b}
             for p, n, k, scope, a, b in (("node", 2, 2, "intra", 2e-5, 1e-9), ("cross", 2, 2, "inter", 2e-4, 1e-8),
                                          ("world", 4, 1, "inter", 4e-4, 1.5e-8)) for s in SIZES]
    pd.DataFrame(rows).to_parquet(d / "results.parquet")
    (d / "meta.json").write_text(json.dumps({"run_id": name, "kind": "doctor", "suite": "doctor",
                                             **machine_meta(nodes=2, world=4)}))
    return d


def test_the_planner_reads_a_fingerprints_collectives_and_inter_node_pairs(tmp_path):
    from bench.plan import comm as pc
    from bench.plan.runs import link

    d = _fingerprint_run(tmp_path)
    comm = pc.comm_of(d)
    assert sorted(comm.fits) == [("all_reduce", 2, "inter", 2), ("all_reduce", 2, "intra", 2),
                                 ("all_reduce", 4, "inter", 1)]  # the pairs are not a group's collective
    assert comm.fits[("all_reduce", 2, "intra", 2)].beta_s_per_byte == pytest.approx(1e-9)
    assert comm.fits[("all_reduce", 2, "inter", 2)].alpha_s == pytest.approx(2e-4)
    assert comm.source.startswith("fingerprint fp") and comm.ranks_per_node == 2
    wire = link(d)
    assert (wire.alpha_s, wire.beta_s_per_byte) == (pytest.approx(1e-4), pytest.approx(1e-8))  # the inter-node pairs
    assert "inter-node" in wire.source


def test_plan_refuses_a_run_that_is_not_a_fingerprint(tmp_path):
    d = tmp_path / "notfp"
    d.mkdir()
    pd.DataFrame([{"run_id": "notfp", "case_id": "doctor.pair.0-1", "doctor_test": "pair", "size_bytes": 4096,
                   "time_median_s": 1e-4}]).to_parquet(d / "results.parquet")
    (d / "meta.json").write_text(json.dumps({"run_id": "notfp", "kind": "doctor", **machine_meta()}))
    r = run_cli("plan", str(tmp_path / "cal"), "--cluster-fingerprint", str(d), timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "is not a cluster fingerprint: measure one with `distbench doctor --cluster-fingerprint`" in r.stderr


def test_a_collectives_run_stored_through_the_schema_is_not_taken_for_a_doctor_run(tmp_path):
    """Every stored run has every kind's columns (bench.results.schema.conform): a collectives run's
    doctor_test is there, null. Found by gpu-smoke's plan-layouts check on a fresh clone: the
    planner refused the collectives run as 'a doctor run without a fingerprint'."""
    from bench.plan import comm as pc
    from bench.results.schema import conform

    d = tmp_path / "coll"
    d.mkdir()
    rows = pd.DataFrame([{"run_id": "coll", "case_id": "all_reduce.w2", "collective": "all_reduce", "world": 2,
                          "nodes": 1, "size_bytes": s, "time_median_s": 1e-5 + s * 1e-9} for s in SIZES])
    conform(rows, "results").to_parquet(d / "results.parquet")
    (d / "meta.json").write_text(json.dumps({"run_id": "coll", "kind": "collectives", "suite": "collectives",
                                             **machine_meta()}))
    comm = pc.comm_of(d)
    assert ("all_reduce", 2, "intra", 1) in comm.fits and comm.source == "collectives run coll"
