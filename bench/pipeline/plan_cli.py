"""`distbench plan`: calibrate the pipeline model on stored runs, predict every candidate
(stages, schedule, chunks, micro-batch), recommend under a memory limit, or validate the model
against measured runs it was not calibrated on. Model: bench.pipeline.plan (every figure it
prints is a prediction and says so)."""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.pipeline import plan as pl
from bench.regress.launch import interleaved, run_suite
from bench.results.fingerprint import of_run
from bench.results.metadata import new_run_id, utc_now
from bench.results.rundir import RunDir, read_meta, write_json
from bench.results.schema import SCHEMA_VERSION, conform
from bench.results.store import load_run, write_parquet
from bench.suite import resolve_suite, tomllib
from bench.training import schedules as scheds
from bench.training.pp import CHECKPOINTS
from bench.units import parse_size
from bench.workloads.models import get_spec

COLUMNS = {"stage_fwd_s": "F", "stage_bwd_s": "B", "stage_bwd_input_s": "I", "stage_bwd_weight_s": "W"}


def _ms_list(text) -> list[float]:
    if text is None or pd.isna(text) or not str(text).strip():  # None, NaN, pd.NA (string column)
        return []
    return [float(x) / 1e3 for x in str(text).split(",") if x.strip()]


def machine_of(meta: dict) -> str:
    """The machine a stored run measured, from its meta.json (bench.results.fingerprint): the device
    (the GPU model; on CPU the CPU model and its cores), the backend and the node count, and the
    interconnect where recorded. Two runs are of one machine when these agree (world, torch and
    NCCL versions may differ)."""
    if not (meta.get("launches") or {}):
        return "machine not recorded"
    fp = of_run(meta)
    device = fp.device if fp.device != "cpu" else " ".join(filter(None, ["cpu", fp.cpu_model])) + (
        f" ({fp.cores} cores)" if fp.cores else "")
    return ", ".join(filter(None, [device, fp.backend, f"{fp.nodes} node(s)", fp.interconnect]))


def _machine_of_dir(run_dir) -> str:
    return machine_of(read_meta(Path(run_dir), []))


