"""The `pipeline` kind: torch.distributed.pipelining (every schedule it ships) swept over
micro-batch counts, with the bubble measured beside the GPipe and Megatron formulas and a
calibrated replay; one unit per case, then (once) the one-process micro-batch efficiency curve."""

import dataclasses

from bench.errors import BenchError
from bench.kind import KINDS, Kind, Reading, Report, drawn_by
from bench.options import add_training_options, ints, overrides
from bench.pipeline.columns import COLUMNS
from bench.pipeline.config import PipelineConfig, expand_pipeline
from bench.training.dims import arithmetic
from bench.training.measure import efficiency_curve, measure
from bench.training.memory import memory_of
from bench.training.reading import TRAIN_KEYS, TRAIN_METRICS, TRAIN_SETTINGS
from bench.training.schedules import SCHEDULES
from bench.training.summary import StrategiesLive, strategies_summary


def add_options(p):
    add_training_options(p)
    p.add_argument("--chunks", default=None, help="micro-batches per mini-batch, comma list, e.g. 1,4,8")
    p.add_argument("--schedule", "--schedules", dest="schedules", default=None,
                   help="comma list of " + ",".join(SCHEDULES) + " (torch's names too, e.g. ZBVZeroBubble)")
    p.add_argument("--stages", default=None, help="pipeline ranks, comma list")
    p.add_argument("--checkpoint", default=None, help="always,except_last,never")
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


def units(cfg: PipelineConfig, world: int, meta: dict):
    cases, notes = expand_pipeline(cfg)
    return [c for c in cases if c.world == world], notes


def efficiency(cfg: PipelineConfig, launch) -> dict | None:
    """Rank 0, once (at the smallest world): the micro-batch efficiency curve; others wait."""
    if not cfg.efficiency or launch.info.world != min(cfg.worlds()):
        return None
    rows = efficiency_curve(cfg, launch.info.device, launch.run_id, launch.info.world) if launch.info.rank == 0 else []
    launch.comm.barrier()
    return {"microbatch_efficiency": rows}


def at_world(cfg: PipelineConfig, world: int) -> PipelineConfig:
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
    from bench.pipeline import plan_plots  # lazy: matplotlib only when a report is drawn
    from bench.training import plots  # lazy: matplotlib only when a report is drawn

    return plan_plots.add(plots.section(entries, out, "pipeline", pipeline=True), entries, out)


KIND = KINDS.register(Kind(
    module=__name__, name="pipeline", help="pipeline parallelism (torch.distributed.pipelining): chunks sweep, bubble",
    config=PipelineConfig, columns=COLUMNS, tables=("results", "strategy_ranks", "strategy_steps", "strategy_spans",
                                   "microbatch_efficiency", "telemetry", "plan_predictions"),
    add_options=add_options, options=options, units=units, measure=measure, worlds=lambda cfg: cfg.worlds(),
    after_units=efficiency, at_world=at_world, memory=memory_of(expand_pipeline),
    # runs stored before meta.json named the kind: a suite named pipeline* was a pipeline sweep
    read=Reading(keys=TRAIN_KEYS, metrics=TRAIN_METRICS, group="schedule", settings=TRAIN_SETTINGS,
                 claims=lambda meta: not meta.get("kind") and str(meta.get("suite", "")).startswith("pipeline")),
    report=Report(title="Pipeline", section=_section, summary=strategies_summary, live=StrategiesLive,
                  headline=drawn_by("bench.training.plots", "headline", "pipeline", pipeline=True)),
))
