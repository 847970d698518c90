"""distbench: benchmarks of collectives and parallel training strategies in PyTorch.

Command line: parse, validate, launch. Every benchmark kind (bench.kinds) gets the same
subcommand shape; the readers of stored runs (report, show, runs, compare, gate…) add theirs.

Bad input is a one-line `distbench: error: ...` with exit code 2, before anything is written.
Exit code 1 means the benchmark ran but found wrong results (or a rank failed).
"""

import argparse
import dataclasses
import sys

import bench.kinds  # noqa: F401  (registers every benchmark kind)
from bench.imports import cli as import_cli
from bench.imports import injob_cli
from bench.jobspec import cli as jobspec_cli
from bench.overhead import cli as telemetry_cli
from bench.plan import cli as plan_cli
from bench.regress import cli as regress_cli
from bench.regress import history_cli
from bench.report import cli as report_cli
from bench.results import cli as results_cli
from bench.simcluster import cli as simcluster_cli
from bench.distributed.env import (check_world, gpu_layout, launcher_world, ranks_per_node, resolve_backend,
                                   select_device, torch_env)
from bench.distributed.launch import launched_externally
from bench.errors import USAGE_EXIT, BenchError, LaunchError
from bench.harness import KINDS, Kind
from bench.options import Parser, add_common
from bench.suite import int_list, load_suite, resolve_suite

# Subcommands that are not benchmark kinds: each module has add_parser(subparsers).
COMMANDS = (telemetry_cli, report_cli, regress_cli, results_cli, history_cli, import_cli, plan_cli, simcluster_cli,
            jobspec_cli, injob_cli)


def build_parser() -> Parser:
    parser = Parser(prog="distbench", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, required=True)
    for kind in KINDS:
        p = sub.add_parser(kind.name, help=kind.help)
        add_common(p, kind.name)
        kind.add_options(p)
        p.set_defaults(func=lambda args, kind=kind: cmd_kind(kind, args))
    for module in COMMANDS:
        module.add_parser(sub)
    sub.add_parser("list", help="list the registered units").set_defaults(func=cmd_list)
    # a subcommand added with help=argparse.SUPPRESS (bisect-step: internal) stays callable and is left out of
    # --help: its line (which python < 3.13 prints as '==SUPPRESS==') and its name in the list of choices
    hidden = {a.dest for a in sub._choices_actions if a.help == argparse.SUPPRESS}
    sub._choices_actions[:] = [a for a in sub._choices_actions if a.dest not in hidden]
    sub.metavar = "{" + ",".join(name for name in sub.choices if name not in hidden) + "}"
    return parser


def cmd_list(args) -> int:
    """Every kind's units (each kind lists its own), then the kinds."""
    for k in KINDS:
        for line in k.listing():
            print(line)
    for k in KINDS:
        print(f"kind        {k.name:<24} {k.help}")
    return 0


def configure(kind: Kind, args):
    """(config, backend, worlds) from the suite and the options, checked against the launcher."""
    cfg = load_suite(resolve_suite(args.suite or kind.name, kind.name), kind.config_class(), kind.name,
                     kind.options(args))
    asked = int_list(args.world, "world size")
    external = launcher_world() if launched_externally() else None
    if external is not None:  # torchrun / srun / mpirun chose the world: the suite's list is for self-launch
        if asked and asked != (external,):
            raise BenchError(f"--nproc {args.world} does not match the launcher's world size {external}; "
                             "under torchrun/srun/mpirun leave --nproc out")
        cfg = kind.at_world(cfg, external)
        worlds = (external,)
    else:
        if asked:
            cfg = kind.at_world(cfg, asked[0]) if len(asked) == 1 else _with_worlds(cfg, asked)
        worlds = tuple(kind.worlds(cfg))
    backend = resolve_backend(cfg.backend)
    for w in worlds:
        check_world(w, backend)
    return cfg, backend, worlds


def _with_worlds(cfg, worlds):
    return dataclasses.replace(cfg, world=tuple(worlds))


