"""How long each case took in the stored runs of one kind on one machine class: what `--dry-run`
estimates a case from. Rank 0 stores a finished case's wall time (its measure and write, warm-up
included) in its launch's `case_s` of meta.json, keyed by the case key (bench.harness.rank); runs
stored before that field existed say nothing, and their cases stay without an estimate."""

import dataclasses
import statistics

from bench.kind import kind_of_run
from bench.results import fingerprint as fp
from bench.results.runs import find_runs, read_meta


def same_machine(a: fp.Fingerprint, b: fp.Fingerprint) -> bool:
    """One machine class (bench.results.fingerprint), whatever world sizes the runs launched: a
    case key names its own world."""
    return not fp.differences(dataclasses.replace(a, world=""), dataclasses.replace(b, world=""))


def stored_case_seconds(root, kind: str, machine: fp.Fingerprint) -> dict[str, list[float]]:
    """{case key: its wall seconds in each stored run of `kind` under root on `machine`'s class}."""
    seen: dict[str, list[float]] = {}
    for path in find_runs(root):
        meta = read_meta(path)
        if kind_of_run(meta) != kind or not same_machine(fp.of_run(meta), machine):
            continue
        for launch in (meta.get("launches") or {}).values():
            for key, seconds in (launch.get("case_s") or {}).items():
                seen.setdefault(str(key), []).append(float(seconds))
    return seen


def estimate_s(seconds: list[float]) -> float:
    """A case's estimate from its stored durations: their median (one slow launch does not move it)."""
    return statistics.median(seconds)
