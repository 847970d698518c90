"""bench.collectives: every registered collective's output equals the exact expected value on
every rank (world 2 and 3, gloo, over dtypes, reduce ops, roots and placements), the input
patterns, avg's ulp bound, the bus factors, bad input at the CLI, and a tiny run end to end.
Parametrized over the registry: a new collective module is tested without editing this file."""

import pytest
import torch

from bench.cli import main
from bench.collectives import REGISTRY, Ctx
from bench.collectives.all_reduce import AllReduce
from bench.collectives.base import (arange, avg_ulp_bound, expected_range, move_range, move_values, reduce_expected,
                                    reduce_range, reduce_values, wrong_elements)
from bench.collectives.cases import check
from bench.collectives.kind import KIND
from bench.results.store import load_run
from conftest import assert_usage_error, run_cli, spawn

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int8]
OPS = ["sum", "avg", "max", "min", "product"]


# ---- exact output of every collective ---------------------------------------------------------

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
    assert sorted(results) == list(range(world))
    for rank, per_coll in results.items():
        wrong, checks = per_coll[name]
        assert checks > 0
        assert wrong == 0, f"{name}: {wrong} wrong elements on rank {rank}"


class _Broken(AllReduce):
    name = "broken"

    def call(self, c, b, async_op=False):
        b.inputs.add_(1)  # a wrong result: the check must count every element


def _check_broken(info):
    c = Ctx(rank=info.rank, world=info.world, count=10, dtype=torch.float32, device=info.device, op="sum")
    return check(_Broken(), c, 2)


def test_check_counts_wrong_elements():
    assert spawn(_check_broken, 1) == {0: 20}


# ---- input patterns -----------------------------------------------------------------------------

def test_inputs_identify_source_rank_and_index():
    idx = arange(0, 1000, "cpu")
    for dtype in DTYPES:
        a, b = move_values(0, idx, dtype), move_values(1, idx, dtype)
        assert (a != b).all(), "a chunk from the wrong rank must not look right"
        assert len(torch.unique(a[:50])) > 10, "values must vary with the index"


@pytest.mark.parametrize("op", OPS)
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
@pytest.mark.parametrize("op", OPS)
def test_fast_tiled_patterns_equal_the_definitions(world, op):
    for dtype in [torch.float32, torch.bfloat16, torch.int8]:
        c = Ctx(rank=0, world=world, count=1, dtype=dtype, device=torch.device("cpu"), op=op)
        for start, n in [(0, 5), (3, 10_000), (12_345, 54_321)]:
            idx = arange(start, n, "cpu")
            assert torch.equal(move_range(world - 1, start, n, dtype, "cpu"), move_values(world - 1, idx, dtype))
            if op == "avg" and not dtype.is_floating_point:
                continue
            assert torch.equal(reduce_range(world - 1, start, n, c), reduce_values(world - 1, idx, c))
            assert torch.equal(expected_range(start, n, c), reduce_expected(idx, c))


# ---- avg under NCCL: a pre-multiplied sum, compared within (n + 2) ulps ----------------------------

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
        assert exact_wrong > 0  # an exact check would report a correct backend as wrong
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


def test_avg_bound_is_stated():
    assert avg_ulp_bound(3) == 5 and avg_ulp_bound(8) == 10


# ---- bus factors (nccl-tests doc/PERFORMANCE.md, hand-computed for n = 1, 2, 3, 4, 8) -------------

FACTORS = {
    "all_reduce": {1: 0.0, 2: 1.0, 3: 4 / 3, 4: 1.5, 8: 1.75},
    "all_gather": {1: 0.0, 2: 0.5, 3: 2 / 3, 4: 0.75, 8: 0.875},
    "all_gather_single": {1: 0.0, 2: 0.5, 3: 2 / 3, 4: 0.75, 8: 0.875},
    "reduce_scatter": {1: 0.0, 2: 0.5, 3: 2 / 3, 4: 0.75, 8: 0.875},
    "reduce_scatter_single": {1: 0.0, 2: 0.5, 3: 2 / 3, 4: 0.75, 8: 0.875},
    "all_to_all": {1: 0.0, 2: 0.5, 3: 2 / 3, 4: 0.75, 8: 0.875},
    "all_to_all_single": {1: 0.0, 2: 0.5, 3: 2 / 3, 4: 0.75, 8: 0.875},
    "scatter": {1: 0.0, 2: 0.5, 3: 2 / 3, 4: 0.75, 8: 0.875},
    "gather": {1: 0.0, 2: 0.5, 3: 2 / 3, 4: 0.75, 8: 0.875},
    "broadcast": {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 8: 1.0},
    "reduce": {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 8: 1.0},
    "sendrecv": {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 8: 1.0},
}


@pytest.mark.parametrize("name", sorted(FACTORS))
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_bus_factors(name, n):
    assert REGISTRY.get(name).bus_factor(n) == pytest.approx(FACTORS[name][n])


@pytest.mark.parametrize("name", REGISTRY.names())
def test_every_sized_collective_has_a_known_factor(name):
    """A new sized collective must state its bus factor here (nccl-tests' definition)."""
    if REGISTRY.get(name).sized:
        assert name in FACTORS, f"add {name}'s nccl-tests bus factor to FACTORS"


