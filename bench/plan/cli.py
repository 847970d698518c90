"""`distbench plan`: parse the command, and print. The planner reads top to bottom:

  plan_runs      read the runs: pipeline cases, the p2p link, each run's machine
  plan_fit       calibrate the model on them (plan: the model and its prediction)
  plan_launch    measure calibration / validation launches first (--calibrate, --validate alone)
  plan_search    every candidate layout predicted and ranked under a memory limit, and why
  plan_validate  the model against held-out measured runs: MAPE, launch factors, sweeps
  plan_store     the validation's predictions, as a run of their own

Every figure it prints is a prediction of the model and says so (docs/plan.md)."""

import json
import math
from dataclasses import replace
from pathlib import Path

from bench.errors import BenchError
from bench.plan import model as pl
from bench.plan import launch as plan_launch
from bench.plan.fit import Spread, fit_layouts, fit_measured, launch_spread, one_machine, one_model
from bench.plan import comm as plan_comm
from bench.plan.comm import comm_of
from bench.plan.compose import fit_host
from bench.plan.runs import check_p2p_machine, link, machine_of_dir, observations, target_machine
from bench.plan.search import Where, as_dict, calibration_runs, mib, search, why
from bench.plan.store import store
from bench.plan.validate import by_sharing, errors, per_launch, per_layout, sweeps, validate
from bench.suite import resolve_suite
from bench.training import schedules as scheds
from bench.training.schedules import CHECKPOINTS
from bench.units import parse_size
from bench.workloads.specs import get_spec


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
                   help="only candidates at these world sizes (ranks = stages x dp), comma list: what a fixed "
                        "number of devices can run")
    p.add_argument("--tp", default="1",
                   help="tensor-parallel degrees inside the stages to consider, comma list (default 1; predicted by "
                        "composition with --comm's collectives)")
    p.add_argument("--fsdp", default="1",
                   help="FSDP2 shards of every stage to consider, comma list (default 1; predicted by composition)")
    p.add_argument("--comm", default=None, metavar="RUN_DIR",
                   help="the target machine's collectives: a distbench collectives run (all_reduce, all_gather, "
                        "reduce_scatter at the group sizes; --group-size n --mode throughput prices a layout's groups "
                        "running at once), an imported nccl-tests log or a simcluster run; without, the tp / fsdp / "
                        "uncalibrated dp terms are 0 (marked)")
    p.add_argument("--ranks-per-node", type=int, default=0,
                   help="ranks per node of the machine predicted for (default: --comm's run's where it spanned "
                        "nodes, else one node); a group wider than a node uses --comm's inter-node figures")
    p.add_argument("--tp-across-nodes", action="store_true",
                   help="place tp groups across nodes (inter-node figures); by default tp is innermost, within a node")
    p.add_argument("--schedules", default=None, help="schedules to consider (default: every one torch ships)")
    p.add_argument("--chunks", default="1,2,4,8,16", help="micro-batch counts, comma list (default 1,2,4,8,16)")
    p.add_argument("--checkpoint", default=None,
                   help="activation checkpointing modes to consider, comma list of always, except_last, never "
                        "(default: the calibrated ones)")
    p.add_argument("--batch", type=int, default=None, help="mini-batch (default: the calibration runs')")
    p.add_argument("--memory-limit", default=None, help="per-rank memory limit, e.g. 2G: candidates above are dropped")
    p.add_argument("--top", type=int, default=5, help="how many recommendations to print (default 5)")
    p.add_argument("--validate", nargs="*", default=None, metavar="RUN_DIR",
                   help="print predicted vs measured and the MAPE on runs not used for calibration; with no "
                        "RUN_DIR it measures them first (--validate-suite, same model, under --out)")
    p.add_argument("--validate-suite", default="plan-validate",
                   help="the suite --validate runs when given no runs (default: plan-validate)")
    p.add_argument("--launches", type=int, default=1,
                   help="how many launches --calibrate and --validate measure (default 1): calibration launches "
                        "are pooled; with several validation launches each configuration is also judged on "
                        "its median over them")
    p.add_argument("--out", default=None, metavar="DIR",
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
    p.add_argument("--cluster-fingerprint", dest="fingerprint", default=None, metavar="RUN_DIR",
                   help="a cluster fingerprint of the target, a `distbench doctor --cluster-fingerprint` run: its collectives at their "
                        "placements are --comm, its inter-node pairs the target's p2p link (with --p2p), its machine "
                        "the one predicted for (each unless given)")
    p.add_argument("--format", default="table", choices=("table", "json"), help="output format: table | json")
    p.set_defaults(func=cmd_plan)


def _ints(text, what) -> list[int]:
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"{what} '{text}' is not a comma list of integers, e.g. 1,2,4,8") from None
    if not out or min(out) < 1:
        raise BenchError(f"{what} '{text}' must list integers >= 1")
    return out


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


