"""A two-rank gloo probe of one link (the simulator's own measurement, not a benchmark kind):
rank 0 sends `--bytes` to rank 1 `--reps` times (one tensor each, back to back, then one ack), and a
ping-pong of `--small-bytes` measures the round trip. Run it under torchrun, e.g. across a link:

    distbench simcluster --nodes 2 --link 200mbit -- python -m bench.simcluster.probe --bytes 8M

or on one node's loopback: python -m torch.distributed.run --standalone --nproc-per-node 2 -m bench.simcluster.probe

With more ranks, `--peers 1,2` measures rank 0 -> 1, then rank 0 -> 2 (the others wait), and
`--both-ways` adds each peer -> rank 0 (e.g. both directions of a slowed pair of nodes).
Rank 0 prints one JSON line per measurement: `{"probe": ..., "src", "dst", "bytes", "reps",
"seconds", "rate_bits_s", "rtt_s", "hosts": [src's, dst's]}`.
The rate counts payload bytes only (TCP/IP and Ethernet headers, ~4.4% of a 1500-byte frame, are
inside the link's rate), from the first byte sent to the receiver's ack.
"""

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

from bench.errors import BenchError
from bench.units import parse_size


def measure(nbytes: int, reps: int, small_bytes: int, pings: int, src: int = 0, dst: int = 1) -> dict:
    """`src` sends to `dst`; every other rank only joins the barriers. The result on every rank."""
    rank = dist.get_rank()
    hosts = _hosts()
    buf = torch.zeros(max(nbytes // 4, 1), dtype=torch.float32)
    ack = torch.zeros(1)
    dist.barrier()
    if rank == src:
        dist.send(buf, dst)  # warm-up: the connection and its buffers
    elif rank == dst:
        dist.recv(buf, src)
    dist.barrier()
    t0 = time.perf_counter()
    if rank in (src, dst):
        for _ in range(reps):
            dist.send(buf, dst) if rank == src else dist.recv(buf, src)
        dist.recv(ack, dst) if rank == src else dist.send(ack, src)  # the last byte arrived at dst
    seconds = time.perf_counter() - t0
    small = torch.zeros(max(small_bytes // 4, 1))
    rtts = []
    for _ in range(pings if rank in (src, dst) else 0):
        t = time.perf_counter()
        if rank == src:
            dist.send(small, dst)
            dist.recv(small, dst)
        else:
            dist.recv(small, src)
            dist.send(small, src)
        rtts.append(time.perf_counter() - t)
    dist.barrier()
    sent = buf.numel() * 4 * reps
    return {"probe": "gloo send/recv", "src": src, "dst": dst, "bytes": sent, "reps": reps, "seconds": seconds,
            "rate_bits_s": sent * 8 / seconds, "rtt_s": statistics.median(rtts) if rtts else None,
            "small_bytes": small.numel() * 4, "hosts": [hosts[src], hosts[dst]],
            "ifname": os.environ.get("GLOO_SOCKET_IFNAME", "")}


def _hosts() -> list:
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, socket.gethostname())
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.simcluster.probe", description=__doc__.splitlines()[0])
    p.add_argument("--bytes", default="8M", help="bytes per message (K/M/G: powers of 1024), default 8M")
    p.add_argument("--reps", type=int, default=4, help="messages timed back to back, default 4")
    p.add_argument("--small-bytes", default="4", help="ping-pong message, default 4 bytes")
    p.add_argument("--pings", type=int, default=200, help="round trips, default 200")
    p.add_argument("--peers", default="1", help="ranks rank 0 sends to, one after the other (comma list), default 1")
    p.add_argument("--both-ways", dest="both_ways", action="store_true", help="also measure each peer -> rank 0")
    args = p.parse_args(argv)
    try:
        nbytes, small = parse_size(args.bytes), parse_size(args.small_bytes)
        if args.reps < 1 or args.pings < 1:
            raise BenchError(f"--reps {args.reps} and --pings {args.pings} must be >= 1")
        peers = [int(x) for x in args.peers.split(",") if x.strip().isdigit()]
        if not peers or len(peers) != len(args.peers.split(",")):
            raise BenchError(f"--peers '{args.peers}': a comma list of ranks, e.g. 1,2")
    except BenchError as e:
        print(f"probe: error: {e}", file=sys.stderr)
        return 2
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    try:
        world = dist.get_world_size()
        if world < 2 or not all(0 < r < world for r in peers):
            print(f"probe: error: --peers {args.peers} must be ranks 1 .. {world - 1} (world {world})", file=sys.stderr)
            return 2
        for peer in peers:
            for src, dst in ((0, peer), (peer, 0)) if args.both_ways else ((0, peer),):
                res = measure(nbytes, args.reps, small, args.pings, src, dst)
                if dist.get_rank() == 0:
                    print(json.dumps(res), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
