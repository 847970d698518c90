"""What a collective unit supplies to the shared harness (nccl-tests' split of common.cu vs
one file per collective): buffer shapes, the call, the expected result and the bus factor.

Inputs are small integers that depend on the source rank and the global element index, so
they are exact in every dtype and a mis-routed chunk shows up as a wrong element (a constant
per rank would not). The harness owns sweep, warm-up, timing, ranks, dtypes and the check.
"""

from dataclasses import dataclass, field
from typing import Any

import torch

from bench.registry import Registry
# the exact values every unit sends and checks (shared with the allreduce kind), re-exported for the units
from bench.sweep.values import (CHECK_CHUNK_NUMEL, CHECK_SCRATCH_BYTES, Ctx, arange, avg_ulp_bound, empty,  # noqa: F401
                                expected_range, gathered_values, move_range, move_values, reduce_expected,
                                reduce_range, reduce_values, ulp, wrong_elements)

REGISTRY: "Registry[Collective]" = Registry("collective")


@dataclass
class Bufs:
    """Buffers of one case: what the call reads and writes, and what the check reads."""

    inputs: Any = None
    outputs: Any = None
    extra: dict = field(default_factory=dict)


class Collective:
    """Base class of a collective unit; subclasses set the class attributes and four methods."""

    name: str = ""
    reduces: bool = False  # takes a reduce op
    has_root: bool = False
    sharded: bool = False  # the total count must split evenly over ranks
    placements: tuple[str, ...] = ("out-of-place",)
    min_world: int = 1
    sized: bool = True  # barrier is not

    def bus_factor(self, n: int) -> float:
        """busbw = algbw * bus_factor(n) (nccl-tests doc/PERFORMANCE.md)."""
        raise NotImplementedError

    def buff_numel(self, count: int, world: int) -> tuple[int, int]:
        """(send, recv) elements that setup() allocates on the rank that holds the most (the root of
        a rooted collective) for a total-array `count`: nccl-tests' getBuffSize / GetCollByteCount
        (src/<collective>.cu), what the harness sums for memory (case_numel)."""
        raise NotImplementedError

    def setup(self, c: Ctx) -> Bufs:
        raise NotImplementedError

    def call(self, c: Ctx, b: Bufs, async_op: bool = False):
        raise NotImplementedError

    def wait_blocks_host(self, c: Ctx) -> bool | None:
        """Does waiting on this op's Work block the host until the device is done (so a CUDA
        latency sample cannot hold its dispatch out)? None: not known, the loop probes it."""
        return None

    def result(self, c: Ctx, b: Bufs) -> torch.Tensor | list | None:
        """What to check on this rank: a tensor, or a list of tensors in order (a list output is
        not joined: the check walks its pieces), or None where the rank has no output."""
        raise NotImplementedError

    def expected(self, c: Ctx) -> torch.Tensor | list | None:
        """The exact result on this rank, a tensor or a list of pieces in order (cut anywhere)."""
        raise NotImplementedError


def register(cls):
    REGISTRY.register(cls())
    return cls


def case_numel(coll: Collective, count: int, world: int, inplace: bool, check: bool) -> int:
    """Elements of the case's dtype one rank holds at its peak (the most loaded rank), as
    nccl-tests allocates sendbuff, recvbuff and, when checking, expected (nccl-tests a0b82b2,
    src/common.cu:1104 AllocateBuffs, sized by getBuffSize at src/common.cu:1563): send + recv buffers (one buffer in-place: the send
    buffer lies inside the receive buffer, nccl-tests' sendInplaceOffset), and while checked a
    fresh set of them plus the expected result (recv elements; the timed buffers are freed
    first: bench.collectives.kind.measure). The compare itself adds CHECK_SCRATCH_BYTES."""
    if not coll.sized:
        return 0
    send, recv = coll.buff_numel(count, world)
    held = max(send, recv) if inplace else send + recv
    return held + (recv if check else 0)
