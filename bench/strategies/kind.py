"""The `strategies` kind: reference models trained under dp, ddp, layer, tp, pp and fsdp
(bench.strategies.REGISTRY), one unit per (model, strategy, world) case."""

import dataclasses
import sys

from bench.errors import BenchError
from bench.kind import KINDS, Kind, Reading, Report, drawn_by, first_doc_line
from bench.options import add_training_options, ints, overrides
from bench.strategies.config import StrategiesConfig, expand_strategies
from bench.training import REGISTRY
from bench.training.columns import COLUMNS
from bench.training.measure import measure
from bench.training.memory import memory_of
from bench.training.reading import TRAIN_KEYS, TRAIN_METRICS, TRAIN_SETTINGS
from bench.training.summary import StrategiesLive, strategies_summary


def add_options(p):
    add_training_options(p)
    p.add_argument("-s", "--strategy", "--strategies", dest="strategies", default=None, help="comma list")
    p.add_argument("--model", "--models", dest="models", default=None, help="model presets, comma list")
    p.add_argument("--chunks", default=None, help="pp micro-batches")
    p.add_argument("--schedule", default=None, help="pp schedule")
    p.add_argument("--profile", type=int, default=None, metavar="0|1",
                   help="1: 5 more steps per case under torch.profiler after the timed ones: "
                        "<run dir>/traces/<case>.rank<r>.json (Perfetto, HTA); timings unchanged")
    p.add_argument("--bucket-cap-mb", dest="bucket_cap_mb", type=float, default=None, help="ddp bucket size, MB")


def at_world(cfg: StrategiesConfig, world: int) -> StrategiesConfig:
    """The config at one world (--nproc N, or the launcher's world under torchrun/srun/mpirun). A
    strategy of the suite that cannot run there is left out with its reason on stderr, so the
    others still run; refused only when none can (e.g. `-s pp` alone at a world its chunks don't fit)."""
    try:
        return dataclasses.replace(cfg, world=(world,), layout_world=(world,))
    except BenchError:
        keep, why = [], []
        for s in cfg.strategies:
            try:
                dataclasses.replace(cfg, world=(world,), layout_world=(world,), strategies=(s,))
                keep.append(s)
            except BenchError as e:
                why.append(f"{s}: {e}")
        if not keep:
            raise
        for line in why:
            print(f"distbench: note: at world {world} left out {line}", file=sys.stderr)
        return dataclasses.replace(cfg, world=(world,), layout_world=(world,), strategies=tuple(keep))


def options(args) -> dict:
    one = ("batch", "steps", "warmup", "check", "seed", "chunks")
    ov = {**overrides(args, ("strategies", "models", "bucket_cap_mb")), **ints(args, one, one=one)}
    if args.schedule is not None:
        ov["schedule"] = args.schedule
    if args.profile is not None:
        ov["profile"] = args.profile
    return ov


def units(cfg: StrategiesConfig, world: int, meta: dict):
    cases, notes = expand_strategies(cfg)
    return [c for c in cases if c.world == world], notes


def listing() -> list[str]:
    return [f"strategy    {s.name:<24} {first_doc_line(s.doc)}" for s in REGISTRY]


KIND = KINDS.register(Kind(
    module=__name__, name="strategies", help="train reference models under dp, ddp, layer, tp, pp, fsdp", config=StrategiesConfig,
    columns=COLUMNS, tables=("results", "strategy_ranks", "strategy_steps", "strategy_spans", "telemetry"),
    add_options=add_options, options=options, units=units, measure=measure, worlds=lambda cfg: cfg.worlds(),
    at_world=at_world, memory=memory_of(expand_strategies), listing=listing,
    read=Reading(keys=TRAIN_KEYS, metrics=TRAIN_METRICS, group="strategy", aliases=("strategy",), settings=TRAIN_SETTINGS),
    report=Report(title="Strategies",
                  section=drawn_by("bench.training.plots", "section", "strategies", pipeline=False),
                  summary=strategies_summary, live=StrategiesLive,
                  headline=drawn_by("bench.training.plots", "headline", "strategies", pipeline=False)),
))
