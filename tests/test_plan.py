"""distbench plan: the calibrated pipeline model recovers known costs exactly, predicts what its
own replay says, ranks under a memory limit, and reads stored runs."""

from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.pipeline import plan as pl
from bench.training.replay import gpipe_order, one_f_one_b_order, replay

# Known costs: per stage and action a + c * b seconds; 50 us of schedule overhead per action;
# memory: 100 MiB base per rank + 4 KiB per in-flight sample.
TRUE = {(0, "F"): pl.Line(a=1e-3, c=2e-6), (0, "B"): pl.Line(a=2e-3, c=4e-6),
        (1, "F"): pl.Line(a=1.5e-3, c=3e-6), (1, "B"): pl.Line(a=2.5e-3, c=5e-6)}
OVERHEAD = 50e-6
BASE, PER_SAMPLE = {0: 100 * 2**20, 1: 120 * 2**20}, 4096


def order_of(schedule, p, m):
    return gpipe_order(p, m) if schedule == "gpipe" else one_f_one_b_order(p, m)


def observe(schedule, m, batch=1024):
    b = batch // m
    order = order_of(schedule, 2, m)
    dur = {k: ln.at(b) + OVERHEAD for k, ln in TRUE.items()}
    held = pl.inflight(order)
    return pl.Observation(model="mlp-pipe", stages=2, schedule=schedule, chunks=m, micro_batch=b,
                          step_s=replay(order, dur).step_s, stage_s={k: ln.at(b) for k, ln in TRUE.items()},
                          peak_bytes={r: BASE[r] + PER_SAMPLE * held[r] * b for r in held},
                          case_id=f"{schedule}.m{m}", run_id="cal")


CAL = [observe("gpipe", m) for m in (1, 2, 4, 8)] + [observe("1f1b", m) for m in (2, 8)]


def test_calibration_recovers_the_known_costs_overhead_and_memory():
    cal = pl.fit(CAL, order_of)
    for k, ln in TRUE.items():
        assert cal.costs[(2, "never")][k].a == pytest.approx(ln.a, rel=1e-9)
        assert cal.costs[(2, "never")][k].c == pytest.approx(ln.c, rel=1e-9)
    assert cal.overhead == {(2, "gpipe"): pytest.approx(OVERHEAD, rel=1e-6), (2, "1f1b"): pytest.approx(OVERHEAD, rel=1e-6)}
    assert cal.placement_overhead == {(2, 1, "loop"): pytest.approx(OVERHEAD, rel=1e-6)}
    assert cal.base_bytes[2] == pytest.approx(BASE, rel=1e-9)
    assert cal.bytes_per_inflight_sample == {"never": pytest.approx(PER_SAMPLE, rel=1e-9)}
    assert cal.micro_batches == (128, 1024) and cal.cases == 6


def test_a_held_out_case_is_predicted_exactly_when_the_model_holds():
    cal = pl.fit(CAL, order_of)
    held = observe("1f1b", 4)
    p = pl.predict(cal, pl.Candidate(stages=2, schedule="1f1b", chunks=4, micro_batch=256), order_of)
    assert p.step_s == pytest.approx(held.step_s, rel=1e-6)
    assert p.peak_bytes == pytest.approx(max(held.peak_bytes.values()), rel=1e-9)
    assert p.extrapolated == ""
    assert pl.mape([(p.step_s, held.step_s)]) == pytest.approx(0.0, abs=1e-4)


def test_overhead_is_per_schedule_and_an_uncalibrated_one_says_which_placement_it_used():
    """Measured on 2 CPU cores the per-action overhead differs by schedule and placement (about 1.3 ms
    with one stage per rank at 2 ranks, 0.5 ms with two, 2-4 ms at 4 ranks; 1F1B about 8% faster than
    GPipe with the same actions): one o per (ranks, schedule), and per placement (ranks, stages per
    rank, loop | v) for the schedules that were not calibrated."""
    import dataclasses

    cal = dataclasses.replace(pl.fit(CAL, order_of), overhead={(2, "gpipe"): 1.8e-3, (2, "1f1b"): 1.6e-3},
                              placement_overhead={(2, 1, "loop"): 1.7e-3, (2, 2, "v"): 0.5e-3,
                                                  (2, 2, "loop"): 0.9e-3, (4, 1, "loop"): 4e-3})
    assert pl.placement("zbv", 2) == (2, 2, "v") and pl.placement("interleaved", 4) == (4, 2, "loop")
    assert cal.overhead_for(2, "1f1b") == (1.6e-3, "")
    assert cal.overhead_for(2, "dualpipev") == (0.5e-3, "overhead of dualpipev at 2 rank(s) not calibrated "
                                                        "(used placement 2 rank(s) x 2 stage(s) v)")
    assert cal.overhead_for(4, "zbv")[0] == 0.5e-3 and cal.overhead_for(8, "gpipe")[0] == 4e-3
    p = pl.predict(cal, pl.Candidate(stages=2, schedule="gpipe", chunks=4, micro_batch=256), order_of)
    order = order_of("gpipe", 2, 4)
    assert p.step_s == pytest.approx(replay(order, {k: ln.at(256) + 1.8e-3 for k, ln in TRUE.items()}).step_s)


def test_a_per_step_cost_is_fitted_apart_from_the_per_action_overhead():
    """Measured on 2 CPU cores the overhead solved per case falls as micro-batches grow (pp4:
    about 2.8 ms per action at 4 micro-batches, 1.9 ms at 16): part of it is paid once per step
    (optimizer step, chunk split and merge, the runtime's setup), not per action. One per-step
    cost per pipeline depth, shared by its schedules, and one per-action overhead per schedule,
    fitted jointly: with 4 ms per step the fit recovers both, and a schedule calibrated at one
    micro-batch count only (1F1B at 8) is predicted exactly at another (4)."""
    step = 4e-3
    cal_obs = [pl.Observation(**{**o.__dict__, "step_s": o.step_s + step})
               for o in CAL if o.schedule == "gpipe" or o.chunks == 8]
    cal = pl.fit(cal_obs, order_of)
    assert cal.step_overhead == {2: pytest.approx(step, rel=1e-6)}
    assert cal.overhead == {(2, "gpipe"): pytest.approx(OVERHEAD, rel=1e-5), (2, "1f1b"): pytest.approx(OVERHEAD, rel=1e-5)}
    p = pl.predict(cal, pl.Candidate(stages=2, schedule="1f1b", chunks=4, micro_batch=256), order_of)
    assert p.step_s == pytest.approx(observe("1f1b", 4).step_s + step, rel=1e-6)


