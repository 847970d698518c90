"""The launcher side of a run: every launch of the plan (one run id, one results directory),
then the kind's finishing step, the merge of the parts, and the closing summary, printed from
the stored run by the same code under elastic_launch, torchrun and srun."""

import logging
import os
import sys
from contextlib import contextmanager

from bench.distributed.env import launcher, torch_env
from bench.distributed.launch import launch, launched_externally
from bench.distributed.session import Job
from bench.harness.kind import Kind, Plan
from bench.harness.rank import worker_main
from bench.results.metadata import git_info, new_run_id, utc_now
from bench.results.store import RunWriter, load_run


@contextmanager
def env_changes(changes: dict):
    """os.environ updated by `changes` inside the block (the launcher's children inherit it)."""
    old = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def is_rank_zero(env=os.environ) -> bool:
    """This process is rank 0, or the launcher of a self-launched run (the one that prints)."""
    t = torch_env(env)
    return t is None or str(t.get("RANK", "0")) == "0"


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def run(kind: Kind, cfg, backend: str, plan: Plan) -> int:
    """Exit code: 0 ok, 1 wrong results or a failed rank."""
    meta = {"command_line": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]), "started_utc": utc_now(),
            "cwd": os.getcwd(), "launcher": launcher(os.environ) or "elastic_launch", **git_info(), **plan.meta}
    if launched_externally():  # torchrun / srun started the ranks: this process is one of them
        lp = plan.launches[0]
        res = worker_main(Job(kind=kind, config=lp.config, backend=backend, world=lp.world, run_id=None, meta=meta))
        if not is_rank_zero():
            return 1 if res["wrong"] else 0
        return close_run(kind, cfg, res["dir"], res["wrong"])
    logging.getLogger("torch.distributed.elastic").setLevel(logging.WARNING)
    run_id = new_run_id()
    wrong, out_dir = 0, None
    for lp in plan.launches:
        job = Job(kind=kind, config=lp.config, backend=backend, world=lp.world, run_id=run_id, meta=meta,
                  launch_key=lp.key, part_prefix=lp.part_prefix)
        try:
            with env_changes(lp.env):
                results = launch(worker_main, (job,), nproc=lp.world)
        except Exception as e:  # noqa: BLE001 - a rank died: say which, keep what was written
            setting = f" with {lp.env}" if lp.env else ""
            print(f"distbench: a rank failed at world {lp.world}{setting}: {first_line(e)}", file=sys.stderr)
            if out_dir:
                RunWriter.at(out_dir).finalize()
            return 1
        wrong += results[0]["wrong"]
        out_dir = results[0]["dir"]
    return close_run(kind, cfg, out_dir, wrong)


def close_run(kind: Kind, cfg, out_dir, wrong: int) -> int:
    """After the last launch: the kind's finishing step, the merge, the summary, the exit code."""
    if not out_dir:
        return 1 if wrong else 0
    if kind.finish:
        kind.finish(out_dir, cfg)
    RunWriter.at(out_dir).finalize()
    text = kind.summary(load_run(out_dir))
    if text:
        print(text, flush=True)
    print(f"# results: {out_dir}", flush=True)
    if wrong:
        print(f"distbench: {wrong} wrong element(s): results were written, but the check failed", file=sys.stderr)
    return 1 if wrong else 0