def observations(run_dirs) -> list[pl.Observation]:
    """Every measured pipeline case (a results row with per-stage times) of the given runs."""
    out = []
    for d in run_dirs:
        run = load_run(d)
        res = run.tables.get("results")
        if res is None or "stage_fwd_s" not in res.columns:
            raise BenchError(f"run '{d}' has no pipeline cases (no per-stage times); pass runs of distbench pipeline")
        ranks = run.tables.get("strategy_ranks", pd.DataFrame())
        machine = machine_of(run.meta)
        for _, row in res.iterrows():
            stage_s = {}
            for col, kind in COLUMNS.items():
                for s, t in enumerate(_ms_list(row.get(col)) if col in res.columns else []):
                    stage_s[(s, kind)] = t
            if not stage_s or pd.isna(row.get("step_median_s")):
                continue
            degrees = {dim: int(row[f"{dim}_degree"]) if pd.notna(row.get(f"{dim}_degree"))
                       else (int(row["world"]) if dim == "pp" else 1) for dim in ("pp", "dp", "fsdp", "tp")}
            if any(degrees[dim] > 1 for dim in ("fsdp", "tp")):
                raise BenchError(f"case {row['case_id']} of run '{d}' is a composed layout ("
                                 + " x ".join(f"{k} {v}" for k, v in degrees.items())
                                 + "); the planner models pipeline layouts with data-parallel replicas (pp x dp; "
                                 "fsdp and tp 1) only")
            dp = degrees["dp"]
            mine = ranks[ranks["case_id"] == row["case_id"]] if len(ranks) else ranks
            peaks: dict = {}  # per pipeline rank (the mesh puts pp outermost): the most any replica held
            for _, r in mine.iterrows():
                peaks[int(r["rank"]) // dp] = max(peaks.get(int(r["rank"]) // dp, 0.0), float(r["peak_bytes"]))
            # one replica's micro-batch (runs before the results said so stored batch / chunks for dp > 1)
            mb = int(row["batch"]) // (dp * int(row["chunks"])) if dp > 1 else int(row["micro_batch"])
            out.append(pl.Observation(model=str(row["model"]), stages=degrees["pp"], schedule=str(row["schedule"]),
                                      chunks=int(row["chunks"]), micro_batch=mb, dp=dp,
                                      step_s=float(row["step_median_s"]), stage_s=stage_s, peak_bytes=peaks,
                                      case_id=str(row["case_id"]), run_id=str(row["run_id"]), run_dir=str(d),
                                      machine=machine,
                                      checkpoint=str(row["checkpoint"]) if "checkpoint" in res.columns
                                      and pd.notna(row["checkpoint"]) else "never",
                                      bubble=float(row["bubble_measured"]) if "bubble_measured" in res.columns
                                      and pd.notna(row["bubble_measured"]) else float("nan")))
    return out


def link(run_dir) -> pl.Link:
    """alpha-beta from the sendrecv cases of a collectives run (the median time per size)."""
    run = load_run(run_dir)
    res = run.tables.get("results")
    if res is None or "collective" not in res.columns or not (res["collective"] == "sendrecv").any():
        raise BenchError(f"run '{run_dir}' has no sendrecv cases; measure the link with "
                         "`distbench collectives --collectives sendrecv` between two ranks")
    g = res[res["collective"] == "sendrecv"].groupby("size_bytes")["time_median_s"].median()
    return pl.fit_link(g.index.tolist(), g.tolist(), source=str(run.meta.get("run_id") or run_dir))


def add_parser(sub):
    p = sub.add_parser("plan", help="pipeline planner: predict and rank layouts/schedules/chunks (model predictions)")
    p.add_argument("runs", nargs="*", metavar="RUN_DIR",
                   help="calibration runs (distbench pipeline), pooled; none with --calibrate")
    p.add_argument("--calibrate", action="store_true",
                   help="measure the calibration first (--calibrate-suite with --model, under --out), "
                        "then plan on it and the RUN_DIRs given")
    p.add_argument("--calibrate-suite", default="plan-calibrate",
                   help="the suite --calibrate runs (default: plan-calibrate)")
    p.add_argument("--model", default=None,
                   help="the model --calibrate measures (default: the suite's); --validate measures the calibrated one")
    p.add_argument("--stages", default=None, help="pipeline ranks to consider, comma list (default: calibrated ones)")
    p.add_argument("--dp", default=None,
                   help="data-parallel replicas of the pipeline to consider, comma list (world = stages x dp; "
                        "default: the calibrated ones; calibrate one with distbench pipeline --dp N)")
    p.add_argument("--world", default=None,
                   help="only candidates at these worlds (stages x dp), comma list: what a fixed number of "
                        "devices can run")
    p.add_argument("--schedules", default=None, help="schedules to consider (default: every one torch ships)")
    p.add_argument("--chunks", default="1,2,4,8,16", help="micro-batch counts, comma list")
    p.add_argument("--checkpoint", default=None,
                   help="activation checkpointing modes to consider, comma list of always, except_last, never "
                        "(default: the calibrated ones)")
    p.add_argument("--batch", type=int, default=None, help="mini-batch (default: the calibration runs')")
    p.add_argument("--memory-limit", default=None, help="per-rank memory limit, e.g. 2G: candidates above are dropped")
    p.add_argument("--top", type=int, default=5, help="how many recommendations to print")
    p.add_argument("--validate", nargs="*", default=None, metavar="RUN_DIR",
                   help="print predicted vs measured and the MAPE on runs not used for calibration; with no "
                        "RUN_DIR it measures them first (--validate-suite, same model, under --out)")
    p.add_argument("--validate-suite", default="plan-validate",
                   help="the suite --validate runs when given no runs (default: plan-validate)")
    p.add_argument("--launches", type=int, default=1,
                   help="how many launches --calibrate and --validate measure (default 1): calibration launches "
                        "are pooled; with several validation launches each configuration is also judged on "
                        "its median over them")
    p.add_argument("--out", default=None,
                   help="results root for the launches (default results/) and for --validate's predictions, "
                        "stored as a run of their own under OUT/plan/ (default: beside the validation runs)")
    p.add_argument("--p2p", default=None, metavar="RUN_DIR",
                   help="a sendrecv run (distbench collectives) between the calibration's ranks: p2p becomes an "
                        "alpha-beta term of its own instead of part of the per-action overhead")
    p.add_argument("--target-p2p", default=None, metavar="RUN_DIR",
                   help="predict with this sendrecv run's link (e.g. between nodes) instead of --p2p's, for its "
                        "machine (validation runs of that machine are then accepted)")
    p.add_argument("--target-machine", default=None, metavar="RUN_DIR",
                   help="predict for the machine of this run with the calibration's machine's times, as they are: "
                        "validation runs of that machine are then accepted (otherwise refused), every prediction "
                        "marked")
    p.add_argument("--format", default="table", help="table | json")
    p.set_defaults(func=cmd_plan)


def _ints(text, what) -> list[int]:
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"{what} '{text}' is not a comma list of integers, e.g. 1,2,4,8") from None
    if not out or min(out) < 1:
        raise BenchError(f"{what} '{text}' must list integers >= 1")
    return out


