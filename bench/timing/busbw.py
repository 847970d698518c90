"""nccl-tests' bus factors (doc/PERFORMANCE.md): busbw = algbw x factor, the bytes each rank's link
carries per byte of the array S in a ring, at n ranks. Keyed by the nccl-tests program names; the
collectives units carry their own (`Collective.bus_factor`, per unit), this table serves the readers
that have a name and no unit (the nccl-tests import's inference, the planner's scaling across
group sizes)."""

FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "alltoallv": lambda n: (n - 1) / n,  # src/alltoallv.cu AlltoAllvGetBw: algbw from the busiest rank's bytes
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "reduce": lambda n: 1.0,
    "broadcast": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def bus_factor(collective: str, n: int) -> float:
    """The factor of `collective` at n ranks; 1 for a name outside the table (a point-to-point)."""
    return FACTORS[collective](n) if collective in FACTORS else 1.0
