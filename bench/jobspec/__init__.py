"""`distbench jobspec slurm|kubernetes|skypilot [options] -- distbench KIND ...`: the job file a user submits to
a cluster they do not own (docs/cluster.md, "Job files for clusters you rent").

command.py: the rank command after `--` (checked, `--out` added, its torchrun form); fabric.py: the NCCL /
libfabric variables of each network; slurm.py, kubernetes.py, skypilot.py: one job file each (pure: options
in, text out); emit.py: the small YAML writer the last two use; cli.py: the options and the one write.
"""