def candidates(cals: dict, stages, schedules, chunks, batch, checkpoints=None,
               dps=None) -> tuple[list[pl.Candidate], list[str]]:
    """Every (pipeline ranks, data-parallel replicas, schedule, chunks, checkpoint mode) that can run
    the mini-batch: each replica takes batch / dp samples in `chunks` micro-batches."""
    out, skipped = [], []
    for dp in dps or sorted(cals):
        modes = checkpoints or pl.layout_for(cals, dp).checkpoints
        for p in stages:
            where = pl.layout_label(p, dp)
            for name in schedules:
                sch = scheds.get(name)
                for m in chunks:
                    why = sch.rule(p, m) or (f"batch {batch} is not divisible by dp x chunks {dp * m}"
                                             if batch % (dp * m) else None)
                    if why:
                        skipped.append(f"{where} {sch.name} m={m}: {why}")
                        continue
                    try:
                        scheds.torch_class(sch.name)
                    except BenchError as e:
                        skipped.append(f"{sch.name}: {e}")
                        break
                    out += [pl.Candidate(stages=p, dp=dp, schedule=sch.name, chunks=m, micro_batch=batch // (dp * m),
                                         checkpoint=c) for c in modes]
    return out, skipped


def predict(cals: dict, cand: pl.Candidate, link: pl.Link | None = None, to: str = "", how: str = "") -> pl.Prediction:
    """A candidate predicted with its layout's calibration (else the nearest layout's, marked), for
    the machine `to` (default the calibration's; `how` the option that mapped it)."""
    return pl.predict(pl.layout_for(cals, cand.dp), cand, pl.torch_order, link=link, target=to, mapped_by=how)


def _p2p_machine(args, machine: str):
    """--p2p measures the calibration machine's link: a run of another machine is refused."""
    if args.p2p:
        theirs = _machine_of_dir(args.p2p)
        if theirs != machine:
            raise BenchError(f"--p2p run {Path(args.p2p).name} was measured on {theirs}, the calibration on {machine}; "
                             "--p2p is the calibration machine's link (another machine's: --target-p2p)")


def _target(args, machine: str) -> tuple[str, str]:
    """(the machine predicted for, the option that says so): --target-machine's run's, else
    --target-p2p's run's, else the calibration's own ("", "")."""
    for opt, d in (("--target-machine", args.target_machine), ("--target-p2p", args.target_p2p)):
        if d:
            load_run(d)  # a wrong path is one line
            theirs = _machine_of_dir(d)
            if theirs != machine:
                return theirs, opt
    return machine, ""


def _modes(text, cals: dict) -> list[str] | None:
    if not text:
        return None
    modes = [m.strip() for m in str(text).split(",") if m.strip()]
    for m in modes:
        if m not in CHECKPOINTS:
            raise BenchError(f"checkpoint mode '{m}' is not one of: {', '.join(CHECKPOINTS)}")
        for cal in cals.values():
            cal.check_mode(m)
    return modes


def _mib(b: float) -> str:
    return f"{b / 2**20:.0f} MiB"


