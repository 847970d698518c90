"""`distbench jobspec slurm|kubernetes|skypilot`: the job files, exactly; bad input is one line, exit 2, and no
file; the sbatch script is valid bash and runs with nothing but bash and srun (a fake srun here); the JobSet and
the SkyPilot task validate offline against the projects' own schemas (tests/data/jobspec/SOURCE.md); the
recipes in docs/cluster.md are run and their files compared with the ones shown there."""

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from bench.cli import main
from bench.jobspec import emit, fabric

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "jobspec"
CMD = ["--", "distbench", "collectives", "-c", "all_reduce", "--sizes", "1M,64M"]
DOCTOR_RUN = "results/doctor/20261207T120000Z-ab12cd"  # the doctor run the docs' recipe names

try:
    import jsonschema
    import yaml
except ImportError:  # the dev extras install both (pyproject.toml)
    jsonschema = yaml = None
needs_schemas = pytest.mark.skipif(jsonschema is None, reason="jsonschema or PyYAML not importable: "
                                   "pip install -e '.[dev]'")
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")


def jobspec(capsys, *argv):
    """(exit code, stdout, stderr) of `distbench jobspec ARGV`."""
    code = main(["jobspec", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def doctor_run(where: Path, nodes=("node2",), kind="doctor") -> Path:
    """A stored doctor run as bench.doctor.exclude reads it: meta.json with its `exclude` block."""
    where.mkdir(parents=True, exist_ok=True)
    exclude = {"nodes": list(nodes), "slurm": f"--exclude={','.join(nodes)}", "because": [], "not_excluded": []}
    (where / "meta.json").write_text(json.dumps({"kind": kind, "exclude": exclude}))
    return where


# ---- Slurm ------------------------------------------------------------------------------------------------

SLURM_FULL = """\
#!/bin/bash
# distbench jobspec slurm: 2 node(s) x 8 GPU(s), one rank per GPU: 16 ranks.
# Submit with `sbatch FILE` after `mkdir -p /shared/runs` (sbatch writes its log there).
#SBATCH --job-name=ar-sweep
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --partition=gpu
#SBATCH --account=proj42
#SBATCH --time=1-12:00:00
#SBATCH --exclusive
#SBATCH --exclude=node7,node9,node2
#SBATCH --no-requeue
#SBATCH --output=/shared/runs/slurm-%j.out
set -euo pipefail

# Each task is one rank: distbench reads SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS, and takes
# MASTER_ADDR from the first host of SLURM_JOB_NODELIST.
export MASTER_PORT=29500
# the network's variables (--fabric, --env): docs/cluster.md says what each one does
export NCCL_IB_HCA=mlx5_0:1,mlx5_1:1
export NCCL_IB_GID_INDEX=5
export NCCL_SOCKET_IFNAME==ens1f0np0
export NCCL_DEBUG=INFO

srun --kill-on-bad-exit=1 distbench collectives -c all_reduce --sizes 1M,64M --out /shared/runs
"""


def test_slurm_script_exactly(tmp_path, capsys):
    """Every #SBATCH line, the exports (a fabric preset, its names given, one --env), and --exclude merged with
    a doctor run's nodes: each host once, --exclude's first."""
    run = doctor_run(tmp_path / "doctor-run", nodes=("node2", "node7"))
    code, out, err = jobspec(capsys, "slurm", "--nodes", "2", "--gpus-per-node", "8", "--job-name", "ar-sweep",
                             "--partition", "gpu", "--account", "proj42", "--time", "1-12:00:00", "--exclusive",
                             "--exclude", "node7,node9", "--exclude-from", str(run), "--results", "/shared/runs",
                             "--fabric", "roce", "--hca", "mlx5_0:1,mlx5_1:1", "--gid-index", "5",
                             "--ifname", "=ens1f0np0", "--env", "NCCL_DEBUG=INFO", *CMD)
    assert (code, err) == (0, "")
    assert out == SLURM_FULL


def test_slurm_defaults_and_a_cpu_job(capsys):
    code, out, _ = jobspec(capsys, "slurm", "--nodes", "3", "--gpus-per-node", "0", "--tasks-per-node", "4", *CMD)
    assert code == 0
    sbatch = [line for line in out.splitlines() if line.startswith("#SBATCH")]
    assert sbatch == ["#SBATCH --job-name=distbench", "#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=4",
                      "#SBATCH --no-requeue", "#SBATCH --output=results/slurm-%j.out"]
    assert "# distbench jobspec slurm: 3 node(s) x 4 CPU rank(s): 12 ranks." in out
    assert "NCCL_" not in out  # no --fabric: NCCL chooses by itself
    assert out.rstrip().endswith("srun --kill-on-bad-exit=1 distbench collectives -c all_reduce --sizes 1M,64M "
                                 "--out results")


def test_slurm_container_port_from_the_job_and_srun_args(capsys):
    code, out, _ = jobspec(capsys, "slurm", "--nodes", "2", "--gpus-per-node", "4", "--results", "/lustre/r",
                           "--container-image", "nvcr.io#nvidia/pytorch:24.05-py3", "--port", "job",
                           "--srun-args=--cpu-bind=none --mpi=none", "--", "/opt/venv/bin/distbench", "doctor")
    assert code == 0
    lines = out.splitlines()
    assert "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))" in lines
    assert lines[-1] == ("srun --kill-on-bad-exit=1 '--container-image=nvcr.io#nvidia/pytorch:24.05-py3' "
                         "--container-mounts=/lustre/r:/lustre/r --cpu-bind=none --mpi=none "
                         "/opt/venv/bin/distbench doctor --out /lustre/r")


def test_the_commands_own_out_is_the_results_directory(capsys):
    code, out, _ = jobspec(capsys, "slurm", "--nodes", "1", "--gpus-per-node", "8", "--",
                           "python3", "-m", "bench", "--debug", "pipeline", "--out=/shared/p")
    assert code == 0
    assert "#SBATCH --output=/shared/p/slurm-%j.out" in out
    assert out.splitlines()[-1] == "srun --kill-on-bad-exit=1 python3 -m bench --debug pipeline --out=/shared/p"


SLURM_VARIANTS = [
    ["--nodes", "2", "--gpus-per-node", "8", "--fabric", "ib", "--env", "X=a b'c$d"],
    ["--nodes", "1", "--gpus-per-node", "0", "--tasks-per-node", "2", "--fabric", "socket", "--ifname", "^docker,lo"],
    ["--nodes", "4", "--gpus-per-node", "8", "--fabric", "efa", "--port", "job", "--time", "UNLIMITED"],
    ["--nodes", "2", "--gpus-per-node", "8", "--container-image", "/images/pt.sqsh", "--results", "/shared/r"],
]


@needs_bash
@pytest.mark.parametrize("options", SLURM_VARIANTS, ids=lambda o: " ".join(o[4:7]))
def test_slurm_script_is_valid_bash(options, tmp_path, capsys):
    code, out, _ = jobspec(capsys, "slurm", *options, *CMD)
    assert code == 0
    (tmp_path / "job.sbatch").write_text(out)
    done = subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@needs_bash
def test_slurm_script_runs_with_only_bash_and_srun(tmp_path, capsys):
    """Run as sbatch would run it (bash, SLURM_JOB_ID set), with a fake srun first on PATH: the command
    reaches srun word for word, the variables are exported, and nothing else is called."""
    code, out, _ = jobspec(capsys, "slurm", "--nodes", "2", "--gpus-per-node", "8", "--fabric", "socket",
                           "--ifname", "=eth0", "--env", "NCCL_DEBUG=INFO", "--port", "job", "--results", "/shared/r",
                           "--", "distbench", "collectives", "-c", "all_reduce", "--sizes", "1M,64M", "--label",
                           "two words")
    assert code == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text('#!/bin/bash\nfor a in "$@"; do printf "[%s]" "$a"; done\necho\n'
                    'echo "$MASTER_PORT $NCCL_IB_DISABLE $NCCL_SOCKET_IFNAME $NCCL_DEBUG"\n')
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "job.sbatch").write_text(out)
    bash = shutil.which("bash")
    env = {"PATH": str(bin_dir), "SLURM_JOB_ID": "123457"}  # only the fake srun can be found
    done = subprocess.run([bash, str(tmp_path / "job.sbatch")], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[--kill-on-bad-exit=1][distbench][collectives][-c][all_reduce][--sizes][1M,64M][--label][two words]"
        "[--out][/shared/r]",
        f"{20000 + 123457 % 20000} 1 =eth0 INFO"]


# ---- the network presets ------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset,expected", [
    (["--fabric", "ib"], [("NCCL_IB_HCA", "mlx5"), ("NCCL_SOCKET_IFNAME", "^docker,lo")]),
    (["--fabric", "roce"], [("NCCL_IB_HCA", "mlx5"), ("NCCL_IB_GID_INDEX", "3"), ("NCCL_SOCKET_IFNAME", "^docker,lo")]),
    (["--fabric", "efa"], [("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "1"),
                           ("NCCL_SOCKET_IFNAME", "^docker,lo")]),
    (["--fabric", "socket", "--ifname", "eth"], [("NCCL_IB_DISABLE", "1"), ("NCCL_SOCKET_IFNAME", "eth")]),
    (["--fabric", "efa", "--env", "FI_EFA_USE_DEVICE_RDMA=0", "--env", "NCCL_PROTO=simple"],
     [("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "0"), ("NCCL_SOCKET_IFNAME", "^docker,lo"),
      ("NCCL_PROTO", "simple")]),
    (["--env", "NCCL_DEBUG=INFO"], [("NCCL_DEBUG", "INFO")]),
])
def test_fabric_presets_reach_every_target(preset, expected, capsys):
    code, out, _ = jobspec(capsys, "slurm", "--nodes", "2", "--gpus-per-node", "8", *preset, *CMD)
    assert code == 0
    exports = [line[len("export "):] for line in out.splitlines() if line.startswith("export ")]
    assert exports[1:] == [f"{k}={shlex.quote(v)}" for k, v in expected]  # after MASTER_PORT
    if yaml is None:
        return
    code, out, _ = jobspec(capsys, "kubernetes", "--nodes", "2", "--gpus-per-node", "8", "--image", "img", *preset,
                           *CMD)
    assert code == 0
    pod = yaml.safe_load(out)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = pod["containers"][0]["env"]
    assert [(e["name"], e["value"]) for e in env] == [("PYTHONUNBUFFERED", "1"), *expected]
    code, out, _ = jobspec(capsys, "skypilot", "--nodes", "2", "--accelerators", "H100:8", *preset, *CMD)
    assert code == 0
    assert list(yaml.safe_load(out)["envs"].items()) == expected


def test_every_preset_variable_is_documented_with_a_source():
    section = docs_section()
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"[A-Z_]+", cells[1]):
            rows[cells[1]] = cells
    for name in ("ib", "roce", "efa", "socket"):
        for var, _ in fabric.fabric_env(name, None, None, None):
            assert var in rows, f"{var} (--fabric {name}) is not in the table of docs/cluster.md"
            assert name in rows[var][0] and rows[var][4], rows[var]  # the fabric named, a source given


