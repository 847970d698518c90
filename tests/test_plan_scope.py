"""Within or across nodes is decided per group, stored per row at measure time.

Found by a read: the planner labelled a collectives run's rows inter-node when the *launch*
spanned nodes, not when the *group* did, so a `--group-size 2` run on 2 nodes x 2 ranks (each
group inside one node) priced a cross-node term with the intra-node fit: silently optimistic by
the ratio of the two links. Now each collectives row says `group_scope` (intra | inter | mixed),
computed at measure time from where each group's ranks sit, and the planner reads it."""

import json

import pandas as pd
import pytest

from bench.collectives.cases import group_scope
from bench.plan import comm as pc
from plan_fixtures import machine_meta

SIZES = (4096, 65536, 1 << 20)
FAST, SLOW = (20e-6, 1 / 5e9), (200e-6, 1 / 1e8)  # (alpha, seconds per byte): within a node, across


def t(ab, s):
    return ab[0] + s * ab[1]


@pytest.mark.parametrize("node_ranks,size,want", [
    ([0, 0, 1, 1], 2, "intra"),  # 2 nodes x 2 ranks, groups of 2: each group on one node
    ([0, 0, 1, 1], 4, "inter"),  # one group of every rank
    ([0, 1, 0, 1], 2, "inter"),  # ranks interleaved over the nodes: each group spans both
    ([0, 0, 0, 1, 1, 1], 2, "mixed"),  # 2 nodes x 3 ranks, groups of 2: {0,1} {2,3} {4,5}
    ([0, 0, 0, 0], 2, "intra"),
])
def test_a_groups_scope_is_where_its_ranks_sit(node_ranks, size, want):
    assert group_scope(node_ranks, size) == want


def _run(tmp_path, rows, name="c"):
    d = tmp_path / name
    d.mkdir()
    pd.DataFrame(rows).to_parquet(d / "results.parquet")
    (d / "meta.json").write_text(json.dumps({"run_id": name, "kind": "collectives", "suite": "collectives",
                                             **machine_meta(nodes=2, world=4)}))
    return d


def test_groups_inside_nodes_of_a_two_node_launch_are_priced_intra(tmp_path):
    """world 4 on 2 nodes: the whole-world rows cross nodes (slow), the --group-size 2 rows run
    inside each node (fast). Before: both inter, the intra fit missing."""
    rows = [{"run_id": "c", "case_id": "all_reduce.w4", "collective": "all_reduce", "world": 4, "nodes": 2,
             "group_size": 4, "groups": 1, "group_scope": "inter", "size_bytes": s, "time_median_s": t(SLOW, s)}
            for s in SIZES]
    rows += [{"run_id": "c", "case_id": "all_reduce.w4.g2", "collective": "all_reduce", "world": 4, "nodes": 2,
              "group_size": 2, "groups": 2, "group_scope": "intra", "size_bytes": s, "time_median_s": t(FAST, s)}
             for s in SIZES]
    comm = pc.comm_of(_run(tmp_path, rows))
    f = comm.fits[("all_reduce", 2, "intra", 2)]
    assert (f.alpha_s, f.beta_s_per_byte) == (pytest.approx(FAST[0], rel=1e-6), pytest.approx(FAST[1], rel=1e-6))
    assert ("all_reduce", 2, "inter", 2) not in comm.fits
    # a cross-node group of 2 is not priced with the intra-node fit: the nearest inter-node fit, scaled
    got, note = comm.seconds("all_reduce", 2, 1 << 20, "inter", at_once=2)
    assert got > t(FAST, 1 << 20) * 10 and "intra" not in note


def test_a_run_stored_before_group_scope_keeps_the_launchs_scope_and_says_so(tmp_path):
    rows = [{"run_id": "c", "case_id": "all_reduce.w4.g2", "collective": "all_reduce", "world": 4, "nodes": 2,
             "group_size": 2, "groups": 2, "size_bytes": s, "time_median_s": t(FAST, s)} for s in SIZES]
    comm = pc.comm_of(_run(tmp_path, rows, "old"))
    assert ("all_reduce", 2, "inter", 2) in comm.fits
    assert "scope from the launch" in comm.source