def cmd_plan(args) -> int:
    if args.format not in ("table", "json"):
        raise BenchError(f"format '{args.format}' is not one of: table, json")
    if args.launches < 1:
        raise BenchError(f"--launches {args.launches} is not a launch count; give an integer >= 1")
    limit = parse_size(args.memory_limit) if args.memory_limit else None
    if not args.runs and not args.calibrate:
        raise BenchError("no calibration runs given; pass RUN_DIRs of distbench pipeline, or --calibrate to measure "
                         "them first")
    if args.model and not args.calibrate:
        raise BenchError(f"--model {args.model} is what --calibrate measures; without --calibrate the model is the "
                         "calibration runs'")
    if args.target_p2p and not args.p2p:
        raise BenchError("--target-p2p needs --p2p (the calibration machine's link): without it the calibrated "
                         "overhead holds that machine's transfers")
    given = observations(args.runs) if args.runs else []  # before any launch: a wrong path costs nothing
    wire = link(args.p2p) if args.p2p else None
    target = link(args.target_p2p) if args.target_p2p else None
    if given:  # the machine the given calibration runs agree on (several: refused)
        _p2p_machine(args, pl._one_machine(given))
    if args.calibrate:
        resolve_suite(args.calibrate_suite, "pipeline")
        if args.model:
            get_spec(args.model)
    if args.validate == []:
        resolve_suite(args.validate_suite, "pipeline")
    measured, held = _launches(args, given)
    obs = given + observations(measured)
    cals = pl.fit_layouts(obs, pl.torch_order, link=wire,
                          boundary_bytes=get_spec(obs[0].model).boundary_bytes_per_sample if wire and obs else 0.0)
    cal = next(iter(cals.values()))  # what every layout's calibration shares: the model, the link, the machine
    _p2p_machine(args, cal.machine)
    to, how = _target(args, cal.machine)
    if args.validate is not None:
        runs = args.validate or held or [_measure(args, args.validate_suite, cal.model) for _ in range(args.launches)]
        return _validate(cals, observations(runs), args.format, out=args.out, runs=runs, to=to, how=how, target=target)
    batch = args.batch or max(o.dp * o.chunks * o.micro_batch for o in obs)
    stages = _ints(args.stages, "stages") if args.stages else sorted({r for c in cals.values() for r in c.ranks})
    names = [scheds.canonical(s) for s in args.schedules.split(",")] if args.schedules else list(scheds.SCHEDULES)
    cands, skipped = candidates(cals, stages, names, _ints(args.chunks, "chunks"), batch, _modes(args.checkpoint, cals),
                                _ints(args.dp, "dp") if args.dp else None)
    if args.world:
        worlds = _ints(args.world, "world")
        cands = [c for c in cands if c.world in worlds]
        if not cands:
            raise BenchError(f"no candidate at world {args.world}: worlds are stages x dp (--stages "
                             f"{','.join(map(str, stages))}, --dp {args.dp or ','.join(map(str, sorted(cals)))})")
    preds = [predict(cals, c, link=target, to=to, how=how) for c in cands]
    best, over = pl.recommend(preds, limit)
    runs = _runs(cals)
    if args.format == "json":
        links = {k: {"alpha_s": w.alpha, "beta_bytes_per_s": w.beta, "source": w.source}
                 for k, w in (("p2p", cal.link), ("target_p2p", target)) if w is not None}
        print(json.dumps({"prediction": True, "calibration": {"runs": runs, "machine": cal.machine,
                                                               "cases": sum(c.cases for c in cals.values()),
                                                               "overhead_per_action_s": {
                                                                   f"{pl.layout_label(r, c.dp)} {n}": v for c in cals.values()
                                                                   for (r, n), v in c.overhead.items()},
                                                               "overhead_per_step_s": {
                                                                   pl.layout_label(r, c.dp): v for c in cals.values()
                                                                   for r, v in c.step_overhead.items()},
                                                               **links},
                          "recommended": [_as_dict(p) for p in best[:args.top]],
                          "over_memory_limit": [_as_dict(p) for p in over], "skipped": skipped}, indent=1))
        return 0
    print(f"PREDICTIONS of the pipeline model (bench.pipeline.plan), not measurements: calibrated on "
          f"{sum(c.cases for c in cals.values())} case(s) of {len(runs)} run(s) on {cal.machine}, model {cal.model}"
          + (f", predicted for {to} ({how})" if to != cal.machine else "") + "; overhead per action "
          + ", ".join(f"{pl.layout_label(r, c.dp)} {n} {v * 1e6:.0f} us" for c in cals.values() for (r, n), v in c.overhead.items())
          + "; per step " + _per_step(cals))
    if cal.link:
        print(f"p2p between pipeline ranks (alpha-beta, {cal.boundary_bytes:.0f} bytes per sample at a stage boundary): "
              f"calibrated {cal.link.label()}" + (f"; predicted with {target.label()}" if target else ""))
    print(f"{'#':>2}  {'candidate':<32} {'step ms':>9} {'samples/s':>10} {'bubble':>7} {'peak/rank':>10}  note")
    for i, p in enumerate(best[:args.top], 1):
        print(f"{i:>2}  {p.candidate.label:<32} {p.step_s * 1e3:>9.2f} {p.samples_per_s:>10.1f} {p.bubble:>7.1%} "
              f"{_mib(p.peak_bytes):>10}  {('extrapolated: ' + p.extrapolated) if p.extrapolated else ''}")
    if best:
        print(why(best[0], preds))
    for p in over:
        print(f"over --memory-limit {args.memory_limit}: {p.candidate.label} needs {_mib(p.peak_bytes)} per rank")
    for s in skipped:
        print(f"not a candidate: {s}")
    return 0


def _runs(cals: dict) -> list[str]:
    """The calibration runs of every layout."""
    return sorted({r for c in cals.values() for r in c.runs})


def _per_step(cals: dict) -> str:
    return ", ".join(f"{pl.layout_label(r, c.dp)} {v * 1e3:.2f} ms" for c in cals.values() for r, v in c.step_overhead.items())


