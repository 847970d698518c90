"""`distbench strategies` and `distbench pipeline`: parse, validate into a frozen config, launch.

Everything that can be wrong with the input fails here (one line, exit 2, nothing written).
"""

import os

from bench.errors import BenchError


def _common(p, default_suite: str):
    from bench.cli import add_common

    add_common(p, default_suite)  # suite, nproc, backend, out, timeout, telemetry
    p.add_argument("--batch", default=None, help="global mini-batch, samples")
    p.add_argument("--steps", default=None, help="timed steps (>= 5)")
    p.add_argument("--warmup", default=None, help="discarded warm-up steps")
    p.add_argument("--check", default=None, help="1: compare the first step with the single-process reference")
    p.add_argument("--seed", default=None)


def add_parser(sub):
    p = sub.add_parser("pipeline", help="pipeline parallelism (torch.distributed.pipelining): chunks sweep, bubble")
    _common(p, "suites/pipeline.toml")
    p.add_argument("--chunks", default=None, help="micro-batches per mini-batch, comma list, e.g. 1,4,8")
    p.add_argument("--schedule", "--schedules", dest="schedules", default=None, help="gpipe,1f1b,interleaved")
    p.add_argument("--stages", default=None, help="pipeline ranks, comma list")
    p.add_argument("--checkpoint", default=None, help="always,except_last,never")
    p.add_argument("--micro-batch", dest="micro_batch", default=None,
                   help="fixed micro-batch size(s): mini-batch = micro-batch x chunks")
    p.add_argument("--model", default=None, help="model preset, e.g. mlp-pipe, gpt-tiny")
    p.add_argument("--balance", default=None, help="blocks per stage, e.g. 3,5")
    p.add_argument("--no-efficiency", dest="efficiency", action="store_const", const=False, default=None,
                   help="skip the one-process micro-batch efficiency curve")
    p.set_defaults(func=cmd_pipeline)

    s = sub.add_parser("strategies", help="train reference models under dp, ddp, layer, tp, pp, fsdp")
    _common(s, "suites/strategies.toml")
    s.add_argument("-s", "--strategy", "--strategies", dest="strategies", default=None, help="comma list")
    s.add_argument("--model", "--models", dest="models", default=None, help="model presets, comma list")
    s.add_argument("--chunks", default=None, help="pp micro-batches")
    s.add_argument("--schedule", default=None, help="pp schedule")
    s.add_argument("--bucket-cap-mb", dest="bucket_cap_mb", type=float, default=None, help="ddp bucket size, MB")
    s.set_defaults(func=cmd_strategies)


def _ints(args, names) -> dict:
    from bench.suite import int_list

    out = {}
    for n in names:
        v = getattr(args, n, None)
        if v is not None:
            vals = int_list(v, n.replace("_", "-"))
            if not vals:
                raise BenchError(f"bad {n.replace('_', '-')} '{v}': expected comma-separated integers, e.g. 1,4")
            out[n] = vals
    return out


def _strs(args, names) -> dict:
    from bench.suite import split_list

    return {n: split_list(getattr(args, n)) for n in names if getattr(args, n, None) is not None}


def _plain(args) -> dict:
    return {n: getattr(args, n) for n in ("backend", "out", "timeout_s", "telemetry", "telemetry_interval_s") if getattr(args, n, None) is not None}


def _scalar(d: dict, names):
    for n in names:
        if n in d:
            if len(d[n]) != 1:
                raise BenchError(f"{n.replace('_', '-')} takes one value, got {','.join(map(str, d[n]))}")
            d[n] = d[n][0]
    return d


def _launch(kind, cfg, args, meta):
    from bench.cli import resolve_worlds, run_kind
    from bench.distributed.env import check_world, resolve_backend

    worlds = resolve_worlds(args.world, cfg.worlds())
    for w in worlds:
        if w not in cfg.worlds():
            raise BenchError(f"world size {w} does not fit this suite: it runs at world "
                             f"{', '.join(map(str, cfg.worlds()))}" + (" (stages x tp)" if kind == "pipeline" else ""))
    backend = resolve_backend(cfg.backend)
    for w in worlds:
        check_world(w, backend)
    return run_kind(kind, cfg, backend, worlds, meta)


def _default(path):
    return path if os.path.exists(path) else None


def cmd_pipeline(args) -> int:
    from bench.strategies.config import PipelineConfig, expand_pipeline
    from bench.suite import load_suite

    ov = {**_plain(args), **_ints(args, ("chunks", "stages", "micro_batch", "balance", "batch", "steps", "warmup",
                                         "check", "seed")),
          **_strs(args, ("schedules", "checkpoint"))}
    _scalar(ov, ("batch", "steps", "warmup", "check", "seed"))
    if args.model is not None:
        ov["model"] = args.model
    if args.efficiency is not None:
        ov["efficiency"] = args.efficiency
    if args.schedules is not None:
        ov["strict"] = True  # schedules asked for by name: 1f1b with chunks < stages is an error
    if args.world is not None:
        ov["world"] = _ints(args, ("world",))["world"]
    cfg = load_suite(args.suite or _default("suites/pipeline.toml"), PipelineConfig, "pipeline", ov)
    _, notes = expand_pipeline(cfg)
    return _launch("pipeline", cfg, args, {"notes": notes})


def cmd_strategies(args) -> int:
    from bench.strategies.config import StrategiesConfig
    from bench.suite import load_suite

    ov = {**_plain(args), **_ints(args, ("batch", "steps", "warmup", "check", "seed", "chunks")),
          **_strs(args, ("strategies", "models", "schedule"))}
    _scalar(ov, ("batch", "steps", "warmup", "check", "seed", "chunks", "schedule"))
    if args.bucket_cap_mb is not None:
        ov["bucket_cap_mb"] = args.bucket_cap_mb
    cfg = load_suite(args.suite or _default("suites/strategies.toml"), StrategiesConfig, "strategies", ov)
    if args.world is not None:
        import dataclasses

        cfg = dataclasses.replace(cfg, world=tuple(w for w in _ints(args, ("world",))["world"] if w != 1) or cfg.world)
    return _launch("strategies", cfg, args, {})