def cmd_kind(kind: Kind, args) -> int:
    from bench.distributed.verdict import Verdict  # lazy: torch: a launch only, never a command that reads
    from bench.harness.run import dry_run, run  # lazy: torch: a launch only, never a command that reads

    with Verdict() as verdict:  # under torchrun / srun: a rank's refusal reaches every rank (bench.distributed.verdict)
        cfg, backend, worlds = configure(kind, args)
        verdict.timeout_s = cfg.timeout_s
        plan = kind.plan(cfg, backend, worlds)
        if args.dry_run:
            return dry_run(kind, cfg, plan)
        preflight_checks(kind, cfg, backend, plan)
    return run(kind, cfg, backend, plan, resume=args.resume)


def preflight_checks(kind: Kind, cfg, backend: str, plan):
    """Before the first case: a writable results root, ranks this host can hold, memory for the
    largest case of every launch (bench.preflight); one-line errors, nothing written.

    Memory: CPU ranks share the host's (the ranks of this node). A CUDA rank started by torchrun /
    srun / mpirun first makes its own GPU current (select_device: the first call that touches a
    GPU) and checks that GPU's free memory; ranks divide it only when the launcher really puts
    several on one GPU (gpu_layout). A self-launching process owns no GPU and makes no CUDA call:
    it reads the free memory of the GPUs its ranks will use from NVML (no CUDA context)."""
    import torch  # lazy: torch: a launch only, never a command that reads

    from bench import preflight  # lazy: torch: a launch only, never a command that reads
    from bench.harness.run import is_rank_zero  # lazy: torch: a launch only, never a command that reads

    preflight.check_writable(cfg.out)
    local = ranks_per_node()
    for lp in plan.launches:
        if local is None:
            warning = preflight.check_ranks(lp.world)
            if warning and is_rank_zero():
                print(f"distbench: warning: {warning}", file=sys.stderr)
    if backend != "nccl":
        for lp in plan.launches:
            preflight.check_sweep(kind, lp.config, lp.world, "cpu", ranks_on_host=local or lp.world,
                                  where="this host's memory" if (local or lp.world) > 1 else "")
        return
    if launched_externally():
        device = select_device(backend)
        sharing = gpu_layout()[1]
        where = f"{device} (this rank's own GPU)" if sharing == 1 else \
            f"{device} (the launcher puts {sharing} ranks on this GPU: NCCL_MULTI_RANK_GPU_ENABLE=1)"
        for lp in plan.launches:
            preflight.check_sweep(kind, lp.config, lp.world, device, ranks_on_host=sharing, where=where)
        return
    for lp in plan.launches:
        free = preflight.nvml_free_bytes(range(lp.world))
        if free is None:
            print("distbench: warning: GPU memory not checked before the launch (NVML cannot be read here); "
                  "a case too large for a GPU fails with CUDA out of memory", file=sys.stderr)
            return
        i = min(range(lp.world), key=lambda k: free[k])
        preflight.check_sweep(kind, lp.config, lp.world, torch.device("cuda", i), free=free[i], ranks_on_host=1,
                              where=f"cuda:{i} (one GPU per rank, the one with the least free memory)")


def _rank_prefix() -> str:
    """'rank 9 (node 1, local rank 1): ' in a process an external launcher started, else ''."""
    t = torch_env()
    if not t:
        return ""
    return f"rank {t.get('RANK', '?')} (node {t.get('GROUP_RANK', '?')}, local rank {t.get('LOCAL_RANK', '?')}): "


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except BenchError as e:
        # every rank that refuses says why, with its rank: an error only one rank sees is never silent
        print(f"distbench: error: {_rank_prefix()}{' '.join(str(e).split())}", file=sys.stderr)  # one line
        return USAGE_EXIT
    except LaunchError as e:
        print(f"distbench: error: {_rank_prefix()}{' '.join(str(e).split())}", file=sys.stderr)  # one line
        return 1
    except KeyboardInterrupt:
        print("distbench: interrupted; finished cases are kept", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - an internal error: one line unless --debug
        if isinstance(e, OSError) and e.filename and not debug:  # a path the system refused: name it
            print(f"distbench: error: {_rank_prefix()}'{e.filename}': {e.strerror or type(e).__name__}", file=sys.stderr)
            return USAGE_EXIT
        if debug:
            raise
        print(f"distbench: internal error: {_rank_prefix()}{type(e).__name__}: {e} (run with --debug for the "
              "traceback)", file=sys.stderr)
        return 1