# ---- the kind: units without ranks, bad input at the CLI ---------------------------------------

@pytest.mark.parametrize("name", REGISTRY.names())
def test_every_collective_is_a_unit_of_the_default_suite_at_its_world(name):
    from bench.collectives.config import CollectivesConfig

    world = max(2, REGISTRY.get(name).min_world)
    cfg = CollectivesConfig(collectives=(name,), world=(world,), sizes=("4K",))
    units, _ = KIND.units(cfg, world, {})
    assert units and {u.case.collective for u in units} == {name}


CASES = [
    (["-c", "all_reduse"], "unknown collective 'all_reduse' (did you mean 'all_reduce'?)"),
    (["--sizes", "4X"], "bad size '4X'"),
    (["-b", "1M", "-e", "1K"], "min bytes 1048576 > max bytes 1024"),
    (["-f", "1"], "step factor 1.0 must be > 1"),
    (["--nproc", "0"], "world size 0 must be >= 1"),
    (["--nproc", "two"], "bad world size 'two'"),
    (["--backend", "nccl"], "backend 'nccl' needs CUDA"),
    (["--backend", "mpi"], "unknown backend 'mpi'"),
    (["--dtype", "float33"], "unknown dtype 'float33' (did you mean 'float32'?)"),
    (["--op", "avgg"], "unknown reduce op 'avgg' (did you mean 'avg'?)"),
    (["--mode", "latncy"], "unknown timing mode 'latncy' (did you mean 'latency'?)"),
    (["--root-rank", "5", "--nproc", "2", "-c", "broadcast"], "root 5 is not a rank at world size 2"),
    (["--dtype", "int32", "--op", "avg", "-c", "all_reduce"], "backend gloo cannot do op 'avg' on int32"),
]


@pytest.mark.parametrize("argv,message", CASES, ids=[c[1][:30] for c in CASES])
def test_bad_input_is_one_line_exit_2(argv, message, tmp_path, capsys):
    out = tmp_path / "results"
    sized = "--sizes" in argv or "-b" in argv
    rc = main(["collectives", "--out", str(out), *([] if sized else ["--sizes", "1K"]), *argv])
    assert_usage_error(rc, capsys.readouterr().err, message, out)


# ---- end to end ---------------------------------------------------------------------------------

TINY = """
kind = "collectives"
name = "tiny"
collectives = ["all_reduce", "all_gather_single", "broadcast", "sendrecv", "barrier"]
world = [2]
sizes = ["1K", "4K"]
modes = ["latency", "throughput"]
budget_s = 0.001
iters = 20
"""


@pytest.mark.slow
def test_cli_run_on_a_tiny_suite(tmp_path):
    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY)
    p = run_cli("collectives", "--suite", str(suite), "--out", str(tmp_path / "res"))
    assert p.returncode == 0, p.stderr
    assert "out-of-place" in p.stdout and "Wrong elements: 0 OK" in p.stdout
    (run_dir,) = (tmp_path / "res" / "tiny").iterdir()
    run = load_run(run_dir)
    df = run["results"]
    # 4 sized collectives x 2 sizes x placements (all_gather_single has 2) x 2 modes + barrier x 2 modes
    assert len(df) == (2 + 2 * 2 + 2 + 2) * 2 + 2
    assert set(df["kind"]) == {KIND.name} and run.meta["kind"] == KIND.name  # one name everywhere
    assert set(df["mode"]) == {"latency", "throughput"}
    assert (df["wrong"] == 0).all() and (df["world"] == 2).all()
    assert (df.loc[df.collective != "barrier", "iters"] >= 20).all()
    ar = df[(df.collective == "all_reduce") & (df["mode"] == "latency")]
    assert (ar["bus_factor"] == 1.0).all()
    assert (ar["busbw_gbps"] - ar["size_bytes"] / ar["time_median_s"] / 1e9).abs().max() < 1e-9
    s = run["samples"]
    one = s[(s.case_id == ar.case_id.iloc[0]) & (s.size_bytes == 1024)]
    assert sorted(one["rank"].unique()) == [0, 1]
    # the row's median is the median of the per-iteration max over ranks
    worst = one.pivot(index="iteration", columns="rank", values="seconds").max(axis=1)
    assert abs(worst.median() - ar[ar.size_bytes == 1024]["time_median_s"].iloc[0]) < 1e-12
    meta = run.meta
    assert meta["launches"]["2"]["world"] == 2 and meta["software"]["torch"] == torch.__version__
    assert meta["launches"]["2"]["threads_per_rank"] == 1 and "first_collective_s" in meta["launches"]["2"]
    assert "git_sha" in meta
    assert meta["command_line"].startswith(f"python -m bench collectives --suite {suite} "), meta["command_line"]


# ---- the check runs in bounded chunks (issue 17 item 10) -----------------------------------------

