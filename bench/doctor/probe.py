"""The doctor's measurements on every rank: point-to-point rounds (bandwidth and latency of every
ordered pair, bench.doctor.schedule) and the group all_reduces. Runners return samples and never
print; rank 0 turns them into rows (bench.doctor.kind)."""

import torch
import torch.distributed as dist

from bench.doctor.schedule import Round
from bench.timing.timers import make_timer, sync


def _buffers(n_bytes: int, rank: int, device) -> torch.Tensor:
    """float32 elements filled with the sender's rank: the receiver checks what arrived."""
    return torch.full((max(n_bytes // 4, 1),), float(rank), dtype=torch.float32, device=device)


PING_TRIPS = 4  # round trips under one timer, after one untimed


def _ping_pong(me: int, peer: int, first: bool, buf: torch.Tensor, timer, trips: int = PING_TRIPS) -> float | None:
    """Round trips of `buf`, started by the `first` rank; its one-way seconds. One untimed round
    trip first: when it is back, the peer has left the barrier and is in its loop, so the timer
    holds no barrier-exit lag of the peer (a single timed trip did: on a busy host or a GPU, that
    lag read as latency). Then `trips` round trips under one timer: one-way = time / (2 trips)."""
    if first:
        dist.send(buf, peer)
        dist.recv(buf, peer)
        timer.start()  # on CUDA, recorded behind the untimed recv on the stream: starts when it is back
        for _ in range(trips):
            dist.send(buf, peer)
            dist.recv(buf, peer)
        return timer.stop() / (2 * trips)
    for _ in range(trips + 1):
        dist.recv(buf, peer)
        dist.send(buf, peer)
    return None


def _one_way(me: int, peer: int, sender: bool, buf: torch.Tensor, ack: torch.Tensor, timer) -> float | None:
    """`buf` from the sender to the receiver, then a 1-element ack back: the sender's seconds from
    the start of its send to the ack (so the time ends when the data has arrived)."""
    if sender:
        timer.start()
        dist.send(buf, peer)
        dist.recv(ack, peer)
        return timer.stop()
    dist.recv(buf, peer)
    dist.send(ack, peer)
    return None


def run_rounds(rounds: list[Round], rank: int, device, sizes: tuple[int, int], reps: int, warmup: int,
               barrier) -> tuple[dict, dict]:
    """Every round, both phases (a -> b, then b -> a), both sizes (small: ping-pong, large: one way),
    `warmup + reps` times:
    ({(src, dst, size): [seconds per rep]} of the pairs this rank sent from, {(src, dst, size): wrong
    elements} of the pairs this rank received on, checked after the last repetition).
    Every rank passes every barrier (ranks without a partner in a round just wait there); a
    barrier before every repetition keeps the pairs of a round in step, so the flows that share
    a link overlap."""
    small, large = sizes
    timer = make_timer(device)
    ack = torch.zeros(1, device=device)
    mine = {s: _buffers(s, rank, device) for s in sizes}
    got = {s: torch.empty_like(mine[s]) for s in sizes}
    out: dict = {}
    wrong: dict = {}
    # repetitions outer, rounds inner: every pair's repetitions are spread over the whole
    # measurement, so a burst of load from outside slows one repetition of many pairs, not every
    # repetition of the pairs of one round
    for rep in range(warmup + reps):
        for rnd in rounds:
            role = rnd.partner(rank)
            for phase in (0, 1):
                for size in (small, large):
                    barrier()
                    if role is None:
                        continue
                    peer, is_a = role
                    sender = is_a == (phase == 0)
                    if size == small:
                        t = _ping_pong(rank, peer, sender, mine[size] if sender else got[size], timer)
                    else:
                        t = _one_way(rank, peer, sender, mine[size] if sender else got[size], ack, timer)
                    if sender and rep >= warmup:
                        out.setdefault((rank, peer, size), []).append(t)
                    if not sender and rep == warmup + reps - 1:
                        wrong[(peer, rank, size)] = _wrong(got[size], peer)
    barrier()
    return out, wrong


def _wrong(buf: torch.Tensor, sender: int) -> int:
    """Elements received that are not the sender's rank (a ping-pong echoes the sender's buffer)."""
    sync(buf.device)
    return int((buf != float(sender)).sum().item())


def node_groups(nodes: list[list[int]]):
    """(the process group of this rank's node or None, the group of the first rank of every node or
    None): every rank creates every group, in the same order (torch.distributed.new_group)."""
    rank = dist.get_rank()
    own = None
    for ranks in nodes:
        g = dist.new_group(ranks) if len(ranks) > 1 else None
        if rank in ranks:
            own = g
    leaders = [r[0] for r in nodes]
    lead = dist.new_group(leaders) if len(leaders) > 1 else None
    return own, (lead if rank in leaders else None)


def time_group(group, size: int, device, reps: int, warmup: int, barrier) -> list[float]:
    """Seconds of each timed all_reduce of `size` bytes in `group` ([] where this rank is not in it);
    every rank passes the same barriers."""
    x = torch.ones(max(size // 4, 1), dtype=torch.float32, device=device)
    timer = make_timer(device)
    out = []
    for rep in range(warmup + reps):
        barrier()
        if group is None:
            continue
        x.fill_(1.0)
        timer.start()
        dist.all_reduce(x, group=group)
        t = timer.stop()
        if rep >= warmup:
            out.append(t)
    barrier()
    return out
