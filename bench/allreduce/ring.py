"""ring: reduce-scatter then all-gather around the logical ring r -> r+1, pipelined in chunks.

2(n-1) steps; at step t rank r sends segment (r - t) mod n to the right and receives segment
(r - t - 1) mod n from the left (reduced into its own copy for t < n-1, copied for t >= n-1);
what a rank sends at step t is what it received at step t-1, so chunk c of step t can leave as
soon as chunk c of step t-1 has arrived: chunks of consecutive steps overlap (a pipeline of up
to DEPTH exchanges in flight). Each rank sends 2(n-1)/n * S bytes.
Cost: a = 2(n-1), b = 2(n-1)/n (Thakur et al. 2005, ring allreduce / Patarasuk & Yuan).
"""

import math
from collections import deque

import torch

from bench.allreduce.base import Algorithm, Plan, bounds, combine, exchange, register, wait

DEPTH = 4  # exchanges in flight (each reduce step owns one chunk-sized receive buffer)


@register
class Ring(Algorithm):
    name = "ring"
    model = "a = 2(n-1), b = 2(n-1)/n"

    def cost(self, n):
        return 2 * (n - 1), 2 * (n - 1) / n

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
