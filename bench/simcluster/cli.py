"""`distbench simcluster --nodes N --ranks-per-node R --link RATE [--link-of nodeI=RATE|nodeA-nodeB=RATE]
[--cpu-quota-of rankR=PCT|nodeI=PCT] [--link-down nodeI=ATs[:FORs]] [--kill-node nodeI=ATs] [--launcher torchrun|mpirun | --scheduler slurm [--keep-up]] -- COMMAND`, and
`distbench simcluster --down ID|all` (a cluster kept up)."""

import argparse

from bench.errors import BenchError
from bench.simcluster import cpu, faults, mpi, slurm
from bench.simcluster.net import MAX_NODES, check_can_run, parse_links
from bench.simcluster.kept import down
from bench.simcluster.command import inner_argv
from bench.simcluster.run import LAUNCHERS, simulate

SCHEDULERS = ("none", "slurm")


def add_parser(sub):
    p = sub.add_parser("simcluster", help="run a distbench command on a simulated cluster of N nodes on this machine "
                       "(network namespaces, links shaped with tc; needs root)")
    p.add_argument("--nodes", type=int, help=f"number of nodes, 1 .. {MAX_NODES}")
    p.add_argument("--ranks-per-node", dest="ranks_per_node", type=int, default=1,
                   help="ranks on each node, started by torchrun or mpirun (default 1)")
    p.add_argument("--link", help="every node's link rate: kbit, mbit or gbit (powers of 1000), "
                   "e.g. 500mbit; shaped with tc tbf, no added delay")
    p.add_argument("--link-of", dest="link_of", action="append", default=[], metavar="nodeI=RATE|nodeA-nodeB=RATE",
                   help="one node's link rate instead (node1=200mbit), or a slower rate between two nodes, both "
                   "directions (node0-node2=200mbit); repeat, or a comma list")
    p.add_argument("--cpu-quota-of", dest="cpu_quota_of", action="append", default=[], metavar="rankR=PCT|nodeI=PCT",
                   help="cap one rank's processes (rank3=25%%) or a whole node's (node1=50%%) at PCT %% of one CPU, "
                   "with a cgroup (needs a writable cgroup cpu controller); repeat, or a comma list")
    p.add_argument("--link-down", dest="link_down", action="append", default=[], metavar="nodeI=ATs[:FORs]",
                   help="take node I's link down AT seconds after the command starts (node1=20s), and back up FOR "
                   "seconds later (node1=20s:15s); repeat, or a comma list")
    p.add_argument("--kill-node", dest="kill_node", action="append", default=[], metavar="nodeI=ATs",
                   help="SIGKILL every process of node I AT seconds after the command starts (node1=30s), as a node "
                   "that loses power")
    p.add_argument("--scheduler", choices=SCHEDULERS, default="none",
                   help="none: the --launcher starts the ranks (default); slurm: a real Slurm (munge, slurmctld, one slurmd per "
                   "node) runs the command as a batch job (sbatch --wait; needs Debian's slurm-wlm and munge)")
    p.add_argument("--launcher", choices=LAUNCHERS, default="torchrun",
                   help="who starts the ranks without a scheduler: torchrun in every node (default), or Open MPI's "
                   "mpirun in node0, reaching the other nodes through a launch agent that enters their namespaces "
                   "(needs Open MPI 4.x: Debian's openmpi-bin)")
    p.add_argument("--keep-up", dest="keep_up", action="store_true", help="with --scheduler slurm: leave the cluster up at the end (the "
                   "command is then optional) and print how to submit to it and how to tear it down")
    p.add_argument("--down", metavar="ID|all", help="tear down a cluster left up by --keep-up (its id, or all)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="after `--`: the command, e.g. distbench collectives -c all_reduce --sizes 1M")
    p.set_defaults(func=cmd_simcluster)


def cmd_simcluster(args) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.down:
        if args.nodes is not None or command:
            raise BenchError(f"simcluster --down {args.down}: give no --nodes and no command with --down")
        check_can_run()
        return down([x.strip() for x in args.down.split(",") if x.strip()])
    for name, value in (("--nodes", args.nodes), ("--link", args.link)):
        if value is None:
            raise BenchError(f"simcluster: {name} is required (e.g. --nodes 2 --link 1gbit), or --down ID")
    if args.keep_up and args.scheduler != "slurm":
        raise BenchError("simcluster --keep-up: only with --scheduler slurm (a cluster kept without a scheduler has "
                         "nothing to submit to)")
    if args.launcher == "mpirun" and args.scheduler != "none":
        raise BenchError(f"simcluster --launcher mpirun: not with --scheduler {args.scheduler} (the job's srun starts "
                         "the ranks there); leave --scheduler out, or use --launcher torchrun")
    if not 1 <= args.nodes <= MAX_NODES:
        raise BenchError(f"--nodes {args.nodes}: allowed 1 .. {MAX_NODES}")
    if args.ranks_per_node < 1:
        raise BenchError(f"--ranks-per-node {args.ranks_per_node}: must be >= 1")
    world = args.nodes * args.ranks_per_node
    if args.launcher == "mpirun" and world < 2:
        raise BenchError(f"simcluster --launcher mpirun: a world of {world} is no MPI launch (a rank that sees "
                         "OMPI_COMM_WORLD_SIZE=1 starts its own ranks); give --nodes 2 or more, or --ranks-per-node "
                         "2 or more, or --launcher torchrun")
    links = parse_links(args.nodes, args.link, args.link_of)
    quotas = cpu.parse_quotas(args.cpu_quota_of, args.nodes, args.ranks_per_node)
    timed = faults.parse(args.link_down, args.kill_node, args.nodes)
    if command or not args.keep_up:
        inner_argv(command)  # bad input is refused before anything else
    check_can_run()
    if args.scheduler == "slurm":
        slurm.check_can_run()
    if args.launcher == "mpirun":
        mpi.check_mpirun()
    controller = cpu.check_controller(cpu.SYS_CGROUP) if quotas else None
    return simulate(list(links.node_bits_s), args.ranks_per_node, command, pairs=links.pair_bits_s, quotas=quotas,
                    controller=controller, scheduler=None if args.scheduler == "none" else args.scheduler,
                    keep=args.keep_up, launcher=args.launcher, timed_faults=timed)