def test_one_micro_batch_count_leaves_the_per_step_cost_at_zero():
    """With a single micro-batch count per schedule the per-step cost and the per-action overhead
    cannot be told apart: the step cost stays 0 and the overhead takes it all (as before)."""
    cal = pl.fit([o for o in CAL if o.chunks == 8], order_of)
    assert cal.step_overhead == {2: 0.0}
    assert cal.overhead[(2, "gpipe")] == pytest.approx(OVERHEAD, rel=1e-6)


# Activation checkpointing (torchgpipe's modes): the backward re-runs the forward (recompute), and
# a rank holds only each in-flight micro-batch's stage input: 1 KiB per sample here, not 4 KiB.
CKPT_PER_SAMPLE = 1024


def observe_ckpt(schedule, m, batch=1024):
    b = batch // m
    order = order_of(schedule, 2, m)
    stage = {k: ln.at(b) for k, ln in TRUE.items()}
    stage.update({(s, "B"): stage[(s, "B")] + stage[(s, "F")] for s in (0, 1)})
    held = pl.inflight(order)
    return pl.Observation(model="mlp-pipe", stages=2, schedule=schedule, chunks=m, micro_batch=b, checkpoint="always",
                          step_s=replay(order, {k: t + OVERHEAD for k, t in stage.items()}).step_s, stage_s=stage,
                          peak_bytes={r: BASE[r] + CKPT_PER_SAMPLE * held[r] * b for r in held},
                          case_id=f"{schedule}.m{m}.always", run_id="cal")


CAL_CKPT = [observe_ckpt("gpipe", m) for m in (1, 2, 8)] + [observe_ckpt("1f1b", 8)]


def test_each_checkpoint_mode_is_calibrated_and_predicted_apart():
    cal = pl.fit(CAL + CAL_CKPT, order_of)
    assert cal.checkpoints == ("always", "never")
    assert cal.costs[(2, "always")][(0, "B")].a == pytest.approx(TRUE[(0, "B")].a + TRUE[(0, "F")].a, rel=1e-9)
    assert cal.costs[(2, "never")][(0, "B")].a == pytest.approx(TRUE[(0, "B")].a, rel=1e-9)
    assert cal.bytes_per_inflight_sample == {"always": pytest.approx(CKPT_PER_SAMPLE, rel=1e-6),
                                             "never": pytest.approx(PER_SAMPLE, rel=1e-6)}
    assert cal.base_bytes[2] == pytest.approx(BASE, rel=1e-9)
    held = observe_ckpt("1f1b", 4)
    p = pl.predict(cal, pl.Candidate(stages=2, schedule="1f1b", chunks=4, micro_batch=256, checkpoint="always"),
                   order_of)
    assert p.step_s == pytest.approx(held.step_s, rel=1e-6)
    assert p.peak_bytes == pytest.approx(max(held.peak_bytes.values()), rel=1e-6)
    assert p.candidate.label == "pp2 1f1b m=4 b=256 ckpt=always" and p.extrapolated == ""


def test_checkpointing_is_picked_when_only_it_fits_the_memory_limit():
    """The article's trade-off: recompute costs time, and saves the activations of every
    micro-batch in flight. GPipe m=8 holds 8 x 128 samples on each rank."""
    cal = pl.fit(CAL + CAL_CKPT, order_of)
    preds = [pl.predict(cal, pl.Candidate(stages=2, schedule="gpipe", chunks=8, micro_batch=128, checkpoint=c),
                        order_of) for c in ("never", "always")]
    assert preds[0].samples_per_s > preds[1].samples_per_s
    best, over = pl.recommend(preds, memory_limit=120 * 2**20 + 2048 * 1024)
    assert [p.candidate.label for p in best] == ["pp2 gpipe m=8 b=128 ckpt=always"]
    assert [p.candidate.label for p in over] == ["pp2 gpipe m=8 b=128"]


def test_an_uncalibrated_checkpoint_mode_is_refused():
    cal = pl.fit(CAL, order_of)
    with pytest.raises(BenchError, match=r"checkpoint mode always was not calibrated \(have never\)"):
        pl.predict(cal, pl.Candidate(stages=2, schedule="gpipe", chunks=4, micro_batch=256, checkpoint="always"),
                   order_of)


# p2p between pipeline ranks, alpha-beta: 30 us + bytes / 2 GB/s; mlp-pipe's stage boundary
# carries width 512 x float32 = 2 KiB per sample.
LINK = pl.Link(alpha=30e-6, beta=2e9, source="sendrecv-run", sizes=(1024, 2**26))
BOUNDARY = 512 * 4


def observe_linked(schedule, m, link=LINK, batch=1024):
    b = batch // m
    order = order_of(schedule, 2, m)
    wire = link.seconds(BOUNDARY * b)
    dur = {k: ln.at(b) + OVERHEAD + (wire if k == (0, "F") or k == (1, "B") else 0.0) for k, ln in TRUE.items()}
    return pl.Observation(**{**observe(schedule, m).__dict__, "step_s": replay(order, dur).step_s})


def test_transfers_are_the_actions_whose_peer_stage_is_on_another_rank():
    """A forward sends its output to the next stage, a backward (B or I) its input gradient to the
    previous one; the V placement keeps its turn (stages p-1 and p) on one rank."""
    link = pl.Link(alpha=1e-3, beta=1e9, source="x", sizes=(1, 2))
    assert pl.transfers("gpipe", 2, gpipe_order(2, 2), 1000, link, 1) == {(0, "F"): 1e-3 + 1e-6, (1, "B"): 1e-3 + 1e-6}
    zbv = pl.torch_order("zbv", 2, 4)
    got = pl.transfers("zbv", 2, zbv, 1000, link, 1)
    assert sorted(got) == [(0, "F"), (1, "I"), (2, "F"), (3, "I")]
    assert pl.transfers("gpipe", 2, gpipe_order(2, 2), 1000, None, 1) == {}


def test_a_calibration_with_a_link_keeps_the_transfers_out_of_the_overhead_and_predicts_another_link():
    cal = pl.fit([observe_linked(s, m) for s, m in (("gpipe", 1), ("gpipe", 2), ("gpipe", 4), ("gpipe", 8),
                                                   ("1f1b", 2), ("1f1b", 8))], order_of, link=LINK,
                 boundary_bytes=BOUNDARY)
    assert cal.overhead[(2, "gpipe")] == pytest.approx(OVERHEAD, rel=1e-6)
    held = observe_linked("1f1b", 4)
    cand = pl.Candidate(stages=2, schedule="1f1b", chunks=4, micro_batch=256)
    assert pl.predict(cal, cand, order_of).step_s == pytest.approx(held.step_s, rel=1e-6)
    slow = pl.Link(alpha=2e-3, beta=1e8, source="inter-node", sizes=(1024, 2**26))
    p = pl.predict(cal, cand, order_of, link=slow)
    assert p.step_s == pytest.approx(observe_linked("1f1b", 4, link=slow).step_s, rel=1e-6)
    assert "p2p from inter-node, not the calibration's link (sendrecv-run)" in p.extrapolated


