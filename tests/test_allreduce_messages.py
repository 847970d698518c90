"""The chunked ring sends 2(n-1) * ceil(S / (n * chunk)) messages, not 2(n-1): Algorithm.messages
gives the real count, and the alpha-beta fit uses it."""

import pytest
import torch

import bench.allreduce.ring as ring_mod
from bench.allreduce import REGISTRY
from bench.allreduce.base import Plan
from bench.allreduce.model import fit, predict
from bench.allreduce.ring import default_chunk_bytes


def sent_by_ring(world: int, count: int, chunk_numel: int, monkeypatch) -> list[int]:
    """Non-empty sends per rank, counted by running the ring's schedule with a fake exchange."""
    counts = []
    for r in range(world):
        n = [0]

        def fake_exchange(sends=(), recvs=(), group=None):
            n[0] += sum(1 for t, _ in sends if t.numel())
            return []

        monkeypatch.setattr(ring_mod, "exchange", fake_exchange)
        REGISTRY.get("ring").allreduce(torch.zeros(count), Plan(rank=r, world=world, chunk_numel=chunk_numel))
        counts.append(n[0])
    return counts


@pytest.mark.parametrize("world,count,chunk", [(2, 1 << 20, 1 << 16), (3, 1000, 64), (4, 4096, 0), (5, 7, 1),
                                               (4, 4096, 10_000), (4, 37, 6), (6, 61, 4), (3, 29, 6)])
def test_ring_messages_match_what_it_sends(world, count, chunk, monkeypatch):
    want = REGISTRY.get("ring").messages(world, count, chunk)
    assert max(sent_by_ring(world, count, chunk, monkeypatch)) == want
    if chunk == 0 or chunk >= count:
        assert want == 2 * (world - 1)  # one chunk per segment: the textbook a(n)


def test_messages_of_every_algorithm():
    n, count = 8, 1 << 20
    assert REGISTRY.get("ring").messages(n, count, count // 64) == 2 * 7 * 8
    assert REGISTRY.get("ring").messages(n, count, 0) == 14
    assert REGISTRY.get("tree").messages(n, count) == 6
    assert REGISTRY.get("star").messages(n, count) == 14
    assert REGISTRY.get("halving_doubling").messages(6, count) == 6  # 2 log2 4 + fold 2
    assert REGISTRY.get("native").messages(n, count, 123) == 14
    for a in REGISTRY:
        assert a.messages(1, count) == 0 and a.messages(n, 0) == 0


def test_fit_with_real_message_counts_recovers_alpha_and_beta():
    ring = REGISTRY.get("ring")
    alpha, beta = 20e-6, 1 / 5e9
    worlds, sizes, msgs, times = [], [], [], []
    for n in (2, 4):
        for s in (4096, 65536, 1 << 20, 16 << 20, 64 << 20):
            m = ring.messages(n, s // 4, (1 << 20) // 4)  # float32, 1 MiB chunks
            worlds.append(n), sizes.append(s), msgs.append(m)
            times.append(predict(ring.cost, n, s, alpha, beta, messages=m))
    f = fit(ring.cost, worlds, sizes, times, messages=msgs)
    assert f.alpha_s == pytest.approx(alpha, rel=1e-6) and f.beta_s_per_byte == pytest.approx(beta, rel=1e-6)
    assert f.max_abs_rel_residual < 1e-9
    old = fit(ring.cost, worlds, sizes, times)  # a = 2(n-1): the chunks' latency leaks into the fit
    assert old.max_abs_rel_residual > 0.05
    assert abs(old.alpha_s - alpha) / alpha > 0.05 or abs(old.beta_s_per_byte - beta) / beta > 0.05


def test_fit_without_messages_is_unchanged():
    ring = REGISTRY.get("ring")
    t = [predict(ring.cost, 2, s, 1e-5, 1e-9) for s in (1e3, 1e6)]
    f = fit(ring.cost, [2, 2], [1e3, 1e6], t)
    assert f.alpha_s == pytest.approx(1e-5) and f.beta_s_per_byte == pytest.approx(1e-9)


def test_nccl_defaults_to_one_chunk_per_segment():
    assert default_chunk_bytes("nccl") == 0
    assert default_chunk_bytes("gloo") == 1 << 20
    assert default_chunk_bytes("nccl", asked=256 << 10) == 256 << 10
