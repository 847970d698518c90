"""`distbench allreduce`: the allreduce algorithms side by side, with a fitted cost model.

Validates everything first (bad input: one line, exit 2, nothing written), then runs one launch
per world size, and on nccl one more native-only launch per NCCL_ALGO / NCCL_PROTO setting (NCCL
caches some settings per process, so each needs fresh processes). After the last launch the
cost model is fitted over every launch of the run and the summary printed.
"""

import dataclasses
import os

from bench.errors import BenchError


def add_parser(sub):
    from bench.cli import add_common

    p = sub.add_parser("allreduce", help="allreduce algorithms (ring, tree, star, halving_doubling, native) "
                                         "across message sizes, with a fitted alpha-beta cost model")
    add_common(p, "suites/allreduce.toml")
    p.add_argument("-a", "--algorithm", "--algorithms", dest="algorithms", default=None,
                   help="comma list of ring, tree, star, halving_doubling, native, or 'all'")
    p.add_argument("--chunk-bytes", dest="chunk_bytes", default=None, help="ring's pipelined chunk, e.g. 256K (> 0)")
    p.add_argument("--nccl-algo", "--nccl-algos", dest="nccl_algos", default=None,
                   help="nccl only: NCCL_ALGO values, one fresh native launch each (default Ring,Tree)")
    p.add_argument("--nccl-proto", "--nccl-protos", dest="nccl_protos", default=None,
                   help="nccl only: NCCL_PROTO values, one fresh native launch each (default LL,LL128,Simple)")
    p.add_argument("--dtype", "--dtypes", dest="dtypes", default=None, help="comma list, e.g. float32")
    p.add_argument("--op", "--ops", dest="ops", default=None, help="sum | max | min | product (comma list)")
    p.add_argument("--mode", "--modes", dest="modes", default=None, help="latency,throughput")
    p.add_argument("--sizes", default=None, help="explicit sizes, e.g. 4K,1M,64M (overrides the sweep)")
    p.add_argument("-b", "--min-bytes", dest="min_bytes", default=None, help="sweep start, e.g. 4K")
    p.add_argument("-e", "--max-bytes", dest="max_bytes", default=None, help="sweep end, e.g. 64M")
    p.add_argument("-f", "--step-factor", dest="step_factor", type=float, default=None, help="sweep factor (> 1)")
    p.add_argument("-w", "--warmup", type=int, default=None, help="warm-up ops per size (floor)")
    p.add_argument("-n", "--iters", type=int, default=None, help="timed ops per size (floor)")
    p.add_argument("--budget-s", type=float, default=None, help="timed seconds to aim for per size and algorithm")
    p.add_argument("--check", type=int, default=None, help="correctness checks per size (0: none)")
    p.add_argument("--predict-worlds", dest="predict_worlds", default=None,
                   help="world sizes for model predictions, e.g. 2,8,64,1024")
    p.add_argument("--predict-sizes", dest="predict_sizes", default=None, help="sizes for model predictions, e.g. 4K,1M")
    p.set_defaults(func=cmd_allreduce)


def validate(args):
    """(cfg, backend, worlds, launches) or BenchError; launches = [(world, env)]."""
    from bench.allreduce.config import AllreduceConfig
    from bench.cli import overrides, resolve_worlds
    from bench.distributed.env import check_world, resolve_backend
    from bench.suite import int_list, load_suite

    suite = args.suite or ("suites/allreduce.toml" if os.path.exists("suites/allreduce.toml") else None)
    names = ("backend", "out", "timeout_s", "algorithms", "nccl_algos", "nccl_protos", "dtypes", "ops", "modes",
             "sizes", "min_bytes", "max_bytes", "step_factor", "warmup", "iters", "budget_s", "check",
             "predict_sizes", "telemetry", "telemetry_interval_s")
    ov = overrides(args, names)
    ov["chunk_bytes"] = args.chunk_bytes  # a single size, not a list
    ov["predict_worlds"] = int_list(args.predict_worlds, "prediction world size")
    cfg = load_suite(suite, AllreduceConfig, "allreduce", ov)
    worlds = resolve_worlds(args.world, cfg.world)
    backend = resolve_backend(cfg.backend)
    for w in worlds:
        check_world(w, backend, nnodes=int(os.environ.get("NNODES", "1") or 1))
    if cfg.nccl_asked() and backend != "nccl":
        raise BenchError(f"NCCL_ALGO / NCCL_PROTO settings (nccl_algos={list(cfg.nccl_algos)}, "
                         f"nccl_protos={list(cfg.nccl_protos)}) apply to the nccl backend only, and this run uses "
                         f"{backend}; drop them or use --backend nccl")
    native = "native" in cfg.algorithm_names()
    if cfg.nccl_asked() and not native:
        raise BenchError("NCCL_ALGO / NCCL_PROTO settings change only the native all_reduce, and 'native' is not "
                         "among the algorithms; add it (-a ...,native) or drop the NCCL settings")
    cfg = dataclasses.replace(cfg, world=tuple(worlds))
    variants = cfg.nccl_variants() if backend == "nccl" and native else []
    launches = [(w, env) for w in worlds for env in [{}, *variants]]
    return cfg, backend, worlds, launches


def cmd_allreduce(args) -> int:
    from bench.allreduce.summary import write_model
    from bench.cli import run_kind
    from bench.distributed.launch import launched_externally

    cfg, backend, worlds, launches = validate(args)
    meta = {"allreduce_launches": [{"world": w, "env": env} for w, env in launches]}
    if launched_externally():
        if len(launches) > len(worlds):
            meta["notes"] = ["under torchrun/srun the ranks are already started: no fresh launch per "
                             "NCCL_ALGO/NCCL_PROTO setting; set them in the environment of the job instead"]
        return run_kind("allreduce", cfg, backend, worlds, meta, after=lambda d: write_model(d, cfg))
    return launch_all(cfg, backend, launches, meta)






def launch_all(cfg, backend: str, launches, extra_meta: dict) -> int:
    """One run of fresh launches, one per (world, NCCL environment); NCCL variants run native only."""
    from bench.allreduce.summary import write_model
    from bench.cli import run_kind

    jobs = [(w, env, dataclasses.replace(cfg, algorithms=("native",)) if env else cfg) for w, env in launches]
    return run_kind("allreduce", cfg, backend, [w for w, _ in launches], extra_meta, launches=jobs,
                    after=lambda d: write_model(d, cfg))