def why(best: pl.Prediction, preds: list[pl.Prediction]) -> str:
    """The trade-off behind the pick: the best other micro-batch count of the same schedule, depth
    and checkpoint mode (bubble against per-micro-batch cost), the other checkpoint modes of the
    same configuration (throughput against memory), and the best other schedule."""
    c = best.candidate
    same = [p for p in preds if p is not best and (p.candidate.stages, p.candidate.dp, p.candidate.schedule,
                                                    p.candidate.checkpoint) == (c.stages, c.dp, c.schedule, c.checkpoint)]
    modes = [p for p in preds if p.candidate.checkpoint != c.checkpoint and (p.candidate.stages, p.candidate.dp,
                                                                             p.candidate.schedule, p.candidate.chunks)
             == (c.stages, c.dp, c.schedule, c.chunks)]
    other = [p for p in preds if p.candidate.schedule != c.schedule]
    out = [f"why {c.label}: predicted bubble {best.bubble:.0%}"]
    if same:
        s = max(same, key=lambda p: p.samples_per_s)
        trade = ("a smaller bubble does not pay for the smaller, more numerous micro-batches"
                 if s.candidate.chunks > c.chunks else "a larger bubble")
        out.append(f"m={s.candidate.chunks}: bubble {s.bubble:.0%}, {best.samples_per_s / s.samples_per_s:.2f}x slower "
                   f"({trade})")
    for p in modes:  # the memory / recompute trade-off of activation checkpointing
        out.append(f"checkpoint {p.candidate.checkpoint}: {p.samples_per_s / best.samples_per_s:.2f}x the throughput, "
                   f"peak {_mib(p.peak_bytes)} against {_mib(best.peak_bytes)}")
    if other:
        o = max(other, key=lambda p: p.samples_per_s)
        out.append(f"best other schedule {o.candidate.label}: {best.samples_per_s / o.samples_per_s:.2f}x slower")
    return "; ".join(out)


def _as_dict(p: pl.Prediction) -> dict:
    return {"stages": p.candidate.stages, "dp": p.candidate.dp, "schedule": p.candidate.schedule, "chunks": p.candidate.chunks,
            "micro_batch": p.candidate.micro_batch, "checkpoint": p.candidate.checkpoint, "predicted_step_s": p.step_s,
            "predicted_samples_per_s": p.samples_per_s, "predicted_bubble": p.bubble,
            "predicted_peak_bytes": p.peak_bytes, "extrapolated": p.extrapolated, "calibrated_on": p.calibrated_on,
            "predicted_for": p.predicted_for}


def _launches(args, given: list[pl.Observation]) -> tuple[list[Path], list[Path]]:
    """The launches --calibrate measures (calibration runs, validation runs). With --validate and
    no validation runs given, the two suites' launches interleave A B B A (C V V C, then again):
    a host that drifts linearly over the launches (docs/gate.md) moves both sides alike, so the
    calibration is not a launch older than what it is judged on. Every launch measures one model:
    --model, else the given runs', else the calibration suite's."""
    if not args.calibrate:
        return [], []
    both = args.validate == []
    model = args.model or (given[0].model if given else None)
    if both and model is None:
        model = tomllib.loads(resolve_suite(args.calibrate_suite, "pipeline").read_text()).get("model")
    order = interleaved(args.launches, "C", "V") if both else ["C"] * args.launches
    suites = {"C": args.calibrate_suite, "V": args.validate_suite}
    if both:
        print("plan: launch order (A B B A): " + ", ".join(
            Path(str(resolve_suite(suites[s], "pipeline"))).stem for s in order), flush=True)
    runs = [(s, _measure(args, suites[s], model)) for s in order]
    return [d for s, d in runs if s == "C"], [d for s, d in runs if s == "V"]


def _measure(args, suite_name: str, model: str | None) -> Path:
    """Run a planner suite (`distbench pipeline --suite S [--model M] --out OUT`, a launch of its
    own, its output shown as it runs); returns the run directory it wrote."""
    suite = resolve_suite(suite_name, "pipeline")
    name = tomllib.loads(suite.read_text()).get("name", suite.stem)
    print(f"plan: measuring {name}", flush=True)
    return run_suite("pipeline", suite, args.out or "results", ["--model", model] if model else [], timeout_s=None,
                     stream=True)