# ---- bad input: one line, exit 2, nothing written -------------------------------------------------------------

BAD = [
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--time", "1h", *CMD], "--time '1h'"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--time", "10:75:00", *CMD], "--time '10:75:00'"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--", "python", "train.py"], "must start with `distbench`"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--", "bash", "-c", "distbench collectives"],
     "starts with 'bash'"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8"], "no command after `--`"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--", "distbench"], "names no benchmark kind"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--", "distbench", "colectives"], "did you mean 'collectives'"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--", "distbench", "collectives", "--nproc", "16"],
     "launcher decides the world"),
    (["slurm", "--nodes", "0", "--gpus-per-node", "8", *CMD], "--nodes 0: must be >= 1"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--tasks-per-node", "4", *CMD], "one rank per GPU"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "-1", *CMD], "--gpus-per-node -1: must be >= 0"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--exclude", "node1;rm", *CMD], "--exclude host 'node1;rm'"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--partition", "a b", *CMD], "--partition 'a b'"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--port", "80", *CMD], "--port 80: allowed 1024 .. 65535 or"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--container-image", "img", *CMD], "absolute path"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--results", "r%j", *CMD], "'%'"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--results", "$SCRATCH/r", *CMD], "a literal directory path"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--hca", "mlx5", *CMD], "--hca mlx5 needs --fabric"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--fabric", "efa", "--hca", "mlx5", *CMD],
     "--hca mlx5 applies to --fabric ib or roce"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--fabric", "ib", "--gid-index", "3", *CMD],
     "--gid-index 3 applies to --fabric roce"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--fabric", "ib", "--ifname", "eth0 eth1", *CMD],
     "--ifname 'eth0 eth1'"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--fabric", "fast", *CMD], "invalid choice: 'fast'"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--env", "NCCL_DEBUG", *CMD], "--env 'NCCL_DEBUG'"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--srun-args", "'unclosed", *CMD], "--srun-args"),
    (["slurm", "--nodes", "2", "--gpus-per-node", "8", "--results", "/a", "--", "distbench", "collectives",
      "--out", "/b"], "writes to --out /b but --results is /a"),
    (["slurm", "--gpus-per-node", "8", *CMD], "--nodes"),
    (["kubernetes", "--nodes", "2", "--gpus-per-node", "8", *CMD], "give --image"),
    (["kubernetes", "--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--results", "runs", *CMD],
     "absolute path in the container"),
    (["kubernetes", "--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--job-name", "Bench_1", *CMD],
     "--job-name 'Bench_1'"),
    (["kubernetes", "--nodes", "100", "--gpus-per-node", "8", "--image", "img", "--job-name", "a" * 51, *CMD],
     "for the last pod's host name"),
    (["kubernetes", "--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--port", "job", *CMD],
     "--port job: allowed 1024 .. 65535"),
    (["kubernetes", "--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--resource", "efa", *CMD],
     "--resource 'efa'"),
    (["kubernetes", "--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--resource", "nvidia.com/gpu=8",
      *CMD], "comes from --gpus-per-node"),
    (["kubernetes", "--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--memory", "lots", *CMD],
     "--memory 'lots'"),
    (["skypilot", "--nodes", "2", "--accelerators", "H100:x", *CMD], "--accelerators 'H100:x'"),
    (["skypilot", "--nodes", "2", "--accelerators", "H100:8", "--tasks-per-node", "2", *CMD], "one rank per GPU"),
    (["skypilot", "--nodes", "2", "--accelerators", "H100:8", "--image", "my image", *CMD], "--image 'my image'"),
]


