"""What an allreduce algorithm unit supplies: an in-place allreduce built on torch.distributed
point-to-point operations, and its Hockney cost coefficients.

Cost model (Hockney alpha-beta, coefficients from Thakur, Rabenseifner & Gropp, "Optimization
of Collective Communication Operations in MPICH", IJHPCA 2005):

    t(n, S) = a(n) * alpha + b(n) * S * beta

alpha: seconds per message step, beta: seconds per byte, S: total array bytes (nccl-tests'
size), n: world size. `cost(n)` returns (a(n), b(n)). Reduction compute (gamma) is folded into
beta, as the fit cannot separate it from the wire.

Every unit works in place on a flat contiguous tensor at any world >= 1 and any element count:
pieces are balanced splits (`bounds`), and an empty piece is skipped on both sides of an
exchange (both sides compute the same bounds, so they agree on what is empty).
"""

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from bench.registry import Registry

REGISTRY: "Registry[Algorithm]" = Registry("allreduce algorithm")

OPS = ("sum", "max", "min", "product")  # what the p2p algorithms reduce with (avg: sum, then divide)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """One call as seen by one rank."""

    rank: int
    world: int
    op: str = "sum"
    chunk_numel: int = 0  # ring: elements per pipelined chunk (0: one chunk per segment)
    group: Any = None  # None: the default group (peers are global ranks)


class Algorithm:
    name: str = ""
    p2p: bool = True  # False for the backend's own all_reduce
    model: str = ""  # the coefficients in words, for docs and the model table

    def cost(self, n: int) -> tuple[float, float]:
        """(a, b) of t = a*alpha + b*S*beta at world n."""
        raise NotImplementedError

    def messages(self, world: int, count: int, chunk_numel: int = 0) -> int:
        """Message steps of one call at this world, element count and chunk: the alpha term's
        real coefficient (a(n) of `cost` unless the algorithm splits its messages further)."""
        if world <= 1 or count <= 0:
            return 0
        return int(self.cost(world)[0])

    def allreduce(self, x: torch.Tensor, p: Plan) -> None:
        """Reduce x (flat, contiguous) over all ranks, in place, result on every rank."""
        raise NotImplementedError

    def scratch_bytes(self, size_bytes: int, world: int, chunk_bytes: int) -> int:
        """Receive buffers this algorithm keeps (grow-only, across sizes: `scratch`) for a
        size_bytes allreduce at this world and chunk: what preflight counts. Every algorithm says."""
        raise NotImplementedError(f"{type(self).__name__} does not say its scratch bytes")

    def scratch(self, like: torch.Tensor, numel: int, slot: int = 0) -> torch.Tensor:
        """A receive buffer of `numel` elements kept across calls (grow-only), so that timed
        calls do not pay for fresh pages: a real implementation keeps its buffers too."""
        cache = self.__dict__.setdefault("_scratch", {})
        key = (slot, like.dtype, like.device)
        buf = cache.get(key)
        if buf is None or buf.numel() < numel:
            buf = cache[key] = torch.empty(numel, dtype=like.dtype, device=like.device)
        return buf[:numel]


def register(cls):
    REGISTRY.register(cls())
    return cls


def combine(op: str) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """dst <- dst (op) src, in place."""
    if op == "sum":
        return lambda dst, src: dst.add_(src)
    if op == "product":
        return lambda dst, src: dst.mul_(src)
    if op == "max":
        return lambda dst, src: torch.maximum(dst, src, out=dst)
    if op == "min":
        return lambda dst, src: torch.minimum(dst, src, out=dst)
    raise ValueError(f"op {op!r}")  # validated up front in config


def bounds(count: int, parts: int) -> list[int]:
    """Balanced split of [0, count) into `parts` pieces: piece i is [b[i], b[i+1]) (may be empty)."""
    return [i * count // parts for i in range(parts + 1)]


def exchange(sends=(), recvs=(), group=None) -> list:
    """Post (tensor, peer) sends and receives as one batch (ncclGroupStart/End on NCCL, so a
    send and a receive in a cycle cannot deadlock); empty tensors are skipped. Returns works."""
    ops = [dist.P2POp(dist.irecv, t, peer, group) for t, peer in recvs if t.numel()]
    ops += [dist.P2POp(dist.isend, t, peer, group) for t, peer in sends if t.numel()]
    return dist.batch_isend_irecv(ops) if ops else []


def wait(works) -> None:
    for w in works:
        w.wait()


def ceil_log2(n: int) -> int:
    return (n - 1).bit_length()
