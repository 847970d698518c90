"""Every allreduce algorithm equals the closed form and the native all_reduce exactly on
integer-valued data, and is allclose on random floats, on every rank, at world 1..5 and at
element counts 1, 7, n-1 and an odd large count (one launch per world, many checks inside)."""

import pytest
import torch
import torch.distributed as dist

from bench.allreduce import REGISTRY, Plan
from bench.collectives.base import Ctx, arange, reduce_expected, reduce_values

ODD_LARGE = 100_003  # prime: no even split over any world, several ring chunks


def _counts(world):
    return sorted({1, 7, world - 1, ODD_LARGE})


def _chunks(count):
    """Ring chunk sizes in elements: one chunk per segment, and several (tiny ones on small counts:
    each chunk is one message, so a 3-element chunk of a large array would only cost time)."""
    return (0, 3) if count < 1000 else (0, 4096)


def _cases(count):
    for alg in REGISTRY:
        for chunk in (_chunks(count) if alg.name == "ring" else (0,)):
            yield alg, chunk


def _check_rank(info) -> list[str]:
    """Runs on every rank; returns what went wrong here (empty when all is exact)."""
    bad = []
    n, r = info.world, info.rank
    for count in _counts(n):
        idx = arange(0, count, info.device)
        for dtype in (torch.float32, torch.int32):
            for op in ("sum", "max", "min", "product"):
                c = Ctx(rank=r, world=n, count=count, dtype=dtype, device=info.device, op=op)
                native = reduce_values(r, idx, c)
                dist.all_reduce(native, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                                            "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}[op])
                want = reduce_expected(idx, c)
                for alg, chunk in _cases(count):
                    x = reduce_values(r, idx, c)
                    alg.allreduce(x, Plan(rank=r, world=n, op=op, chunk_numel=chunk))
                    tag = f"{alg.name} chunk={chunk} count={count} {dtype} {op} rank={r}"
                    if not torch.equal(x, want):
                        bad.append(f"{tag}: {(x != want).sum().item()} element(s) differ from closed form")
                    if not torch.equal(x, native):
                        bad.append(f"{tag}: differs from native all_reduce")
        g = torch.Generator().manual_seed(1234 + r)
        data = torch.randn(count, generator=g, dtype=torch.float32)
        native = data.clone()
        dist.all_reduce(native)
        for alg, chunk in _cases(count):
            x = data.clone()
            alg.allreduce(x, Plan(rank=r, world=n, op="sum", chunk_numel=chunk))
            if not torch.allclose(x, native, rtol=1e-5, atol=1e-5):
                bad.append(f"{alg.name} chunk={chunk} count={count} random float32 rank={r}: not allclose")
    return bad


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_every_algorithm_is_exact(spawn_ranks, world):
    results = spawn_ranks(_check_rank, world, timeout_s=300.0)
    assert sorted(results) == list(range(world))
    bad = [m for r in sorted(results) for m in results[r]]
    assert not bad, "\n".join(bad[:20])
