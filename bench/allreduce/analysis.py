"""From measured rows to the cost-model tables: fits per algorithm (per world and joint),
residuals, measured latency / peak busbw / n_half, the tree-ring crossover, and predictions for
worlds beyond the machine. Pure over rows; `write_model` reads a run directory and writes the
tables (`model`, `residuals`, `crossover`, `predictions`) as parts of it.

Predictions come from the fit over the launches that were not oversubscribed (an oversubscribed
launch measures ranks time-sharing cores, not communication); when every launch was
oversubscribed, from all of them, and the rows say so.
"""

from pathlib import Path

from bench.allreduce import REGISTRY
from bench.allreduce.config import predict_size_list
from bench.allreduce.model import measured_crossover, model_crossover, n_half
from bench.report.format import row_label
from bench.results.store import RunWriter, load_run
from bench.timing.alphabeta import fit, predict
from bench.timing.stats import GB, figure_text
from bench.units import parse_dtype


def bus_factor(n: int) -> float:
    """nccl-tests' all_reduce factor 2(n-1)/n, for every algorithm: a normalisation, not a
    count of the bytes an algorithm moves (doc/PERFORMANCE.md)."""
    return 2 * (n - 1) / n


def _worlds_key(worlds) -> str:
    return ",".join(str(w) for w in sorted(set(worlds)))


def _series(rows: list[dict]) -> tuple[list[int], list[float], list[float]]:
    rows = sorted(rows, key=lambda r: r["size_bytes"])
    return ([int(r["size_bytes"]) for r in rows], [float(r["time_median_s"]) for r in rows],
            [float(r["busbw_gbps"]) for r in rows])


def analyse(rows: list[dict], predict_worlds, predict_sizes) -> dict[str, list[dict]]:
    """rows: measured results rows of one run (any launches). Returns {table: rows}."""
    out: dict[str, list[dict]] = {"model": [], "residuals": [], "crossover": [], "predictions": []}
    blocks: dict[tuple, list[dict]] = {}
    for r in rows:
        blocks.setdefault((r["dtype"], r["op"], r["mode"], r.get("rank_reduce") or "max"), []).append(r)
    for (dtype, op, mode, reduce), brows in blocks.items():
        # the figure every fit, prediction and crossover of this block is made from, in words
        keys = {"dtype": dtype, "op": op, "mode": mode, "figure": figure_text(mode, reduce)}
        by_label: dict[str, list[dict]] = {}
        for r in brows:
            by_label.setdefault(row_label(r), []).append(r)
        fits: dict[tuple[str, int], tuple] = {}  # (label, world) -> (alpha, beta)
        for label, lrows in by_label.items():
            _label_tables(label, lrows, keys, predict_worlds, predict_sizes, out, fits)
        _crossovers(by_label, keys, fits, out)
    run_id = rows[0]["run_id"] if rows else None
    suite = rows[0]["suite"] if rows else None
    for table in out.values():
        for r in table:
            r.setdefault("run_id", run_id)
    for r in out["model"] + out["predictions"]:
        r.setdefault("suite", suite)
    return out