@pytest.mark.parametrize("argv,says", BAD, ids=[f"{a[0]}: {says}" for a, says in BAD])
def test_bad_input_is_one_line_and_writes_nothing(argv, says, tmp_path, capsys):
    target = tmp_path / "job.file"
    head, sep, tail = (argv[:argv.index("--")], ["--"], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [], [])
    code, out, err = jobspec(capsys, *head, "--output", str(target), *sep, *tail)
    assert code == 2 and out == ""
    assert err.startswith("distbench: error: ") and err.count("\n") == 1, err
    assert says in err, err
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_exclude_from_a_bad_run_directory_is_one_line(tmp_path, capsys):
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    other_kind = doctor_run(tmp_path / "collectives-run", kind="collectives")
    for run, says in ((not_a_run, "not a stored run"), (other_kind, "not 'doctor'")):
        code, out, err = jobspec(capsys, "slurm", "--nodes", "2", "--gpus-per-node", "8", "--exclude-from", str(run),
                                 *CMD)
        assert (code, out) == (2, "") and err.count("\n") == 1 and says in err, err


def test_output_is_written_once_and_overwritten_only_with_force(tmp_path, capsys):
    target = tmp_path / "job.sbatch"
    argv = ["slurm", "--nodes", "2", "--gpus-per-node", "8", "--output", str(target)]
    code, out, err = jobspec(capsys, *argv, *CMD)
    assert (code, out, err) == (0, "", f"distbench: wrote {target}\n")
    first = target.read_text()
    assert first.startswith("#!/bin/bash\n")
    code, _, err = jobspec(capsys, *argv, "--nodes", "4", *CMD)
    assert code == 2 and "exists; give --force" in err
    assert target.read_text() == first
    code, _, _ = jobspec(capsys, *argv, "--nodes", "4", "--force", *CMD)
    assert code == 0 and "#SBATCH --nodes=4" in target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.sbatch"]  # no temporary file left
    code, _, err = jobspec(capsys, "slurm", "--nodes", "2", "--gpus-per-node", "8", "--output",
                           str(tmp_path / "no-such-dir" / "x.sbatch"), *CMD)
    assert code == 2 and "does not exist" in err