def _store(cals: dict, held: list[pl.Observation], rows: list[dict], out, runs, to: str, how: str,
           target: pl.Link | None = None) -> Path:
    """A run directory of its own, <root>/plan/<run_id>/ (root: --out, else the first validation
    run's results root), never the measured runs it read: per validated run its cases' predictions
    beside the measurements, and the ranked recommendation for its mini-batch, as table
    plan_predictions (the report draws them beside the runs: `distbench report RUN... PLAN_DIR`);
    meta.json says which runs and machines. Returns its path."""
    cal = next(iter(cals.values()))
    out_rows = []
    for d in sorted({o.run_dir for o in held}, key=str):
        mine = [o for o in held if o.run_dir == d]
        run_id, batch = mine[0].run_id, max(o.dp * o.chunks * o.micro_batch for o in mine)
        dps = sorted({o.dp for o in mine})
        modes = set.intersection(*(set(pl.layout_for(cals, dp).checkpoints) for dp in dps))
        cands, _ = candidates(cals, sorted({o.stages for o in mine}), list(scheds.SCHEDULES),
                              sorted({o.chunks for o in mine} | {1, 2, 4, 8, 16}), batch,
                              sorted({o.checkpoint for o in mine} & modes) or None, dps)
        there = mine[0].machine if mine[0].machine == to else ""
        wire = target if there and how == "--target-p2p" else None  # a run of the mapped machine: its link
        best, _ = pl.recommend([predict(cals, c, link=wire, to=there, how=how if there else "") for c in cands])
        ids = {o.case_id for o in mine}
        for r in rows:
            if r["run_id"] == run_id and r["case_id"] in ids:
                keep = {k: v for k, v in r.items()
                        if k not in ("step_error", "peak_error", "calibrated_on", "measured_on")}
                out_rows.append({**keep, "role": "validation", "rank": 0, "measured_machine": r["measured_on"]})
        for i, p in enumerate(best[:5], 1):
            out_rows.append({"run_id": run_id, "case_id": "", "role": "recommended", "rank": i,
                             **{k: v for k, v in _as_dict(p).items() if k != "calibrated_on"},
                             "candidate": p.candidate.label, "why": why(p, best) if i == 1 else ""})
    for r in out_rows:
        r["calibration_runs"] = ",".join(_runs(cals))
        r["calibration_machine"] = cal.machine
    root = Path(out) if out else RunDir.at(Path(runs[0]).resolve()).root
    rd = RunDir(root, "plan", new_run_id())
    rd.path.mkdir(parents=True, exist_ok=False)
    write_parquet(conform(pd.DataFrame(out_rows), "plan_predictions"), rd.path / "plan_predictions.parquet")
    write_json({"schema_version": SCHEMA_VERSION, "run_id": rd.run_id, "kind": "pipeline", "suite": "plan",
                "state": "complete", "started_utc": utc_now(), "command_line": " ".join(["distbench", *sys.argv[1:]]),
                "notes": ["predictions of distbench plan --validate (model output, not measurements)"],
                "plan": {"calibration_runs": _runs(cals), "calibration_machine": cal.machine,
                         "validation_runs": [str(r) for r in runs], "predicted_for": to}},
               rd.meta_path)
    return rd.path


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.1%}"


def _config(o) -> tuple:
    return (o.stages, o.schedule, o.chunks, o.micro_batch, o.checkpoint)


def _calibrated(cals: dict, o: pl.Observation) -> bool:
    """Was `o` (its run, or its configuration in its layout) used for calibration?"""
    return any(o.run_id in c.runs for c in cals.values()) or (o.dp in cals and _config(o) in cals[o.dp].configs)


