"""distbench simcluster: a cluster of network namespaces on this machine (docs/simcluster.md).

Without root or without ip / tc the tests that build namespaces skip, saying why; the refusal
itself is tested everywhere (faked: another uid, an empty PATH). The end-to-end ones (torchrun in
every namespace) are slow-marked: `make test-slow` runs them, and CI runs both sets as root."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pandas as pd
import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.simcluster import net
from bench.simcluster.net import Network, leftover_namespaces, node_rates, parse_rate, tbf_burst_bytes
from bench.simcluster.command import inner_argv
from conftest import ROOT


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return f"simcluster needs root (CAP_NET_ADMIN); this test runs as uid {os.geteuid()}"
    missing = net.missing_tools()
    if missing:
        return f"simcluster needs {', '.join(missing)} on PATH (apt-get install -y iproute2)"
    probe = f"{net.PREFIX}probe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if r.returncode != 0:
        return f"network namespaces cannot be made here: {' '.join(r.stderr.split())}"
    return None


WHY_NOT = _why_not()
needs_root = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


def _cli(*argv, timeout=300, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "bench", "simcluster", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd or ROOT)


def _left(id_: str) -> list[str]:
    """Whatever of invocation `id_` exists anywhere: namespaces, host links, host qdiscs, temp files."""
    found = [f"netns {n}" for n in leftover_namespaces(id_)]
    for cmd in (["ip", "-o", "link"], ["tc", "qdisc", "show"]):
        found += [f"{cmd[0]}: {ln}" for ln in subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()
                  if id_ in ln]
    found += [f"tmp {p}" for p in os.listdir(tempfile.gettempdir()) if p.startswith(f"dbsc-{id_}")]
    return found


def _id(stderr: str) -> str:
    line = next(ln for ln in stderr.splitlines() if ln.startswith("distbench: simcluster "))
    return line.split()[2].rstrip(":")


# ---- input and refusal: everywhere, no root needed ----

def test_rates_are_read_as_tc_reads_them():
    assert parse_rate("500mbit") == 500_000_000
    assert parse_rate("1gbit") == 10**9 and parse_rate("1.5GBIT") == 1_500_000_000
    assert node_rates(3, "1gbit", ["node1=200mbit", "node2=100mbit,node0=300mbit"]) == [300 * 10**6, 200 * 10**6, 10**8]
    assert tbf_burst_bytes(10**8) == 64 * 1024 and tbf_burst_bytes(10**10) == 5_000_000


@pytest.mark.parametrize("args, message", [
    (["--link", "fast"], "bad link rate 'fast'"),
    (["--link", "500mb"], "bad link rate '500mb'"),
    (["--link", "1kbit"], "allowed 1mbit .. 100gbit"),
    (["--link", "1gbit", "--link-of", "node3=1gbit"], "unknown node in --link-of 'node3'"),
    (["--link", "1gbit", "--link-of", "node1"], "expected nodeI=RATE"),
    (["--link", "1gbit", "--nodes", "9"], "--nodes 9: allowed 1 .. 8"),
    (["--link", "1gbit", "--ranks-per-node", "0"], "--ranks-per-node 0"),
])
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    argv = ["simcluster", "--nodes", "2", *args, "--", "distbench", "collectives"]
    if "--nodes" in args:
        argv = ["simcluster", *args, "--", "distbench", "collectives"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("distbench: error: ") and message in err[0], err


def test_the_command_after_the_dashes():
    assert inner_argv(["distbench", "collectives", "--sizes", "1M"]) == ["-m", "bench", "collectives", "--sizes", "1M"]
    assert inner_argv([".venv/bin/distbench", "pipeline"]) == ["-m", "bench", "pipeline"]
    assert inner_argv(["python", "-m", "bench", "strategies"]) == ["-m", "bench", "strategies"]
    assert inner_argv(["python3", "-m", "bench.simcluster.probe"]) == ["-m", "bench.simcluster.probe"]
    assert inner_argv(["x.py", "--a"]) == ["x.py", "--a"]
    for bad, message in (([], "no command after `--`"), (["ls", "-l"], "cannot run 'ls'"),
                         (["distbench", "simcluster"], "cannot be simcluster itself")):
        with pytest.raises(BenchError, match=message):
            inner_argv(bad)


def test_refused_without_root(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["simcluster", "--nodes", "2", "--link", "1gbit", "--", "distbench", "collectives"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs root (CAP_NET_ADMIN)" in err[0] and "uid 1000" in err[0], err


def test_refused_without_tc(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH: no ip, no tc
    assert main(["simcluster", "--nodes", "2", "--link", "1gbit", "--", "distbench", "collectives"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs ip, tc, unshare on PATH" in err[0], err


# ---- the network alone (no torch in the namespaces: fast) ----

@needs_root
def test_network_is_isolated_shaped_and_torn_down():
    n = Network([200 * 10**6, 10**9])
    try:
        n.build()
        assert sorted(leftover_namespaces(n.id)) == sorted(n.namespaces)
        host_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert n.id not in host_links, "no interface of the cluster may exist in the host's namespace"
        for node, rate in zip(n.nodes, ("200Mbit", "1Gbit")):
            routes = subprocess.run(["ip", "-n", node.netns, "route"], capture_output=True, text=True).stdout
            assert "default" not in routes and routes.count("\n") == 1, routes  # only the /24 of the link
            addrs = subprocess.run(["ip", "-n", node.netns, "-o", "-4", "addr"], capture_output=True, text=True).stdout
            assert f"{node.address}/24" in addrs and addrs.count("inet ") == 2, addrs  # lo and its link
            for ns, dev in ((node.netns, node.ifname), (n.switch, node.port)):  # both ends of the link shaped
                q = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout
                assert "tbf" in q and f"rate {rate}" in q, q
    finally:
        assert n.teardown() == []
    assert _left(n.id) == []


# ---- end to end: torchrun in every namespace ----

@needs_root
@pytest.mark.slow
def test_two_node_run_records_its_nodes(tmp_path):
    r = _cli("--nodes", "2", "--ranks-per-node", "2", "--link", "1gbit", "--link-of", "node1=500mbit", "--",
             "distbench", "collectives", "-c", "all_reduce", "--sizes", "4K", "--out", str(tmp_path), "--no-telemetry")
    assert r.returncode == 0, r.stderr[-3000:]
    assert _left(_id(r.stderr)) == []
    (run_dir,) = list((tmp_path / "collectives").iterdir())
    meta = json.loads((run_dir / "meta.json").read_text())
    (launch,) = meta["launches"].values()
    assert launch["world"] == 4 and launch["nodes"] == 2 and launch["hosts"] == ["node0", "node1"]
    placement = sorted((f["rank"], f["host"], f["node_rank"], f["local_rank"]) for f in launch["ranks"])
    assert placement == [(0, "node0", 0, 0), (1, "node0", 0, 1), (2, "node1", 1, 0), (3, "node1", 1, 1)]
    sim = meta["simcluster"]
    assert sim["simulated"] is True and sim["node_count"] == 2 and sim["ranks_per_node"] == 2
    assert [(n["hostname"], n["link_rate_bits_s"], n["ranks"]) for n in sim["nodes"]] == \
        [("node0", 10**9, 2), ("node1", 500 * 10**6, 2)]
    assert sim["added_delay_s"] == 0.0 and "no added delay" in sim["note"]
    rows = pd.read_parquet(run_dir / "results.parquet")
    assert set(rows["nodes"]) == {2} and set(rows["world"]) == {4} and (rows["wrong"] == 0).all()


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("mbit", [100, 200, 500])
def test_a_shaped_link_carries_its_rate(mbit):
    """A measurement of the simulator (not a speed assertion on distbench): gloo send/recv of
    2.7 s of traffic between two namespaces moves payload at the link's rate within 15% (TCP/IP
    and Ethernet headers take ~4.4% of it)."""
    reps = mbit // 50  # 16 MiB each: ~2.7 s at any of these rates
    r = _cli("--nodes", "2", "--link", f"{mbit}mbit", "--", "python", "-m", "bench.simcluster.probe",
             "--bytes", "16M", "--reps", str(reps), "--pings", "20")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("{")))
    assert res["hosts"] == ["node0", "node1"]
    assert 0.85 <= res["rate_bits_s"] / (mbit * 10**6) <= 1.15, res
    assert _left(_id(r.stderr)) == []


@needs_root
@pytest.mark.slow
def test_sigterm_mid_run_leaves_nothing(tmp_path):
    script = tmp_path / "hold.py"
    script.write_text("import os, sys, time\nsys.stdout.write(f\"holding {os.environ['RANK']}\\n\")\n"
                      "sys.stdout.flush()\ntime.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "bench", "simcluster", "--nodes", "2", "--ranks-per-node", "2",
                          "--link", "200mbit", "--", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, cwd=ROOT)
    guard = threading.Timer(150, p.send_signal, (signal.SIGTERM,))  # never hang: a SIGTERM still tears down
    guard.start()
    try:
        held = 0
        for line in p.stdout:  # every rank of node 0 and node 1 is up and holding
            held += line.count("holding")  # two ranks of a node share its agent's stdout
            if held == 4:
                break
        assert held == 4
        p.send_signal(signal.SIGTERM)
        code = p.wait(timeout=120)
        err = p.stderr.read()
    finally:
        guard.cancel()
        if p.poll() is None:
            p.kill()
    assert code == 128 + signal.SIGTERM, err[-2000:]
    id_ = _id(err)
    assert "the simulated cluster is torn down" in err
    assert _left(id_) == []
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(script) not in ps and f"simcluster-{id_}" not in ps, "every process of the cluster ended"


@needs_root
def test_namespaces_of_a_killed_invocation_are_removed_by_the_next():
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    mine = [f"{net.PREFIX}{dead.pid:x}x0000-n0", f"{net.PREFIX}{live.pid:x}x0000-n0"]
    try:
        for ns in mine:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        hosts_dir = os.path.join(tempfile.gettempdir(), f"{mine[0][:-3]}-hosts")
        os.makedirs(hosts_dir)  # the dead invocation's temporary /etc/hosts
        assert net.remove_stale() == [mine[0]]
        assert not os.path.exists(hosts_dir)
        assert net.leftover_namespaces(f"{live.pid:x}x0000") == [mine[1]]
    finally:
        live.kill()
        for ns in mine:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@needs_root
@pytest.mark.slow
def test_bad_input_inside_is_every_rank_s_line_and_exit_2():
    r = _cli("--nodes", "2", "--link", "1gbit", "--", "distbench", "collectives", "--sizes", "bogus")
    assert r.returncode == 2, r.stderr[-3000:]
    for prefix, rank in (("", 0), ("node1| ", 1)):
        assert f"{prefix}distbench: error: rank {rank} (node {rank}, local rank 0): bad size 'bogus'" in r.stderr
    assert _left(_id(r.stderr)) == []
