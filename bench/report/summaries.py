"""What every kind's closing summary shares (each kind's own is in its folder: a function of a
loaded run, bench.results.store.Run, that the terminal prints after the last launch, `distbench
show` re-prints and the report and the gate quote; it never reads anything but the run): the
rows of a table, the run's notes, the wrong-elements and noise footer, the energy lines."""

from bench.report.format import missing, nbytes


def rows_of(run, table: str = "results") -> list[dict]:
    if table not in run.tables or run[table].empty:
        return []
    df = run[table]
    return df.astype(object).where(df.notna(), None).to_dict("records")


def notes(run) -> list[str]:
    """Every launch's notes (oversubscription, skips), once each, then the run's own."""
    out = []
    for launch in run.meta.get("launches", {}).values():
        out += launch.get("notes", [])
    out += run.meta.get("notes", [])
    return list(dict.fromkeys(out))


def footer(rows: list[dict], run, what: str = "rows") -> list[str]:
    wrong = sum(int(r["wrong"] or 0) for r in rows)
    noisy = sum(bool(r.get("noisy")) for r in rows)
    # rows an imported tool judged wrong without counting elements (nccl-tests before 2.13: max_error)
    judged = sum(str(r.get("degraded") or "").startswith("wrong results") for r in rows)
    unchecked = bool(rows) and all(r.get("wrong") is None for r in rows) and not judged
    verdict = ("not checked (the rows hold no count)" if unchecked else
               f"{wrong} {'OK' if wrong == 0 and not judged else 'FAILED'}"
               + (f", {judged} {what} wrong by the tool's own check (their `degraded` says why)" if judged else ""))
    return ([f"#  Wrong elements: {verdict}; noisy {what}: {noisy}/{len(rows)}"] + energy_lines(rows)
            + [f"#  Note: {n}" for n in notes(run)])


_PER = (("energy_per_op_j", "J/op"), ("energy_per_gb_j", "J/GB"), ("energy_per_step_j", "J/step"),
        ("energy_per_sample_j", "J/sample"))


def energy_lines(rows: list[dict]) -> list[str]:
    """The energy over the timed spans (docs/telemetry.md, "Energy"): per case the row of its
    largest size that has a figure, then how many rows have none and why. Nothing for rows that
    marked no span (telemetry off, a kind without one, a run stored before the columns)."""
    marked = [r for r in rows if r.get("energy_note") is not None]
    given = [r for r in marked if not missing(r.get("energy_j"))]
    out = []
    if given:
        out.append("#  Energy over the timed span (NVML counter, summed over the case's GPUs; J/GB: bus bytes of "
                   "every rank):")
        best: dict = {}
        for r in given:
            if r["case_id"] not in best or (r.get("size_bytes") or 0) > (best[r["case_id"]].get("size_bytes") or 0):
                best[r["case_id"]] = r
        for cid, r in best.items():
            at = f" at {nbytes(r['size_bytes'])}B" if r.get("size_bytes") else ""
            at += f" ({r['placement']})" if r.get("placement") else ""
            figures = [f"{r['energy_j']:.4g} J over {r['energy_span_s']:.3g} s"]
            figures += [f"{r[c]:.4g} {unit}" for c, unit in _PER if not missing(r.get(c))]
            out.append(f"#    {cid}{at}: " + ", ".join(figures))
    absent = [r for r in marked if missing(r.get("energy_j"))]
    if absent:
        why = list(dict.fromkeys(r["energy_note"] or "?" for r in absent))
        more = f" (and {len(why) - 3} more reasons)" if len(why) > 3 else ""
        out.append(f"#  Energy: no figure in {len(absent)} of {len(marked)} {'row' if len(marked) == 1 else 'rows'}: "
                   + "; ".join(why[:3]) + more)
    return out
