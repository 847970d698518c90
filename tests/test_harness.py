"""bench.harness: the Kind registry. Every registered kind supplies its config, options, units,
measure, summary and tables; it has one name across the CLI subcommand, its package, meta.json's
`kind` and the rows' `kind`; it pickles by reference (a Job carries it to spawned ranks); its
units() are pure (no ranks, no process group). Parametrized over KINDS: a new kind is covered
without editing this file."""

import argparse
import dataclasses
import json
import os
import pickle
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

import bench.kinds  # noqa: F401  (registers every kind)
from bench.cli import build_parser
from bench.distributed.env import RankInfo
from bench.harness.session import Job, Launch, start_meta
from bench.harness import KINDS, Kind, Plan
from bench.harness.run import command_line, describe_failure, env_changes
from bench.results.schema import TABLES
from bench.results.store import RunWriter
from bench.suite import RunConfig, load_suite, resolve_suite

NAMES = KINDS.names()


def default_config(kind: Kind):
    """The kind's shipped default suite, as `distbench <kind>` with no options loads it."""
    args = build_parser().parse_args([kind.name])
    return load_suite(resolve_suite(kind.name, kind.name), kind.config_class(), kind.name, kind.options(args))


def test_the_four_kinds_are_registered():
    assert {"collectives", "allreduce", "strategies", "pipeline"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_kind_supplies_its_parts(name):
    kind = KINDS.get(name)
    assert kind.name == name and kind.help
    assert isinstance(kind.config_class(), type) and issubclass(kind.config_class(), RunConfig)
    assert dataclasses.is_dataclass(kind.config_class()) and kind.config_class().__dataclass_params__.frozen
    for part in ("add_options", "options", "units", "measure", "worlds", "at_world", "plan"):
        assert callable(getattr(kind, part)), part
    for part in ("section", "summary", "live"):
        assert callable(getattr(kind.report, part)), part
    assert kind.report.title and kind.read.group and kind.read.gated(), "a kind says its title, group and gated metrics"
    assert callable(kind.read.narrow) and callable(kind.read.claims)
    assert "results" in kind.tables and set(kind.tables) <= set(TABLES), set(kind.tables) - set(TABLES)
    live = kind.report.live()
    for event in ("start", "unit", "done"):
        assert callable(getattr(live, event)), event


@pytest.mark.parametrize("name", NAMES)
def test_one_name_for_the_subcommand_the_package_and_the_suite(name):
    kind = KINDS.get(name)
    assert kind.module == f"bench.{name}.kind"  # the package is bench/<name>/
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert name in sub.choices
    cfg = default_config(kind)
    assert cfg.name == name  # the shipped default suite's results directory


@pytest.mark.parametrize("name", NAMES)
def test_kind_pickles_by_reference(name):
    kind = KINDS.get(name)
    assert pickle.loads(pickle.dumps(kind)) is kind
    job = Job(kind=kind, config=default_config(kind), backend="gloo", world=2, run_id="r")
    back = pickle.loads(pickle.dumps(job))
    assert back.kind is kind and back == job


@pytest.mark.parametrize("name", NAMES)
def test_options_and_the_default_plan(name):
    """Parsed options map onto config fields; the plan has one launch per world of the suite."""
    kind = KINDS.get(name)
    args = build_parser().parse_args([name])
    fields = {f.name for f in dataclasses.fields(kind.config_class())}
    assert set(kind.options(args)) <= fields
    cfg = default_config(kind)
    worlds = tuple(kind.worlds(cfg))
    assert worlds and all(w >= 1 for w in worlds)
    if name == "collectives":
        pytest.skip("the collectives plan probes the backend in its own process (covered end to end)")
    plan = kind.plan(cfg, "gloo", worlds)
    assert isinstance(plan, Plan) and [lp.world for lp in plan.launches] == list(worlds)


@pytest.mark.parametrize("name", NAMES)
def test_units_are_pure(name):
    """units(cfg, world, meta) need no ranks: no process group, the same answer twice, every
    world of the default suite has some."""
    kind = KINDS.get(name)
    cfg = default_config(kind)
    for world in kind.worlds(cfg):
        units, notes = kind.units(cfg, world, {})
        assert units, f"{name}: no units at world {world}"
        assert all(isinstance(n, str) for n in notes)
        assert kind.units(cfg, world, {}) == (units, notes)
    assert not dist.is_initialized()


def _launch(kind: Kind, cfg) -> Launch:
    info = RankInfo(rank=0, world=2, local_rank=0, local_world=2, node_rank=0, backend="gloo",
                    device=torch.device("cpu"), threads=1, cores=max(2, os.cpu_count() or 2))
    facts = [{"host": "h", "node_rank": 0, "oversubscribed": False, "rank": r} for r in range(2)]
    job = Job(kind=kind, config=cfg, backend="gloo", world=2, run_id="run1")
    return Launch(info=info, comm=SimpleNamespace(), first_s=0.0, init_s=0.0, run_id="run1", facts=facts, job=job)


@pytest.mark.parametrize("name", NAMES)
def test_rows_and_meta_carry_the_kinds_one_name(name, tmp_path):
    kind = KINDS.get(name)
    launch = _launch(kind, default_config(kind))
    assert launch.base_row()["kind"] == name
    writer = RunWriter(tmp_path, name, "run1")
    start_meta(writer, launch, "2", {"cases": 0, "notes": []})
    meta = writer.read_meta()
    assert meta["kind"] == name and meta["suite"] == name and "2" in meta["launches"]


def test_env_changes_are_undone(monkeypatch):
    monkeypatch.setenv("DISTBENCH_TEST_A", "old")
    monkeypatch.delenv("DISTBENCH_TEST_B", raising=False)
    with env_changes({"DISTBENCH_TEST_A": "new", "DISTBENCH_TEST_B": "set"}):
        assert os.environ["DISTBENCH_TEST_A"] == "new" and os.environ["DISTBENCH_TEST_B"] == "set"
    assert os.environ["DISTBENCH_TEST_A"] == "old" and "DISTBENCH_TEST_B" not in os.environ


def _failed_launch(tmp_path):
    """Rank 1 died without a note (os._exit); rank 0 then failed on the broken connection."""
    prog = tmp_path / ".progress"
    prog.mkdir()
    unit = "all_reduce.float32.sum.root-1.latency.w2@65536B"
    (prog / "rank0.json").write_text(json.dumps({"rank": 0, "index": 2, "unit": unit}))
    (prog / "rank1.json").write_text(json.dumps({"rank": 1, "index": 1, "unit": "x"}))
    peer = "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:35041. GLHF!"
    (prog / "rank0.error").write_text(json.dumps({"rank": 0, "t": 2.0, "message": f"CaseError: {peer}"}))
    f0 = ProcessFailure(0, 100, 1, str(tmp_path / "none0"))
    f0.message, f0.timestamp = peer, 2
    f1 = ProcessFailure(1, 101, 1, str(tmp_path / "none1"))
    f1.timestamp = 1
    return ChildFailedError("rank", {0: f0, 1: f1}), unit


def test_failure_names_the_rank_that_died_not_the_peer_that_lost_it(tmp_path):
    """The dead rank wrote no note; the survivor's 'connection closed by peer' note is a consequence."""
    err, unit = _failed_launch(tmp_path)
    line = describe_failure(err, 2, tmp_path)
    assert line.startswith("rank 1 exited with code 1") and unit in line and "rank(s) 1 never arrived" in line


def test_command_line_is_what_a_user_types_again():
    assert command_line(["/x/bench/__main__.py", "collectives", "--out", "a b"]) == \
        "python -m bench collectives --out 'a b'"
    assert command_line(["/usr/bin/distbench", "runs"]) == "distbench runs"


class _Cycle:
    """A case's leftovers in a reference cycle (like the pipeline's patched schedule methods):
    freed, with its fake CUDA bytes, only when the cycle collector runs."""

    def __init__(self, cuda, device: int, nbytes: int):
        self.cuda, self.device, self.nbytes = cuda, device, nbytes
        self.me = self
        cuda.malloc(device, nbytes)

    def __del__(self):
        self.cuda.free(self.device, self.nbytes)


def test_each_case_peak_is_its_own(monkeypatch, tmp_path):
    """Issue 17 item 3: two cases in a row on a rank of GPU 3; the first leaves 4 GiB in a
    reference cycle, the second allocates 1 GiB. Between cases the harness collects cycles, empties
    the cache and resets the peaks of its own device (and touches no other device): the second
    case's recorded peaks are 1 GiB, not 5."""
    import gc

    from conftest import FakeCuda

    from bench.harness import rank

    cuda = FakeCuda().install(monkeypatch)
    cuda.current = 3
    peaks = []

    def measure(unit, launch):
        if unit.key == "first":
            _Cycle(cuda, 3, 4 << 30)
        else:
            cuda.malloc(3, 1 << 30)
            st = torch.cuda.memory_stats(torch.device("cuda", 3))
            peaks.append((st["allocated_bytes.all.peak"], st["reserved_bytes.all.peak"]))
            cuda.free(3, 1 << 30)
        return {}

    kind = SimpleNamespace(units=lambda cfg, world, meta: ([SimpleNamespace(key="first"), SimpleNamespace(key="second")], []),
                           measure=measure, after_units=None, estimate_s=lambda cfg, unit: 1.0)
    cfg = SimpleNamespace(out=str(tmp_path), name="toy", case_timeout_s=60.0)
    job = SimpleNamespace(kind=kind, config=cfg, launch_key="2", skip=(), part_prefix="", run_id=None, meta={})
    info = RankInfo(rank=1, world=2, local_rank=3, local_world=8, node_rank=0, backend="nccl",
                    device=torch.device("cuda", 3), threads=1, cores=16)
    launch = SimpleNamespace(run_id="r", oversubscribed=False, comm=SimpleNamespace(reduce_sum=lambda x: x))
    monkeypatch.setattr(rank, "open_launch", lambda job, info, init_s: launch)
    monkeypatch.setattr(rank.telemetry, "start", lambda job, info, writer: SimpleNamespace(close=lambda: None))
    gc.disable()  # the collector runs when it likes; the harness may not count on it
    try:
        rank.run_launch(job, info, 0.0)
    finally:
        gc.enable()
    assert peaks == [(1 << 30, 1 << 30)]
    assert {d for _f, d in cuda.calls if d is not None} == {3}


def test_a_launchs_watchdog_ends_with_the_launch(monkeypatch):
    """Was: the watchdog thread of a launch run in-process (tests, gpu-smoke) slept on forever, and a
    later test that faked time.sleep counted its 0.2 s naps (test_timed_block_runs_input_and_weight_
    gradients_apart failed after the suite's in-process launches). It ends when the launch does, and
    never calls time.sleep."""
    import time

    from bench.harness.rank import Watchdog

    naps = []
    monkeypatch.setattr(time, "sleep", lambda s: naps.append(s))
    dog = Watchdog(0)
    dog.arm("case", 60.0)
    dog.stop()
    dog.thread.join(timeout=5)
    assert not dog.thread.is_alive() and naps == []