# ---- Kubernetes -----------------------------------------------------------------------------------------------

def manifest(capsys, *options, command=CMD):
    code, out, err = jobspec(capsys, "kubernetes", *options, *command)
    assert code == 0, err
    return out, yaml.safe_load(out)


@needs_schemas
def test_kubernetes_jobset_fields(capsys):
    _, js = manifest(capsys, "--nodes", "4", "--gpus-per-node", "8", "--image", "ghcr.io/x/distbench:1",
                     "--job-name", "ar", "--namespace", "bench", "--pvc", "runs", "--results", "/data/runs",
                     "--cpu", "96", "--memory", "1500Gi", "--resource", "rdma/ib=1", "--port", "29400")
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and js["kind"] == "JobSet"
    assert js["metadata"] == {"name": "ar", "namespace": "bench"}
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    (rjob,) = js["spec"]["replicatedJobs"]
    job = rjob["template"]["spec"]
    assert (rjob["name"], rjob["replicas"], job["parallelism"], job["completions"], job["completionMode"]) == \
        ("workers", 1, 4, 4, "Indexed")
    pod = job["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"] == ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "--rdzv-backend", "c10d",
                            "--rdzv-endpoint", "ar-workers-0-0.ar:29400", "--rdzv-id", "ar", "-m", "bench",
                            "collectives", "-c", "all_reduce", "--sizes", "1M,64M", "--out", "/data/runs"]
    assert c["resources"] == {"requests": {"cpu": "96", "memory": "1500Gi"},
                              "limits": {"nvidia.com/gpu": 8, "rdma/ib": "1"}}
    assert c["ports"] == [{"containerPort": 29400, "name": "rendezvous"}]
    assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]} == {"dshm": "/dev/shm", "results": "/data/runs"}
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                              {"name": "results", "persistentVolumeClaim": {"claimName": "runs"}}]
    assert pod["restartPolicy"] == "Never" and js["spec"]["failurePolicy"] == {"maxRestarts": 0}


