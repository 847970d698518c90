"""What the planner reads from stored runs: the pipeline cases of `distbench pipeline` runs (as
plan.Observation), the p2p link of a `distbench collectives -c sendrecv` run, and the machine
each run measured (its meta.json), with the refusals where a run's machine does not fit."""

from pathlib import Path

import pandas as pd

from bench.errors import BenchError
from bench.plan import model as pl
from bench.plan.fit import fit_link
from bench.results.fingerprint import of_run
from bench.results.rundir import read_meta
from bench.results.store import load_run

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


def machine_of_dir(run_dir) -> str:
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
            o = _observation(d, row, res.columns, ranks, machine)
            if o is not None:
                out.append(o)
    return out


def _observation(d, row, columns, ranks: pd.DataFrame, machine: str) -> pl.Observation | None:
    """One results row as a case, None when it has no per-stage times or no step."""
    stage_s = {}
    for col, kind in COLUMNS.items():
        for s, t in enumerate(_ms_list(row.get(col)) if col in columns else []):
            stage_s[(s, kind)] = t
    if not stage_s or pd.isna(row.get("step_median_s")):
        return None
    degrees = {dim: int(row[f"{dim}_degree"]) if pd.notna(row.get(f"{dim}_degree"))
               else (int(row["world"]) if dim == "pp" else 1) for dim in ("pp", "dp", "fsdp", "tp")}
    dp, fsdp, tp = degrees["dp"], degrees["fsdp"], degrees["tp"]
    mine = ranks[ranks["case_id"] == row["case_id"]] if len(ranks) else ranks
    per = dp * fsdp * tp  # ranks per pipeline rank (the mesh puts pp outermost)
    peaks: dict = {}  # per pipeline rank: the most any of its dp / fsdp / tp ranks held
    for _, r in mine.iterrows():
        peaks[int(r["rank"]) // per] = max(peaks.get(int(r["rank"]) // per, 0.0), float(r["peak_bytes"]))
    # one replica's micro-batch (runs before the results said so stored batch / chunks for dp > 1)
    mb = int(row["batch"]) // (dp * fsdp * int(row["chunks"])) if dp * fsdp > 1 else int(row["micro_batch"])
    return pl.Observation(model=str(row["model"]), stages=degrees["pp"], schedule=str(row["schedule"]),
                          chunks=int(row["chunks"]), micro_batch=mb, dp=dp, fsdp=fsdp, tp=tp,
                          oversubscribed=bool(row["oversubscribed"]) if "oversubscribed" in columns
                          and pd.notna(row["oversubscribed"]) else False,
                          step_s=float(row["step_median_s"]), stage_s=stage_s, peak_bytes=peaks,
                          case_id=str(row["case_id"]), run_id=str(row["run_id"]), run_dir=str(d), machine=machine,
                          checkpoint=str(row["checkpoint"]) if "checkpoint" in columns
                          and pd.notna(row["checkpoint"]) else "never",
                          bubble=float(row["bubble_measured"]) if "bubble_measured" in columns
                          and pd.notna(row["bubble_measured"]) else float("nan"))


def check_fingerprint(run_dir):
    """A `distbench doctor --cluster-fingerprint` run, or one line saying what the run is instead."""
    res = load_run(run_dir).tables.get("results")
    if res is None or "doctor_test" not in res.columns or not (res["doctor_test"] == "collective").any():
        raise BenchError(f"--cluster-fingerprint '{run_dir}' is not a cluster fingerprint: measure one with "
                         "`distbench doctor --cluster-fingerprint` on the target cluster")


def doctor_pairs(res):
    """A doctor run's pair rows as sendrecv cases: the inter-node pairs where there are any (the link
    a pipeline's stages cross), else the intra-node ones; None for any other run."""
    if "doctor_test" not in res.columns or not res["doctor_test"].notna().any():  # every run has the column (null)
        return None
    pairs = res[res["doctor_test"] == "pair"]
    inter = pairs[pairs["link_class"] == "inter"] if "link_class" in pairs.columns else pairs.iloc[0:0]
    return inter if len(inter) else pairs


def link(run_dir) -> pl.Link:
    """alpha-beta from the sendrecv cases of a collectives run, or from a doctor run's pairs (the
    median time per size)."""
    run = load_run(run_dir)
    res = run.tables.get("results")
    pairs = doctor_pairs(res) if res is not None else None
    if pairs is not None and len(pairs):
        g = pairs.groupby("size_bytes")["time_median_s"].median()
        return fit_link(g.index.tolist(), g.tolist(), source=f"{run.meta.get('run_id') or run_dir} (doctor pairs, "
                        f"{'inter' if (pairs.get('link_class') == 'inter').all() else 'intra'}-node)")
    if res is None or "collective" not in res.columns or not (res["collective"] == "sendrecv").any():
        raise BenchError(f"run '{run_dir}' has no sendrecv cases; measure the link with "
                         "`distbench collectives --collectives sendrecv` between two ranks")
    g = res[res["collective"] == "sendrecv"].groupby("size_bytes")["time_median_s"].median()
    return fit_link(g.index.tolist(), g.tolist(), source=str(run.meta.get("run_id") or run_dir))


def check_p2p_machine(p2p_dir, machine: str):
    """--p2p measures the calibration machine's link: a run of another machine is refused."""
    if p2p_dir:
        theirs = machine_of_dir(p2p_dir)
        if theirs != machine:
            raise BenchError(f"--p2p run {Path(p2p_dir).name} was measured on {theirs}, the calibration on {machine}; "
                             "--p2p is the calibration machine's link (another machine's: --target-p2p)")


def target_machine(machine: str, target_machine_dir=None, target_p2p_dir=None) -> tuple[str, str]:
    """(the machine predicted for, the option that says so): --target-machine's run's, else
    --target-p2p's run's, else the calibration's own (machine, "")."""
    for opt, d in (("--target-machine", target_machine_dir), ("--target-p2p", target_p2p_dir)):
        if d:
            load_run(d)  # a wrong path is one line
            theirs = machine_of_dir(d)
            if theirs != machine:
                return theirs, opt
    return machine, ""