class _LargestNewTensor:
    """Bytes of the largest storage any torch op allocates inside the block (a view shares its
    input's storage and is not counted)."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                inputs = {a.untyped_storage().data_ptr() for a in [*args, *(kwargs or {}).values()]
                          if isinstance(a, torch.Tensor)}
                for t in (out if isinstance(out, (list, tuple)) else [out]):
                    if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                        outer.largest = max(outer.largest, t.untyped_storage().nbytes())
                return out

        self.largest, self.mode = 0, Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)


@pytest.mark.parametrize("op,dtype", [("avg", torch.float32), ("avg", torch.bfloat16), ("sum", torch.int32)])
def test_the_check_never_copies_the_whole_buffer(monkeypatch, op, dtype):
    """Was: the avg check made float64 copies of the whole buffer (16 GiB more for an 8 GiB
    all_reduce) and every check a whole-buffer mask; now each temporary holds one chunk."""
    from bench.sweep import values

    monkeypatch.setattr(values, "CHECK_CHUNK_NUMEL", 1000, raising=False)
    n, count = 3, 10_000
    c = Ctx(rank=0, world=n, count=count, dtype=dtype, device=torch.device("cpu"), op=op)
    want = reduce_expected(arange(0, count, c.device), c)
    got = want.clone()
    got[[5, 1500, 9999]] += 64
    with _LargestNewTensor() as seen:
        wrong = wrong_elements(got, want, op, dtype, n)
    assert wrong == 3
    assert seen.largest <= 1000 * 8, f"a temporary of {seen.largest} B (a chunk is at most 8000 B)"


def test_the_check_walks_lists_of_pieces_without_joining_them():
    """A list output (all_gather, all_to_all, gather) is compared piece by piece against the
    expected pieces, also when the two are cut at different places."""
    want = torch.arange(100, dtype=torch.int64)
    got = [want[:30].clone(), want[30:31].clone(), want[31:].clone()]
    got[2][10] = -1
    assert wrong_elements(got, list(want.split(7)), "sum", torch.int64, 2) == 1
    assert wrong_elements(got, want, "sum", torch.int64, 2) == 1


# ---- concurrent groups (--group-size, nccl-tests' NCCL_TESTS_SPLIT="DIV n") -----------------------

def _check_split(info, names, size):
    """Every collective in groups of `size` consecutive ranks, all groups at once."""
    from bench.collectives.cases import split_groups

    group, rank, n = split_groups(info.rank, info.world, size)
    out = {}
    for name in names:
        coll = REGISTRY.get(name)
        if n < coll.min_world:
            continue
        wrong = checks = 0
        for v in _variants(coll, n):
            wrong += check(coll, Ctx(rank=rank, world=n, device=info.device, group=group, **v), 1)
            checks += 1
        out[name] = (wrong, checks)
    return out


@pytest.mark.parametrize("name", REGISTRY.names())
def test_every_collective_is_exact_in_concurrent_groups(split_checked, name):
    for rank, per_coll in split_checked.items():
        if name in per_coll:
            wrong, checks = per_coll[name]
            assert checks > 0 and wrong == 0, f"{name}: {wrong} wrong elements on rank {rank} in groups of 2"


@pytest.fixture(scope="module")
def split_checked():
    out = spawn(_check_split, 4, REGISTRY.names(), 2)
    assert sorted(out) == [0, 1, 2, 3]
    return out


def test_split_groups_are_consecutive_blocks():
    from bench.collectives.cases import members

    assert members(0, 4, 2) == [0, 1] and members(3, 4, 2) == [2, 3]
    assert members(5, 8, 4) == [4, 5, 6, 7] and members(1, 2, 2) == [0, 1]


@pytest.mark.parametrize("argv,message", [
    (["--nproc", "4", "--group-size", "3"], "group size 3 does not divide world size 4; allowed: 2, 4"),
    (["--nproc", "2", "--group-size", "1"], "group size 1 must be >= 2"),
    (["--nproc", "2", "--group-size", "two"], "bad group size 'two'"),
])
def test_bad_group_size_is_one_line_exit_2(argv, message, tmp_path, capsys):
    out = tmp_path / "results"
    rc = main(["collectives", "--out", str(out), "--sizes", "1K", "-c", "all_reduce", *argv])
    assert_usage_error(rc, capsys.readouterr().err, message, out)


def test_a_split_run_stores_its_groups(tmp_path):
    p = run_cli("collectives", "-c", "all_reduce", "--nproc", "4", "--group-size", "2", "--sizes", "4K,64K",
                "--budget-s", "0.001", "-n", "5", "-w", "1", "--no-telemetry", "--out", str(tmp_path / "res"))
    assert p.returncode == 0, p.stderr
    (run_dir,) = (tmp_path / "res" / "collectives").iterdir()
    df = load_run(run_dir)["results"]
    assert (df["world"] == 4).all() and (df["group_size"] == 2).all() and (df["groups"] == 2).all()
    assert (df["wrong"] == 0).all() and (df["bus_factor"] == 1.0).all()  # all_reduce at n = 2: 2 (n - 1) / n
    assert df["case_id"].str.endswith(".w4.g2").all()
    s = load_run(run_dir)["samples"]
    assert sorted(s["rank"].unique()) == [0, 1, 2, 3]  # every rank's time, both groups