@needs_schemas
@pytest.mark.parametrize("command,start", [
    (["--", "distbench", "doctor"], ["torchrun"]),
    (["--", "/opt/venv/bin/distbench", "doctor"], ["/opt/venv/bin/torchrun"]),
    (["--", "python3.11", "-m", "bench", "doctor"], ["python3.11", "-m", "torch.distributed.run"]),
    (["--", "distbench", "doctor", "--label", "$(HOME)"], ["torchrun"]),
])
def test_kubernetes_runs_the_command_under_the_torchrun_beside_it(command, start, capsys):
    """torchrun of the same environment; a CPU job (0 GPUs) has no GPU limit; Kubernetes' $(VAR) expansion
    is escaped in the user's words."""
    _, js = manifest(capsys, "--nodes", "2", "--gpus-per-node", "0", "--tasks-per-node", "3", "--image", "i",
                     command=command)
    c = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][:len(start)] == start
    assert c["command"][len(start):len(start) + 4] == ["--nnodes", "2", "--nproc-per-node", "3"]
    assert c["command"][-2:] == ["--out", "/results"] and "resources" not in c
    if "--label" in command:
        assert c["command"][-3] == "$$(HOME)"


def closed(schema):
    """Every object that lists its properties refuses others (kubectl apply --validate=strict), unless the
    schema keeps unknown fields on purpose."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def jobset_validator():
    """JobSet v0.12.0's CRD schema, an OpenAPI v3.0 schema (JSON Schema draft 4 with Kubernetes' x- extensions,
    which jsonschema ignores)."""
    schema = closed(json.loads((DATA / "jobset-v0.12.0-openapiv3.json").read_text()))
    return jsonschema.Draft4Validator(schema)


K8S_VARIANTS = [
    ["--nodes", "2", "--gpus-per-node", "8", "--image", "ghcr.io/x/distbench:1"],
    ["--nodes", "16", "--gpus-per-node", "8", "--image", "i", "--pvc", "runs", "--fabric", "efa", "--resource",
     "vpc.amazonaws.com/efa=32", "--cpu", "188", "--memory", "1900Gi", "--namespace", "ml", "--env", "NCCL_DEBUG=INFO"],
    ["--nodes", "1", "--gpus-per-node", "0", "--tasks-per-node", "4", "--image", "i", "--fabric", "socket"],
    ["--nodes", "3", "--gpus-per-node", "4", "--image", "i", "--fabric", "roce", "--cpu", "500m"],
]


@needs_schemas
@pytest.mark.parametrize("options", K8S_VARIANTS, ids=lambda o: " ".join(o[:4]))
def test_kubernetes_manifest_validates_against_the_jobset_crd(options, capsys):
    _, js = manifest(capsys, *options)
    errors = sorted(jobset_validator().iter_errors(js), key=str)
    assert errors == [], "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


@needs_schemas
@pytest.mark.parametrize("path,field,value", [
    ((), "envs", []),  # an unknown field of a container
    ((), "resources", {"limits": {"nvidia.com/gpu": "eight"}}),  # not a quantity
    ((), "ports", [{"containerPort": "29500"}]),  # a string for an integer
], ids=["unknown field", "bad quantity", "wrong type"])
def test_the_jobset_schema_check_has_teeth(path, field, value, capsys):
    """The same check refuses what the API server would refuse."""
    _, js = manifest(capsys, *K8S_VARIANTS[0])
    validator = jobset_validator()
    assert list(validator.iter_errors(js)) == []
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][field] = value
    assert list(validator.iter_errors(js)), "the schema accepted a broken manifest"


# ---- SkyPilot -------------------------------------------------------------------------------------------------

def skypilot_validators():
    """SkyPilot's own validator (sky/utils/validator.py): Draft 7 plus its two enum keywords."""
    def case_insensitive_enum(validator, enums, instance, schema):
        if instance.lower() not in [e.lower() for e in enums]:
            yield jsonschema.ValidationError(f"{instance!r} is not one of {enums!r}")

    def case_sensitive_enum(validator, enums, instance, schema):
        if instance not in enums:
            yield jsonschema.ValidationError(f"{instance!r} is not one of {enums!r}")

    cls = jsonschema.validators.extend(jsonschema.Draft7Validator, validators={
        "case_insensitive_enum": case_insensitive_enum, "case_sensitive_enum": case_sensitive_enum})
    data = json.loads((DATA / "skypilot-0.14.1-task-schema.json").read_text())
    return cls(data["task"]), cls(data["resources"])


