"""Command line: parse, validate, launch, report. The one place that talks to the user.

Bad input is a one-line `distbench: error: ...` with exit code 2, before anything is written.
Exit code 1 means the benchmark ran but found wrong results (or a rank failed).
"""

import argparse
import importlib
import logging
from contextlib import contextmanager
import os
import sys

from bench.errors import USAGE_EXIT, BenchError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the whole usage otherwise)
        raise BenchError(message)


# Modules with add_parser(subparsers): each benchmark kind owns its subcommand. Their handlers
# validate into a config and call run_kind(kind, cfg, backend, worlds, meta).
PLUGINS = ("bench.allreduce.cli", "bench.strategies.cli", "bench.telemetry.cli", "bench.report.cli",
           "bench.results.cli")


def _is_rank_zero() -> bool:
    return os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0"


def add_common(p: argparse.ArgumentParser, default_suite: str):
    p.add_argument("--suite", default=None, help=f"TOML suite file (default {default_suite})")
    p.add_argument("--nproc", "--world", dest="world", default=None,
                   help="ranks to launch here, comma list for several launches (suite field 'world')")
    p.add_argument("--backend", default=None, help="auto | gloo | nccl (auto: nccl with CUDA, else gloo)")
    p.add_argument("--out", default=None, help="results root (default results/)")
    p.add_argument("--timeout-s", type=float, default=None, help="process-group timeout in seconds")
    p.add_argument("--no-telemetry", dest="telemetry", action="store_const", const=False, default=None,
                   help="do not sample NVML / host telemetry during cases (suite field 'telemetry')")
    p.add_argument("--telemetry-interval-s", dest="telemetry_interval_s", type=float, default=None,
                   help="seconds between telemetry samples (default 0.1)")


def _add_collectives(sub):
    p = sub.add_parser("collectives", help="time every collective primitive across message sizes")
    add_common(p, "suites/collectives.toml")
    p.add_argument("-c", "--collective", "--collectives", dest="collectives", default=None,
                   help="comma list of collectives or 'all' (see `distbench list`)")
    p.add_argument("--dtype", "--dtypes", dest="dtypes", default=None, help="comma list, e.g. float32,bfloat16")
    p.add_argument("--op", "--ops", dest="ops", default=None, help="sum | avg | max | min | product (comma list)")
    p.add_argument("--root", "--roots", dest="roots", default=None, help="comma list of root ranks")
    p.add_argument("--placement", dest="placements", default=None, help="out-of-place,in-place")
    p.add_argument("--mode", "--modes", dest="modes", default=None, help="latency,throughput")
    p.add_argument("--sizes", default=None, help="explicit sizes, e.g. 4K,1M,64M (overrides the sweep)")
    p.add_argument("-b", "--min-bytes", dest="min_bytes", default=None, help="sweep start, e.g. 1K")
    p.add_argument("-e", "--max-bytes", dest="max_bytes", default=None, help="sweep end, e.g. 64M")
    p.add_argument("-f", "--step-factor", dest="step_factor", type=float, default=None, help="sweep factor (> 1)")
    p.add_argument("-w", "--warmup", type=int, default=None, help="warm-up ops per size (floor)")
    p.add_argument("-n", "--iters", type=int, default=None, help="timed ops per size (floor)")
    p.add_argument("--budget-s", type=float, default=None, help="timed seconds to aim for per size")
    p.add_argument("--check", type=int, default=None, help="correctness checks per size (0: none)")
    p.add_argument("--skip-unsupported", action="store_const", const=True, default=None,
                   help="skip dtype/op pairs the backend refuses instead of failing")
    p.set_defaults(func=cmd_collectives)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="distbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, required=True)
    _add_collectives(sub)
    for mod in PLUGINS:  # other benchmark kinds add their own subcommand
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                continue
            raise
        module.add_parser(sub)
    lp = sub.add_parser("list", help="list the registered units")
    lp.set_defaults(func=cmd_list)
    return parser


def cmd_list(args) -> int:
    from bench.allreduce import REGISTRY as ALGORITHMS
    from bench.collectives import REGISTRY as COLLECTIVES
    from bench.strategies import NAMES as STRATEGIES, get

    for c in COLLECTIVES:
        print(f"collective  {c.name:<24} busbw factor at n=8: {c.bus_factor(8):.3f}  placements: {', '.join(c.placements)}")
    for a in ALGORITHMS:
        doc = (sys.modules[type(a).__module__].__doc__ or "").strip().splitlines()
        print(f"allreduce   {a.name:<24} {doc[0] if doc else ''}")
    for name in STRATEGIES:
        doc = (get(name).__doc__ or "").strip().splitlines()
        print(f"strategy    {name:<24} {doc[0] if doc else ''}")
    return 0


def overrides(args, names) -> dict:
    from bench.suite import split_list

    out = {}
    for n in names:
        v = getattr(args, n, None)
        if v is None:
            continue
        out[n] = split_list(v) if isinstance(v, str) and n not in ("backend", "out", "min_bytes", "max_bytes") else v
    return out


