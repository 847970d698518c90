"""`distbench simcluster --nodes N --ranks-per-node R --link RATE [--link-of nodeI=RATE] -- COMMAND`."""

import argparse

from bench.errors import BenchError
from bench.simcluster.net import MAX_NODES, check_can_run, node_rates
from bench.simcluster.run import inner_argv, simulate


def add_parser(sub):
    p = sub.add_parser("simcluster", help="run a distbench command on a simulated cluster of N nodes on this machine "
                       "(network namespaces, links shaped with tc; needs root)")
    p.add_argument("--nodes", type=int, required=True, help=f"number of nodes, 1 .. {MAX_NODES}")
    p.add_argument("--ranks-per-node", dest="ranks_per_node", type=int, default=1,
                   help="ranks torchrun starts on each node (default 1)")
    p.add_argument("--link", required=True, help="every node's link rate: kbit, mbit or gbit (powers of 1000), "
                   "e.g. 500mbit; shaped with tc tbf, no added delay")
    p.add_argument("--link-of", dest="link_of", action="append", default=[], metavar="nodeI=RATE",
                   help="one node's link rate instead (repeat, or a comma list), e.g. node1=200mbit")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="after `--`: the command, e.g. distbench collectives -c all_reduce --sizes 1M")
    p.set_defaults(func=cmd_simcluster)


def cmd_simcluster(args) -> int:
    if not 1 <= args.nodes <= MAX_NODES:
        raise BenchError(f"--nodes {args.nodes}: allowed 1 .. {MAX_NODES}")
    if args.ranks_per_node < 1:
        raise BenchError(f"--ranks-per-node {args.ranks_per_node}: must be >= 1")
    rates = node_rates(args.nodes, args.link, args.link_of)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    inner_argv(command)  # bad input is refused before anything else
    check_can_run()
    return simulate(rates, args.ranks_per_node, command)
