"""What every kind's closing summary shares (each kind's own is in its folder: a function of a
loaded run, bench.results.store.Run, that the terminal prints after the last launch, `distbench
show` re-prints and the report and the gate quote; it never reads anything but the run): the
rows of a table, the run's notes, the wrong-elements and noise footer."""



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
    return ([f"#  Wrong elements: {verdict}; noisy {what}: {noisy}/{len(rows)}"]
            + [f"#  Note: {n}" for n in notes(run)])