def test_a_link_is_fitted_on_relative_error_over_a_sendrecv_run():
    sizes = [2**k for k in range(10, 27, 2)]
    link = pl.fit_link(sizes, [30e-6 + n / 2e9 for n in sizes], source="r")
    assert link.alpha == pytest.approx(30e-6, rel=1e-6) and link.beta == pytest.approx(2e9, rel=1e-6)
    assert link.sizes == (2**10, 2**26)


def test_a_weight_gradient_action_gets_no_overhead():
    """W receives and sends nothing: the per-action overhead goes to F, B and I only."""
    costs = {(0, k): pl.Line(a=1e-3, c=0.0) for k in "FIW"}
    order = {0: [(0, "F", 0), (0, "I", 0), (0, "W", 0)]}
    assert pl._durations(costs, order, 1, 5e-4) == {(0, "F"): 1.5e-3, (0, "I"): 1.5e-3, (0, "W"): 1e-3}


def test_inflight_counts_what_each_rank_holds_at_once():
    # GPipe holds every micro-batch; 1F1B at most p - r on rank r (Narayanan 2021, sec. 2.2)
    assert pl.inflight(gpipe_order(2, 8)) == {0: 8, 1: 8}
    assert pl.inflight(one_f_one_b_order(4, 8)) == {0: 4, 1: 3, 2: 2, 3: 1}
    assert pl.inflight({0: [(0, "F", 0), (0, "I", 0), (0, "W", 0)]}) == {0: 1}


def test_extrapolation_is_marked_with_the_reason():
    cal = pl.fit(CAL, order_of)
    p = pl.predict(cal, pl.Candidate(stages=4, schedule="1f1b", chunks=16, micro_batch=64), order_of)
    assert "4 model stages not calibrated (have 2)" in p.extrapolated
    assert "micro-batch 64 outside the calibrated 128..1024" in p.extrapolated


def test_recommend_ranks_by_throughput_and_drops_what_does_not_fit():
    cal = pl.fit(CAL, order_of)
    preds = [pl.predict(cal, pl.Candidate(stages=2, schedule=s, chunks=m, micro_batch=1024 // m), order_of)
             for s, m in (("gpipe", 1), ("gpipe", 8), ("1f1b", 8))]
    # GPipe holds the whole mini-batch (1 x 1024 or 8 x 128 samples); 1F1B at most 2 x 128 on rank 0
    best, over = pl.recommend(preds, memory_limit=120 * 2**20 + PER_SAMPLE * 512)
    assert [p.candidate.label for p in over] == ["pp2 gpipe m=1 b=1024", "pp2 gpipe m=8 b=128"]
    assert [p.candidate.label for p in best] == ["pp2 1f1b m=8 b=128"]
    assert [p.samples_per_s for p in best] == sorted((p.samples_per_s for p in best), reverse=True)


def test_mixed_models_and_no_cases_are_refused():
    with pytest.raises(BenchError, match="no pipeline cases"):
        pl.fit([], order_of)
    other = pl.Observation(**{**CAL[0].__dict__, "model": "gpt-tiny"})
    with pytest.raises(BenchError, match="mix models gpt-tiny, mlp-pipe"):
        pl.fit([CAL[0], other], order_of)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved", "looped_bfs", "interleaved_zb", "zbv",
                                      "dualpipev"])
def test_torch_order_is_built_without_a_process_group_for_every_schedule(schedule):
    """Each rank's order holds every (stage, micro-batch) of its stages once per action kind."""
    from bench.training import schedules as scheds

    p, m = 2, 4
    order = pl.torch_order(schedule, p, m)
    sch = scheds.get(schedule)
    assert sorted(order) == list(range(p))
    for r, acts in order.items():
        for s in sch.stage_ids(r, p):
            for kind in ("F",):
                assert sorted(i for st, k, i in acts if st == s and k == kind) == list(range(m))
            backs = sorted(i for st, k, i in acts if st == s and k in ("B", "W"))
            assert backs == list(range(m))  # every micro-batch's backward ends with B or W
    assert replay(order, {(s, k): 1.0 for s in range(p * sch.per_rank) for k in "FBIW"}).step_s > 0


def test_torch_order_refuses_what_the_schedule_cannot_run():
    with pytest.raises(BenchError, match="dualpipev needs chunks >= pipeline stages"):
        pl.torch_order("dualpipev", 2, 2)


# --- the command, on stored runs ---------------------------------------------------------------

import json  # noqa: E402

import pandas as pd  # noqa: E402

from bench.cli import main  # noqa: E402
from bench.pipeline.plan_cli import sweeps  # noqa: E402


def machine_meta(device: str = "cpu", nodes: int = 1, world: int = 2) -> dict:
    """meta.json `launches` of a run on `device` ("cpu": 2 cores of an AMD EPYC 7B13, gloo; else
    that GPU model with nccl, one per rank) over `nodes` nodes."""
    cpu = device == "cpu"
    ranks = [{"rank": r, "host": f"n{r * nodes // world}", "device": "cpu" if cpu else f"cuda:{r}", "cores": 2,
              "cpu_model": "AMD EPYC 7B13", "gpus": [] if cpu else [{"index": r, "name": device, "uuid": f"GPU-{r}"}]}
             for r in range(world)]
    return {"launches": {str(world): {"world": world, "backend": "gloo" if cpu else "nccl", "nodes": nodes,
                                      "ranks": ranks}}}


CPU_BOX = "cpu AMD EPYC 7B13 (2 cores), gloo, 1 node(s)"


def stored(tmp_path, name, observations, machine: dict | None = None):
    """A run directory as distbench pipeline writes it (the columns the planner reads); meta.json
    records the machine (machine_meta(), 2 CPU cores by default)."""
    d = tmp_path / name
    d.mkdir()
    rows, ranks = [], []
    for o in observations:
        n = 1 + max(s for s, _ in o.stage_s)
        ms = {k: ",".join(f"{o.stage_s[(s, k)] * 1e3:.9f}" for s in range(n)) for k in ("F", "B")}
        rows.append({"run_id": name, "case_id": o.case_id, "model": o.model, "world": o.stages * o.dp,
                     "schedule": o.schedule, "chunks": o.chunks, "micro_batch": o.micro_batch,
                     "batch": o.dp * o.chunks * o.micro_batch,
                     "step_median_s": o.step_s, "stage_fwd_s": ms["F"], "stage_bwd_s": ms["B"]}
                    | ({"pp_degree": o.stages, "dp_degree": o.dp} if o.dp > 1 else {}))
        # the mesh puts pp outermost: global rank r * dp + k is pipeline rank r of replica k
        ranks += [{"run_id": name, "case_id": o.case_id, "rank": r * o.dp + k, "peak_bytes": b}
                  for r, b in o.peak_bytes.items() for k in range(o.dp)]
    pd.DataFrame(rows).to_parquet(d / "results.parquet")
    pd.DataFrame(ranks).to_parquet(d / "strategy_ranks.parquet")
    (d / "meta.json").write_text(json.dumps({"run_id": name, "kind": "pipeline", "suite": "pipeline",
                                             **(machine if machine is not None else machine_meta())}))
    return d


