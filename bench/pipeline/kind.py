"""The `pipeline` kind: torch.distributed.pipelining (every schedule it ships) swept over
micro-batch counts, with the bubble measured beside the GPipe and Megatron formulas and a
calibrated replay; one unit per case, then (once) the one-process micro-batch efficiency curve."""

import dataclasses

from bench.errors import BenchError
from bench.kind import KINDS, Kind, Reading, Report, drawn_by, later, memory_later
from bench.options import add_training_options, ints, overrides
from bench.pipeline.columns import COLUMNS
from bench.training.dims import arithmetic
from bench.training.reading import TRAIN_KEYS, TRAIN_METRICS, TRAIN_SETTINGS
from bench.training.schedules import SCHEDULES
from bench.training.summary import StrategiesLive, strategies_summary

CASES = "bench.pipeline.cases"  # the launch side (units, memory, the efficiency curve): torch, imported when needed


def add_options(p):
    add_training_options(p)
    p.add_argument("--chunks", default=None, help="micro-batches per mini-batch, comma list, e.g. 1,4,8")
    p.add_argument("--schedule", "--schedules", dest="schedules", default=None,
                   help="schedules, comma list of " + ",".join(SCHEDULES) + " (torch's names too, e.g. ZBVZeroBubble)")
    p.add_argument("--stages", default=None, help="pipeline ranks, comma list")
    p.add_argument("--checkpoint", default=None, help="activation checkpointing: always,except_last,never")
    p.add_argument("--micro-batch", dest="micro_batch", default=None,
                   help="fixed micro-batch size(s): mini-batch = micro-batch x chunks")
    p.add_argument("--model", default=None, help="model preset, e.g. mlp-pipe, gpt-tiny")
    p.add_argument("--balance", default=None, help="blocks per stage, e.g. 3,5")
    p.add_argument("--tp", default=None, help="tensor-parallel degree inside every stage (world = stages x dp x fsdp x tp)")
    p.add_argument("--dp", default=None, help="DDP replicas of the whole pipeline")
    p.add_argument("--fsdp", default=None, help="FSDP2 shards of every stage")
    p.add_argument("--profile", type=int, default=None, metavar="0|1",
                   help="1: 5 more steps per case under torch.profiler after the timed ones: "
                        "<run dir>/traces/<case>.rank<r>.json (Perfetto, HTA); timings unchanged")
    p.add_argument("--no-efficiency", dest="efficiency", action="store_const", const=False, default=None,
                   help="skip the one-process micro-batch efficiency curve")


def options(args) -> dict:
    one = ("batch", "steps", "warmup", "check", "seed", "tp", "dp", "fsdp")
    ov = {**overrides(args, ("schedules", "checkpoint", "model", "efficiency")),
          **ints(args, ("chunks", "stages", "micro_batch", "balance", *one), one=one)}
    if args.schedules is not None:
        ov["strict"] = True  # schedules asked for by name: 1f1b with chunks < stages is an error
    if args.profile is not None:
        ov["profile"] = args.profile
    return ov


def at_world(cfg, world: int):
    """The stages that run at `world`; a world that is no stages x dp x fsdp x tp of the suite raises
    (showing the arithmetic)."""
    fits = tuple(s for s in cfg.stages if s * cfg.inner == world)
    if not fits:
        names, _ = cfg.inner_label()
        why = "; ".join(arithmetic(world, {"pp": s, "dp_replicate": cfg.dp, "dp_shard": cfg.fsdp, "tp": cfg.tp})
                        for s in cfg.stages)
        fix = (f"pass --stages {world // cfg.inner} to run a {world}-rank pipeline"
               if world % cfg.inner == 0 and world // cfg.inner >= 2
               else f"choose a world of stages x {cfg.inner} with stages >= 2, e.g. {2 * cfg.inner}")
        raise BenchError(f"world {world} is not stages x {names} of this suite: {why}; {fix}")
    return dataclasses.replace(cfg, stages=fits, world=(world,))


def _section(entries, out):
    """The strategies section of the pipeline runs, with the planner's predicted-vs-measured plot
    where a run has plan_predictions (plots imported here: matplotlib only when a report is drawn)."""
    from bench.plan import plots as plan_plots  # lazy: matplotlib only when a report is drawn
    from bench.training import plots  # lazy: matplotlib only when a report is drawn

    return plan_plots.add(plots.section(entries, out, "pipeline", pipeline=True), entries, out)


KIND = KINDS.register(Kind(
    module=__name__, name="pipeline", help="pipeline parallelism (torch.distributed.pipelining): chunks sweep, bubble",
    config="bench.pipeline.config:PipelineConfig", columns=COLUMNS,
    tables=("results", "strategy_ranks", "strategy_steps", "strategy_spans", "microbatch_efficiency", "telemetry",
            "plan_predictions"),
    add_options=add_options, options=options, units=later(CASES, "units"),
    measure=later("bench.training.measure", "measure"), worlds=lambda cfg: cfg.worlds(),
    after_units=later(CASES, "efficiency"), at_world=at_world, memory=memory_later(CASES),
    # runs stored before meta.json named the kind: a suite named pipeline* was a pipeline sweep
    read=Reading(keys=TRAIN_KEYS, metrics=TRAIN_METRICS, group="schedule", settings=TRAIN_SETTINGS,
                 claims=lambda meta: not meta.get("kind") and str(meta.get("suite", "")).startswith("pipeline")),
    report=Report(title="Pipeline", section=_section, summary=strategies_summary, live=StrategiesLive,
                  headline=drawn_by("bench.training.plots", "headline", "pipeline", pipeline=True)),
))
