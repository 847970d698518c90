"""Who stopped answering (bench.distributed.liveness): heartbeats in a real TCPStore, the silent
ranks read on the heartbeat's own client, and the words of the one line, by node."""

import datetime
import socket

import pytest
import torch.distributed as dist

from bench.distributed import liveness


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def store(monkeypatch):
    port = _free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=datetime.timedelta(seconds=10),
                           wait_for_workers=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setattr(liveness, "HEARTBEAT_S", 0.05)
    yield server


def test_a_beating_rank_is_not_silent_and_a_stopped_one_is(store):
    keys = [f"t/alive/{r}" for r in range(3)]
    beats = [liveness.Heartbeat(k) for k in keys]
    try:
        assert liveness.silent_ranks(beats[0], keys, window_s=0.5) == []
        beats[2].stop()
        assert liveness.silent_ranks(beats[0], keys, window_s=0.5) == [2]
    finally:
        for b in beats:
            b.stop()


def test_a_rank_that_never_beat_is_silent(store):
    keys = ["t/alive/0", "t/alive/1"]
    beat = liveness.Heartbeat(keys[0])
    try:
        assert liveness.silent_ranks(beat, keys, window_s=0.3) == [1]
    finally:
        beat.stop()


def test_a_rank_whose_own_beats_fail_says_the_store_does_not_answer(store):
    beat = liveness.Heartbeat("t/alive/0")
    beat.stop()
    beat.last_ok -= 100  # its beats have failed for 100 s (its link is down)
    with pytest.raises(liveness.StoreSilent, match="own heartbeat has failed for 10[0-9] s"):
        liveness.silent_ranks(beat, ["t/alive/0"], window_s=0.1)
    line = liveness.explain(beat, ["t/alive/0", "t/alive/1"], ["node0", "node1"], 1)
    assert line.startswith(f"the launch's store at 127.0.0.1:{store.port} (node0) does not answer from node1: "
                           "this node's link, or node0, is down"), line


@pytest.mark.parametrize("silent, hosts, me, words", [
    ([], ["n0", "n1"], 0, ""),
    ([2, 3], ["n0", "n0", "n1", "n1"], 0,
     "n1 (ranks 2, 3) stopped answering: no heartbeat in 3 s (of two nodes, n0's link and n1's cannot be told apart "
     "from here)"),
    ([1], ["n0", "n1", "n2"], 0, "n1 (rank 1) stopped answering: no heartbeat in 3 s"),
    ([1, 2], ["n0", "n1", "n2"], 0,
     "no other node answers (no heartbeat in 3 s from n1, n2): this node's (n0's) link is the likely fault"),
    # the store is on n0: n1 reads it, so its own link works
    ([0, 2], ["n0", "n1", "n2"], 1, "n0 (rank 0), n2 (rank 2) stopped answering: no heartbeat in 3 s"),
])
def test_the_words_name_nodes_and_ranks(silent, hosts, me, words):
    assert liveness.describe(silent, hosts, me) == words


def test_a_rank_that_ended_on_its_own_error_is_not_the_fault():
    """node2 is killed; node1's collective fails, it says bye and exits; node0 sees both silent."""
    words = liveness.describe([1, 2], ["n0", "n1", "n2"], 0, ended={1: "case x failed: Connection reset by peer"})
    assert words == "n2 (rank 2) stopped answering: no heartbeat in 3 s; n1 (rank 1) ended on an error of its own"
    assert liveness.describe([1], ["n0", "n1"], 0, ended={1: "x"}) == "n1 (rank 1) ended on an error of its own"


def test_bye_is_read_by_the_others(store):
    keys = ["t/alive/0", "t/alive/1"]
    beats = [liveness.Heartbeat(k) for k in keys]
    try:
        beats[1].bye("case x failed on rank 1:\n  boom")
        beats[1].stop()
        assert beats[0].ended(keys) == {1: "case x failed on rank 1: boom"}
    finally:
        for b in beats:
            b.stop()


def test_a_heartbeat_stuck_in_the_store_makes_the_question_give_up(store, monkeypatch):
    """A store operation over a dead link can block for good while holding the client: reading
    gives up after LOCK_WAIT_S (was: the watchdog waited on it for ever and the rank never ended)."""
    monkeypatch.setattr(liveness, "LOCK_WAIT_S", 0.2)
    beat = liveness.Heartbeat("t/alive/0")
    try:
        beat.lock.acquire()  # the heartbeat thread, blocked in store.add
        with pytest.raises(liveness.StoreSilent, match="waiting on the store"):
            beat.read(["t/alive/0"])
        beat.bye("x")  # skipped or gives up: never blocks
        beat.lock.release()
        assert beat.read(["t/alive/0"])[0] >= 1
    finally:
        beat.stop()


def test_a_rank_whose_beats_stalled_in_a_case_marks_it_degraded(store, monkeypatch):
    """Rank 0 reads every counter at a case's start and end: a rank that beat 3 or more times
    fewer than the case's seconds allow stalled in it (a link that went down and came back)."""
    clock = [100.0]
    monkeypatch.setattr(liveness, "HEARTBEAT_S", 1.0)
    monkeypatch.setattr(liveness.time, "monotonic", lambda: clock[0])
    keys = ["t/alive/0", "t/alive/1"]
    beat = liveness.Heartbeat(keys[0])
    beat.stop()  # counters moved by hand below
    beat.last_ok = clock[0]
    stalls = liveness.Stalls(beat, keys, lambda: ["n0", "n1"])
    stalls.start()
    store.add(keys[0], 10)
    store.add(keys[1], 2)  # 10 s of case: rank 1 beat twice
    clock[0] += 10.0
    assert stalls.note() == ("heartbeats stalled during this case: n1 (rank 1) ~8 s (a link outage or a stopped "
                             "rank: the samples hold it)")
    stalls.start()
    store.add(keys[0], 2)
    store.add(keys[1], 1)
    clock[0] += 2.0  # a short case: never judged (one beat short is scheduling)
    assert stalls.note() == ""
