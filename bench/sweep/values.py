"""The exact values the message-size sweeps send and check (the collectives and allreduce kinds):
inputs are small integers that depend on the source rank and the global element index, so they
are exact in every dtype and a mis-routed chunk shows up as a wrong element (a constant per rank
would not); the expected results, and the count of wrong elements within each dtype's bound."""

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from bench.units import EXACT_INT_LIMIT, torch_op


@dataclass(frozen=True, kw_only=True)
class Ctx:
    """One (collective, size, dtype, op, root, placement) case as seen by one rank."""

    rank: int
    world: int
    count: int  # elements of the total array S (nccl-tests' count); a multiple of world if sharded
    dtype: torch.dtype
    device: torch.device
    op: str | None = None  # reduce op name, None for data-movement collectives
    root: int = 0
    inplace: bool = False
    group: Any = None  # the communicator, when the world runs several groups at once (rank, world: within it)

    def global_rank(self, r: int) -> int:
        """The world rank of group rank `r` (torch's src/dst/peer arguments are world ranks)."""
        return r if self.group is None else dist.get_global_rank(self.group, r)

    @property
    def shard(self) -> int:
        return self.count // self.world

    @property
    def torch_op(self):
        return torch_op(self.op)


# ---- exact input patterns -------------------------------------------------------------

_MOVE_MODULUS = 251  # prime: rank and index patterns do not alias for small worlds


def _move_modulus(dtype: torch.dtype) -> int:
    return min(_MOVE_MODULUS, EXACT_INT_LIMIT[dtype])


