"""The `strategies` kind: reference models trained under dp, ddp, layer, tp, pp and fsdp
(bench.strategies.REGISTRY), one unit per (model, strategy, world) case."""

import dataclasses
import sys

from bench.errors import BenchError
from bench.kind import KINDS, Kind, Reading, Report, drawn_by, later, memory_later
from bench.options import add_training_options, ints, overrides
from bench.training.columns import COLUMNS
from bench.training.reading import TRAIN_KEYS, TRAIN_METRICS, TRAIN_SETTINGS
from bench.training.summary import StrategiesLive, strategies_summary

CASES = "bench.strategies.cases"  # the launch side (units, memory, listing): torch, imported when needed


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


def at_world(cfg, world: int):
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


KIND = KINDS.register(Kind(
    module=__name__, name="strategies", help="train reference models under dp, ddp, layer, tp, pp, fsdp",
    config="bench.strategies.config:StrategiesConfig",
    columns=COLUMNS, tables=("results", "strategy_ranks", "strategy_steps", "strategy_spans", "telemetry"),
    add_options=add_options, options=options, units=later(CASES, "units"),
    measure=later("bench.training.measure", "measure"), worlds=lambda cfg: cfg.worlds(),
    at_world=at_world, memory=memory_later(CASES), listing=later(CASES, "listing"),
    read=Reading(keys=TRAIN_KEYS, metrics=TRAIN_METRICS, group="strategy", aliases=("strategy",), settings=TRAIN_SETTINGS),
    report=Report(title="Strategies",
                  section=drawn_by("bench.training.plots", "section", "strategies", pipeline=False),
                  summary=strategies_summary, live=StrategiesLive,
                  headline=drawn_by("bench.training.plots", "headline", "strategies", pipeline=False)),
))
