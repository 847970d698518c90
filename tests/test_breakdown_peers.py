"""Waits attributed against the neighbour they wait on (issue 12): with 3+ stages the old rule
(idle whenever *any* other rank computes) counts a transfer in flight as bubble."""

import pytest

from bench.training.breakdown import breakdown

# 3 stages, one shared clock. Transfers take 0.5 s; both ends block while one is in flight.
#   rank 0: compute 0-1, send to 1 (1-1.5), compute 1.5-4 (its next micro-batches)
#   rank 1: receive from 0 (0-1.5), compute 1.5-2.5, send to 2 (2.5-3)
#   rank 2: receive from 1 (0-3), compute 3-4
SPANS = {0: (0.0, 4.0), 1: (0.0, 3.0), 2: (0.0, 4.0)}
COMPUTE = {0: [(0, 1), (1.5, 4)], 1: [(1.5, 2.5)], 2: [(3, 4)]}
WAITS = {0: [(1, 1.5, (1,))], 1: [(0, 1.5, (0,)), (2.5, 3, (2,))], 2: [(0, 3, (1,))]}


def parts(b):
    return (b.compute_s, b.idle_s, b.exposed_comm_s, b.overhead_s)


def test_three_stages_with_peers():
    bd = breakdown(SPANS, COMPUTE, WAITS)
    # rank 2 waits 3 s on rank 1: 0-1 rank 1 waits on rank 0, which computes (bubble); 1-1.5 the
    # 0->1 transfer is in flight (comm); 1.5-2.5 rank 1 computes (bubble); 2.5-3 the 1->2
    # transfer is in flight (comm), while rank 0 computes, which is no reason to wait.
    assert parts(bd[2]) == pytest.approx((1.0, 2.0, 1.0, 0.0))
    # rank 1: 1 s after its span; 0-1 waits on computing rank 0 (bubble); 1-1.5 and 2.5-3 in flight
    assert parts(bd[1]) == pytest.approx((1.0, 2.0, 1.0, 0.0))
    assert parts(bd[0]) == pytest.approx((3.5, 0.0, 0.5, 0.0))
    for b in bd.values():
        assert sum(parts(b)) == pytest.approx(b.step_wall_s)


def test_three_stages_without_peers_is_the_old_rule():
    """Before: the same waits without peers. Rank 2's 2.5-3 and rank 1's 2.5-3 (the 1->2
    transfer) count as idle because rank 0 computes then: idle 2.5 instead of 2.0 on rank 2,
    2.5 instead of 2.0 on rank 1, exposed comm 0.5 instead of 1.0."""
    old = breakdown(SPANS, COMPUTE, {r: [w[:2] for w in ws] for r, ws in WAITS.items()})
    assert parts(old[2]) == pytest.approx((1.0, 2.5, 0.5, 0.0))
    assert parts(old[1]) == pytest.approx((1.0, 2.5, 0.5, 0.0))


def test_waiting_on_a_peer_in_host_work_or_not_started_is_idle():
    spans = {0: (0.0, 3.0), 1: (1.0, 3.0)}
    compute = {0: [(2, 3)], 1: [(1.2, 2)]}
    waits = {0: [(0, 2, [1])], 1: []}  # peers as a list (after gather_object) work too
    bd = breakdown(spans, compute, waits)
    # 0-1 rank 1 not started (idle), 1-1.2 host work on rank 1 (idle), 1.2-2 rank 1 computes
    assert parts(bd[0]) == pytest.approx((1.0, 2.0, 0.0, 0.0))
