#!/usr/bin/env bash
# Runs the sbatch file `distbench jobspec slurm` writes on a Slurm that distbench did not set up.
#
# Everything here is by hand, as a site would do it from Slurm's quick-start guide: no part of
# bench/simcluster is used. Four network namespaces on this host (a bridge, a controller `ctl`, two
# compute nodes `cn01`, `cn02`) in 10.214.0.0/24; one munged per host with one shared key; slurmctld on
# ctl and slurmd on each node, from the slurm.conf written below. Then `distbench jobspec slurm` writes
# the job, `sbatch --wait` runs it, and the stored run is checked: launcher slurm, hosts cn01 and cn02,
# partition debug, no wrong result. Exit 0 only if all of that holds. The EXIT trap tears everything
# down, after a success or a failure: every process started here, everything left in the namespaces,
# the namespaces, the temp dir.
#
# Usage: sudo tools/slurm_by_hand.sh
#   PYTHON     the python each rank runs (default: the repo's .venv/bin/python)
#   NS_PREFIX  the namespaces' prefix (default: sbh<pid>); the test sets its own
# Needs root, iproute2, util-linux (unshare), munge and Slurm's daemons and clients (slurm-wlm).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV_PY=$REPO/.venv/bin/python    # runs `distbench jobspec` and the check (it has pandas)
PYTHON=${PYTHON:-$VENV_PY}        # runs each rank
PREFIX=${NS_PREFIX:-sbh$$}
NET=10.214.0                      # distbench's own simulated cluster uses 10.213.0.0/24
declare -A ADDR=([ctl]=$NET.1 [cn01]=$NET.11 [cn02]=$NET.12)
HOSTS=(ctl cn01 cn02)
NODES=(cn01 cn02)
START_S=$SECONDS

say() { echo "slurm_by_hand: $*"; }

TMP=$(mktemp -d /tmp/slurm-by-hand.XXXXXX)
PIDS=()        # every process started here, by pid
NAMESPACES=()  # every namespace added here
FG_PID=        # the command wait_on waits for