def _validate(cals: dict, held: list[pl.Observation], fmt: str, out=None, runs=(), to: str = "", how: str = "",
              target: pl.Link | None = None) -> int:
    """Held-out cases only: a case of a calibration run, or a configuration (ranks, schedule,
    chunks, micro-batch) the calibration measured, is left out and counted. A run of another
    machine than the calibration's is refused unless the user mapped the calibration onto it
    (`to`: --target-machine, --target-p2p); its cases are then predicted for it (with the target
    link, where given). The predictions go into a run directory of their own (_store)."""
    machine = next(iter(cals.values())).machine
    to = to or machine
    for o in held:
        if o.machine not in (machine, to):
            raise BenchError(f"validation run {o.run_id} was measured on {o.machine}, the calibration on {machine}"
                             + (f", the target ({how}) is {to}" if to != machine else "")
                             + "; pass runs of the calibration's machine, or say which machine it predicts with "
                             "--target-machine RUN_DIR (or --target-p2p RUN_DIR: the other machine's link)")
    given = len(held)
    held = [o for o in held if not _calibrated(cals, o)]
    if not held:
        raise BenchError("--validate runs are all calibration runs or configurations; pass measured runs of "
                         "configurations the model was not fitted on")
    rows = []
    for o in held:
        moved = o.machine != machine
        p = predict(cals, pl.Candidate(stages=o.stages, dp=o.dp, schedule=o.schedule, chunks=o.chunks,
                                       micro_batch=o.micro_batch, checkpoint=o.checkpoint),
                    link=target if moved and how == "--target-p2p" else None, to=o.machine if moved else "",
                    how=how if moved else "")
        peak = max(o.peak_bytes.values()) if o.peak_bytes else float("nan")
        rows.append({"run_id": o.run_id, "case_id": o.case_id, "candidate": p.candidate.label, "stages": o.stages, "dp": o.dp,
                     "schedule": o.schedule, "chunks": o.chunks, "micro_batch": o.micro_batch,
                     "checkpoint": o.checkpoint, "predicted_step_s": p.step_s, "measured_step_s": o.step_s,
                     "step_error": p.step_s / o.step_s - 1, "predicted_bubble": p.bubble, "measured_bubble": o.bubble,
                     "predicted_peak_bytes": p.peak_bytes, "measured_peak_bytes": peak,
                     "peak_error": p.peak_bytes / peak - 1 if peak else float("nan"), "extrapolated": p.extrapolated,
                     "calibrated_on": p.calibrated_on, "predicted_for": p.predicted_for, "measured_on": o.machine})
    where = _store(cals, held, rows, out, runs, to, how, target)
    pooled = over_launches(rows)
    if fmt == "json":
        print(json.dumps({"prediction": True, "predictions_dir": str(where), "cases": rows, **_errors(rows),
                          "sweeps": sweeps(rows),
                          "per_launch": _per_launch(rows),
                          "over_launches": {"cases": pooled, **_errors(pooled), "sweeps": sweeps(pooled)}
                          if pooled else None}, indent=1))
        return 0
    print(f"validation: model predictions vs measured, {len(rows)} held-out case(s)"
          + (f" ({given - len(rows)} left out: calibration runs or configurations)" if given > len(rows) else ""))
    print(f"calibration: {sum(c.cases for c in cals.values())} case(s) of "
          f"{', '.join(_runs(cals))} on {machine}" + (f", predicted for {to} ({how})" if to != machine else "")
          + f"; per-step cost {_per_step(cals)}")
    print(f"predictions stored in {where} (a run of their own; the runs read are left as they are)")
    _table(rows)
    _print_errors(rows, sweeps(rows))
    for run, v in _per_launch(rows).items():
        print(f"launch {run}: step time MAPE {v['step_mape_pct']:.1f}%; launch factor (geometric mean of measured / "
              f"predicted) {v['launch_factor']:.3f}x, MAPE with it taken out {v['step_mape_factor_out_pct']:.1f}%")
    if pooled:
        print(f"\nover launches: each configuration measured in more than one validation launch, its median "
              f"over them ({len(pooled)} configuration(s))")
        _table(pooled)
        _print_errors(pooled, sweeps(pooled))
    return 0


def over_launches(rows: list[dict]) -> list[dict]:
    """Each configuration measured in more than one validation launch, once, with the median over
    its launches of the measured step, bubble and peak. On a shared host a launch is fast or slow
    as a whole (docs/gate.md), of the order of the model's error; a configuration's median over
    launches is its better measurement, while one launch's MAPE also carries that launch's factor."""
    if not rows:
        return []
    out = []
    for _, g in pd.DataFrame(rows).groupby(["stages", "dp", "schedule", "chunks", "micro_batch", "checkpoint"], sort=False):
        n = g["run_id"].nunique()
        if n < 2:
            continue
        r = g.iloc[0].to_dict()
        r.update(run_id=f"median of {n} launches", case_id=f"{r['case_id']} x{n}", launches=n,
                 measured_step_s=float(g["measured_step_s"].median()),
                 measured_bubble=float(g["measured_bubble"].median()),
                 measured_peak_bytes=float(g["measured_peak_bytes"].median()))
        r["step_error"] = r["predicted_step_s"] / r["measured_step_s"] - 1
        r["peak_error"] = r["predicted_peak_bytes"] / r["measured_peak_bytes"] - 1
        out.append(r)
    return out


def _per_launch(rows: list[dict]) -> dict:
    """Per validation launch: its step MAPE; its launch factor, the geometric mean of measured /
    predicted over its cases (a launch fast or slow as a whole, which no model of the workload
    predicts: host load, frequency, placement); and the MAPE with that factor taken out (predicted
    x factor against measured), which is what is left of the model's error within the launch.
    The factor is fitted on the launch it judges (one parameter over its cases): a diagnostic."""
    out = {}
    for run, g in (pd.DataFrame(rows).groupby("run_id", sort=True) if rows else ()):
        factor = float(np.exp(np.mean(np.log(g["measured_step_s"] / g["predicted_step_s"]))))
        out[run] = {"step_mape_pct": pl.mape(zip(g["predicted_step_s"], g["measured_step_s"])),
                    "launch_factor": factor,
                    "step_mape_factor_out_pct": pl.mape(zip(g["predicted_step_s"] * factor, g["measured_step_s"]))}
    return out