def _checked(args) -> float | None:
    """Refuse a bad command before anything is read or launched; returns the memory limit in bytes."""
    if args.launches < 1:
        raise BenchError(f"--launches {args.launches} is not a launch count; give an integer >= 1")
    limit = parse_size(args.memory_limit) if args.memory_limit else None
    if not args.runs and not args.calibrate:
        raise BenchError("no calibration runs given; pass RUN_DIRs of distbench pipeline, or --calibrate to measure "
                         "them first")
    if args.model and not args.calibrate:
        raise BenchError(f"--model {args.model} is what --calibrate measures; without --calibrate the model is the "
                         "calibration runs'")
    if args.fingerprint:
        from bench.plan.runs import check_fingerprint  # lazy: reads the run only when one is given

        check_fingerprint(args.fingerprint)
        args.comm = args.comm or args.fingerprint
        args.target_machine = args.target_machine or args.fingerprint
        if args.p2p:
            args.target_p2p = args.target_p2p or args.fingerprint
    if args.target_p2p and not args.p2p:
        raise BenchError("--target-p2p needs --p2p (the calibration machine's link): without it the calibrated "
                         "overhead holds that machine's transfers")
    return limit


def cmd_plan(args) -> int:
    limit = _checked(args)
    given = observations(args.runs) if args.runs else []  # before any launch: a wrong path costs nothing
    wire = link(args.p2p) if args.p2p else None
    target = link(args.target_p2p) if args.target_p2p else None
    if given:  # the machine the given calibration runs agree on (several: refused)
        check_p2p_machine(args.p2p, one_machine(given))
    if args.calibrate:
        resolve_suite(args.calibrate_suite, "pipeline")
        if args.model:
            get_spec(args.model)
    if args.validate == []:
        resolve_suite(args.validate_suite, "pipeline")
    measured, held = _launches(args, given)
    obs = given + observations(measured)
    boundary = get_spec(obs[0].model).boundary_bytes_per_sample if wire and obs else 0.0
    pure = [o for o in obs if o.tp == o.fsdp == 1]  # pipelines and pp x dp; the composed ones as measured layouts
    cals = fit_layouts(pure or obs, pl.torch_order, link=wire, boundary_bytes=boundary)
    cal = next(iter(cals.values()))  # what every layout's calibration shares: the model, the link, the machine
    one_model(obs)
    one_machine(obs)
    check_p2p_machine(args.p2p, cal.machine)
    to, how = target_machine(cal.machine, args.target_machine, args.target_p2p)
    where = _where(args, cal.machine, fit_measured(obs, pl.torch_order, link=wire, boundary_bytes=boundary))
    if where.measured:  # what tp / fsdp cost beyond their share and collectives, for the depths not measured
        where = replace(where, host=fit_host(obs, cals, where.comm, get_spec(cal.model), pl.torch_order,
                                             ranks_per_node=where.ranks_per_node, tp_across=where.tp_across))
    if args.validate is not None:
        runs = args.validate or held or plan_launch.measure_all(
            [plan_launch.launch(plan_launch.VALIDATE, args.validate_suite)] * args.launches, cal.model, args.out)
        return _validate(cals, observations(runs), args, runs, to, how, target, where)
    return _plan(args, cals, obs, limit, target, to, how, where)


