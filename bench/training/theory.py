"""Textbook bubble fractions, named after where they come from.

GPipe (Huang et al. 2019, sec. 2.3): with p stages and m micro-batches of equal time, the idle
share of the step is (p-1)/(m+p-1)  -- bubble over the whole step. For interleaved schedules we
report (p-1)/(v m + p - 1), the same count with v chunks per device.
Megatron-LM (Narayanan et al. 2021, sec. 2.2): bubble time over *ideal* compute time,
(p-1)/m, and (p-1)/(v*m) for the interleaved schedule with v model chunks per device. It is a
ratio to compute, not to the step, so it exceeds the GPipe form and can be > 1.
"""


def gpipe_bubble(p: int, m: int, v: int = 1) -> float:
    """(p-1)/(m+p-1); with v model chunks per device (interleaved) the same fill/drain count
    over v*m chunk-steps, (p-1)/(v*m+p-1) -- our extension, equal to GPipe's form at v=1."""
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"stages {p}, micro-batches {m}, chunks per device {v} must be >= 1")
    return (p - 1) / (v * m + p - 1)


def megatron_bubble(p: int, m: int, v: int = 1) -> float:
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"stages {p}, micro-batches {m}, chunks per device {v} must be >= 1")
    return (p - 1) / (v * m)