def skypilot_errors(task: dict) -> list[str]:
    """SkyPilot's two steps (sky/task.py, then sky/resources.py): the task, then its resources."""
    task_v, resources_v = skypilot_validators()
    errors = [f"task {list(e.absolute_path)}: {e.message}" for e in task_v.iter_errors(task)]
    errors += [f"resources {list(e.absolute_path)}: {e.message}"
               for e in resources_v.iter_errors(task.get("resources", {}))]
    return errors


SKY_VARIANTS = [
    ["--nodes", "2", "--accelerators", "H100:8"],
    ["--nodes", "4", "--accelerators", "A100-80GB:8", "--cloud", "gcp", "--image", "ghcr.io/x/distbench:1",
     "--fabric", "efa", "--workdir", ".", "--setup", "pip install -e .\nnvidia-smi", "--port", "12375"],
    ["--nodes", "2", "--tasks-per-node", "4", "--fabric", "socket", "--ifname", "=eth0"],
]


@needs_schemas
@pytest.mark.parametrize("options", SKY_VARIANTS, ids=lambda o: " ".join(o[:4]))
def test_skypilot_task_validates_against_skypilots_schema(options, capsys):
    code, out, err = jobspec(capsys, "skypilot", *options, *CMD)
    assert code == 0, err
    assert skypilot_errors(yaml.safe_load(out)) == []


@needs_schemas
def test_the_skypilot_schema_check_has_teeth():
    good = {"name": "x", "num_nodes": 2, "resources": {"accelerators": "H100:8", "cloud": "aws"}, "run": "true\n"}
    assert skypilot_errors(good) == []
    for bad in ({**good, "num_node": 2}, {**good, "num_nodes": "2"}, {**good, "envs": {"1BAD": "x"}},
                {**good, "resources": {"accelerator": "H100:8"}}, {**good, "resources": {"cloud": "nocloud"}}):
        assert skypilot_errors(bad), bad


@needs_schemas
def test_skypilot_task_fields(capsys):
    code, out, _ = jobspec(capsys, "skypilot", "--nodes", "2", "--accelerators", "H100:8", "--cloud", "aws",
                           "--image", "ghcr.io/x/d:1", "--job-name", "sweep", "--", "/opt/venv/bin/distbench",
                           "collectives", "--label", "a b")
    task = yaml.safe_load(out)
    assert {k: task[k] for k in ("name", "num_nodes", "resources")} == {
        "name": "sweep", "num_nodes": 2,
        "resources": {"cloud": "aws", "accelerators": "H100:8", "image_id": "docker:ghcr.io/x/d:1"}}
    assert task["run"].splitlines() == [
        "set -euo pipefail",
        "# the head node's IP: the first line of SKYPILOT_NODE_IPS (as SkyPilot's distributed examples take it)",
        'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
        '/opt/venv/bin/torchrun --nnodes "$SKYPILOT_NUM_NODES" --nproc-per-node "$SKYPILOT_NUM_GPUS_PER_NODE" \\',
        '  --node-rank "$SKYPILOT_NODE_RANK" --master-addr "$MASTER_ADDR" --master-port 29500 \\',
        "  -m bench collectives --label 'a b' --out results"]


