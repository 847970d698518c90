"""halving_doubling: Rabenseifner's allreduce, recursive-halving reduce-scatter then
recursive-doubling all-gather, over the largest power of two p' <= n.

Non-powers of two use the standard fold (Thakur et al. 2005, sec. 4.4): of the first 2r ranks
(r = n - p'), each even rank sends its whole array to the odd rank above it and sits out; the
p' remaining ranks run the power-of-two algorithm; at the end each odd rank sends the result
back to its even partner.
Halving: at distance p'/2, p'/4, ..., 1 a rank keeps one half of its block range, sends the
other half to its partner and reduces the half it receives; it ends with block `newrank` of p'
balanced blocks. Doubling replays the steps backwards, exchanging whole held ranges.
Cost: a = 2 log2 p' (+2 when n != p'), b = 2(p'-1)/p' (+2 when n != p').
"""

import torch

from bench.allreduce.base import Algorithm, Plan, bounds, combine, exchange, register, wait


def pof2_below(n: int) -> int:
    return 1 << (n.bit_length() - 1)


@register
class HalvingDoubling(Algorithm):
    name = "halving_doubling"

    def scratch_bytes(self, size_bytes: int, world: int, chunk_bytes: int) -> int:
        return size_bytes  # the first halving step receives S/2; the fold-in of extra ranks S
    model = "a = 2 log2 p' + 2[n != p'], b = 2(p'-1)/p' + 2[n != p'], p' = 2^floor(log2 n)"

    def cost(self, n):
        p2 = pof2_below(n)
        fold = 0 if n == p2 else 2
        return 2 * (p2.bit_length() - 1) + fold, 2 * (p2 - 1) / p2 + fold

    def allreduce(self, x: torch.Tensor, p: Plan) -> None:
        n, r = p.world, p.rank
        if n == 1 or x.numel() == 0:
            return
        red = combine(p.op)
        p2 = pof2_below(n)
        rem = n - p2
        tmp = self.scratch(x, x.numel())
        if r < 2 * rem:  # fold the extra ranks into their odd partners
            if r % 2 == 0:
                wait(exchange(sends=[(x, r + 1)], group=p.group))
                newrank = -1
            else:
                wait(exchange(recvs=[(tmp, r - 1)], group=p.group))
                red(x, tmp)
                newrank = r // 2
        else:
            newrank = r - rem
        if newrank >= 0:
            self._power_of_two(x, tmp, newrank, p2, rem, red, p.group)
        if r < 2 * rem:  # unfold
            if r % 2:
                wait(exchange(sends=[(x, r - 1)], group=p.group))
            else:
                wait(exchange(recvs=[(x, r + 1)], group=p.group))

    @staticmethod
    def _power_of_two(x, tmp, newrank, p2, rem, red, group):
        def real(nr):  # newrank -> global rank
            return nr * 2 + 1 if nr < rem else nr + rem

        b = bounds(x.numel(), p2)
        lo, hi = 0, p2  # the range of blocks this rank is responsible for
        history = []
        mask = p2 >> 1
        while mask:
            partner = real(newrank ^ mask)
            mid = (lo + hi) // 2
            keep, give = ((mid, hi), (lo, mid)) if newrank & mask else ((lo, mid), (mid, hi))
            ks, ke = b[keep[0]], b[keep[1]]
            incoming = tmp[:ke - ks]
            wait(exchange(sends=[(x[b[give[0]]:b[give[1]]], partner)], recvs=[(incoming, partner)], group=group))
            red(x[ks:ke], incoming)
            history.append((partner, keep, give))
            lo, hi = keep
            mask >>= 1
        for partner, keep, give in reversed(history):  # recursive doubling
            wait(exchange(sends=[(x[b[keep[0]]:b[keep[1]]], partner)],
                          recvs=[(x[b[give[0]]:b[give[1]]], partner)], group=group))