def resolve_worlds(args_world, cfg_world) -> tuple[int, ...]:
    from bench.distributed.launch import launched_externally
    from bench.suite import int_list

    if launched_externally():
        from bench.distributed.env import slurm_to_torch_env, under_slurm

        env = slurm_to_torch_env(os.environ) if under_slurm() else os.environ
        world = int(env["WORLD_SIZE"])
        asked = int_list(args_world, "world size")
        if asked and asked != (world,):
            raise BenchError(f"--nproc {args_world} does not match the launcher's world size {world}; "
                             "under torchrun/srun leave --nproc out")
        return (world,)
    return int_list(args_world, "world size") or tuple(cfg_world)


def cmd_collectives(args) -> int:
    from bench.collectives import REGISTRY
    from bench.collectives.config import CollectivesConfig, expand
    from bench.distributed import probe
    from bench.distributed.env import check_world, resolve_backend
    from bench.suite import load_suite

    suite = args.suite or ("suites/collectives.toml" if os.path.exists("suites/collectives.toml") else None)
    names = ("backend", "out", "timeout_s", "collectives", "dtypes", "ops", "placements", "modes", "sizes",
             "min_bytes", "max_bytes", "step_factor", "warmup", "iters", "budget_s", "check", "skip_unsupported",
             "telemetry", "telemetry_interval_s")
    ov = overrides(args, names)
    if args.roots is not None:
        from bench.suite import int_list

        ov["roots"] = int_list(args.roots, "root")
    cfg = load_suite(suite, CollectivesConfig, "collectives", ov)
    worlds = resolve_worlds(args.world, cfg.world)
    backend = resolve_backend(cfg.backend)
    combos = set()
    for w in worlds:
        check_world(w, backend, nnodes=int(os.environ.get("NNODES", "1")) if os.environ.get("NNODES") else 1)
        for c in expand(cfg, w)[0]:
            if REGISTRY.get(c.collective).min_world == 1:  # the probe runs at world 1
                combos.add((c.collective, c.dtype, c.op))
    refused = probe.unsupported(backend, sorted(combos))
    if refused and not cfg.skip_unsupported:
        (coll, dt, op), why = sorted(refused.items())[0]
        what = f"op '{op}' on {dt}" if op else f"dtype {dt}"
        raise BenchError(f"backend {backend} cannot do {what} for {coll} ({why}); choose another --op/--dtype, "
                         f"or pass --skip-unsupported ({len(refused)} combination(s) refused)")
    meta = {"skipped": [list(k) for k in refused], "skipped_why": [[*k, v] for k, v in refused.items()]}
    return run_kind("collectives", cfg, backend, worlds, meta)


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


def run_kind(kind: str, cfg, backend: str, worlds, extra_meta: dict, launches=None, after=None) -> int:
    """Run every launch of one run (one run id, one results directory) and merge its parts.

    launches: [(world, env changes, config)], default one per world size with `cfg` and no changes
    (a fresh launch per NCCL setting, say, is one entry each). after(out_dir) runs once all
    launches have finished, before the parts are merged (e.g. to fit a model over all of them).
    """
    from bench.distributed.launch import launch, launched_externally
    from bench.results.metadata import git_info, new_run_id, utc_now
    from bench.worker import Job, worker_main

    meta = {"command_line": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]), "started_utc": utc_now(),
            "cwd": os.getcwd(), **git_info(), **extra_meta}
    if launched_externally():
        meta["launcher"] = "slurm" if "SLURM_PROCID" in os.environ and "TORCHELASTIC_RUN_ID" not in os.environ \
            else "torchrun"
        res = worker_main(Job(kind=kind, config=cfg, backend=backend, world=worlds[0], run_id=None, meta=meta))
        if _is_rank_zero() and res.get("dir"):
            if after:
                after(res["dir"])
            finalize_run(res["dir"])
            print(f"# results: {res['dir']}", flush=True)
        return 1 if res["wrong"] else 0
    meta["launcher"] = "elastic_launch"
    logging.getLogger("torch.distributed.elastic").setLevel(logging.WARNING)
    run_id = new_run_id()
    wrong, out_dir = 0, None
    for w, env, job_cfg in launches or [(w, {}, cfg) for w in worlds]:
        job = Job(kind=kind, config=job_cfg, backend=backend, world=w, run_id=run_id, meta=meta)
        try:
            with env_changes(env):
                results = launch(worker_main, (job,), nproc=w)
        except Exception as e:  # noqa: BLE001 - a rank died: say which, keep what was written
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            setting = f" with {env}" if env else ""
            print(f"distbench: a rank failed at world {w}{setting}: {first}", file=sys.stderr)
            finalize_run(out_dir)
            return 1
        wrong += results[0]["wrong"]
        out_dir = results[0]["dir"]
    if out_dir and after:
        after(out_dir)
    finalize_run(out_dir)
    print(f"# results: {out_dir}", flush=True)
    if wrong:
        print(f"distbench: {wrong} wrong element(s): results were written, but the check failed", file=sys.stderr)
    return 1 if wrong else 0


def finalize_run(out_dir):
    """Merge a run directory's parts into one parquet file per table."""
    from bench.results.store import RunWriter

    if out_dir:
        RunWriter.at(out_dir).finalize()


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except BenchError as e:
        if _is_rank_zero():
            print(f"distbench: error: {e}", file=sys.stderr)
        return USAGE_EXIT
    except KeyboardInterrupt:
        print("distbench: interrupted; finished cases are kept", file=sys.stderr)
        return 130