def _label_tables(label, lrows, keys, predict_worlds, predict_sizes, out, fits):
    algo = lrows[0]["algorithm"]
    alg = REGISTRY.get(algo)
    by_world: dict[int, list[dict]] = {}
    for r in lrows:
        by_world.setdefault(int(r["world"]), []).append(r)
    oversub = {w: any(bool(r["oversubscribed"]) for r in rs) for w, rs in by_world.items()}
    comm = [w for w in sorted(by_world) if w > 1]  # world 1 moves nothing: nothing to fit
    basis = [w for w in comm if not oversub[w]] or comm
    sets = [[w] for w in sorted(by_world)]
    for extra in (comm, basis):
        if extra and extra not in sets:
            sets.append(extra)
    base = {"label": label, "algorithm": algo, "variant": lrows[0].get("variant") or "", **keys,
            "coefficients": alg.model}
    basis_fit = None
    for ws in sets:
        pts = [r for w in ws for r in by_world[w]]
        msgs = [r.get("messages") for r in pts]  # the real message counts (a chunked ring splits further)
        f = fit(alg.cost, [int(r["world"]) for r in pts], [r["size_bytes"] for r in pts],
                [r["time_median_s"] for r in pts], messages=msgs if None not in msgs else None)
        row = {**base, "fit_worlds": _worlds_key(ws), "oversubscribed": any(oversub[w] for w in ws),
               "points": len(pts), "used_for_predictions": bool(basis) and ws == basis}
        if f is not None:
            row.update(alpha_s=f.alpha_s, alpha_us=f.alpha_us, beta_s_per_byte=f.beta_s_per_byte,
                       bandwidth_gbps=f.bandwidth_gbps, rms_rel_residual=f.rms_rel_residual,
                       max_abs_rel_residual=f.max_abs_rel_residual)
            for r, rel in zip(pts, f.rel_residuals):
                out["residuals"].append({"label": label, "fit_worlds": row["fit_worlds"], "world": int(r["world"]),
                                         "size_bytes": int(r["size_bytes"]), "measured_s": r["time_median_s"],
                                         "fitted_s": r["time_median_s"] * (1 + rel), "rel_residual": rel})
            if len(ws) == 1:
                fits[(label, ws[0])] = (f.alpha_s, f.beta_s_per_byte)
            if ws == basis:
                basis_fit = (f, row)
        if len(ws) == 1:
            row.update(_measured_stats(by_world[ws[0]]))
        out["model"].append(row)
    if basis_fit is None:
        return
    f, row = basis_fit
    measured = {(int(r["world"]), int(r["size_bytes"])): r["time_median_s"] for r in lrows}
    esize = parse_dtype(keys["dtype"]).itemsize
    chunk_bytes = int(lrows[0].get("chunk_bytes") or 0)
    chunk_numel = max(chunk_bytes // esize, 1) if chunk_bytes else 0
    for n in predict_worlds:
        for s in predict_sizes:
            t = predict(alg.cost, n, s, f.alpha_s, f.beta_s_per_byte, messages=alg.messages(n, s // esize, chunk_numel))
            algbw = s / t / GB if t > 0 else float("nan")
            out["predictions"].append({
                "source": "model", "label": label, "algorithm": algo, **keys, "fit_worlds": row["fit_worlds"],
                "fit_oversubscribed": row["oversubscribed"], "world": n, "size_bytes": s, "predicted_time_s": t,
                "predicted_algbw_gbps": algbw, "predicted_busbw_gbps": algbw * bus_factor(n) if n > 1 else 0.0,
                "measured_time_s": measured.get((n, s)),
            })


def _measured_stats(rows: list[dict]) -> dict:
    sizes, times, bw = _series(rows)
    peak_i = max(range(len(bw)), key=lambda i: bw[i])
    out = {"latency_s": times[0], "latency_size_bytes": sizes[0], "peak_busbw_gbps": bw[peak_i],
           "peak_size_bytes": sizes[peak_i]}
    if len(sizes) and max(bw) > 0:
        nh, below = n_half(sizes, bw)
        out.update(n_half_bytes=nh, n_half_at_or_below=below)
    return out


def _crossovers(by_label, keys, fits, out):
    if "ring" not in by_label or "tree" not in by_label:
        return
    ring = REGISTRY.get("ring")
    tree = REGISTRY.get("tree")
    worlds = sorted({int(r["world"]) for r in by_label["ring"]} & {int(r["world"]) for r in by_label["tree"]})
    for n in worlds:
        if n < 2:
            continue
        rr = {int(r["size_bytes"]): r for r in by_label["ring"] if int(r["world"]) == n}
        tr = {int(r["size_bytes"]): r for r in by_label["tree"] if int(r["world"]) == n}
        sizes = sorted(set(rr) & set(tr))
        row = {**keys, "world": n, "oversubscribed": any(bool(rr[s]["oversubscribed"]) for s in sizes)}
        if len(sizes) >= 1:
            m = measured_crossover(sizes, [tr[s]["time_median_s"] for s in sizes],
                                   [rr[s]["time_median_s"] for s in sizes])
            row.update(measured_kind=m.kind, measured_bytes=m.size_bytes, measured_changes=m.changes)
        if ("ring", n) in fits and ("tree", n) in fits:
            m = model_crossover(tree.cost, ring.cost, n, fits[("tree", n)], fits[("ring", n)])
            row.update(model_kind=m.kind, model_bytes=m.size_bytes)
            m = model_crossover(tree.cost, ring.cost, n, fits[("ring", n)], fits[("ring", n)])
            row.update(textbook_kind=m.kind, textbook_bytes=m.size_bytes)
        out["crossover"].append(row)


def write_model(run_dir, cfg) -> dict[str, list[dict]]:
    """Fit the model on every measured row of the run and write the model tables as parts of it."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    if "results" not in run.tables or run["results"].empty:
        return {}
    df = run["results"]
    rows = df.astype(object).where(df.notna(), None).to_dict("records")
    tables = analyse(rows, cfg.predict_worlds, predict_size_list(cfg))
    RunWriter.at(run_dir, part_prefix="model-").write_case(tables)
    return tables
