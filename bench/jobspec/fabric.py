"""`--fabric ib|roce|efa|socket`: the NCCL / libfabric variables each network needs, as (name, value) pairs in
the order they are exported. What each one does and where that is documented: docs/cluster.md, "Job files
for clusters you rent" (the NCCL user guide's env.html; aws-ofi-nccl doc/efa-env-var.md).

The interface and HCA names are the cluster's own: `--ifname` (NCCL_SOCKET_IFNAME, NCCL's syntax: prefixes,
`^` to exclude, `=` for an exact name) and `--hca` (NCCL_IB_HCA: card prefixes, `:port`). Their defaults are
placeholders that work on most hosts but pick nothing in particular: `^docker,lo` (every interface but
docker* and lo) and `mlx5` (every port of every mlx5 card). `--env NAME=VALUE` sets or overrides any variable.
"""

import re

from bench.errors import BenchError

FABRICS = ("ib", "roce", "efa", "socket")
IFNAME_PLACEHOLDER = "^docker,lo"
HCA_PLACEHOLDER = "mlx5"
GID_INDEX_DEFAULT = 3  # RoCE v2 over IPv4 on a port with one IPv4 address (NCCL >= 2.21 picks it itself)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NAME_LIST = re.compile(r"[\^=]?[A-Za-z0-9_.:=\^-]+(,[\^=]?[A-Za-z0-9_.:=\^-]+)*")  # ib0 / =eth0,eth1 / ^docker,lo


def fabric_env(fabric: str | None, ifname: str | None, hca: str | None, gid_index: int | None) -> list[tuple[str, str]]:
    """The preset's variables; no fabric: none (NCCL chooses by itself). Options that the fabric does not use
    are refused rather than ignored."""
    if fabric is None:
        for flag, value in (("--ifname", ifname), ("--hca", hca), ("--gid-index", gid_index)):
            if value is not None:
                raise BenchError(f"jobspec: {flag} {value} needs --fabric; allowed: {', '.join(FABRICS)}")
        return []
    if hca is not None and fabric not in ("ib", "roce"):
        raise BenchError(f"jobspec: --hca {hca} applies to --fabric ib or roce, not {fabric}")
    if gid_index is not None and fabric != "roce":
        raise BenchError(f"jobspec: --gid-index {gid_index} applies to --fabric roce, not {fabric}")
    for flag, value in (("--ifname", ifname), ("--hca", hca)):
        if value is not None and not NAME_LIST.fullmatch(value):
            raise BenchError(f"jobspec: {flag} '{value}': give a comma list of names or prefixes, NCCL's syntax "
                             "(^ excludes, = matches exactly), e.g. ib0, =eth0, ^docker,lo, mlx5_0:1,mlx5_1:1")
    if gid_index is not None and not 0 <= gid_index <= 255:
        raise BenchError(f"jobspec: --gid-index {gid_index}: allowed 0 .. 255 (see `show_gids` or "
                         "/sys/class/infiniband/<hca>/ports/<port>/gid_attrs/types/)")
    ifname = ifname or IFNAME_PLACEHOLDER
    hca = hca or HCA_PLACEHOLDER
    if fabric == "ib":
        return [("NCCL_IB_HCA", hca), ("NCCL_SOCKET_IFNAME", ifname)]
    if fabric == "roce":
        return [("NCCL_IB_HCA", hca), ("NCCL_IB_GID_INDEX", str(GID_INDEX_DEFAULT if gid_index is None else gid_index)),
                ("NCCL_SOCKET_IFNAME", ifname)]
    if fabric == "efa":
        return [("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "1"), ("NCCL_SOCKET_IFNAME", ifname)]
    return [("NCCL_IB_DISABLE", "1"), ("NCCL_SOCKET_IFNAME", ifname)]


def job_env(fabric_vars: list[tuple[str, str]], overrides: list[str]) -> list[tuple[str, str]]:
    """The preset's variables with `--env NAME=VALUE` applied: a name already set takes the new value in
    place, a new name is added at the end."""
    env = dict(fabric_vars)
    for item in overrides:
        name, eq, value = item.partition("=")
        if not eq or not ENV_NAME.fullmatch(name):
            raise BenchError(f"jobspec: --env '{item}': give NAME=VALUE with NAME a variable name, "
                             "e.g. --env NCCL_DEBUG=INFO")
        env[name] = value
    return list(env.items())
