"""The one table of nccl-tests' bus factors by name (bench.timing.busbw) agrees with every
collectives unit's own factor."""

import pytest

from bench.timing.busbw import FACTORS, bus_factor

UNIT = {"all_reduce": "all_reduce", "reduce_scatter": "reduce_scatter", "all_gather": "all_gather",
        "alltoall": "all_to_all", "gather": "gather", "scatter": "scatter", "reduce": "reduce",
        "broadcast": "broadcast", "sendrecv": "sendrecv",
        "alltoallv": "all_to_all"}  # nccl-tests' alltoallv (imported runs only): all_to_all's factor, (n - 1) / n


@pytest.mark.parametrize("program", sorted(FACTORS))
def test_the_table_is_the_units_factor(program):
    from bench.collectives import REGISTRY

    unit = REGISTRY.get(UNIT[program])
    assert [bus_factor(program, n) for n in range(2, 9)] == [unit.bus_factor(n) for n in range(2, 9)]


def test_a_name_outside_the_table_is_point_to_point():
    assert bus_factor("send", 8) == 1.0
