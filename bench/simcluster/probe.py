"""A two-rank gloo probe of one link (the simulator's own measurement, not a benchmark kind):
rank 0 sends `--bytes` to rank 1 `--reps` times (one tensor each, back to back, then one ack), and a
ping-pong of `--small-bytes` measures the round trip. Run it under torchrun, e.g. across a link:

    distbench simcluster --nodes 2 --link 200mbit -- python -m bench.simcluster.probe --bytes 8M

or on one node's loopback: python -m torch.distributed.run --standalone --nproc-per-node 2 -m bench.simcluster.probe

Rank 0 prints one JSON line: `{"probe": ..., "bytes", "reps", "seconds", "rate_bits_s", "rtt_s"}`.
The rate counts payload bytes only (TCP/IP and Ethernet headers, ~4.4% of a 1500-byte frame, are
inside the link's rate), from the first byte sent to the receiver's ack.
"""

import argparse
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


def measure(nbytes: int, reps: int, small_bytes: int, pings: int) -> dict:
    rank = dist.get_rank()
    buf = torch.zeros(max(nbytes // 4, 1), dtype=torch.float32)
    ack = torch.zeros(1)
    dist.barrier()
    dist.send(buf, 1) if rank == 0 else dist.recv(buf, 0)  # warm-up: the connection and its buffers
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        dist.send(buf, 1) if rank == 0 else dist.recv(buf, 0)
    dist.recv(ack, 1) if rank == 0 else dist.send(ack, 0)  # the last byte arrived at rank 1
    seconds = time.perf_counter() - t0
    small = torch.zeros(max(small_bytes // 4, 1))
    rtts = []
    for _ in range(pings):
        t = time.perf_counter()
        if rank == 0:
            dist.send(small, 1)
            dist.recv(small, 1)
        else:
            dist.recv(small, 0)
            dist.send(small, 0)
        rtts.append(time.perf_counter() - t)
    sent = buf.numel() * 4 * reps
    return {"probe": "gloo send/recv", "bytes": sent, "reps": reps, "seconds": seconds,
            "rate_bits_s": sent * 8 / seconds, "rtt_s": statistics.median(rtts), "small_bytes": small.numel() * 4,
            "hosts": _hosts(), "ifname": os.environ.get("GLOO_SOCKET_IFNAME", "")}


def _hosts() -> list:
    out = [None, None]
    dist.all_gather_object(out, socket.gethostname())
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.simcluster.probe", description=__doc__.splitlines()[0])
    p.add_argument("--bytes", default="8M", help="bytes per message (K/M/G: powers of 1024), default 8M")
    p.add_argument("--reps", type=int, default=4, help="messages timed back to back, default 4")
    p.add_argument("--small-bytes", default="4", help="ping-pong message, default 4 bytes")
    p.add_argument("--pings", type=int, default=200, help="round trips, default 200")
    args = p.parse_args(argv)
    try:
        nbytes, small = parse_size(args.bytes), parse_size(args.small_bytes)
        if args.reps < 1 or args.pings < 1:
            raise BenchError(f"--reps {args.reps} and --pings {args.pings} must be >= 1")
    except BenchError as e:
        print(f"probe: error: {e}", file=sys.stderr)
        return 2
    dist.init_process_group("gloo")
    try:
        if dist.get_world_size() != 2:
            print(f"probe: error: needs exactly 2 ranks, got {dist.get_world_size()}", file=sys.stderr)
            return 2
        res = measure(nbytes, args.reps, small, args.pings)
        if dist.get_rank() == 0:
            print(json.dumps(res), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
