"""The pipeline schedules torch.distributed.pipelining ships, one row each: torch's class, the
stage placement it needs, what (chunks, ranks) it can run, and its textbook bubble.

Placement (torch's generate_stage_to_rank_mapping): "loop" puts stages r, r+p, r+2p, ... on rank r
(p ranks, v = stages per rank); "v" puts stages r and 2p-1-r on rank r (the V shape of ZB-V and
DualPipeV: rank 0 holds the first and the last stage).

The rules are torch 2.13's, read from schedules.py and checked against the classes themselves
(tests/test_schedules.py constructs every schedule for p in 2..4, m in 1..12):
  1f1b                      chunks >= ranks (ours: Schedule1F1B runs fewer, but the warm-up
                            then holds every micro-batch, which is GPipe)
  interleaved, interleaved_zb
                            chunks divisible by the rounds max(1, chunks // ranks)
  dualpipev                 chunks >= stages (2 x ranks)
A schedule the installed torch lacks (torch >= 2.4 has gpipe, 1f1b, interleaved and looped_bfs)
is refused with its class name.

Theory (bubble as a fraction of the step, all stages equal, F, I, W the times of one chunk's
forward, input-gradient and weight-gradient backward, B = I + W; bubble time T over the step
T + v m (F + B)):
  gpipe, 1f1b      (p-1)/(m+p-1)           Huang et al. 2019 sec. 2.3; Narayanan et al. 2021
                                            sec. 2.2 (1F1B keeps GPipe's bubble)
  interleaved      (p-1)/(v m+p-1)         Narayanan et al. 2021 sec. 2.2, bubble (1/v)(p-1)/m of
                                            the ideal time
  looped_bfs       (p-1)/(v m+p-1)         Lamy-Poirier 2023 (Breadth-First PP), sec. 3: the
                                            looped placement cuts the bubble by v like interleaving
  interleaved_zb   T = (p-1)(F+I-W)         Qi et al. 2023 (Zero Bubble PP), sec. 3, ZB-H1
                                            (torch's ZB1P, in chunk times)
  zbv              T = (p-1)(F+I-2W), >= 0  Qi et al. 2023 sec. 6: ZB-V, ZB-H2's bubble with
                                            1F1B's memory (zero when F = I = W)
  dualpipev        T = (p-1)(F&B+B-3W)      DeepSeek-V3 technical report (2024), Table 2, with
                                            PP/2 = p ranks of DualPipeV and F&B = F + B (no
                                            compute-communication overlap on one stream)
"""

from dataclasses import dataclass
from typing import Callable

from bench.errors import BenchError, did_you_mean


def _fill_drain(p: int, m: int, v: int, f: float, i: float, w: float) -> float:
    return (p - 1) / (v * m + p - 1)


def _of_time(bubble_time: Callable[[int, float, float, float], float]):
    """A bubble time formula -> the bubble fraction of the step."""
    def frac(p: int, m: int, v: int, f: float, i: float, w: float) -> float:
        t = max(0.0, bubble_time(p, f, i, w))
        work = v * m * (f + i + w)
        return t / (t + work) if t + work > 0 else 0.0
    return frac


def _always(p: int, m: int) -> str | None:
    return None


def _chunks_ge_ranks(p: int, m: int) -> str | None:
    return None if m >= p else f"needs chunks >= stages: chunks {m} < stages {p}"


