"""Every registered collective's output equals the exact expected value on every rank, at world
sizes 2 and 3 (gloo), over dtypes, reduce ops, roots and placements. Parametrized over the
registry: a new collective module is tested without editing this file."""

import pytest
import torch

from bench.collectives import REGISTRY, Ctx
from bench.collectives.base import move_values, reduce_expected, reduce_values, arange
from conftest import spawn

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int8]
OPS = ["sum", "avg", "max", "min", "product"]


def _variants(coll, world):
    counts = [world, 7 * world, 1000 * world + world]  # sharded collectives need multiples of world
    for dtype in DTYPES:
        ops = [o for o in OPS if dtype.is_floating_point or o != "avg"] if coll.reduces else [None]
        for op in ops:
            for root in ([0, world - 1] if coll.has_root else [0]):
                for place in coll.placements:
                    for count in (counts if coll.sized else [0]):
                        yield dict(count=count, dtype=dtype, op=op, root=root, inplace=place == "in-place")


def _check_all(info, names):
    from bench.collectives.runner import check

    out = {}
    for name in names:
        coll = REGISTRY.get(name)
        if info.world < coll.min_world:
            continue
        wrong = checks = 0
        for v in _variants(coll, info.world):
            ctx = Ctx(rank=info.rank, world=info.world, device=info.device, **v)
            wrong += check(coll, ctx, 1)
            checks += 1
        out[name] = (wrong, checks)
    return out


@pytest.fixture(scope="module", params=[2, 3], ids=lambda w: f"world{w}")
def checked(request):
    return request.param, spawn(_check_all, request.param, REGISTRY.names())


@pytest.mark.parametrize("name", REGISTRY.names())
def test_collective_output_is_exact_on_every_rank(checked, name):
    world, results = checked
    if world < REGISTRY.get(name).min_world:
        pytest.skip(f"{name} needs world >= {REGISTRY.get(name).min_world}")
    for rank, per_coll in results.items():
        wrong, checks = per_coll[name]
        assert checks > 0
        assert wrong == 0, f"{name}: {wrong} wrong elements on rank {rank}"


def test_inputs_identify_source_rank_and_index():
    idx = arange(0, 1000, "cpu")
    for dtype in DTYPES:
        a, b = move_values(0, idx, dtype), move_values(1, idx, dtype)
        assert (a != b).all(), "a chunk from the wrong rank must not look right"
        assert len(torch.unique(a[:50])) > 10, "values must vary with the index"


@pytest.mark.parametrize("op", ["sum", "max", "min", "avg", "product"])
@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
def test_closed_form_reduction_matches_brute_force(op, world):
    idx = arange(0, 500, "cpu")
    for dtype in [torch.float32, torch.bfloat16, torch.float16, torch.int32]:
        if op == "avg" and not dtype.is_floating_point:
            continue
        c = Ctx(rank=0, world=world, count=500, dtype=dtype, device=torch.device("cpu"), op=op)
        stack = torch.stack([reduce_values(r, idx, c).double() for r in range(world)])
        brute = {"sum": stack.sum(0), "max": stack.max(0).values, "min": stack.min(0).values,
                 "avg": stack.mean(0), "product": stack.prod(0)}[op]
        assert torch.equal(reduce_expected(idx, c).double(), brute)


@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("op", ["sum", "avg", "max", "min", "product"])
def test_fast_tiled_patterns_equal_the_definitions(world, op):
    from bench.collectives.base import expected_range, move_range, reduce_range

    for dtype in [torch.float32, torch.bfloat16, torch.int8]:
        c = Ctx(rank=0, world=world, count=1, dtype=dtype, device=torch.device("cpu"), op=op)
        for start, n in [(0, 5), (3, 10_000), (12_345, 54_321)]:
            idx = arange(start, n, "cpu")
            assert torch.equal(move_range(world - 1, start, n, dtype, "cpu"), move_values(world - 1, idx, dtype))
            if op == "avg" and not dtype.is_floating_point:
                continue
            assert torch.equal(reduce_range(world - 1, start, n, c), reduce_values(world - 1, idx, c))
            assert torch.equal(expected_range(start, n, c), reduce_expected(idx, c))
