"""distbench simcluster's fault injection (docs/simcluster.md): a slower pair of nodes
(`--link-of nodeA-nodeB=RATE`, htb at both nodes' egress) and a CPU quota for one rank or node
(`--cpu-quota-of`, a cgroup). Parsing, refusals, the tc commands and the cgroup files are checked
everywhere (no root: the commands are built, not run; a fake cgroup root is a temporary folder);
the real ones (namespaces, a real cgroup) are slow-marked and skip without root."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.simcluster import cpu, net
from bench.simcluster.net import Network, parse_links
from bench.simcluster.run import SimCluster
from conftest import ROOT
from test_simcluster import _id, _left, needs_root

M = 10**6


# ---- a slower pair of nodes ----

def test_pairs_are_parsed_both_orders_and_nodes_stay():
    links = parse_links(4, "1gbit", ["node2-node0=200mbit", "node1=500mbit,node3-node1=100mbit"])
    assert links.node_bits_s == (10**9, 500 * M, 10**9, 10**9)
    assert links.pair_bits_s == {(0, 2): 200 * M, (1, 3): 100 * M}


@pytest.mark.parametrize("spec, message", [
    ("node0-node4=100mbit", "unknown node in --link-of 'node4'"),
    ("node1-node1=100mbit", "a pair names two different nodes"),
    ("node0-node1-node2=100mbit", "a pair names two different nodes"),
    ("node0-node2=1gbit", "node0-node2=1gbit is not slower than the nodes' own links (node0=1gbit, node2=1gbit)"),
    ("node0-node2=fast", "bad link rate 'fast'"),
])
def test_bad_pairs_are_refused(spec, message):
    with pytest.raises(BenchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_links(4, "1gbit", [spec])


def test_a_node_without_slowed_peers_keeps_tbf():
    n = Network([10**9, 10**9], id_="abcx0001", pairs={})
    assert n.nodes[0].egress() == [["qdisc", "add", "dev", "n0-abcx0001", "root", *n.nodes[0].tbf()]]


def test_a_slowed_pair_is_htb_at_both_ends():
    n = Network([500 * M, 500 * M, 500 * M], id_="abcx0001", pairs={(0, 2): 100 * M})
    dev = ["dev", "n0-abcx0001"]
    burst = str(65536)  # max(4 ms of the cap, 64 KiB) for 100 and 500 Mbit/s alike
    q = str(net.HTB_QUANTUM_BYTES)

    def htb(rate, ceil, b=burst):
        return ["htb", "rate", f"{rate}bit", "ceil", f"{ceil}bit", "burst", b, "cburst", b, "quantum", q]
    # assured rates split the node's 500 Mbit/s in proportion to the caps 500 : 100
    assert n.nodes[0].egress() == [
        ["qdisc", "add", *dev, "root", "handle", "1:", "htb", "default", "10"],
        ["class", "add", *dev, "parent", "1:", "classid", "1:1", *htb(500 * M, 500 * M, "250000")],
        ["class", "add", *dev, "parent", "1:1", "classid", "1:10", *htb(500 * M * 5 // 6, 500 * M, "250000")],
        ["qdisc", "add", *dev, "parent", "1:10", "handle", "10:", "bfifo", "limit", str(3_125_000 + 250_000)],
        ["class", "add", *dev, "parent", "1:1", "classid", "1:102", *htb(500 * M // 6, 100 * M)],
        ["qdisc", "add", *dev, "parent", "1:102", "handle", "102:", "bfifo", "limit", str(625_000 + 65536)],
        ["filter", "add", *dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "dst",
         "10.213.0.3/32", "flowid", "1:102"],
    ]
    node2 = n.nodes[2].egress()  # the other end shapes its way back: a class for node0's address
    assert ["filter", "add", "dev", "n2-abcx0001", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip",
            "dst", "10.213.0.1/32", "flowid", "1:100"] in node2
    assert n.nodes[1].egress()[0][4:6] == ["root", "tbf"]  # node1 is not in the pair
    facts = n.facts()
    assert facts["pairs"] == [{"between": ["node0", "node2"], "rate_bits_s": 100 * M, "rate": "100mbit",
                               "shaped": "both directions: htb at node0's egress to node2 and at node2's to node0"}]
    assert facts["links"][0]["egress"][0] == "tc qdisc add dev n0-abcx0001 root handle 1: htb default 10"


# ---- a CPU quota ----

def test_quotas_are_parsed():
    qs = cpu.parse_quotas(["rank3=25%", "node0=50,rank2=12.5%"], nodes=3, ranks_per_node=2, ncpus=2)
    assert [(q.target, q.node, q.rank, q.percent, q.quota_us) for q in qs] == [
        ("rank3", 1, 3, 25.0, 25_000), ("node0", 0, None, 50.0, 50_000), ("rank2", 1, 2, 12.5, 12_500)]
    assert cpu.parse_quotas(["rank0=200%"], nodes=1, ranks_per_node=1, ncpus=2)[0].quota_us == 200_000


@pytest.mark.parametrize("spec, message", [
    ("rank4=25%", "unknown rank or node in --cpu-quota-of 'rank4'"),
    ("node2=25%", "unknown rank or node in --cpu-quota-of 'node2'"),
    ("rank1=0%", "must be a number 1 .. 200 (this host has 2 cores)"),
    ("rank1=201", "must be a number 1 .. 200"),
    ("rank1=lots", "must be a number 1 .. 200"),
    ("rank1", "expected rankR=PCT or nodeI=PCT"),
    ("rank3=25%,node1=50%", "rank3 runs on node1, which has a quota of its own"),
])
def test_bad_quotas_are_refused(spec, message):
    with pytest.raises(BenchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cpu.parse_quotas([spec], nodes=2, ranks_per_node=2, ncpus=2)


@pytest.mark.parametrize("args, message", [
    (["--link-of", "node0-node1=2gbit"], "is not slower than the nodes' own links"),
    (["--cpu-quota-of", "rank9=10%"], "unknown rank or node in --cpu-quota-of 'rank9'"),
    (["--cpu-quota-of", f"rank0={100 * (os.cpu_count() or 1) + 1}%"], "the percent of one CPU must be a number 1 .."),
])
def test_bad_fault_options_are_one_line_exit_2(args, message, capsys):
    assert main(["simcluster", "--nodes", "2", "--link", "1gbit", *args, "--", "distbench", "collectives"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("distbench: error: ") and message in err[0], err


def test_no_writable_cpu_controller_is_refused(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cpu, "SYS_CGROUP", str(tmp_path))  # an empty folder: neither v1's cpu nor v2's list
    monkeypatch.setattr("bench.simcluster.cli.check_can_run", lambda: None)
    assert main(["simcluster", "--nodes", "2", "--link", "1gbit", "--cpu-quota-of", "rank1=25%", "--",
                 "distbench", "collectives"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cpu-quota-of needs a writable cgroup cpu controller" in err[0], err
    assert str(tmp_path) in err[0]


def _fake_v1(root: Path) -> Path:
    (root / "cpu").mkdir()
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    return root / "cpu"


def _fake_v2(root: Path) -> Path:
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory\n")
    return root


def test_cgroup_v1_and_v2_files(tmp_path):
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    v1, v2 = _fake_v1(tmp_path / "v1"), _fake_v2(tmp_path / "v2")
    assert cpu.find_controller(str(tmp_path / "v1")) == cpu.Controller(v1, 1)
    assert cpu.find_controller(str(tmp_path / "v2")) == cpu.Controller(v2, 2)
    assert cpu.find_controller(str(tmp_path)) is None
    q = cpu.parse_quotas(["rank3=25%"], nodes=2, ranks_per_node=2, ncpus=2)
    (g1,) = cpu.make_groups(cpu.Controller(v1, 1), "abcx0001", q)
    (g2,) = cpu.make_groups(cpu.Controller(v2, 2), "abcx0001", q)
    for g in (g1, g2):
        g.create()
        g.join(4242)
    assert g1.path == v1 / "dbsc-abcx0001-rank3"
    assert (g1.path / "cpu.cfs_period_us").read_text() == "100000" and (g1.path / "cpu.cfs_quota_us").read_text() == "25000"
    assert (g2.path / "cpu.max").read_text() == "25000 100000"
    assert (v2 / "cgroup.subtree_control").read_text() == "+cpu"  # the root hands cpu down to its children
    assert g1.members() == [4242] and g2.members() == [4242]
    (g1.path / "cpu.stat").write_text("nr_periods 40\nnr_throttled 31\nthrottled_time 2700000000\n")
    facts = g1.facts()
    assert facts["cpu_stat"] == {"nr_periods": 40, "nr_throttled": 31, "throttled_time": 2700000000}
    assert (facts["target"], facts["rank"], facts["node"], facts["applied"], facts["limits"]) == \
        ("rank3", 3, "node1", False, "cpu.cfs_period_us=100000 cpu.cfs_quota_us=25000")
    for f in g1.path.iterdir():  # a real cgroup's files go with it; a fake folder's must go first
        f.unlink()
    assert g1.remove() is None and not g1.path.exists()
    assert "could not be removed" in g2.remove(wait_s=0)


def test_the_watcher_moves_only_the_rank_it_wants(tmp_path):
    v1 = _fake_v1(tmp_path)
    qs = cpu.parse_quotas(["rank3=25%", "node0=50%"], nodes=2, ranks_per_node=2, ncpus=2)
    groups = cpu.make_groups(cpu.Controller(v1, 1), "abcx0001", qs)
    for g in groups:
        g.create()
    run = "simcluster-abcx0001"
    environ = {10: f"RANK=3\0LOCAL_RANK=1\0TORCHELASTIC_RUN_ID={run}\0".encode(),  # the worker
               11: f"RANK=2\0LOCAL_RANK=0\0TORCHELASTIC_RUN_ID={run}\0".encode(),  # another rank of node1
               12: b"RANK=3\0LOCAL_RANK=1\0TORCHELASTIC_RUN_ID=other\0",  # another invocation's
               13: b"PATH=/bin\0",  # node1's agent
               20: b"RANK=0\0"}  # node0's: its node's quota takes every process
    in_ns = {"ns0": [20], "ns1": [10, 11, 12, 13]}
    w = cpu.QuotaWatcher(groups, lambda i: f"ns{i}", run, pids_of=in_ns.get, environ_of=environ.get)
    w.poll()
    w.poll()  # a second poll moves nothing twice
    assert [g.pids for g in groups] == [[10], [20]]
    assert all(g.applied_s is not None for g in groups) and w.errors == []
    assert cpu.rank_of(environ[10], run) == 3 and cpu.rank_of(environ[12], run) is None
    assert cpu.rank_of(environ[13], run) is None


def test_a_quota_never_applied_is_a_warning_and_an_applied_one_says_what_it_did(tmp_path):
    v1 = _fake_v1(tmp_path)
    qs = cpu.parse_quotas(["rank1=25%", "rank2=10%"], nodes=2, ranks_per_node=2, ncpus=2)
    c = SimCluster([10**9, 10**9], 2, quotas=qs, controller=cpu.Controller(v1, 1))
    rank1, rank2 = c.groups
    rank1.create()
    (rank1.path / "cpu.stat").write_text("nr_periods 50\nnr_throttled 20\nthrottled_time 900000000\n")
    rank1.pids, rank1.applied_s = [4242], 0.3
    assert c.quota_lines() == [
        f"rank1=25% of one CPU: pid 4242 in dbsc-{c.net.id}-rank1 after 0.3 s; throttled in 20 of 50 periods",
        f"warning: --cpu-quota-of rank2=10% of one CPU was never applied: no process of rank2 appeared in node1's "
        f"namespace (or none could join {v1}/dbsc-{c.net.id}-rank2)"]
    facts = c.facts(["distbench", "collectives"])["cpu_quotas"]
    assert [(f["target"], f["applied"], f["pids"]) for f in facts] == [("rank1", True, [4242]), ("rank2", False, [])]


def test_stale_cgroups_of_dead_owners_are_removed(tmp_path):
    v1 = _fake_v1(tmp_path)
    for name in ("dbsc-dead-rank1", "dbsc-live-rank1"):
        (v1 / name).mkdir()
    assert cpu.remove_stale(lambda name: "live" in name, str(tmp_path)) == [str(v1 / "dbsc-dead-rank1")]
    assert sorted(p.name for p in v1.iterdir() if p.is_dir()) == ["dbsc-live-rank1"]


# ---- for real: namespaces, htb, a cgroup ----

def _cli(*argv, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "bench", "simcluster", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@needs_root
@pytest.mark.slow
def test_a_slowed_pair_runs_at_its_rate_and_the_rest_at_the_link():
    """A measurement of the simulator: node0 <-> node2 slowed to 100 Mbit/s carries payload at that
    rate in both directions, node0 <-> node1 at the 500 Mbit/s links, each within 15% (TCP/IP and
    Ethernet headers take ~4.4%)."""
    r = _cli("--nodes", "3", "--link", "500mbit", "--link-of", "node0-node2=100mbit", "--",
             "python", "-m", "bench.simcluster.probe", "--bytes", "16M", "--reps", "4", "--peers", "1,2",
             "--both-ways", "--pings", "10")
    assert r.returncode == 0, r.stderr[-3000:]
    res = {(x["src"], x["dst"]): x for x in (json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{"))}
    assert sorted(res) == [(0, 1), (0, 2), (1, 0), (2, 0)]
    assert res[(0, 2)]["hosts"] == ["node0", "node2"] and res[(2, 0)]["hosts"] == ["node2", "node0"]
    for pair, want in (((0, 1), 500 * M), ((1, 0), 500 * M), ((0, 2), 100 * M), ((2, 0), 100 * M)):
        assert 0.85 <= res[pair]["rate_bits_s"] / want <= 1.15, (pair, res[pair])
    assert "node0-node2=100mbit (tbf, htb for the pairs" in r.stderr
    assert _left(_id(r.stderr)) == []


SPIN = """import json, os, time
rank = int(os.environ["RANK"])
def cpu_cgroup():  # (a node's /sys is its namespace's own: the cgroup's files are read by simcluster)
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.rstrip("\\n").split(":", 2)
        if "cpu" in controllers.split(",") or controllers == "":
            return path