def test_plan_recommends_from_stored_runs_and_says_they_are_predictions(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "1,2,4,8", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PREDICTIONS of the pipeline model")
    assert (f"calibrated on 6 case(s) of 1 run(s) on {CPU_BOX}, model mlp-pipe; overhead per action pp2 1f1b 50 us, "
            "pp2 gpipe 50 us") in out
    assert len([ln for ln in out.splitlines() if ln[:2].strip().isdigit()]) == 3
    assert "not a candidate: pp2 1f1b m=1: needs chunks >= stages" in out


def test_a_schedule_without_split_backward_has_missing_stage_times_not_an_error(tmp_path, capsys):
    """distbench pipeline stores I / W per stage as a string column, missing (<NA>) for schedules that
    do not split the backward (gpipe, 1f1b): the planner reads them as absent."""
    cal = stored(tmp_path, "cal", CAL)
    res = pd.read_parquet(cal / "results.parquet")
    for col in ("stage_bwd_input_s", "stage_bwd_weight_s"):
        res[col] = pd.array([None] * len(res), dtype="string")
    res.to_parquet(cal / "results.parquet")
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "1,2,4,8", "--top", "3"]) == 0
    assert capsys.readouterr().out.startswith("PREDICTIONS of the pipeline model")


def test_validate_prints_predicted_vs_measured_and_the_mape(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    held = stored(tmp_path, "held", [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})])
    assert main(["plan", str(cal), "--validate", str(held), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["prediction"] is True and len(got["cases"]) == 1
    assert got["step_mape_pct"] == pytest.approx(0.0, abs=1e-3)
    assert got["peak_mape_pct"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("argv, message", [
    (["plan", "{missing}"], "run directory '{missing}' does not exist"),
    (["plan", "{cal}", "--chunks", "4,x"], "chunks '4,x' is not a comma list of integers"),
    (["plan", "{cal}", "--schedules", "gpipe,zb"], "unknown schedule 'zb'"),
    (["plan", "{cal}", "--validate", "{cal}"], "--validate runs are all calibration runs or configurations"),
    (["plan", "{cal}", "--format", "csv"], "format 'csv' is not one of: table, json"),
    (["plan", "{empty}"], "has no pipeline cases"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    paths = {"missing": tmp_path / "nope", "cal": stored(tmp_path, "cal", CAL), "empty": tmp_path / "empty"}
    (tmp_path / "empty").mkdir()
    pd.DataFrame([{"run_id": "e", "case_id": "c", "time_median_s": 1.0}]).to_parquet(tmp_path / "empty" / "results.parquet")
    argv = [a.format(**paths) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message.format(**paths) in err


def test_validate_without_runs_measures_the_held_out_suite_first(tmp_path, capsys, monkeypatch):
    """--validate alone launches `distbench pipeline --suite plan-validate --model <calibrated>`
    and validates on the run it wrote (the launch is faked: it writes a held-out run)."""
    from bench.regress import launch as launch_mod

    cal = stored(tmp_path, "cal", CAL)
    calls = []

    def launch(cmd, **kw):  # bench.regress.launch._run: (exit code, stdout)
        calls.append(cmd)
        out = tmp_path / "out" / "plan-validate"
        out.mkdir(parents=True)
        d = stored(out, "20261204T000000Z-held", [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})])
        return 0, f"# results: {d}\n"

    monkeypatch.setattr(launch_mod, "_run", launch)
    assert main(["plan", str(cal), "--validate", "--out", str(tmp_path / "out")]) == 0
    assert calls[0][2:5] == ["bench", "pipeline", "--suite"] and calls[0][-4:] == ["--model", "mlp-pipe", "--out",
                                                                                 str(tmp_path / "out")]
    out = capsys.readouterr().out
    assert "validation: model predictions vs measured, 1 held-out case(s)" in out
    assert "step time MAPE 0.0%" in out


def test_validation_is_stored_in_a_run_of_its_own_and_drawn_beside_the_run(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    (tmp_path / "results" / "pipeline").mkdir(parents=True)
    held = stored(tmp_path / "results" / "pipeline", "held",
                  [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})])
    assert main(["plan", str(cal), "--validate", str(held)]) == 0
    (mine,) = (tmp_path / "results" / "plan").iterdir()  # no --out: beside the validation run, results/plan/
    assert f"predictions stored in {mine} (a run of their own" in capsys.readouterr().out
    assert not (held / "plan_predictions.parquet").exists()
    got = pd.read_parquet(mine / "plan_predictions.parquet")
    assert got["role"].tolist()[0] == "validation" and got["case_id"].tolist()[0] == "1f1b.m4"
    rec = got[got["role"] == "recommended"]
    assert rec["rank"].tolist() == list(range(1, len(rec) + 1)) and rec["why"].iloc[0].startswith("why pp2")
    assert set(got["calibration_runs"]) == {"cal"}
    assert main(["report", str(held), str(mine), "-o", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "pipeline_plan_predicted_vs_measured.png").exists()
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "planner recommendation (model predictions, best first)" in html


def test_each_validation_sweep_says_how_far_the_models_pick_is_from_the_measured_best():
    """Issue 22: the recommended configuration must be the measured best or within 5% of its
    throughput, per sweep (one run, one depth): the model's pick among the measured configurations,
    its measured throughput against the best measured one."""
    from bench.pipeline.plan_cli import sweeps

    def row(stages, label, pred, meas):
        return {"run_id": "v", "stages": stages, "candidate": label, "chunks": 8, "micro_batch": 128,
                "predicted_step_s": pred, "measured_step_s": meas}

    got = sweeps([row(2, "a", 0.10, 0.125), row(2, "b", 0.11, 0.100), row(4, "c", 0.2, 0.2)])
    assert [(w["stages"], w["picked"], w["best"]) for w in got] == [(2, "a", "b"), (4, "c", "c")]
    assert got[0]["shortfall"] == pytest.approx(0.2) and got[1]["shortfall"] == 0.0
    assert got[0]["best_samples_per_s"] == pytest.approx(1024 / 0.1)


def held_run(tmp_path, name, factor):
    """A held-out launch of two configurations whose every step took `factor` x the model's value
    (a launch that is fast or slow as a whole)."""
    obs = [pl.Observation(**{**observe(s, 4).__dict__, "run_id": name, "step_s": observe(s, 4).step_s * factor})
           for s in ("gpipe", "1f1b")]
    return stored(tmp_path, name, obs)


def test_several_validation_launches_are_also_judged_on_each_configurations_median(tmp_path, capsys):
    """A launch is fast or slow as a whole: one launch's MAPE carries its factor; the median over
    launches per configuration is the better measurement. Launches 0.9x, 1.0x and 1.2x the model:
    per launch 11.1%, 0.0%, 16.7%; the medians equal the model (0.0%)."""
    cal = stored(tmp_path, "cal4", [o for o in CAL if o.chunks != 4])
    runs = [held_run(tmp_path, f"v{i}", f) for i, f in enumerate((0.9, 1.0, 1.2))]
    assert main(["plan", str(cal), "--validate", *map(str, runs), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert len(got["cases"]) == 6
    launches = got["per_launch"]
    assert {k: v["step_mape_pct"] for k, v in launches.items()} == {
        "v0": pytest.approx(100 / 9), "v1": pytest.approx(0.0, abs=1e-6), "v2": pytest.approx(100 / 6)}
    assert {k: v["launch_factor"] for k, v in launches.items()} == {
        "v0": pytest.approx(0.9), "v1": pytest.approx(1.0), "v2": pytest.approx(1.2)}
    assert all(v["step_mape_factor_out_pct"] == pytest.approx(0.0, abs=1e-6) for v in launches.values())
    pooled = got["over_launches"]
    assert [(c["schedule"], c["launches"]) for c in pooled["cases"]] == [("gpipe", 3), ("1f1b", 3)]
    assert pooled["step_mape_pct"] == pytest.approx(0.0, abs=1e-6)
    assert [w["run_id"] for w in pooled["sweeps"]] == ["median of 3 launches"]
    assert main(["plan", str(cal), "--validate", *map(str, runs)]) == 0
    out = capsys.readouterr().out
    assert "launch v2: step time MAPE 16.7%; launch factor (geometric mean of measured / predicted) 1.200x, " \
           "MAPE with it taken out 0.0%" in out
    assert "over launches: each configuration measured in more than one validation launch, its median over them " \
           "(2 configuration(s))" in out


def test_one_validation_launch_has_no_over_launches_view(tmp_path, capsys):
    cal = stored(tmp_path, "cal4", [o for o in CAL if o.chunks != 4])
    assert main(["plan", str(cal), "--validate", str(held_run(tmp_path, "v0", 1.0)), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["over_launches"] is None


def test_launches_measures_that_many_validation_launches(tmp_path, capsys, monkeypatch):
    from bench.regress import launch as launch_mod

    cal = stored(tmp_path, "cal4", [o for o in CAL if o.chunks != 4])
    calls = []

    def launch(cmd, **kw):  # bench.regress.launch._run: (exit code, stdout)
        calls.append(cmd)
        out = tmp_path / "out" / "plan-validate"
        out.mkdir(parents=True, exist_ok=True)
        d = held_run(out, f"20261204T00000{len(calls)}Z-held", 1.0)
        return 0, f"# results: {d}\n"

    monkeypatch.setattr(launch_mod, "_run", launch)
    assert main(["plan", str(cal), "--validate", "--launches", "2", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert len(calls) == 2 and "(2 configuration(s))" in out


def test_launches_below_one_is_refused_before_anything_runs(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    assert main(["plan", str(cal), "--validate", "--launches", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--launches 0 is not a launch count; give an integer >= 1") and len(err.splitlines()) == 1


def test_calibrate_measures_the_calibration_first_and_pools_its_launches(tmp_path, capsys, monkeypatch):
    """--calibrate launches `distbench pipeline --suite plan-calibrate --model M` (--launches times,
    pooled) before planning; the launches are faked: each writes a calibration run."""
    from bench.regress import launch as launch_mod

    calls = []

    def launch(cmd, **kw):  # bench.regress.launch._run: (exit code, stdout)
        calls.append(cmd)
        out = tmp_path / "out" / "plan-calibrate"
        out.mkdir(parents=True, exist_ok=True)
        name = f"20261204T00000{len(calls)}Z-cal"
        d = stored(out, name, [pl.Observation(**{**o.__dict__, "run_id": name}) for o in CAL])
        return 0, f"# results: {d}\n"

    monkeypatch.setattr(launch_mod, "_run", launch)
    assert main(["plan", "--calibrate", "--model", "mlp-pipe", "--launches", "2", "--out", str(tmp_path / "out"),
                 "--schedules", "gpipe,1f1b", "--chunks", "2,4,8"]) == 0
    assert len(calls) == 2 and calls[0][2:5] == ["bench", "pipeline", "--suite"]
    assert calls[0][5].endswith("plan-calibrate.toml") and calls[0][-4:-2] == ["--model", "mlp-pipe"]
    assert f"calibrated on 12 case(s) of 2 run(s) on {CPU_BOX}, model mlp-pipe" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["plan"], "no calibration runs given; pass RUN_DIRs of distbench pipeline, or --calibrate"),
    (["plan", "{cal}", "--model", "mlp-pipe"], "--model mlp-pipe is what --calibrate measures"),
    (["plan", "--calibrate", "--model", "mlp-huge"], "unknown model preset 'mlp-huge'"),
    (["plan", "--calibrate", "--calibrate-suite", "nope"], "nope"),
    (["plan", "{cal}", "--validate", "--validate-suite", "nope"], "nope"),
])
def test_calibrate_refusals_come_before_any_launch(tmp_path, capsys, monkeypatch, argv, message):
    from bench.regress import launch as launch_mod

    monkeypatch.setattr(launch_mod, "_run", lambda cmd, **kw: pytest.fail(f"launched {cmd}"))
    cal = stored(tmp_path, "cal", CAL)
    argv = [a.format(cal=cal) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def stored_ckpt(tmp_path, name, observations):
    d = stored(tmp_path, name, observations)
    res = pd.read_parquet(d / "results.parquet")
    res["checkpoint"] = [o.checkpoint for o in observations]
    res.to_parquet(d / "results.parquet")
    return d


def test_plan_ranks_checkpoint_modes_under_a_memory_limit(tmp_path, capsys):
    cal = stored_ckpt(tmp_path, "cal", CAL + CAL_CKPT)
    limit = 120 * 2**20 + 2048 * 1024
    assert main(["plan", str(cal), "--schedules", "gpipe", "--chunks", "8", "--memory-limit", str(limit),
                 "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(p["schedule"], p["checkpoint"]) for p in got["recommended"]] == [("gpipe", "always")]
    assert [(p["schedule"], p["checkpoint"]) for p in got["over_memory_limit"]] == [("gpipe", "never")]
    assert main(["plan", str(cal), "--schedules", "gpipe", "--chunks", "8", "--checkpoint", "never"]) == 0
    out = capsys.readouterr().out
    assert "pp2 gpipe m=8 b=128" in out and "ckpt=always" not in out


def test_a_checkpoint_mode_is_validated_against_its_own_runs(tmp_path, capsys):
    cal = stored_ckpt(tmp_path, "cal", CAL + CAL_CKPT)
    held = stored_ckpt(tmp_path, "held", [pl.Observation(**{**observe_ckpt("1f1b", 4).__dict__, "run_id": "held"})])
    assert main(["plan", str(cal), "--validate", str(held), "--format", "json", "--out", str(tmp_path / "out")]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [c["checkpoint"] for c in got["cases"]] == ["always"]
    assert got["step_mape_pct"] == pytest.approx(0.0, abs=1e-3) and got["peak_mape_pct"] == pytest.approx(0.0, abs=1e-3)
    stored_rows = pd.read_parquet(Path(got["predictions_dir"]) / "plan_predictions.parquet")
    assert set(stored_rows["checkpoint"].dropna()) == {"always"}


@pytest.mark.parametrize("mode, message", [
    ("sometimes", "checkpoint mode 'sometimes' is not one of: always, except_last, never"),
    ("except_last", "checkpoint mode except_last was not calibrated (have never)"),
])
def test_a_checkpoint_mode_that_cannot_be_planned_is_one_line(tmp_path, capsys, mode, message):
    assert main(["plan", str(stored(tmp_path, "cal", CAL)), "--checkpoint", mode]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_why_states_the_checkpoint_trade_off(tmp_path, capsys):
    cal = stored_ckpt(tmp_path, "cal", CAL + CAL_CKPT)
    assert main(["plan", str(cal), "--schedules", "gpipe", "--chunks", "8", "--memory-limit",
                 str(120 * 2**20 + 2048 * 1024)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("why "))
    assert line.startswith("why pp2 gpipe m=8 b=128 ckpt=always: predicted bubble")
    assert "checkpoint never: " in line and "x the throughput, peak 124 MiB against 121 MiB" in line


def stored_sendrecv(tmp_path, name, alpha=30e-6, beta=2e9, machine: dict | None = None):
    d = tmp_path / name
    d.mkdir()
    sizes = [2**k for k in range(10, 27, 2)]
    pd.DataFrame([{"run_id": name, "case_id": f"sendrecv@{n}", "collective": "sendrecv", "size_bytes": n,
                   "time_median_s": alpha + n / beta} for n in sizes]).to_parquet(d / "results.parquet")
    (d / "meta.json").write_text(json.dumps({"run_id": name, "kind": "collectives", "suite": "p2p",
                                             **(machine if machine is not None else machine_meta())}))
    return d


def test_plan_with_a_p2p_run_calibrates_the_link_and_predicts_another(tmp_path, capsys):
    obs = [observe_linked(s, m) for s, m in (("gpipe", 1), ("gpipe", 2), ("gpipe", 4), ("gpipe", 8),
                                              ("1f1b", 2), ("1f1b", 8))]
    cal = stored(tmp_path, "cal", obs)
    here, there = stored_sendrecv(tmp_path, "here"), stored_sendrecv(tmp_path, "there", alpha=2e-3, beta=1e8)
    argv = ["plan", str(cal), "--schedules", "1f1b", "--chunks", "4", "--p2p", str(here)]
    assert main([*argv, "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["calibration"]["overhead_per_action_s"]["pp2 gpipe"] == pytest.approx(OVERHEAD, rel=1e-5)
    assert got["calibration"]["p2p"]["beta_bytes_per_s"] == pytest.approx(2e9, rel=1e-6)
    assert got["recommended"][0]["predicted_step_s"] == pytest.approx(observe_linked("1f1b", 4).step_s, rel=1e-5)
    assert main([*argv, "--target-p2p", str(there)]) == 0
    out = capsys.readouterr().out
    assert "p2p between pipeline ranks (alpha-beta, 2048 bytes per sample at a stage boundary): calibrated " \
           "alpha 30.0 us, beta 2.00 GB/s (here); predicted with alpha 2000.0 us, beta 0.10 GB/s (there)" in out
    assert "extrapolated: p2p from there, not the calibration's link (here)" in out


@pytest.mark.parametrize("argv, message", [
    (["plan", "{cal}", "--p2p", "{cal}"], "has no sendrecv cases; measure the link with"),
    (["plan", "{cal}", "--target-p2p", "{cal}"], "--target-p2p needs --p2p"),
])
def test_p2p_refusals_are_one_line(tmp_path, capsys, argv, message):
    cal = stored(tmp_path, "cal", CAL)
    assert main([a.format(cal=cal) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_calibrate_and_validate_interleave_their_launches_abba(tmp_path, capsys, monkeypatch):
    """--calibrate --validate --launches 2 measures calibrate, validate, validate, calibrate (A B B A):
    a host that drifts linearly over the launches drifts the same for both, so the calibration is
    not a launch older than what it is judged on. Every launch measures the calibrated model."""
    from bench.regress import launch as launch_mod

    calls = []

    def launch(cmd, **kw):  # bench.regress.launch._run: (exit code, stdout)
        calls.append(cmd)
        suite = Path(cmd[cmd.index("--suite") + 1]).stem
        out = tmp_path / "out" / suite
        out.mkdir(parents=True, exist_ok=True)
        name = f"20261204T00000{len(calls)}Z-{suite}"
        if suite == "plan-calibrate":
            d = stored(out, name, [pl.Observation(**{**o.__dict__, "run_id": name}) for o in CAL if o.chunks != 4])
        else:
            d = held_run(out, name, 1.0)
        return 0, f"# results: {d}\n"

    monkeypatch.setattr(launch_mod, "_run", launch)
    assert main(["plan", "--calibrate", "--model", "mlp-pipe", "--validate", "--launches", "2",
                 "--out", str(tmp_path / "out")]) == 0
    assert [Path(c[c.index("--suite") + 1]).stem for c in calls] == \
        ["plan-calibrate", "plan-validate", "plan-validate", "plan-calibrate"]
    assert all(c[c.index("--model") + 1] == "mlp-pipe" for c in calls)
    out = capsys.readouterr().out
    assert "launch order (A B B A): plan-calibrate, plan-validate, plan-validate, plan-calibrate" in out
    assert "(2 configuration(s))" in out


def test_a_sharded_or_tensor_parallel_run_is_refused_not_read_as_a_deeper_pipeline(tmp_path, capsys):
    """A `distbench pipeline --fsdp 2` run at world 4 is pp 2 x fsdp 2: its world is not its pipeline
    depth. The planner models pp x dp only, so it says so instead of fitting it as pp4."""
    cal = stored(tmp_path, "cal", CAL)
    res = pd.read_parquet(cal / "results.parquet")
    res["pp_degree"], res["dp_degree"], res["fsdp_degree"], res["tp_degree"] = res["world"], 1, 1, 1
    res.loc[0, ["world", "fsdp_degree"]] = [4, 2]
    res.to_parquet(cal / "results.parquet")
    assert main(["plan", str(cal)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert (f"case {res.loc[0, 'case_id']} of run '{cal}' is a composed layout (pp 2 x dp 1 x fsdp 2 x tp 1); "
            "the planner models pipeline layouts with data-parallel replicas (pp x dp; fsdp and tp 1) only") in err


def test_the_pipeline_depth_is_read_from_pp_degree_where_the_run_has_it(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    res = pd.read_parquet(cal / "results.parquet")
    res["pp_degree"], res["dp_degree"], res["fsdp_degree"], res["tp_degree"] = res["world"], 1, 1, 1
    res.to_parquet(cal / "results.parquet")
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "2,4", "--format", "json"]) == 0
    assert {p["stages"] for p in json.loads(capsys.readouterr().out)["recommended"]} == {2}


# pp x dp: each replica runs the pipeline on batch / dp; the layout's all-reduce is paid once a step
ALLREDUCE = 3e-3


def observe_dp(schedule, m, batch=1024, dp=2):
    o = observe(schedule, m, batch=batch // dp)
    return pl.Observation(**{**o.__dict__, "dp": dp, "step_s": o.step_s + ALLREDUCE, "case_id": f"{o.case_id}.dp{dp}"})


def test_each_data_parallel_layout_is_calibrated_from_its_own_cases_and_predicted_exactly():
    cals = pl.fit_layouts(CAL + [observe_dp("gpipe", m) for m in (2, 4, 8)] + [observe_dp("1f1b", 4)], order_of)
    assert sorted(cals) == [1, 2] and cals[2].dp == 2 and cals[2].cases == 4
    assert cals[2].step_overhead[2] == pytest.approx(ALLREDUCE, rel=1e-4)
    assert cals[1].step_overhead[2] == pytest.approx(0.0, abs=1e-9)
    held = observe_dp("1f1b", 8)
    cand = pl.Candidate(stages=2, dp=2, schedule="1f1b", chunks=8, micro_batch=64)
    assert (cand.label, cand.batch, cand.world) == ("pp2 dp2 1f1b m=8 b=64", 1024, 4)
    p = pl.predict(pl.layout_for(cals, 2), cand, order_of)
    assert p.step_s == pytest.approx(held.step_s, rel=1e-5) and p.samples_per_s == pytest.approx(1024 / held.step_s)
    assert p.peak_bytes == pytest.approx(max(held.peak_bytes.values()), rel=1e-9) and p.extrapolated == ""


def test_an_uncalibrated_data_parallel_degree_is_predicted_from_the_nearest_and_marked():
    cals = pl.fit_layouts(CAL, order_of)
    cand = pl.Candidate(stages=2, dp=2, schedule="1f1b", chunks=4, micro_batch=128)
    p = pl.predict(pl.layout_for(cals, 2), cand, order_of)
    assert p.extrapolated.startswith("dp 2 not calibrated (dp 1's pipeline per replica")
    assert p.step_s == pytest.approx(pl.predict(cals[1], pl.Candidate(stages=2, schedule="1f1b", chunks=4,
                                                                      micro_batch=128), order_of).step_s)
    with pytest.raises(BenchError, match="mix data-parallel degrees 1, 2"):
        pl.fit(CAL + [observe_dp("gpipe", 4)], order_of)


def test_plan_ranks_pipeline_and_data_parallel_layouts_at_a_world(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL + [observe_dp("gpipe", m) for m in (2, 4, 8)] + [observe_dp("1f1b", 4)])
    assert main(["plan", str(cal), "--world", "4", "--schedules", "gpipe,1f1b", "--chunks", "2,4,8",
                 "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {(p["stages"], p["dp"]) for p in got["recommended"]} == {(2, 2)}
    assert all(p["micro_batch"] == 1024 // (2 * p["chunks"]) and p["extrapolated"] == "" for p in got["recommended"])
    assert got["calibration"]["overhead_per_step_s"] == {"pp2": pytest.approx(0.0, abs=1e-9),
                                                          "pp2 dp2": pytest.approx(ALLREDUCE, rel=1e-4)}
    assert main(["plan", str(cal), "--world", "3"]) == 2
    assert "no candidate at world 3: worlds are stages x dp (--stages 2, --dp 1,2)" in capsys.readouterr().err


def test_a_data_parallel_case_is_validated_with_its_layouts_calibration(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL + [observe_dp("gpipe", m) for m in (2, 4, 8)] + [observe_dp("1f1b", 4)])
    held = stored(tmp_path, "held", [pl.Observation(**{**observe_dp("1f1b", 8).__dict__, "run_id": "held"})])
    assert main(["plan", str(cal), "--validate", str(held), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(c["dp"], c["candidate"]) for c in got["cases"]] == [(2, "pp2 dp2 1f1b m=8 b=64")]
    assert got["step_mape_pct"] == pytest.approx(0.0, abs=1e-3) and got["peak_mape_pct"] == pytest.approx(0.0, abs=1e-6)
    assert [w["layout"] for w in got["sweeps"]] == ["pp2 dp2"]


def test_layouts_measured_at_one_world_make_a_sweep_of_their_own():
    row = dict(run_id="a", micro_batch=64, chunks=8, checkpoint="never", schedule="1f1b")
    rows = [dict(row, stages=4, dp=1, micro_batch=128, candidate="pp4", predicted_step_s=1.0, measured_step_s=1.0),
            dict(row, run_id="b", stages=2, dp=2, candidate="pp2 dp2", predicted_step_s=0.9, measured_step_s=1.1)]
    got = {w["run_id"]: w for w in sweeps(rows)}
    assert set(got) == {"a", "b", "world 4 (every run)"}
    w = got["world 4 (every run)"]
    assert (w["picked"], w["best"], w["layout"]) == ("pp2 dp2", "pp4", "2 layouts")
    assert w["shortfall"] == pytest.approx(1 - (1024 / 1.1) / (1024 / 1.0))


# --- issue 31 item 5: the machine of every calibration, validation and prediction ---------------

import re  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"
GPU_BOX = f"{H100}, nccl, 1 node(s)"


def test_calibration_cases_of_two_machines_are_refused():
    gpu = [pl.Observation(**{**o.__dict__, "machine": GPU_BOX, "run_id": "gpu"}) for o in CAL[:3]]
    cpu = [pl.Observation(**{**o.__dict__, "machine": CPU_BOX}) for o in CAL[3:]]
    want = f"calibration runs were measured on different machines: {GPU_BOX} (gpu); {CPU_BOX} (cal); " \
           "calibrate on runs of one machine"
    with pytest.raises(BenchError, match=re.escape(want)):
        pl.fit(gpu + cpu, order_of)
    assert pl.fit(cpu, order_of).machine == CPU_BOX


def test_observations_carry_the_machine_their_run_was_measured_on(tmp_path):
    from bench.pipeline.plan_cli import observations

    gpu = stored(tmp_path, "gpu", CAL[:1], machine_meta(H100, nodes=2, world=4))
    cpu = stored(tmp_path, "cpu", CAL[:1])
    assert [o.machine for o in observations([gpu, cpu])] == [f"{H100}, nccl, 2 node(s)", CPU_BOX]


def test_plan_names_the_machine_every_prediction_was_calibrated_on(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "4,8", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["calibration"]["machine"] == CPU_BOX
    assert {p["calibrated_on"] for p in got["recommended"]} == {CPU_BOX}
    assert {p["predicted_for"] for p in got["recommended"]} == {CPU_BOX}
    assert main(["plan", str(cal), "--schedules", "gpipe,1f1b", "--chunks", "4,8"]) == 0
    assert f"calibrated on 6 case(s) of 1 run(s) on {CPU_BOX}, model mlp-pipe" in capsys.readouterr().out


def test_a_cpu_calibration_does_not_silently_validate_gpu_runs(tmp_path, capsys):
    """Was: a CPU calibration ranked and judged GPU runs without a word."""
    cal = stored(tmp_path, "cal", CAL)
    held = stored(tmp_path, "held", [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})],
                  machine_meta(H100))
    assert main(["plan", str(cal), "--validate", str(held), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        f"distbench: error: validation run held was measured on {GPU_BOX}, the calibration on {CPU_BOX}; "
        "pass runs of the calibration's machine, or say which machine it predicts with --target-machine RUN_DIR "
        "(or --target-p2p RUN_DIR: the other machine's link)")
    assert not (tmp_path / "out").exists()


def test_another_machine_is_validated_when_the_user_maps_it(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    held = stored(tmp_path, "held", [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})],
                  machine_meta(H100))
    assert main(["plan", str(cal), "--validate", str(held), "--target-machine", str(held), "--format", "json",
                 "--out", str(tmp_path / "out")]) == 0
    case = json.loads(capsys.readouterr().out)["cases"][0]
    assert (case["calibrated_on"], case["predicted_for"], case["measured_on"]) == (CPU_BOX, GPU_BOX, GPU_BOX)
    assert case["extrapolated"] == f"calibrated on {CPU_BOX}, predicted for {GPU_BOX} (--target-machine)"


def test_a_p2p_run_of_another_machine_than_the_calibration_is_refused(tmp_path, capsys):
    cal = stored(tmp_path, "cal", CAL)
    gpu_link = stored_sendrecv(tmp_path, "link", machine=machine_meta(H100))
    assert main(["plan", str(cal), "--p2p", str(gpu_link)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        f"distbench: error: --p2p run link was measured on {GPU_BOX}, the calibration on {CPU_BOX}; --p2p is the "
        "calibration machine's link (another machine's: --target-p2p)")


def test_target_p2p_maps_the_calibration_to_its_machine(tmp_path, capsys):
    """--target-p2p names the machine predicted for: validation runs of that machine are accepted
    (e.g. calibrated on one node, validated on two, with the link between them)."""
    obs = [observe_linked(s, m) for s, m in (("gpipe", 1), ("gpipe", 2), ("gpipe", 4), ("gpipe", 8),
                                              ("1f1b", 2), ("1f1b", 8))]
    cal = stored(tmp_path, "cal", obs)
    here = stored_sendrecv(tmp_path, "here")
    two = machine_meta(nodes=2)
    there = stored_sendrecv(tmp_path, "there", alpha=2e-3, beta=1e8, machine=two)
    held = stored(tmp_path, "held", [pl.Observation(**{**observe_linked("1f1b", 4).__dict__, "run_id": "held"})], two)
    assert main(["plan", str(cal), "--p2p", str(here), "--target-p2p", str(there), "--validate", str(held),
                 "--format", "json", "--out", str(tmp_path / "out")]) == 0
    got = json.loads(capsys.readouterr().out)
    case = got["cases"][0]
    far = "cpu AMD EPYC 7B13 (2 cores), gloo, 2 node(s)"
    assert (case["calibrated_on"], case["predicted_for"], case["measured_on"]) == (CPU_BOX, far, far)
    assert case["predicted_step_s"] == pytest.approx(observe_linked("1f1b", 4, link=pl.Link(
        alpha=2e-3, beta=1e8, source="there", sizes=(1024, 2**26))).step_s, rel=1e-5)  # with the target's link
    rec = pd.read_parquet(Path(got["predictions_dir"]) / "plan_predictions.parquet").query("role == 'recommended'")
    assert set(rec["predicted_for"]) == {far} and rec["extrapolated"].str.contains("p2p from there").all()


def test_validate_writes_its_predictions_into_a_run_of_its_own_never_into_the_runs_it_reads(tmp_path, capsys):
    """Was: plan_predictions.parquet written into every validated run directory."""
    cal = stored(tmp_path, "cal", CAL)
    held = stored(tmp_path, "held", [pl.Observation(**{**observe("1f1b", 4).__dict__, "run_id": "held"})])
    before = {p: p.read_bytes() for d in (cal, held) for p in sorted(d.iterdir())}
    assert main(["plan", str(cal), "--validate", str(held), "--out", str(tmp_path / "out"), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {p: p.read_bytes() for d in (cal, held) for p in sorted(d.iterdir())} == before
    (mine,) = (tmp_path / "out" / "plan").iterdir()
    assert got["predictions_dir"] == str(mine)
    assert sorted(p.name for p in mine.iterdir()) == ["meta.json", "plan_predictions.parquet"]
    meta = json.loads((mine / "meta.json").read_text())
    assert (meta["kind"], meta["suite"], meta["run_id"]) == ("pipeline", "plan", mine.name)
    assert meta["plan"] == {"calibration_runs": ["cal"], "calibration_machine": CPU_BOX, "validation_runs": [str(held)],
                            "predicted_for": CPU_BOX}
    rows = pd.read_parquet(mine / "plan_predictions.parquet")
    assert set(rows["run_id"]) == {"held"} and set(rows["calibration_machine"]) == {CPU_BOX}
    assert rows.loc[rows["role"] == "validation", "measured_machine"].tolist() == [CPU_BOX]
