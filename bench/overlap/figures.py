"""The overlap figures, from medians (pure: no torch). Definitions (docs/overlap.md):

t_comm, t_comp: the collective alone and the compute alone; t_both: both started together, until
both finish; comm_under, comp_under: each side's own duration while the other ran. Each is the
median over repetitions of the repetition's time reduced over ranks by max (the completion time:
a collective is done when its last rank is, a step waits for its slowest rank).

- hidden share of communication = (t_comm + t_comp - t_both) / t_comm: the share of the
  collective's own time that running it beside the compute saved. 1: fully hidden (t_both =
  t_comp); 0: none (t_both = t_comm + t_comp); negative: running both together was slower than
  one after the other. The exposed communication of a training step is the same idea with the
  step: exposed = t_step - t_compute_alone, hidden share = 1 - exposed / t_comm_alone.
- overlap efficiency = (t_comm + t_comp - t_both) / min(t_comm, t_comp): the saving against the
  most that overlap can save (the shorter side entirely hidden); unclamped, 1 at best.
- slowdowns: comm_under / t_comm and comp_under / t_comp: what each side costs the other
  (PARAM's commsComputeBench prints both latencies, without a ratio).
- ideal hidden share = min(t_comm, t_comp) / t_comm: what perfect overlap with no interference
  would give from the alone times (the yardstick's expectation).
"""

import math


def _ok(*xs) -> bool:
    return all(x is not None and math.isfinite(x) for x in xs)


def hidden_share(t_comm: float, t_comp: float, t_both: float) -> float:
    return (t_comm + t_comp - t_both) / t_comm if _ok(t_comm, t_comp, t_both) and t_comm > 0 else math.nan


def overlap_efficiency(t_comm: float, t_comp: float, t_both: float) -> float:
    lo = min(t_comm, t_comp) if _ok(t_comm, t_comp) else math.nan
    return (t_comm + t_comp - t_both) / lo if _ok(lo, t_both) and lo > 0 else math.nan


def slowdown(under: float, alone: float) -> float:
    return under / alone if _ok(under, alone) and alone > 0 else math.nan


def ideal_hidden_share(t_comm: float, t_comp: float) -> float:
    return min(t_comm, t_comp) / t_comm if _ok(t_comm, t_comp) and t_comm > 0 else math.nan


def exposed_share(t_step: float, t_compute: float, t_comm_alone: float) -> tuple[float, float]:
    """A training step: (exposed seconds = t_step - t_compute, hidden share = 1 - exposed / t_comm_alone)."""
    if not _ok(t_step, t_compute):
        return math.nan, math.nan
    exposed = t_step - t_compute
    return exposed, (1.0 - exposed / t_comm_alone) if _ok(t_comm_alone) and t_comm_alone > 0 else math.nan


def pair_columns(t_comm: float, t_comp: float, t_both: float, comm_under: float, comp_under: float) -> dict:
    """The results row's figures of one collective against one compute action."""
    return {"overlap_comm_s": t_comm, "overlap_compute_s": t_comp, "overlap_both_s": t_both,
            "overlap_comm_under_s": comm_under, "overlap_compute_under_s": comp_under,
            "hidden_share": hidden_share(t_comm, t_comp, t_both),
            "overlap_efficiency": overlap_efficiency(t_comm, t_comp, t_both),
            "comm_slowdown": slowdown(comm_under, t_comm), "compute_slowdown": slowdown(comp_under, t_comp),
            "ideal_hidden_share": ideal_hidden_share(t_comm, t_comp)}
