"""Resource checks before a sweep (issue 11), with faked machine numbers."""

import os
from collections import namedtuple

import pytest
import torch

from bench import preflight as R
from bench.allreduce import REGISTRY as ALGORITHMS, memory as AM
from bench.allreduce.base import Algorithm
from bench.allreduce.config import AllreduceConfig
from bench.collectives import REGISTRY, Ctx
from bench.collectives import memory as CM
from bench.collectives.config import CollectivesConfig
from bench.errors import BenchError
from bench.kind import KINDS
from bench.pipeline.config import PipelineConfig, expand_pipeline
from bench.strategies.config import StrategiesConfig
from bench.training import REGISTRY as STRATEGIES, footprint as FP
from bench.training.case import CaseSpec
from bench.workloads.models import PRESETS, build_model

GiB = 1024**3


def strategy_bytes(spec, strategy: str, batch: int, world: int, check: bool = True) -> float:
    """A strategy's own memory answer for one case, plus the reference check (as preflight sums)."""
    f = FP.Footprint(spec, batch, world)
    return STRATEGIES.get(strategy).memory(f) + (f.check_bytes() if check else 0)


def _tensors(x):
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _tensors(y)]
    return [x]


def _bytes(*xs) -> int:
    """Bytes of the distinct storages behind the tensors (a view or a shared buffer counts once)."""
    seen = {}
    for t in (t for x in xs for t in _tensors(x)):
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


@pytest.mark.parametrize("name", [c.name for c in REGISTRY if c.sized])
@pytest.mark.parametrize("world", [2, 3])
def test_collective_estimate_covers_the_real_buffers(name, world):
    coll = REGISTRY.get(name)
    count = 2**16 * world
    for rank in range(world):
        for inplace in (False, True) if "in-place" in coll.placements else (False,):
            c = Ctx(rank=rank, world=world, count=count, dtype=torch.float32, device=torch.device("cpu"),
                    op="sum" if coll.reduces else None, inplace=inplace)
            b = coll.setup(c)
            held = _bytes(b.inputs, b.outputs)
            actual = _bytes(b.inputs, b.outputs, coll.result(c, b), coll.expected(c))
            est = CM.collective_case_bytes(name, count * 4, 4, world, check=1)
            assert actual <= est * 1.01, (name, rank, actual, est)  # storages round up to a pattern period
            assert CM.collective_case_bytes(name, count * 4, 4, world, check=0) * 1.01 >= held


def test_collectives_largest_case_names_collective_and_size():
    cfg = CollectivesConfig(collectives=("all_reduce", "all_to_all"), sizes=("1M", "64M"), dtypes=("float32",))
    need, label = CM.collectives_bytes_per_rank(cfg, 2)
    assert need == CM.collective_case_bytes("all_to_all", 64 * 2**20, 4, 2, 1)
    assert "all_to_all" in label and "64M" in label


def test_sweep_that_cannot_fit_is_refused_naming_sizes_that_fit():
    cfg = CollectivesConfig(collectives=("all_reduce",), min_bytes="1M", max_bytes="8G", world=(2,))
    with pytest.raises(BenchError) as e:
        R.check_sweep(KINDS.get("collectives"), cfg, 2, free=4 * GiB, ranks_on_host=2, overhead_per_rank=0)
    msg = str(e.value)
    assert "\n" not in msg and "all_reduce" in msg and "8G" in msg and "4.00 GiB" in msg
    # 2 ranks x (2 S + S/4) <= 4 GiB  ->  S <= 0.888 GiB: 512M is the largest power of two
    assert "largest that fit: 128MB, 256MB, 512MB" in msg
    R.check_sweep(KINDS.get("collectives"), CollectivesConfig(collectives=("all_reduce",), max_bytes="512M"), 2,
                  free=4 * GiB, ranks_on_host=2, overhead_per_rank=0)  # fits: no error


def test_nothing_fits_says_so():
    cfg = CollectivesConfig(collectives=("all_gather",), sizes=("1G",))
    with pytest.raises(BenchError, match="nothing in this sweep fits"):
        R.check_sweep(KINDS.get("collectives"), cfg, 2, free=1 * GiB, ranks_on_host=2, overhead_per_rank=0)