def _where(args, machine: str, measured: dict) -> Where:
    """The communication the composed layouts are predicted with (bench.plan.comm), and the
    composed layouts the calibration measured (predicted as measured)."""
    if args.ranks_per_node < 0:
        raise BenchError(f"--ranks-per-node {args.ranks_per_node} is not a rank count; give an integer >= 0")
    comm = comm_of(args.comm, machine_of_dir(args.comm)) if args.comm else plan_comm.none()
    return Where(comm=comm, ranks_per_node=args.ranks_per_node or comm.ranks_per_node, tp_across=args.tp_across_nodes,
                 measured=measured)


def _degrees(args, cals: dict, worlds, stages, measured: dict) -> tuple[list, list, list]:
    """(dps, tps, fsdps): as given (by default the calibrated ones, measured composed layouts
    included); with --world and none given, every split of each world over the stages (dp, fsdp or
    tp: one of them above 1 beside the pipeline)."""
    given = (_ints(args.dp, "dp") if args.dp else None,
             _ints(args.tp, "tp") if args.tp != "1" else sorted({1} | {k[2] for k in measured}),
             _ints(args.fsdp, "fsdp") if args.fsdp != "1" else sorted({1} | {k[1] for k in measured}))
    if not worlds or args.dp or args.tp != "1" or args.fsdp != "1":
        return given
    rest = {w // p for w in worlds for p in stages if w % p == 0}
    return sorted(rest | set(cals)), sorted(rest | set(given[1])), sorted(rest | set(given[2]))


def _launches(args, given: list[pl.Observation]) -> tuple[list[Path], list[Path]]:
    """The launches --calibrate measures (calibration runs, validation runs): with --validate and
    no validation runs given, interleaved A B B A (bench.plan.launch)."""
    if not args.calibrate:
        return [], []
    both = args.validate == []
    model = plan_launch.model_for(args.model, given[0].model if given else None, args.calibrate_suite, both)
    launches = plan_launch.planned(args.launches, args.calibrate_suite, args.validate_suite if both else None)
    if both:
        print("plan: launch order (A B B A): " + ", ".join(one.suite.stem for one in launches), flush=True)
    runs = list(zip([one.role for one in launches], plan_launch.measure_all(launches, model, args.out)))
    return ([d for role, d in runs if role == plan_launch.CALIBRATE],
            [d for role, d in runs if role == plan_launch.VALIDATE])


def _plan(args, cals: dict, obs: list[pl.Observation], limit: float | None, target: pl.Link | None, to: str,
          how: str, where: Where) -> int:
    """Rank every candidate for the mini-batch and print the predictions."""
    batch = args.batch or max(o.dp * o.chunks * o.micro_batch for o in obs)
    stages = _ints(args.stages, "stages") if args.stages else sorted({r for c in cals.values() for r in c.ranks})
    names = [scheds.canonical(s) for s in args.schedules.split(",")] if args.schedules else list(scheds.SCHEDULES)
    chunks, modes = _ints(args.chunks, "chunks"), _modes(args.checkpoint, cals)
    worlds = _ints(args.world, "world") if args.world else None
    dps, tps, fsdps = _degrees(args, cals, worlds, stages, where.measured)
    found = search(cals, stages=stages, schedules=names, chunks=chunks, batch=batch, checkpoints=modes, dps=dps,
                   tps=tps, fsdps=fsdps, worlds=worlds, link=target, to=to, how=how, memory_limit=limit, where=where)
    if worlds and not found.preds:
        raise BenchError(f"no candidate at world {args.world}: worlds are stages x dp x fsdp x tp (--stages "
                         f"{','.join(map(str, stages))}, --dp {args.dp or ','.join(map(str, sorted(cals)))}, "
                         f"--fsdp {args.fsdp}, --tp {args.tp})")
    crowded = sorted({pl.layout_label(o.stages, o.dp, o.tp, o.fsdp) for o in obs if o.oversubscribed})
    spread = launch_spread(obs)
    if args.format == "json":
        _print_plan_json(cals, found, target, args.top, where, crowded, spread)
    else:
        _print_plan(cals, found, target, to, how, args.top, args.memory_limit, where, crowded, spread)
    return 0


def _print_plan_json(cals: dict, found, target: pl.Link | None, top: int, where: Where, crowded=(),
                     spread: Spread | None = None):
    cal = next(iter(cals.values()))
    links = {k: {"alpha_s": w.alpha_s, "beta_bytes_per_s": w.bandwidth_bytes_per_s, "source": w.source}
             for k, w in (("p2p", cal.link), ("target_p2p", target)) if w is not None}
    calibration = {"runs": calibration_runs(cals, where), "machine": cal.machine,
                   "cases": sum(c.cases for c in cals.values()),
                   "measured_layouts": {pl.layout_label(c.ranks[0], c.dp, c.tp, c.fsdp): c.cases
                                        for c in where.measured.values()},
                   "host_cost": {h.name: {"compute": h.compute, "collectives": h.comm, "layouts": list(h.layouts),
                                          "runs": list(h.runs)} for h in where.host.values()},
                   "overhead_per_action_s": {f"{pl.layout_label(r, c.dp)} {n}": v for c in cals.values()
                                             for (r, n), v in c.overhead.items()},
                   "overhead_per_step_s": {pl.layout_label(r, c.dp): v for c in cals.values()
                                           for r, v in c.step_overhead.items()},
                   "comm_source": where.comm.source, "ranks_per_node": where.ranks_per_node,
                   "oversubscribed_layouts": list(crowded),
                   "launch_spread": {"difference": spread.difference, "configurations": spread.configs,
                                     "launches": spread.launches} if spread else None, **links}
    print(json.dumps({"prediction": True, "calibration": calibration,
                      "recommended": [as_dict(p) for p in found.best[:top]],
                      "over_memory_limit": [as_dict(p) for p in found.over], "skipped": found.skipped}, indent=1))


def _print_plan(cals: dict, found, target: pl.Link | None, to: str, how: str, top: int, memory_limit, where: Where,
                crowded=(), spread: Spread | None = None):
    cal = next(iter(cals.values()))
    print(f"PREDICTIONS of the pipeline model (bench.plan.model), not measurements: calibrated on "
          f"{sum(c.cases for c in cals.values())} case(s) of {len(calibration_runs(cals))} run(s) on {cal.machine}, "
          f"model {cal.model}" + (f", predicted for {to} ({how})" if to != cal.machine else "")
          + "; overhead per action " + ", ".join(f"{pl.layout_label(r, c.dp)} {n} {v * 1e6:.0f} us"
                                                 for c in cals.values() for (r, n), v in c.overhead.items())
          + "; per step " + _per_step(cals))
    if where.measured:
        print("measured composed layouts (predicted as measured at their pipeline depth): " + ", ".join(
            f"{pl.layout_label(c.ranks[0], c.dp, c.tp, c.fsdp)} ({c.cases} case(s))" for c in where.measured.values()))
    if where.host:
        print("host cost of the composed layouts at other depths (fitted): "
              + "; ".join(h.label() for h in where.host.values()))
    if any(p.comm_s for p in found.preds):
        print(f"communication of the composed layouts (tp, fsdp, uncalibrated dp): {where.comm.source}"
              + (f"; {where.ranks_per_node} rank(s) per node" if where.ranks_per_node else "; one node")
              + ("; tp across nodes" if where.tp_across else ""))
    if crowded:
        print(f"calibration runs that shared their cores (more ranks than cores): {', '.join(crowded)}; their "
              "predictions carry that time-sharing, and there the stage compute need not be linear in the "
              "micro-batch (docs/plan.md, 'World 4 on 2 cores')")
    print(_spread_line(spread))
    if cal.link:
        print(f"p2p between pipeline ranks (alpha-beta, {cal.boundary_bytes:.0f} bytes per sample at a stage boundary): "
              f"calibrated {cal.link.label()}" + (f"; predicted with {target.label()}" if target else ""))
    print(f"{'#':>2}  {'candidate':<32} {'step ms':>9} {'samples/s':>10} {'bubble':>7} {'peak/rank':>10}  note")
    for i, p in enumerate(found.best[:top], 1):
        print(f"{i:>2}  {p.candidate.label:<32} {p.step_s * 1e3:>9.2f} {p.samples_per_s:>10.1f} {p.bubble:>7.1%} "
              f"{mib(p.peak_bytes):>10}  " + "; ".join(filter(None, [
                  f"comm: {p.comm_source}" if p.comm_s else "",
                  f"extrapolated: {p.extrapolated}" if p.extrapolated else ""])))
    if found.best:
        print(why(found.best[0], found.preds, spread))
    for p in found.over:
        print(f"over --memory-limit {memory_limit}: {p.candidate.label} needs {mib(p.peak_bytes)} per rank")
    for s in found.skipped:
        print(f"not a candidate: {s}")


def _spread_line(spread: Spread | None) -> str:
    if spread is None:
        return ("calibration launches: every configuration was measured in one launch, so the launch-to-launch "
                "spread is not known; a near tie may be that launch's order (pool launches: --calibrate --launches N, "
                "or pass several runs)")
    return (f"calibration launch-to-launch spread: two launches of one configuration differ by a median "
            f"{spread.difference:.1%}, each launch's factor taken out ({spread.configs} configuration(s), measured in "
            f"up to {spread.launches} launches); a runner-up less than that behind the pick is marked 'within the "
            "calibration's launch-to-launch spread'")


def _per_step(cals: dict) -> str:
    return ", ".join(f"{pl.layout_label(r, c.dp)} {v * 1e3:.2f} ms" for c in cals.values() for r, v in c.step_overhead.items())


def _validate(cals: dict, given: list[pl.Observation], args, runs, to: str, how: str, target: pl.Link | None,
              where: Where) -> int:
    """Predicted against measured on the held-out cases (bench.plan.validate), stored as a
    run of their own (bench.plan.store), then printed."""
    v = validate(cals, given, to=to, how=how, target=target, where=where)
    stored_in = store(cals, v.held, v.rows, args.out, runs, to, how, target, where)
    rows, pooled, machine = v.rows, v.pooled, next(iter(cals.values())).machine
    if args.format == "json":
        print(json.dumps({"prediction": True, "predictions_dir": str(stored_in), "cases": rows, **errors(rows),
                          "per_layout": per_layout(rows), "by_sharing": by_sharing(rows),
                          "sweeps": sweeps(rows),
                          "per_launch": per_launch(rows),
                          "over_launches": {"cases": pooled, **errors(pooled), "sweeps": sweeps(pooled)}
                          if pooled else None}, indent=1))
        return 0
    print(f"validation: model predictions vs measured, {len(rows)} held-out case(s)"
          + (f" ({v.left_out} left out: calibration runs or configurations)" if v.left_out else ""))
    print(f"calibration: {sum(c.cases for c in cals.values())} case(s) of "
          f"{', '.join(calibration_runs(cals))} on {machine}" + (f", predicted for {to} ({how})" if to != machine else "")
          + f"; per-step cost {_per_step(cals)}")
    print(f"predictions stored in {stored_in} (a run of their own; the runs read are left as they are)")
    _table(rows)
    _print_errors(rows, sweeps(rows))
    for run, e in per_launch(rows).items():
        print(f"launch {run}: step time MAPE {e['step_mape_pct']:.1f}%; launch factor (geometric mean of measured / "
              f"predicted) {e['launch_factor']:.3f}x, MAPE with it taken out {e['step_mape_factor_out_pct']:.1f}%")
    if pooled:
        print(f"\nover launches: each configuration measured in more than one validation launch, its median "
              f"over them ({len(pooled)} configuration(s))")
        _table(pooled)
        _print_errors(pooled, sweeps(pooled))
    return 0


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.1%}"


