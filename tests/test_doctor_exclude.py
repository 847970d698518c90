"""The doctor's verdict handed to the scheduler (issue 44): the suspects that name a node become
an exclude list in the stored run (meta.json `exclude`), printed as `--exclude=...`, and read back
by `distbench jobspec ... --exclude-from RUN`."""

import json

import pytest

from bench.doctor.config import DoctorConfig
from bench.doctor.exclude import exclude_lines, exclude_of, rank_hosts, read_exclude
from bench.doctor.kind import finish
from bench.doctor.verdict import Suspect
from bench.errors import BenchError
from bench.results.store import RunWriter, load_run
from test_doctor import _rows, compute, matrix


def _s(name, scope, rank=-1):
    return Suspect(name=name, scope=scope, factor=2.0, mads=9.0, evidence=f"{name}: evidence", rank=rank)


def test_suspects_that_name_a_node_are_excluded_the_others_listed():
    suspects = [_s("node node2", "node"), _s("link node0 <-> node1", "node-link"), _s("rank 5 compute", "compute", 5),
                _s("rank 4 compute", "compute", 4), _s("rank 0 -> rank 1", "rank-link")]
    block = exclude_of(suspects, {4: "node2", 5: "node3"})
    assert block == {"nodes": ["node2", "node3"], "slurm": "--exclude=node2,node3",
                     "because": ["node node2: evidence", "rank 5 compute: evidence", "rank 4 compute: evidence"],
                     "not_excluded": ["link node0 <-> node1: evidence", "rank 0 -> rank 1: evidence"]}
    assert exclude_of([], {}) == {"nodes": [], "slurm": "", "because": [], "not_excluded": []}


def test_rank_hosts_from_the_launches():
    meta = {"launches": {"6": {"ranks": [{"rank": 0, "host": "node0"}, {"rank": 1, "host": "node1"}]}}}
    assert rank_hosts(meta) == {0: "node0", 1: "node1"} and rank_hosts({}) == {}


def _doctor_run(tmp_path, pairs, comp) -> RunWriter:
    w = RunWriter(tmp_path, "doctor", "20261207T000000Z-abcdef")
    ranks = [{"rank": int(r), "host": f"node{int(r) // 2}"} for r in comp["rank"]]
    w.update_meta(lambda m: {**m, "kind": "doctor", "config": DoctorConfig().__dict__,
                             "launches": {"8": {"ranks": ranks}}})
    w.write_case({"results": _rows(pairs, comp).to_dict("records")})
    w.finalize()
    return w


def test_a_slow_node_is_stored_printed_and_read_back(tmp_path):
    pairs = matrix(4, 2, slow=lambda a, b, na, nb: 0.4 if "node2" in (na, nb) else 1.0)
    w = _doctor_run(tmp_path, pairs, compute(8))
    finish(w.dir, DoctorConfig())
    meta = json.loads((w.dir / "meta.json").read_text())
    assert meta["exclude"]["nodes"] == ["node2"] and meta["exclude"]["slurm"] == "--exclude=node2"
    assert read_exclude(w.dir) == ["node2"]
    text = "\n".join(exclude_lines(load_run(w.dir).meta, w.dir))
    assert f"# exclude from the next job: --exclude=node2 (sbatch / srun); or distbench jobspec slurm ... " \
           f"--exclude-from {w.dir}" in text


def test_a_healthy_cluster_excludes_nothing(tmp_path):
    w = _doctor_run(tmp_path, matrix(4, 2), compute(8))
    finish(w.dir, DoctorConfig())
    assert read_exclude(w.dir) == []
    assert exclude_lines(load_run(w.dir).meta, w.dir) == []


def test_exclude_from_refuses_what_is_not_a_finished_doctor_run(tmp_path):
    with pytest.raises(BenchError, match="not a stored run"):
        read_exclude(tmp_path / "nothing")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "meta.json").write_text(json.dumps({"kind": "collectives"}))
    with pytest.raises(BenchError, match="of kind 'collectives', not 'doctor'"):
        read_exclude(tmp_path / "c")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "meta.json").write_text(json.dumps({"kind": "doctor"}))
    with pytest.raises(BenchError, match="has no exclude list"):
        read_exclude(tmp_path / "d")