def _rounds(p: int, m: int) -> str | None:
    rounds = max(1, m // p)
    return None if m % rounds == 0 else (f"needs chunks divisible by its rounds max(1, chunks // stages) "
                                         f"(torch's rule): chunks {m} % rounds {rounds} = {m % rounds}")


def _chunks_ge_stages(p: int, m: int) -> str | None:
    return None if m >= 2 * p else f"needs chunks >= pipeline stages (2 x {p} ranks = {2 * p}): chunks {m} < {2 * p}"


@dataclass(frozen=True, kw_only=True)
class Schedule:
    name: str
    torch_class: str  # in torch.distributed.pipelining.schedules
    per_rank: int  # stages per rank (v)
    placement: str  # loop | v
    split_backward: bool  # runs input-gradient (I) and weight-gradient (W) as separate actions
    rule: Callable[[int, int], str | None]  # (ranks, chunks) -> why it cannot run, or None
    theory: Callable[..., float]  # (p, m, v, F, I, W) -> bubble fraction of the step
    formula: str  # the theory, as shown in the report
    aliases: tuple[str, ...] = ()

    def stage_ids(self, rank: int, ranks: int) -> list[int]:
        """The global stage indices rank `rank` holds, in torch's order of its local stages."""
        if self.placement == "v":
            return [rank, 2 * ranks - 1 - rank]
        return [rank + k * ranks for k in range(self.per_rank)]

    def rank_of(self, stage: int, ranks: int) -> int:
        if self.placement == "v":
            return stage if stage < ranks else 2 * ranks - 1 - stage
        return stage % ranks


SCHEDULES_TABLE = (
    Schedule(name="gpipe", torch_class="ScheduleGPipe", per_rank=1, placement="loop", split_backward=False,
             rule=_always, theory=_fill_drain, formula="(p-1)/(m+p-1) [Huang 2019]", aliases=("GPipe",)),
    Schedule(name="1f1b", torch_class="Schedule1F1B", per_rank=1, placement="loop", split_backward=False,
             rule=_chunks_ge_ranks, theory=_fill_drain, formula="(p-1)/(m+p-1) [Narayanan 2021]", aliases=("1F1B",)),
    Schedule(name="interleaved", torch_class="ScheduleInterleaved1F1B", per_rank=2, placement="loop",
             split_backward=False, rule=_rounds, theory=_fill_drain, formula="(p-1)/(v m+p-1) [Narayanan 2021]",
             aliases=("Interleaved1F1B",)),
    Schedule(name="looped_bfs", torch_class="ScheduleLoopedBFS", per_rank=2, placement="loop", split_backward=False,
             rule=_always, theory=_fill_drain, formula="(p-1)/(v m+p-1) [Lamy-Poirier 2023]",
             aliases=("LoopedBFS",)),
    Schedule(name="interleaved_zb", torch_class="ScheduleInterleavedZeroBubble", per_rank=2, placement="loop",
             split_backward=True, rule=_rounds, theory=_of_time(lambda p, f, i, w: (p - 1) * (f + i - w)),
             formula="T=(p-1)(F+I-W) [Qi 2023, ZB-H1]", aliases=("InterleavedZeroBubble",)),
    Schedule(name="zbv", torch_class="ScheduleZBVZeroBubble", per_rank=2, placement="v", split_backward=True,
             rule=_always, theory=_of_time(lambda p, f, i, w: (p - 1) * (f + i - 2 * w)),
             formula="T=(p-1)(F+I-2W) [Qi 2023, ZB-V]", aliases=("ZBVZeroBubble",)),
    Schedule(name="dualpipev", torch_class="ScheduleDualPipeV", per_rank=2, placement="v", split_backward=True,
             rule=_chunks_ge_stages, theory=_of_time(lambda p, f, i, w: (p - 1) * ((f + i + w) + (i + w) - 3 * w)),
             formula="T=(p-1)(F&B+B-3W) [DeepSeek-V3]", aliases=("DualPipeV",)),
)
BY_NAME = {s.name: s for s in SCHEDULES_TABLE}
SCHEDULES = tuple(BY_NAME)
CHECKPOINTS = ("always", "except_last", "never")  # activation checkpointing of a stage's blocks (bench.training.pp)
_ALIASES = {a.lower(): s.name for s in SCHEDULES_TABLE for a in (s.name, *s.aliases)}


def canonical(name: str) -> str:
    """Our name for a schedule given by ours or torch's (get_schedule_class's, any case)."""
    got = _ALIASES.get(str(name).lower())
    if got is None:
        hint = did_you_mean(str(name).lower(), list(_ALIASES))  # ours or torch's, lower case
        raise BenchError(f"unknown schedule '{name}'{hint}; allowed: {', '.join(SCHEDULES)} "
                         f"(or torch's names: {', '.join(a for s in SCHEDULES_TABLE for a in s.aliases)})")
    return got


def get(name: str) -> Schedule:
    return BY_NAME[canonical(name)]


def torch_class(name: str):
    """The installed torch's class for a schedule; BenchError naming the class when it lacks it."""
    import torch  # lazy: the schedules table is read by `--help` and the readers, which do not import torch
    from torch.distributed.pipelining import schedules as ts  # lazy: ~1.4 s, only when a pipeline runs or checks

    s = get(name)
    cls = getattr(ts, s.torch_class, None)
    if cls is None:
        have = [x.name for x in SCHEDULES_TABLE if hasattr(ts, x.torch_class)]
        raise BenchError(f"schedule {s.name} needs torch.distributed.pipelining.{s.torch_class}, which torch "
                         f"{torch.__version__} does not have; allowed here: {', '.join(have)} (or upgrade torch)")
    return cls


def theory_bubble(name: str, p: int, m: int, f: float = 1.0, i: float = 1.0, w: float = 1.0) -> float:
    """The schedule's textbook bubble fraction (module docstring) with chunk times F, I, W."""
    if p < 1 or m < 1:
        raise ValueError(f"stages {p} and micro-batches {m} must be >= 1")
    s = get(name)
    return s.theory(p, m, s.per_rank, f, i, w)