end = time.monotonic() + 60
while rank == 1 and "dbsc-" not in cpu_cgroup() and time.monotonic() < end:
    time.sleep(0.05)
t = time.process_time()
while time.process_time() - t < 0.4:  # 0.4 s of CPU: >= 4 s of wall at 10% of one CPU
    sum(range(1000))
print(json.dumps({"rank": rank, "cgroup": cpu_cgroup()}), flush=True)
"""


@needs_root
@pytest.mark.slow
def test_a_rank_s_quota_is_applied_and_throttles(tmp_path):
    if cpu.find_controller() is None:
        pytest.skip("no writable cgroup cpu controller here")
    script = tmp_path / "spin.py"
    script.write_text(SPIN)
    r = _cli("--nodes", "2", "--link", "1gbit", "--cpu-quota-of", "rank1=10%", "--", str(script))
    assert r.returncode == 0, r.stderr[-3000:]
    id_ = _id(r.stderr)
    res = {x["rank"]: x for x in (json.loads(ln.split("| ", 1)[-1]) for ln in r.stdout.splitlines() if "{" in ln)}
    assert res[1]["cgroup"].endswith(f"/dbsc-{id_}-rank1"), res  # the worker of rank 1, moved in by the watcher
    assert "dbsc-" not in res[0]["cgroup"], res
    assert "cpu quota rank1=10% of one CPU" in r.stderr and "never applied" not in r.stderr
    m = re.search(rf"rank1=10% of one CPU: pid \d+ in dbsc-{id_}-rank1 after [0-9.]+ s; throttled in (\d+) of (\d+) "
                  "periods", r.stderr)
    assert m and int(m.group(1)) > 0, r.stderr[-2000:]  # cpu.stat, read before teardown: held to its quota
    assert _left(id_) == []
    assert not list(Path(cpu.find_controller().root).glob(f"dbsc-{id_}-*")), "the cgroup is removed at teardown"


@needs_root
@pytest.mark.slow
def test_the_stored_run_records_pairs_and_quotas(tmp_path):
    if cpu.find_controller() is None:
        pytest.skip("no writable cgroup cpu controller here")
    r = _cli("--nodes", "2", "--ranks-per-node", "2", "--link", "1gbit", "--link-of", "node0-node1=200mbit",
             "--cpu-quota-of", "rank3=50%", "--", "distbench", "collectives", "-c", "all_reduce", "--sizes", "4K",
             "--out", str(tmp_path), "--no-telemetry")
    assert r.returncode == 0, r.stderr[-3000:]
    (run_dir,) = list((tmp_path / "collectives").iterdir())
    sim = json.loads((run_dir / "meta.json").read_text())["simcluster"]
    assert [(p["between"], p["rate_bits_s"]) for p in sim["pairs"]] == [(["node0", "node1"], 200 * M)]
    (q,) = sim["cpu_quotas"]
    assert (q["target"], q["rank"], q["node"], q["percent_of_one_cpu"], q["applied"]) == ("rank3", 3, "node1", 50.0, True)
    assert len(q["pids"]) >= 1 and q["cgroup"].endswith(f"dbsc-{_id(r.stderr)}-rank3")
    assert _left(_id(r.stderr)) == []


@needs_root
@pytest.mark.slow
def test_sigterm_with_a_quota_leaves_no_cgroup(tmp_path):
    if cpu.find_controller() is None:
        pytest.skip("no writable cgroup cpu controller here")
    script = tmp_path / "hold.py"
    script.write_text("import os, sys, time\nsys.stdout.write(f\"holding {os.environ['RANK']}\\n\")\n"
                      "sys.stdout.flush()\ntime.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "bench", "simcluster", "--nodes", "2", "--link", "200mbit",
                          "--cpu-quota-of", "rank1=50%,node0=50%", "--", str(script)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    root = cpu.find_controller().root
    try:
        held = 0
        for line in p.stdout:
            held += line.count("holding")
            if held == 2:
                break
        for _ in range(100):  # the watcher has moved rank 1 in (it polls every 0.1 s)
            if list(root.glob("dbsc-*-rank1")) and (next(root.glob("dbsc-*-rank1")) / "cgroup.procs").read_text():
                break
            time.sleep(0.1)
        made = sorted(d.name for d in root.glob("dbsc-*") if d.is_dir())
        p.send_signal(signal.SIGTERM)
        code = p.wait(timeout=120)
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    id_ = _id(err)
    assert code == 128 + signal.SIGTERM, err[-2000:]
    assert f"dbsc-{id_}-rank1" in made and f"dbsc-{id_}-node0" in made, made
    assert not list(root.glob(f"dbsc-{id_}-*")) and _left(id_) == []