def _errors(rows: list[dict]) -> dict:
    gaps = [abs(r["predicted_bubble"] - r["measured_bubble"]) * 100 for r in rows
            if not math.isnan(r["predicted_bubble"]) and not math.isnan(r["measured_bubble"])]
    return {"step_mape_pct": pl.mape((r["predicted_step_s"], r["measured_step_s"]) for r in rows),
            "peak_mape_pct": pl.mape((r["predicted_peak_bytes"], r["measured_peak_bytes"]) for r in rows
                                     if not math.isnan(r["measured_peak_bytes"])),
            "bubble_mean_gap_pp": float(np.mean(gaps)) if gaps else None,
            "bubble_max_gap_pp": max(gaps) if gaps else None}


def _table(rows: list[dict]):
    print(f"{'configuration':<40} {'pred ms':>9} {'meas ms':>9} {'err':>7} {'pred bub':>8} {'meas bub':>8} "
          f"{'pred peak':>10} {'meas peak':>10}")
    for r in rows:
        label = r["candidate"] + (f" x{r['launches']}" if r.get("launches") else "")
        print(f"{label[:40]:<40} {r['predicted_step_s'] * 1e3:>9.2f} {r['measured_step_s'] * 1e3:>9.2f} "
              f"{r['step_error']:>+7.1%} {_pct(r['predicted_bubble']):>8} {_pct(r['measured_bubble']):>8} "
              f"{_mib(r['predicted_peak_bytes']):>10} {_mib(r['measured_peak_bytes']):>10}"
              f"{'  extrapolated: ' + r['extrapolated'] if r['extrapolated'] else ''}")


def _print_errors(rows: list[dict], picks: list[dict]):
    e = _errors(rows)
    bubble = (f"  bubble |predicted - measured| mean {e['bubble_mean_gap_pp']:.1f} pp, "
              f"max {e['bubble_max_gap_pp']:.1f} pp" if e["bubble_max_gap_pp"] is not None else "")
    print(f"step time MAPE {e['step_mape_pct']:.1f}%  peak memory MAPE {e['peak_mape_pct']:.1f}%" + bubble)
    for w in picks:
        print(f"sweep {w['run_id']} {w['layout']} ({w['cases']} cases): the model picks {w['picked']} "
              f"(measured {w['picked_samples_per_s']:.0f} samples/s), the measured best is {w['best']} "
              f"({w['best_samples_per_s']:.0f}): {w['shortfall']:.1%} short")


def sweeps(rows: list[dict]) -> list[dict]:
    """Per validation sweep (one run, one layout pp x dp): the configuration the model ranks first
    among those measured, against the measured best, and how far short of it the pick's measured
    throughput is (0 when the model picked the best). Throughput is batch / step for both. Where
    two or more layouts were measured at one world (pp4 and pp2 x dp2 on 4 devices), the world is
    a sweep of its own over every run given: the layout question itself."""
    if not rows:
        return []
    df = pd.DataFrame(rows)
    df = df.assign(dp=df["dp"] if "dp" in df else 1)  # rows without a layout are pipelines alone
    df = df.assign(world=df["stages"] * df["dp"], layout=[pl.layout_label(s, d) for s, d in zip(df["stages"], df["dp"])])
    groups = [((run, layout), g) for (run, layout), g in df.groupby(["run_id", "layout"], sort=True)]
    groups += [((f"world {w} (every run)", f"{g['layout'].nunique()} layouts"), g)
               for w, g in df.groupby("world", sort=True) if g["layout"].nunique() > 1]
    out = []
    for (run, layout), g in groups:
        batch = g["dp"] * g["chunks"] * g["micro_batch"]
        picked = g.loc[(batch / g["predicted_step_s"]).idxmax()]
        best = g.loc[(batch / g["measured_step_s"]).idxmax()]
        rate = lambda r: r["dp"] * r["chunks"] * r["micro_batch"] / r["measured_step_s"]  # noqa: E731
        out.append({"run_id": run, "layout": layout, "stages": int(picked["stages"]), "cases": len(g),
                    "picked": picked["candidate"], "picked_samples_per_s": rate(picked), "best": best["candidate"],
                    "best_samples_per_s": rate(best), "shortfall": 1 - rate(picked) / rate(best)})
    return out
