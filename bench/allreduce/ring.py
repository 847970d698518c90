"""ring: reduce-scatter then all-gather around the logical ring r -> r+1, pipelined in chunks.

2(n-1) steps; at step t rank r sends segment (r - t) mod n to the right and receives segment
(r - t - 1) mod n from the left (reduced into its own copy for t < n-1, copied for t >= n-1);
what a rank sends at step t is what it received at step t-1, so chunk c of step t can leave as
soon as chunk c of step t-1 has arrived: chunks of consecutive steps overlap (a pipeline of up
to DEPTH exchanges in flight). Each rank sends 2(n-1)/n * S bytes.
Cost: a = 2(n-1), b = 2(n-1)/n (Thakur et al. 2005, ring allreduce / Patarasuk & Yuan) for one
chunk per segment; in chunks of c elements each step is ceil(ceil(count/n) / c) messages, so a rank
sends 2(n-1) * ceil(S / (n * chunk)) messages (`messages`), which is what the fit uses for alpha.
"""

import math
from collections import deque

import torch

from bench.allreduce.base import Algorithm, Plan, bounds, combine, exchange, register, wait

DEPTH = 4  # exchanges in flight (each reduce step owns one chunk-sized receive buffer)
DEFAULT_CHUNK_BYTES = 1 << 20  # gloo / CPU: pipelining the ring pays off there


def default_chunk_bytes(backend: str, asked: int | None = None) -> int:
    """The ring's chunk in bytes when the user did not ask for one (asked None): on NCCL one
    chunk per segment (0: every extra message costs a kernel launch and a handshake, and NCCL
    pipelines inside a message itself); elsewhere 1 MiB. An explicit `asked` always wins."""
    if asked is not None:
        return int(asked)
    return 0 if backend == "nccl" else DEFAULT_CHUNK_BYTES


def chunks_per_segment(world: int, count: int, chunk_numel: int) -> int:
    """Chunks the longest of the n balanced segments is sent in (0 when there is nothing to send)."""
    if world <= 1 or count <= 0:
        return 0
    longest = -(-count // world)  # bounds(): the longest piece is ceil(count / n)
    ce = min(chunk_numel or longest, longest)
    return math.ceil(longest / ce)


@register
class Ring(Algorithm):
    name = "ring"

    def scratch_bytes(self, size_bytes: int, world: int, chunk_bytes: int) -> int:
        # DEPTH chunk-sized receives in flight; chunk 0 = one chunk per segment (S / world, the nccl default)
        chunk = chunk_bytes if chunk_bytes > 0 else -(-size_bytes // max(world, 1))
        return min(size_bytes, DEPTH * chunk)
    model = "a = 2(n-1), b = 2(n-1)/n"

    def cost(self, n):
        return 2 * (n - 1), 2 * (n - 1) / n

    def messages(self, world, count, chunk_numel=0):
        """Non-empty messages the busiest rank sends: 2(n-1) steps, each segment in
        ceil(len / chunk) messages; = 2(n-1) * ceil(S / (n * chunk)) when the segments are equal.
        Rank r sends every segment but r+1 while reducing and every one but r+2 while gathering."""
        if world <= 1 or count <= 0:
            return 0
        b = bounds(count, world)
        longest = max(b[i + 1] - b[i] for i in range(world))
        ce = min(chunk_numel or longest, longest)  # the chunk allreduce() uses
        c = [-(-(b[i + 1] - b[i]) // ce) for i in range(world)]
        total = sum(c)
        return max(2 * total - c[(r + 1) % world] - c[(r + 2) % world] for r in range(world))

    def allreduce(self, x: torch.Tensor, p: Plan) -> None:
        n, r = p.world, p.rank
        if n == 1 or x.numel() == 0:
            return
        b = bounds(x.numel(), n)
        longest = max(b[i + 1] - b[i] for i in range(n))
        ce = min(p.chunk_numel or longest, longest)  # elements per chunk
        chunks = math.ceil(longest / ce)  # per segment (the shorter ones may end one chunk early)
        steps = 2 * (n - 1)
        right, left = (r + 1) % n, (r - 1) % n
        red = combine(p.op)
        tmp = [self.scratch(x, ce, slot) for slot in range(min(DEPTH, steps * chunks))]

        def piece(seg: int, c: int) -> torch.Tensor:
            lo, hi = b[seg % n], b[seg % n + 1]
            return x[min(lo + c * ce, hi):min(lo + (c + 1) * ce, hi)]

        def issue(i: int):
            t, c = divmod(i, chunks)
            out, into = piece(r - t, c), piece(r - t - 1, c)
            buf = tmp[i % len(tmp)][:into.numel()] if t < n - 1 else into  # all-gather: straight in
            return i, into, buf, exchange(sends=[(out, right)], recvs=[(buf, left)], group=p.group)

        total, issued, done = steps * chunks, 0, 0
        flight: deque = deque()
        while done < total:
            # item i sends what item i - chunks received: it may start once that one is done
            while issued < total and len(flight) < len(tmp) and issued - chunks < done:
                flight.append(issue(issued))
                issued += 1
            i, into, buf, works = flight.popleft()
            wait(works)
            if buf is not into:
                red(into, buf)
            done += 1