def move_values(src_rank, index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Data-movement pattern: value of global element `index` as sent by `src_rank`, in [1, K)."""
    k = _move_modulus(dtype)
    return ((index * 7 + src_rank * 131) % (k - 1) + 1).to(dtype)


def _reduce_modulus(dtype: torch.dtype, world: int) -> int:
    # sum = world * (K - 1) + world * (world - 1) / 2 must stay exact.
    head = (EXACT_INT_LIMIT[dtype] - world * (world - 1) // 2) // world
    return max(1, min(_MOVE_MODULUS, head + 1))


def reduce_values(rank, index: torch.Tensor, c: Ctx) -> torch.Tensor:
    """Input of `rank` at global `index` for a reduction with op c.op over c.world ranks."""
    n = c.world
    if c.op == "product":
        # exactly one rank holds a factor 2..4 per element: product = index % 3 + 2
        hot = ((rank + index) % n == 0).to(torch.int64)
        return (1 + hot * (index % 3 + 1)).to(c.dtype)
    base = (index * 7) % _reduce_modulus(c.dtype, n)
    return (base + (rank + index) % n).to(c.dtype)


def reduce_expected(index: torch.Tensor, c: Ctx) -> torch.Tensor:
    """Exact reduction over all ranks of reduce_values, computed in closed form in float64/int64."""
    n = c.world
    if c.op == "product":
        return (index % 3 + 2).to(c.dtype)
    base = ((index * 7) % _reduce_modulus(c.dtype, n)).to(torch.float64)
    if c.op == "sum":
        out = n * base + n * (n - 1) / 2
    elif c.op == "avg":
        out = base + (n - 1) / 2
    elif c.op == "max":
        out = base + (n - 1)
    elif c.op == "min":
        out = base
    else:  # pragma: no cover - ops are validated up front
        raise ValueError(c.op)
    if c.dtype.is_floating_point:
        return out.to(c.dtype)
    return out.to(torch.int64).to(c.dtype)  # integers wrap like the backends do


def arange(start: int, n: int, device) -> torch.Tensor:
    return torch.arange(start, start + n, dtype=torch.int64, device=device)


def _tiled(fn, start: int, n: int, period: int, device) -> torch.Tensor:
    """fn(arange(start, n)) for an fn periodic in the index with `period`, built from one period
    and tiled: the same values at memory-copy speed (64 MiB in milliseconds, not a second)."""
    if n <= 4 * period:
        return fn(arange(start, n, device))
    one = fn(arange(start, period, device))
    return one.repeat(-(-n // period))[:n]


def move_range(src_rank: int, start: int, n: int, dtype: torch.dtype, device) -> torch.Tensor:
    """move_values(src_rank, arange(start, n)) -- fast."""
    return _tiled(lambda i: move_values(src_rank, i, dtype), start, n, _move_modulus(dtype) - 1, device)


def _reduce_period(c: Ctx) -> int:
    other = 3 if c.op == "product" else _reduce_modulus(c.dtype, c.world)
    return math.lcm(other, c.world)


def reduce_range(rank: int, start: int, n: int, c: Ctx) -> torch.Tensor:
    """reduce_values(rank, arange(start, n), c) -- fast."""
    return _tiled(lambda i: reduce_values(rank, i, c), start, n, _reduce_period(c), c.device)


def expected_range(start: int, n: int, c: Ctx) -> torch.Tensor:
    """reduce_expected(arange(start, n), c) -- fast."""
    return _tiled(lambda i: reduce_expected(i, c), start, n, _reduce_period(c), c.device)


def gathered_values(c: Ctx) -> list[torch.Tensor]:
    """The full array that an all_gather of per-rank shards yields, as its w pieces (not joined:
    joining would hold the pieces and the whole array at once): element i from rank i // shard."""
    return [move_range(k, k * c.shard, c.shard, c.dtype, c.device) for k in range(c.world)]


def empty(c: Ctx, n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=c.dtype, device=c.device)


# ---- the check ---------------------------------------------------------------------------------

_MANTISSA_BITS = {torch.float64: 53, torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Unit in the last place of each |x| in `dtype` (float64 tensor): 2^(e - p) for x in
    [2^(e-1), 2^e), p the dtype's significand bits; the smallest normal's ulp at 0."""
    p = _MANTISSA_BITS[dtype]
    x = x.to(torch.float64).abs()
    tiny = torch.finfo(dtype).tiny
    _, e = torch.frexp(torch.clamp(x, min=tiny))
    return torch.ldexp(torch.ones_like(x), (e - p).to(torch.float64))


def avg_ulp_bound(world: int) -> int:
    """How many ulps (of the expected value, in the dtype) an `avg` may differ by on a floating
    type: world + 2. NCCL computes avg of floats as a pre-multiplied sum, sum_i fl(x_i * fl(1/n)),
    so at a world that is not a power of two 1/n is rounded (1 rounding), each product is rounded
    (1), the n - 1 additions round in some order (n - 1), and the reference is rounded once (1):
    with the non-negative inputs used here each rounding moves the result by at most u * |avg|
    <= 1 ulp, so |got - want| <= (n + 2) ulp(want) (first order; Higham, Accuracy and Stability
    of Numerical Algorithms, 2002, sec. 4.2). At power-of-two worlds the result is usually exact,
    and the bound still holds."""
    return world + 2


# The check compares in chunks of this many elements, so that its temporaries stay bounded
# whatever the message size (an 8 GiB float32 avg compared at once would add 16 GiB of float64
# copies, and every check a whole-buffer mask). Per element of a chunk, the avg compare holds at
# most ~12 float64-sized temporaries at once (got and want in float64, |want|, its frexp parts,
# the ulp, the tolerance, the difference, the masks): CHECK_SCRATCH_BYTES, counted by preflight.
CHECK_CHUNK_NUMEL = 1 << 21
CHECK_SCRATCH_BYTES = CHECK_CHUNK_NUMEL * 12 * 8


def _pieces(x) -> list[torch.Tensor]:
    return [t.reshape(-1) for t in (x if isinstance(x, (list, tuple)) else [x])]


def _aligned_chunks(got: list, want: list, n: int):
    """Pairs of equally long 1-D views of `got` and `want` (lists of pieces, cut anywhere), at most
    n elements each, in order; ValueError when the totals differ."""
    total_g, total_w = sum(t.numel() for t in got), sum(t.numel() for t in want)
    if total_g != total_w:
        raise ValueError(f"the result has {total_g} elements, the expected result {total_w}")
    gi, wi = iter(got), iter(want)
    g = w = got[0][:0] if got else None
    while True:
        while g is not None and g.numel() == 0:
            g = next(gi, None)
        while w is not None and w.numel() == 0:
            w = next(wi, None)
        if g is None or w is None:
            return
        k = min(g.numel(), w.numel(), n)
        yield g[:k], w[:k]
        g, w = g[k:], w[k:]


def wrong_elements(got, want, op: str | None, dtype: torch.dtype, world: int) -> int:
    """Elements of `got` that are wrong (`got`, `want`: tensors or lists of pieces in order).
    Exact comparison, except `avg` on a floating dtype, which is compared within
    avg_ulp_bound(world) ulps (see there); NaN is always wrong. Compared CHECK_CHUNK_NUMEL
    elements at a time (no copy of the whole buffer), the count summed on the device and read
    once."""
    approx = op == "avg" and dtype.is_floating_point and dtype in _MANTISSA_BITS
    wrong = None
    for g, w in _aligned_chunks(_pieces(got), _pieces(want), CHECK_CHUNK_NUMEL):
        if approx:
            w64 = w.to(torch.float64)
            bad = ~((g.to(torch.float64) - w64).abs() <= avg_ulp_bound(world) * ulp(w64, dtype))
        else:
            bad = g != w
        n = bad.sum()
        wrong = n if wrong is None else wrong + n
    return int(wrong.item()) if wrong is not None else 0
