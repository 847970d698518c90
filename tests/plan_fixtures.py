"""Shared by the planner's tests (tests/test_plan*.py): pipeline cases of known costs (every
action a + c * b seconds, 50 us of overhead per action, memory 100 / 120 MiB + 4 KiB per in-flight
sample), and run directories written as distbench pipeline and collectives write them."""

import json

import pandas as pd

from bench.plan import model as pl
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


# p2p between pipeline ranks, alpha-beta: 30 us + bytes / 2 GB/s; mlp-pipe's stage boundary
# carries width 512 x float32 = 2 KiB per sample.
LINK = pl.Link(alpha_s=30e-6, beta_s_per_byte=1 / 2e9, source="sendrecv-run", sizes=(1024, 2**26))
BOUNDARY = 512 * 4


def observe_linked(schedule, m, link=LINK, batch=1024):
    b = batch // m
    order = order_of(schedule, 2, m)
    wire = link.seconds(BOUNDARY * b)
    dur = {k: ln.at(b) + OVERHEAD + (wire if k == (0, "F") or k == (1, "B") else 0.0) for k, ln in TRUE.items()}
    return pl.Observation(**{**observe(schedule, m).__dict__, "step_s": replay(order, dur).step_s})


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


def held_run(tmp_path, name, factor):
    """A held-out launch of two configurations whose every step took `factor` x the model's value
    (a launch that is fast or slow as a whole)."""
    obs = [pl.Observation(**{**observe(s, 4).__dict__, "run_id": name, "step_s": observe(s, 4).step_s * factor})
           for s in ("gpipe", "1f1b")]
    return stored(tmp_path, name, obs)


def stored_ckpt(tmp_path, name, observations):
    d = stored(tmp_path, name, observations)
    res = pd.read_parquet(d / "results.parquet")
    res["checkpoint"] = [o.checkpoint for o in observations]
    res.to_parquet(d / "results.parquet")
    return d


def stored_sendrecv(tmp_path, name, alpha=30e-6, bytes_per_s=2e9, machine: dict | None = None):
    d = tmp_path / name
    d.mkdir()
    sizes = [2**k for k in range(10, 27, 2)]
    pd.DataFrame([{"run_id": name, "case_id": f"sendrecv@{n}", "collective": "sendrecv", "size_bytes": n,
                   "time_median_s": alpha + n / bytes_per_s} for n in sizes]).to_parquet(d / "results.parquet")
    (d / "meta.json").write_text(json.dumps({"run_id": name, "kind": "collectives", "suite": "p2p",
                                             **(machine if machine is not None else machine_meta())}))
    return d


# pp x dp: each replica runs the pipeline on batch / dp; the layout's all-reduce is paid once a step
ALLREDUCE = 3e-3


def observe_dp(schedule, m, batch=1024, dp=2):
    o = observe(schedule, m, batch=batch // dp)
    return pl.Observation(**{**o.__dict__, "dp": dp, "step_s": o.step_s + ALLREDUCE, "case_id": f"{o.case_id}.dp{dp}"})


H100 = "NVIDIA H100 80GB HBM3"
GPU_BOX = f"{H100}, nccl, 1 node(s)"
