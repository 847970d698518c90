"""The planner's FSDP gather rule (bench.plan.compose.fsdp_gathers) against torch itself:
which actions of torch.distributed.pipelining's schedules all-gather a stage's parameters under
FSDP2, counted on two gloo ranks (one pipeline rank, fsdp 2) by wrapping the all-gather FSDP2
calls. The stages are built as the trainer builds them (bench.training.layout.parallelize): every
piece fully_shard-ed, then the stage module.

What torch does: a forward gathers a sharded stage and reshards after it (reshard_after_forward);
a backward gathers a sharded stage and keeps it (the stage calls set_reshard_after_backward(False)
before every backward but the last). The single-stage schedules (GPipe, 1F1B) start the step
sharded; the multi-stage ones (_PipelineScheduleRuntime) unshard each stage before its first
action (an UNSHARD action outside any compute action), so there the first action does not gather.
The rule counts that unshard as the stage's first action's: the same gathers, in the same place on
the rank's timeline."""

import pytest

from conftest import spawn

PIECES = 2  # Linear pieces per stage: one all-gather each


def _gathers(info, schedule: str, chunks: int) -> list:
    """[(action or '-', all-gathers)] of the second step on this rank, in order ('-': outside any
    compute action)."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage

    from bench.training import schedules as scheds
    from bench.training.fsdp import _fully_shard

    fully_shard = _fully_shard()
    mesh = init_device_mesh("cpu", (2,))
    solo = [dist.new_group([r]) for r in range(2)][info.rank]  # the pipeline group: this rank alone
    sch = scheds.get(schedule)
    n = sch.per_rank
    torch.manual_seed(0)
    stages = []
    for i in range(n):
        module = nn.Sequential(*(nn.Linear(8, 8) for _ in range(PIECES)))
        for piece in module:
            fully_shard(piece, mesh=mesh)
        fully_shard(module, mesh=mesh)
        stages.append(PipelineStage(module, i, n, torch.device("cpu"), group=solo))
    run = scheds.torch_class(schedule)(stages if n > 1 else stages[0], n_microbatches=chunks,
                                       loss_fn=lambda out, y: ((out - y) ** 2).mean())
    log, now = [], ["-"]
    for name in ("all_gather_single", "all_gather_into_tensor"):
        if hasattr(dist, name):
            orig = getattr(dist, name)

            def counted(*a, _orig=orig, **k):
                log.append(now[0])
                return _orig(*a, **k)

            setattr(dist, name, counted)
    for st in stages:
        for kind, meth in (("F", "forward_one_chunk"), ("B", "backward_one_chunk")):
            orig = getattr(st, meth)

            def marked(mb, *a, _orig=orig, _label=(st.stage_index, kind), **k):
                now[0] = (*_label, mb)
                log.append(("start", now[0]))
                try:
                    return _orig(mb, *a, **k)
                finally:
                    now[0] = "-"

            setattr(st, meth, marked)
    x, y = torch.randn(2 * chunks, 8), torch.randn(2 * chunks, 8)
    for _ in range(2):  # the second step: the first also infers the stages' metadata
        log.clear()
        run.step(x, target=y, losses=[])
    out = []
    for e in log:
        if isinstance(e, tuple) and e[0] == "start":
            out.append([list(e[1]), 0])
        elif e == "-" and (not out or out[-1][0] != "-"):  # a gather outside any action, after an action
            out.append(["-", 1])
        else:  # inside the current action, or another outside one
            out[-1][1] += 1
    return out


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved", "looped_bfs"])
def test_fsdp_gathers_is_what_torch_gathers(schedule):
    from bench.plan import model as pl
    from bench.plan.compose import fsdp_gathers
    from bench.training import schedules as scheds

    chunks = 4
    got = spawn(_gathers, 2, schedule, chunks)[0]
    inside = {tuple(a) for a, k in got if a != "-" and k}
    outside = sum(k for a, k in got if a == "-")
    assert all(k in (0, PIECES) for a, k in got if a != "-"), got  # a gather is every piece of the stage
    order = pl.torch_order(schedule, 1, chunks)[0]
    model = fsdp_gathers({0: order})
    runtime = scheds.get(schedule).per_rank > 1
    firsts = {next(a for a in order if a[0] == s) for s in {a[0] for a in order}}
    if runtime:  # the runtime's UNSHARD before the first action: outside it, one stage's pieces each
        assert outside == PIECES * len(firsts) and not inside & firsts
        assert inside == model - firsts and firsts <= model
    else:
        assert outside == 0 and inside == model


def test_interleaved_and_looped_bfs_gather_equally_often_on_one_rank():
    """pp1, two stages on the rank, m=8: 18 gathers per step either way. Interleaved: a forward that
    follows its stage's backward reuses the parameters, so 3 forwards gather and 15 of 16 backwards
    (stage 0's last follows a backward). Looped BFS: every forward, then each stage's first backward."""
    from bench.plan import model as pl
    from bench.plan.compose import fsdp_gathers

    got = {s: fsdp_gathers(pl.torch_order(s, 1, 8)) for s in ("interleaved", "looped_bfs")}
    kinds = {s: sorted(k for _, k, _ in g) for s, g in got.items()}
    assert kinds == {"interleaved": ["B"] * 15 + ["F"] * 3, "looped_bfs": ["B"] * 2 + ["F"] * 16}