@needs_bash
@needs_schemas
def test_skypilot_run_is_valid_bash_and_takes_the_head_nodes_ip(tmp_path, capsys):
    code, out, _ = jobspec(capsys, "skypilot", "--nodes", "2", "--tasks-per-node", "2", *CMD)
    run = yaml.safe_load(out)["run"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "torchrun"
    fake.write_text('#!/bin/bash\necho "$*"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6",
           "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_GPUS_PER_NODE": "0"}
    done = subprocess.run(["bash", "-c", run], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("--nnodes 2 --nproc-per-node 2 --node-rank 1 --master-addr 10.0.0.5 --master-port 29500 "
                           "-m bench collectives -c all_reduce --sizes 1M,64M --out results\n")


# ---- the YAML writer ------------------------------------------------------------------------------------------

@needs_schemas
def test_the_yaml_writer_reads_back_as_written():
    tricky = ["8", "08", "1e3", "0x10", "true", "on", "No", "null", "~", "", " lead", "trail ", "a: b", "#x", "-", "-1",
              "--nnodes", "-m", "$(HOME)", "^docker,lo", "=eth0", "H100:8", "nvcr.io#nvidia/pytorch:24.05-py3",
              "it's", 'say "hi"', "tab\there", "ünï", "line\n", "two\nlines", "two\nlines\n", "  indented\nblock\n",
              "trailing blank\n\n", "x \ny\n", "[a]", "{a}", "*a", "&a", "!a", "%a", "@a", "`a", "|", ">", "?", ",a"]
    data = {"strings": tricky, "ints": [0, 8, 29500], "bools": [True, False], "empty": {"d": {}, "l": []},
            "nested": [[1, [2, "3"]], {"a": [{"b": "c"}]}], "nvidia.com/gpu": 8}
    text = emit.dump(data)
    assert yaml.safe_load(text) == data
    assert yaml.load(text, Loader=yaml.BaseLoader) is not None  # YAML 1.1 with nothing resolved: still parses


# ---- the recipes in docs/cluster.md ---------------------------------------------------------------------------

def docs_section() -> str:
    text = (ROOT / "docs" / "cluster.md").read_text()
    start = text.index("## Job files for clusters you rent: `distbench jobspec`")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def recipes():
    """(argv after `distbench`, the block shown after it or None) for each `distbench jobspec` block."""
    blocks = re.findall(r"```(\w*)\n(.*?)```", docs_section(), re.S)
    out = []
    for i, (_, body) in enumerate(blocks):
        if body.startswith("distbench jobspec "):
            argv = shlex.split(body.replace("\\\n", " "))[1:]
            shown = blocks[i + 1][1] if "--output" in argv else None
            out.append((argv, shown))
    return out


def test_the_docs_have_a_recipe_for_each_target():
    targets = [argv[1] for argv, _ in recipes()]
    assert {"slurm", "kubernetes", "skypilot"} <= set(targets)
    assert all(shown is not None for argv, shown in recipes() if argv[1] in ("kubernetes", "skypilot")) and \
        any(shown for argv, shown in recipes() if argv[1] == "slurm")


@pytest.mark.parametrize("argv,shown", recipes(), ids=lambda x: " ".join(x[1:3]) if isinstance(x, list) else "")
def test_the_docs_recipes_write_the_files_shown(argv, shown, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    doctor_run(tmp_path / DOCTOR_RUN)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    text = Path(argv[argv.index("--output") + 1]).read_text() if shown is not None else out
    if shown is not None:
        assert text == shown, "docs/cluster.md shows another file than the recipe writes; regenerate it"
    if argv[1] == "slurm" and shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    if jsonschema is not None and argv[1] == "kubernetes":
        assert list(jobset_validator().iter_errors(yaml.safe_load(text))) == []
    if jsonschema is not None and argv[1] == "skypilot":
        assert skypilot_errors(yaml.safe_load(text)) == []
