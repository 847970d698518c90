"""avg under NCCL is a pre-multiplied sum (sum_i x_i * (1/n)): not bit-exact at worlds that are
not a power of two. The check compares it within (n + 2) ulps, and everything else exactly."""

import pytest
import torch

from bench.collectives.base import Ctx, arange, avg_ulp_bound, reduce_expected, reduce_values, wrong_elements


def premul_avg(c: Ctx, index: torch.Tensor, order) -> torch.Tensor:
    """What NCCL's ncclAvg computes for floats: every rank's input times fl(1/n) in the dtype,
    then summed in the dtype in a ring order."""
    m = torch.tensor(1.0 / c.world, dtype=c.dtype)
    terms = [reduce_values(r, index, c) * m for r in order]
    acc = terms[0]
    for t in terms[1:]:
        acc = acc + t
    return acc


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_avg_premultiplied_at_world_3_is_within_the_bound(dtype):
    n = 3
    c = Ctx(rank=0, world=n, count=4096, dtype=dtype, device=torch.device("cpu"), op="avg")
    idx = arange(0, c.count, c.device)
    want = reduce_expected(idx, c)
    exact_wrong, new_wrong = 0, 0
    for start in range(n):  # each rank's ring order
        got = premul_avg(c, idx, [(start + k) % n for k in range(n)])
        exact_wrong += int((got != want).sum())
        new_wrong += wrong_elements(got, want, "avg", dtype, n)
    if dtype != torch.float64:
        assert exact_wrong > 0  # the old exact check reports a correct backend as wrong
    assert new_wrong == 0


def test_a_misrouted_avg_is_still_caught():
    n = 3
    c = Ctx(rank=0, world=n, count=999, dtype=torch.float32, device=torch.device("cpu"), op="avg")
    idx = arange(0, c.count, c.device)
    want = reduce_expected(idx, c)
    got = premul_avg(c, idx, [0, 1, 2])
    got[10:20] = got[30:40].clone()  # a chunk from the wrong place
    assert wrong_elements(got, want, "avg", torch.float32, n) >= 9
    got = want.clone()
    got[5] = float("nan")
    assert wrong_elements(got, want, "avg", torch.float32, n) == 1


@pytest.mark.parametrize("op,dtype", [("sum", torch.float32), ("avg", torch.int32), ("max", torch.bfloat16)])
def test_other_ops_and_integer_avg_stay_exact(op, dtype):
    want = torch.arange(10, dtype=dtype) + 100
    got = want.clone()
    got[3] = got[3] + 1
    assert wrong_elements(got, want, op, dtype, 3) == 1
    assert wrong_elements(want.clone(), want, op, dtype, 3) == 0


def test_bound_is_stated():
    assert avg_ulp_bound(3) == 5 and avg_ulp_bound(8) == 10