def _table(rows: list[dict]):
    print(f"{'configuration':<40} {'pred ms':>9} {'meas ms':>9} {'err':>7} {'pred bub':>8} {'meas bub':>8} "
          f"{'pred peak':>10} {'meas peak':>10}")
    for r in rows:
        label = r["candidate"] + (f" x{r['launches']}" if r.get("launches") else "")
        print(f"{label[:40]:<40} {r['predicted_step_s'] * 1e3:>9.2f} {r['measured_step_s'] * 1e3:>9.2f} "
              f"{r['step_error']:>+7.1%} {_pct(r['predicted_bubble']):>8} {_pct(r['measured_bubble']):>8} "
              f"{mib(r['predicted_peak_bytes']):>10} {mib(r['measured_peak_bytes']):>10}"
              f"{'  extrapolated: ' + r['extrapolated'] if r['extrapolated'] else ''}")


def _print_errors(rows: list[dict], picks: list[dict]):
    e = errors(rows)
    bubble = (f"  bubble |predicted - measured| mean {e['bubble_mean_gap_pp']:.1f} pp, "
              f"max {e['bubble_max_gap_pp']:.1f} pp" if e["bubble_max_gap_pp"] is not None else "")
    print(f"step time MAPE {e['step_mape_pct']:.1f}%  peak memory MAPE {e['peak_mape_pct']:.1f}%" + bubble)
    sharing = by_sharing(rows)
    if len(sharing) > 1:
        print("apart: " + "; ".join(f"{k.replace('_', ' ')} (ranks > cores) step MAPE {v['step_mape_pct']:.1f}%, "
                                    f"peak {v['peak_mape_pct']:.1f}% ({v['cases']} cases)" for k, v in sharing.items()))
    layouts = per_layout(rows)
    if len(layouts) > 1 or any(not v["comm_source"].startswith("measured in") for v in layouts.values()):
        print("per layout: " + "; ".join(f"{k} step MAPE {v['step_mape_pct']:.1f}%, peak {v['peak_mape_pct']:.1f}% "
                                         f"({v['cases']} cases; comm from {v['comm_source']})"
                                         for k, v in layouts.items()))
    for w in picks:
        tau = "-" if math.isnan(w["kendall_tau"]) else f"{w['kendall_tau']:.2f}"
        print(f"sweep {w['run_id']} {w['layout']} ({w['cases']} cases): the model picks {w['picked']} "
              f"(measured {w['picked_samples_per_s']:.0f} samples/s), the measured best is {w['best']} "
              f"({w['best_samples_per_s']:.0f}): {w['shortfall']:.1%} short" + _launch_test(w) + f"; Kendall tau {tau}")


def _launch_test(w: dict) -> str:
    """The shortfall launch by launch (plan_validate.launch_test), where two or more launches measured both."""
    if w.get("resolved") is None:
        return ""
    lo, hi = w["shortfall_ci95"]
    med = w["launch_shortfall_median"]
    verdict = {"best": "resolved: the best is faster", "pick": "resolved the other way: the pick is faster",
               None: "not resolved, within the launch-to-launch spread"}[w["faster"]]
    return (f" (the best faster in {w['best_faster_in']} of {w['launches_paired']} launches that measured both; "
            f"per launch median {abs(med):.1%} {'short' if med >= 0 else 'ahead'}, 95% CI of the shortfall "
            f"{lo:.1%} to {hi:.1%}: {verdict})")