ours() {  # ours PID: PID is a process in one of this script's namespaces
    local ns
    for ns in "${NAMESPACES[@]}"; do ip netns pids "$ns" 2>/dev/null | grep -qx "$1" && return 0; done
    return 1
}
stop() {  # stop PID: TERM, up to 5 s for a clean exit, then KILL
    local i
    kill -TERM "$1" 2>/dev/null
    for i in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null
}
teardown() {
    local rc=$? ns left i
    set +e
    trap - EXIT INT TERM
    if [ -n "$FG_PID" ]; then  # the client wait_on was waiting for (sbatch) first, while munged still answers
        stop "$FG_PID"
        wait "$FG_PID" 2>/dev/null
    fi
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do  # then the daemons, last started first
        ours "${PIDS[$i]}" && stop "${PIDS[$i]}"  # (only while in our namespaces: a dead one's pid may be reused)
        wait "${PIDS[$i]}" 2>/dev/null
    done
    for ns in "${NAMESPACES[@]}"; do  # slurmstepd, ranks, anything else still in a namespace
        for i in $(seq 50); do
            left=$(ip netns pids "$ns" 2>/dev/null)
            [ -z "$left" ] && break
            kill -KILL $left 2>/dev/null
            sleep 0.1
        done
        ip netns del "$ns"
    done
    rm -rf "$TMP"
    say "torn down (namespaces $PREFIX-*, $((${#PIDS[@]})) started processes, $TMP); exit $rc"
    exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for tool in ip unshare mungekey munged munge unmunge slurmctld slurmd sinfo sbatch; do
    command -v "$tool" >/dev/null || { say "missing $tool"; exit 2; }
done
[ "$(id -u)" = 0 ] || { say "run as root (network namespaces, bind mounts)"; exit 2; }

# --- 1. the network: a bridge in its own namespace, one veth pair per host, no default route ---------
BR=$PREFIX-br
for n in br "${HOSTS[@]}"; do
    ip netns add "$PREFIX-$n"
    NAMESPACES+=("$PREFIX-$n")
    ip -n "$PREFIX-$n" link set lo up
done
ip -n "$BR" link add br0 type bridge
ip -n "$BR" link set br0 up
for h in "${HOSTS[@]}"; do
    # both ends are created inside namespaces: nothing appears in the host's
    ip link add "p-$h" netns "$BR" type veth peer name eth0 netns "$PREFIX-$h"
    ip -n "$BR" link set "p-$h" master br0 up
    ip -n "$PREFIX-$h" addr add "${ADDR[$h]}/24" dev eth0
    ip -n "$PREFIX-$h" link set eth0 up
done
say "network: ${HOSTS[*]} on $NET.0/24 (namespaces $PREFIX-*)"

# --- 2. the configuration, written as a site writes it ----------------------------------------------
SOCK_DIR=$TMP/munge-socket     # every host bind-mounts its own munge directory here
SOCK=$SOCK_DIR/munge.socket.2
CONF=$TMP/etc/slurm.conf
mkdir -p "$SOCK_DIR" "$TMP/etc" "$TMP/log" "$TMP/state" "$TMP/res"
{
    echo "127.0.0.1 localhost"
    for h in "${HOSTS[@]}"; do echo "${ADDR[$h]} $h"; done
} > "$TMP/etc/hosts"
for h in "${HOSTS[@]}"; do mkdir -p "$TMP/$h/munge" "$TMP/$h/spool"; chmod 755 "$TMP/$h/munge"; done
mungekey --create --bits 1024 --keyfile "$TMP/etc/munge.key"   # one key for all hosts
chmod 400 "$TMP/etc/munge.key"

cat > "$CONF" <<EOF
# slurm.conf for a two-node cluster, written by tools/slurm_by_hand.sh
ClusterName=byhand
SlurmctldHost=ctl(${ADDR[ctl]})
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=0
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
InactiveLimit=0
KillWait=5
MinJobAge=300
SlurmctldTimeout=120
SlurmdTimeout=300
Waittime=0
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/%n/spool
SlurmctldPidFile=$TMP/ctl/slurmctld.pid
SlurmdPidFile=$TMP/%n/slurmd.pid
SlurmctldLogFile=$TMP/log/slurmctld.log
SlurmdLogFile=$TMP/log/slurmd-%n.log
NodeName=cn01 NodeAddr=${ADDR[cn01]} CPUs=1 State=UNKNOWN
NodeName=cn02 NodeAddr=${ADDR[cn02]} CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=cn01,cn02 Default=YES MaxTime=INFINITE State=UP
EOF
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then CGROUP=cgroup/v2; else CGROUP=cgroup/v1; fi
echo "CgroupPlugin=$CGROUP" > "$TMP/etc/cgroup.conf"
unset "${!SLURM_@}"    # nothing from a Slurm this script may itself run under
export SLURM_CONF=$CONF

# --- 3. the daemons: each host's processes see its hostname, /etc/hosts and munge socket -------------
as_host() {  # as_host HOST COMMAND...: sets RUN to COMMAND run as if on HOST
    local h=$1; shift
    RUN=(ip netns exec "$PREFIX-$h" unshare --uts --mount sh -c
         'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" "$4" && shift 4 && exec "$@"'
         sh "$h" "$TMP/etc/hosts" "$TMP/$h/munge" "$SOCK_DIR" "$@")
}
on() {  # on HOST COMMAND...: run COMMAND on HOST, in the foreground
    local RUN; as_host "$@"; "${RUN[@]}"
}
start() {  # start HOST NAME COMMAND...: COMMAND in the background on HOST, its pid kept, its output in log/NAME.out
    local h=$1 name=$2 RUN; shift 2
    as_host "$h" "$@"
    # exec all the way down (ip netns exec, unshare, sh): the pid kept is the daemon's own
    (exec "${RUN[@]}" > "$TMP/log/$name.out" 2>&1) &
    PIDS+=("$!")
}
wait_on() {  # wait_on HOST COMMAND...: COMMAND on HOST in the foreground, waited for in a way a signal to
    # this script interrupts (bash runs a trap only after a foreground command ends, but at once in `wait`)
    local RUN rc=0; as_host "$@"
    "${RUN[@]}" &
    FG_PID=$!
    wait "$FG_PID" || rc=$?
    FG_PID=
    return "$rc"
}
wait_for() {  # wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds
    local limit_s=$1 what=$2 i; shift 2
    for i in $(seq $((limit_s * 5))); do "$@" && return 0; sleep 0.2; done
    say "gave up after ${limit_s}s waiting for $what"
    return 1
}
show_logs() { tail -n 12 "$TMP"/log/*.log 2>/dev/null || true; }  # the daemons' own logs (*.out repeat them)

for h in "${HOSTS[@]}"; do
    start "$h" "munged-$h" munged -F -f --key-file="$TMP/etc/munge.key" --socket="$SOCK" \
        --pid-file="$TMP/$h/munged.pid" --seed-file="$TMP/$h/munged.seed" --log-file="$TMP/log/munged-$h.log"
done
for h in "${HOSTS[@]}"; do
    wait_for 20 "munged on $h" test -S "$TMP/$h/munge/munge.socket.2" || { show_logs; exit 1; }
done
# a credential made on ctl decodes on cn02: the key is shared
on ctl munge -n --socket="$SOCK" | on cn02 unmunge --socket="$SOCK" >/dev/null ||
    { say "a credential from ctl does not decode on cn02"; show_logs; exit 1; }
say "munged up on ${HOSTS[*]}"

mkdir -p "$TMP/ctl"
start ctl slurmctld slurmctld -D -f "$CONF"
for n in "${NODES[@]}"; do start "$n" "slurmd-$n" slurmd -D -N "$n" -f "$CONF"; done
both_idle() {
    local state
    state=$(on ctl sinfo --noheader --Node --format='%N %t' 2>/dev/null | sort -u | tr '\n' ' ')
    [ "$state" = "cn01 idle cn02 idle " ]
}
wait_for 60 "sinfo to show cn01 and cn02 idle" both_idle || { on ctl sinfo -N 2>&1 || true; show_logs; exit 1; }
on ctl sinfo
say "slurm up after $((SECONDS - START_S))s"

# --- 4. the job distbench writes, submitted as a user would --------------------------------------------
cd "$REPO"
"$VENV_PY" -m bench jobspec slurm --nodes 2 --gpus-per-node 0 --tasks-per-node 1 --partition debug \
    --results "$TMP/res" --output "$TMP/job.sbatch" \
    -- "$PYTHON" -m bench collectives -c all_reduce --sizes 4K,1M --budget-s 0.05
say "submitting $TMP/job.sbatch:"
cat "$TMP/job.sbatch"
rc=0  # 150 s for a job of seconds: the whole script stays under the test's 300 s
wait_on ctl timeout 150 sbatch --wait "$TMP/job.sbatch" || rc=$?
for out in "$TMP"/res/slurm-*.out; do
    [ -e "$out" ] || continue
    say "--- $(basename "$out") ---"
    cat "$out"
done
if [ "$rc" != 0 ]; then
    say "sbatch --wait exited $rc: the job failed"
    on ctl scontrol show job 2>&1 | grep -E 'JobId|JobState|ExitCode|Reason' || true
    show_logs
    exit 1
fi

"$VENV_PY" - "$TMP/res" <<'EOF'
"""The stored run: one, launched by Slurm on cn01 and cn02 in partition debug, nothing wrong."""
import glob
import json
import sys

import pandas as pd

metas = glob.glob(f"{sys.argv[1]}/collectives/*/meta.json")
if len(metas) != 1:
    sys.exit(f"slurm_by_hand: expected one stored run, found {len(metas)}: {metas}")
meta = json.load(open(metas[0]))
hosts = sorted({h for launch in meta.get("launches", {}).values() for h in launch.get("hosts", [])})
facts = meta.get("launcher_facts", {})
run_dir = metas[0][:-len("meta.json")]
# a finished run has merged its parts into results.parquet; an unfinished one has only parts
parts = glob.glob(run_dir + "results.parquet") + glob.glob(run_dir + "parts/results/*.parquet")
rows = pd.concat([pd.read_parquet(p) for p in parts]) if parts else pd.DataFrame({"wrong": []})
problems = [what for what, ok in (
    (f"launcher {meta.get('launcher')!r}, not 'slurm'", meta.get("launcher") == "slurm"),
    (f"hosts {hosts}, not ['cn01', 'cn02']", hosts == ["cn01", "cn02"]),
    (f"partition {facts.get('partition')!r}, not 'debug'", facts.get("partition") == "debug"),
    ("no result rows", len(rows) > 0),
    (f"wrong column {rows['wrong'].tolist()}, not all 0", bool((rows["wrong"] == 0).all())),
) if not ok]
if problems:
    sys.exit("slurm_by_hand: the stored run is not right: " + "; ".join(problems))
busbw = ", ".join(f"{r.size_bytes} B {r.busbw_gbps:.3f} GB/s"
                  for r in rows.sort_values("size_bytes").itertuples())
print(f"slurm_by_hand: ok: run {meta['run_id']}: launcher slurm (job {facts.get('job_id')}, Slurm "
      f"{facts.get('slurm_version')}), hosts {','.join(hosts)}, partition debug, {len(rows)} rows, wrong 0; "
      f"all_reduce busbw {busbw}")
EOF
say "passed in $((SECONDS - START_S))s"