def test_allreduce_estimate_counts_star_scratch_and_pattern():
    cfg = AllreduceConfig(algorithms=("star",), sizes=("64M",), world=(4,))
    need, _ = AM.allreduce_bytes_per_rank(cfg, 4)
    s = 64 * 2**20
    assert need >= 2 * s + s + 3 * s  # inputs, expected, working copy, star's (world-1) S scratch
    native = AllreduceConfig(algorithms=("native",), sizes=("64M",), world=(4,))
    assert AM.allreduce_bytes_per_rank(native, 4)[0] == 2 * s + 40 * (s // 4)  # building the pattern dominates
    with pytest.raises(BenchError, match="allreduce"):
        R.check_sweep(KINDS.get("allreduce"), cfg, 4, free=1 * GiB, ranks_on_host=4, overhead_per_rank=0)


@pytest.mark.parametrize("preset", ["mlp-tiny", "mlp-small", "gpt-tiny", "gpt-small"])
def test_model_params_closed_form(preset):
    spec = PRESETS[preset]
    assert FP.model_params(spec) == sum(p.numel() for p in build_model(spec, 0).parameters())


def test_strategy_estimates_order_and_refusal():
    spec = PRESETS["gpt-1b"]
    ddp = strategy_bytes(spec, "ddp", 8, 4, check=False)
    fsdp = strategy_bytes(spec, "fsdp", 8, 4, check=False)
    dp = strategy_bytes(spec, "dp", 8, 1, check=False)
    assert fsdp < ddp and ddp > FP.model_params(spec) * 8
    assert dp > strategy_bytes(spec, "pp", 8, 4, check=False)
    assert strategy_bytes(spec, "ddp", 8, 4, check=True) > ddp
    assert FP.OPTIMIZER == "sgd" and FP.OPTIMIZER_STATE_BYTES["adam"] == 8
    cfg = StrategiesConfig(strategies=("ddp",), models=("gpt-124m",), batch=64, world=(2,))
    with pytest.raises(BenchError) as e:
        R.check_sweep(KINDS.get("strategies"), cfg, 2, free=16 * GiB, ranks_on_host=2, overhead_per_rank=0)
    assert "gpt-124m" in str(e.value) and "batch" in str(e.value)
    small = StrategiesConfig(strategies=("ddp",), models=("mlp-tiny",), world=(2,))
    R.check_sweep(KINDS.get("strategies"), small, 2, free=16 * GiB, ranks_on_host=2)


def test_pipeline_check_sweep_fits_default():
    R.check_sweep(KINDS.get("pipeline"), PipelineConfig(), 2, free=8 * GiB, ranks_on_host=2)


def test_check_fits_message():
    with pytest.raises(BenchError) as e:
        R.check_fits(3 * GiB, 2, 4 * GiB, "the largest case (x)", ["1M", "2M", "4M", "8M"])
    assert str(e.value) == ("the largest case (x) needs 3.00 GiB per rank x 2 rank(s) = 6.00 GiB, but only "
                            "4.00 GiB is free; largest that fit: 2M, 4M, 8M")
    R.check_fits(GiB, 2, 4 * GiB, "x")


def test_free_memory_is_positive():
    assert R.free_memory_bytes("cpu") > 0


def test_check_ranks():
    assert R.check_ranks(2, cores=2, fd_limit=1024) is None
    warn = R.check_ranks(4, cores=2, fd_limit=1024)
    assert "world 4" in warn and "2 core" in warn
    with pytest.raises(BenchError, match=r"world 17 .* 2 core"):
        R.check_ranks(17, cores=2, fd_limit=1024)
    with pytest.raises(BenchError, match=r"open files .* limit is 100 .*ulimit -n"):
        R.check_ranks(16, cores=64, fd_limit=(100, 4096))
    with pytest.raises(BenchError, match="fewer ranks per node"):
        R.check_ranks(512, cores=128, fd_limit=(256, 1024))
    assert R.check_ranks(2) is None or "core" in R.check_ranks(2)  # this machine's numbers


def test_check_writable_ok_and_creates(tmp_path):
    root = R.check_writable(tmp_path / "a" / "results")
    assert root.is_dir() and list(root.iterdir()) == []  # the probe file is gone


def test_check_writable_refuses_unwritable(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    try:
        blocked = not os.access(ro, os.W_OK)
        target = ro / "results" if blocked else None
        if target is None:  # root ignores permission bits: a path under a regular file cannot be made
            f = tmp_path / "file"
            f.write_text("x")
            target = f / "sub"
        with pytest.raises(BenchError) as e:
            R.check_writable(target)
        assert str(target) in str(e.value) and "\n" not in str(e.value)
    finally:
        os.chmod(ro, 0o700)
    f2 = tmp_path / "plain"
    f2.write_text("x")
    with pytest.raises(BenchError, match="plain"):
        R.check_writable(f2)


def test_check_writable_refuses_full_disk(tmp_path):
    Usage = namedtuple("Usage", "total used free")
    with pytest.raises(BenchError, match=r"1\.0 MiB free.*50 MiB"):
        R.check_writable(tmp_path, disk_usage=lambda p: Usage(10, 9, 2**20))


# ---- what a collective needs, as nccl-tests' getBuffSize counts it (issue 17 items 1 and 10) -------

@pytest.mark.parametrize("name", [c.name for c in REGISTRY if c.sized])
def test_collective_needs_exactly_its_buffers_and_the_expected(name):
    """Per rank, timed: the buffers setup() allocates (send + recv, one buffer in-place); checked:
    a fresh setup() + the expected result, and nothing else of the buffer's size (no torch.cat
    copy of a list output, no pieces and joined copy at once), as nccl-tests allocates sendbuff,
    recvbuff and expected (src/common.cu AllocateBuffs)."""
    coll, world = REGISTRY.get(name), 4
    count = 2**16 * world
    for place in coll.placements:
        inplace = place == "in-place"
        most_timed = most_checked = 0
        for rank in range(world):
            c = Ctx(rank=rank, world=world, count=count, dtype=torch.float32, device=torch.device("cpu"),
                    op="sum" if coll.reduces else None, inplace=inplace)
            b = coll.setup(c)
            most_timed = max(most_timed, _bytes(b.inputs, b.outputs))
            most_checked = max(most_checked, _bytes(b.inputs, b.outputs, coll.result(c, b), coll.expected(c)))
        timed = CM.collective_case_bytes(name, count * 4, 4, world, check=0, placement=place)
        checked = CM.collective_case_bytes(name, count * 4, 4, world, check=1, placement=place) - CM.CHECK_SCRATCH_BYTES
        # exact up to the input pattern's period (bench.collectives.base._tiled rounds a buffer up to it)
        assert abs(most_timed - timed) <= 0.01 * timed, (name, place, most_timed, timed)
        assert abs(most_checked - checked) <= 0.01 * checked, (name, place, most_checked, checked)


def test_the_issues_all_to_all_needs_three_buffers_not_six():
    """all_to_all int8 at 8 GiB, world 16, checked: send 8 + recv 8 + expected 8 GiB (was 48.5 GiB)."""
    need = CM.collective_case_bytes("all_to_all", 8 * GiB, 1, 16, check=1)
    assert need == 24 * GiB + CM.CHECK_SCRATCH_BYTES
    assert CM.CHECK_SCRATCH_BYTES <= 256 * 2**20


# Issue 19: every unit says what it needs; nothing falls back to a default.

@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_algorithm_says_its_scratch(name):
    alg = ALGORITHMS.get(name)
    assert type(alg).scratch_bytes is not Algorithm.scratch_bytes
    assert alg.scratch_bytes(64 * 2**20, 4, 2**20) >= 0


def test_an_algorithm_that_does_not_say_its_scratch_is_an_error():
    with pytest.raises(NotImplementedError, match="scratch"):
        Algorithm().scratch_bytes(1, 2, 1)


@pytest.mark.parametrize("name", STRATEGIES.names())
def test_every_strategy_says_its_memory(name):
    f = FP.Footprint(PRESETS["mlp-small"], 8, 2)
    assert STRATEGIES.get(name).memory(f) > 0


@pytest.mark.parametrize("name", KINDS.names())
def test_every_kind_answers_memory(name):
    kind = KINDS.get(name)
    cfg = kind.config_class()()
    world = kind.worlds(cfg)[0]
    need, label = kind.memory.need(cfg, world)
    assert need > 0 and label
    assert isinstance(kind.memory.fits(cfg, world, float(need)), list)


def test_ring_scratch_with_one_chunk_per_segment():
    """chunk 0 (nccl's default: one chunk per segment) keeps DEPTH segments of S / world, not 4 bytes."""
    ring = ALGORITHMS.get("ring")
    assert ring.scratch_bytes(64 * 2**20, 8, 0) == 4 * 8 * 2**20
    assert ring.scratch_bytes(64 * 2**20, 2, 0) == 64 * 2**20  # never more than S
    assert ring.scratch_bytes(64 * 2**20, 8, 2**20) == 4 * 2**20


# ---- per stage and per rank (issue 31 item 7) ----------------------------------------------------

GPT124M = (768, 1024, 50304)  # width, seq, vocab


def _gpt124m_pp4_tp2_batch8() -> list[int]:
    """Per-rank bytes of gpt-124m at pp4 x tp2, batch 8, no check (the formula of the test below)."""
    w, seq, vocab = GPT124M
    block = (12 * w * w + 7 * w) // 2 + 6 * w
    blocks_acts = 3 * seq * w * 20 // 2  # floats per sample
    stage = [(vocab + seq) * w + 3 * block, 3 * block, 3 * block, 3 * block + 2 * w + w * vocab]
    acts = [blocks_acts, blocks_acts, blocks_acts, blocks_acts + seq * vocab * 3]
    return [stage[q] * 8 + 8 * acts[q] * 4 for q in range(4) for _ in range(2)]  # params + grads (SGD), 4 B floats


def test_composed_layout_is_counted_per_stage_and_rank():
    """gpt-124m at pp4 x tp2, batch 8, GPipe: 3 blocks per stage, the embedding on stage 0 and the
    head on stage 3, each replicated on both TP ranks (the TP plan shards the blocks' q, k, v, out,
    up, down: 12 w^2 + 7 w of a block's 12 w^2 + 13 w parameters). Activations per sample: a
    block's w x seq x 20 floats split over TP, the head's vocab x seq x 3 floats on the last stage
    on every TP rank. The last stage needs ~4x the old pp x tp split of the whole model."""
    from bench.training.memory import rank_bytes

    w, seq, vocab = GPT124M
    want = _gpt124m_pp4_tp2_batch8()
    case = CaseSpec(strategy="pp", model="gpt-124m", world=8, chunks=2, schedule="gpipe", batch=8, tp=2)
    assert rank_bytes(case, check=False) == want
    p = FP.model_params(PRESETS["gpt-124m"])
    check = 12 * p + 8 * seq * (w * 12 * 20 + vocab * 3) * 4  # the reference on rank 0: model, grads, gathered grads, A(8)
    assert rank_bytes(case, check=True) == [want[0] + check, *want[1:]]
    old = FP.Footprint(PRESETS["gpt-124m"], 8, 8)
    old_estimate = old.states / 8 + old.acts(8) / 8  # what preflight counted: everything / (pp x tp)
    assert 3.9 < want[7] / old_estimate < 4.1


def test_fsdp_inside_a_stage_counts_one_gathered_piece():
    """gpt-small at pp2 x fsdp2, batch 8: each rank holds half its stage's parameters, gradients
    (8 B each, SGD), plus the largest piece of its stage gathered whole with its gradient (8 B
    per parameter): the embedding on stage 0, the head on stage 1; activations of batch / dp."""
    from bench.training.memory import rank_bytes

    w, seq, vocab = 128, 64, 512
    block = 12 * w * w + 13 * w
    embed, head = (vocab + seq) * w, 2 * w + w * vocab
    stage = [embed + 2 * block, 2 * block + head]
    biggest = [max(embed, block), max(block, head)]
    acts = [4 * 2 * seq * w * 20, 4 * (2 * seq * w * 20 + seq * vocab * 3)]  # 4 samples per data-parallel pipeline
    want = [stage[q] * 8 // 2 + 8 * biggest[q] + acts[q] * 4 for q in range(2) for _ in range(2)]
    case = CaseSpec(strategy="pp", model="gpt-small", world=4, chunks=2, schedule="gpipe", batch=8, fsdp=2)
    assert rank_bytes(case, check=False) == want


def test_interleaved_ranks_hold_two_stages():
    """mlp-small (8 blocks of w^2 + w) at pp2, interleaved: rank 0 holds stages 0 and 2, rank 1
    stages 1 and 3, two blocks each; the input (w floats per sample) is stage 0's."""
    from bench.training.memory import rank_bytes

    w = 256
    case = CaseSpec(strategy="pp", model="mlp-small", world=2, chunks=2, schedule="interleaved", batch=8)
    per = 4 * (w * w + w) * 8  # 4 blocks' parameters and gradients
    assert rank_bytes(case, check=False) == [per + 8 * (4 * w * 2 + w) * 4, per + 8 * 4 * w * 2 * 4]


def test_preflight_refuses_what_the_last_stage_cannot_hold():
    """A GPU that held the old estimate of gpt-124m at pp4 x tp2 does not hold the last stage: the
    refusal names the case and the rank."""
    cfg = PipelineConfig(model="gpt-124m", stages=(4,), tp=2, batch=8, chunks=(2,), schedules=("gpipe",), check=0)
    need = _gpt124m_pp4_tp2_batch8()
    free = (need[0] + need[7]) // 2
    with pytest.raises(BenchError, match=r"needs .* per rank.*rank 6 \(stage 3\)|rank 6 \(stage 3\).*needs"):
        R.check_sweep(KINDS.get("pipeline"), cfg, 8, device="cuda:0", free=free, ranks_on_host=1,
                      overhead_per_rank=0, where="cuda:0")
