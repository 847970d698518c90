"""The regression gate: a current run against a stored baseline, with a confirmation re-run;
and gate_ab, the same rule on two revisions' interleaved launches on one machine (bench.regress.ab).

    verdict = gate(baseline_dir, run_dir)      # baseline_dir: one baseline, or a root of them
    verdict.exit_code                          # 0 pass, 1 confirmed regression / wrong, 3 not comparable
    verdict.to_frame(); verdict.to_markdown(); verdict.to_text(); verdict.to_json()

Steps (docs/gate.md):
1. Comparable? The run's fingerprint (bench.results.fingerprint) must equal the baseline's, the
   baseline must be of this schema version, of the same kind, measured with the same settings
   (settings_differences: mode, blocking, budget, iterations, dtype, NCCL_*, versions, driver),
   and share at least one case. Otherwise exit 3 with the reason (each differing field named).
2. Compare (bench.regress.compare: each launch's common factor taken out; the launch factor, each
   group and each case judged on its own band and tolerance; `unstable` cannot fail on its own).
3. Any current row with `wrong` > 0: exit 1 at once (no confirmation needed).
4. Flagged cases (case regressions, and every case of a metric whose launch factor or a group
   regressed, screened at the looser screen_alpha) are re-run once in a fresh launch. A case then
   takes the better of its two launches; the launch factor and the groups are taken over both
   launches and judged against the band for a mean of two (a group also needs the fresh launch
   alone beyond its tolerance). A regression stands only if it is still there at alpha and the
   first launch's screen flagged it (the re-run confirms; it does not discover): exit 1.
   Without a re-run (rerun=None) flagged regressions stand, marked unconfirmed.
5. Nothing decidable at all (every case unstable/throttled): exit 3, "baseline cannot decide".

The A/B (gate_ab on P pairs, bench.regress.ab) confirms the same way with P fresh pairs judged
alone: confirm_ab keeps a regression only where both looks flag it.
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from bench.regress import baseline as bl
from bench.regress.compare import (AGGREGATED, DECIDABLE, Comparison, Rules, _keyed, compare_rows, key_columns,
                                    normalize_kind, public, reading, with_confirmation)
from bench.regress.render import render_cases, render_groups, render_kinds
from bench.regress.settings import settings_differences
from bench.results import fingerprint as fp
from bench.results.schema import SCHEMA_VERSION
from bench.results.store import load_run
from bench.telemetry.summary import THROTTLED_SHARE

PASS, REGRESSION, NOT_COMPARABLE = 0, 1, 3


@dataclass(frozen=True, kw_only=True)
class Verdict:
    exit_code: int
    status: str  # pass | regression | wrong | not-comparable | undecidable
    reason: str
    kind: str = ""
    baseline_dir: str = ""
    run_dir: str = ""
    fingerprint: str = ""
    rules: str = "defaults"
    repeats: int = 0
    cases: pd.DataFrame = field(default_factory=pd.DataFrame)  # final, one row per case and metric
    kinds: pd.DataFrame = field(default_factory=pd.DataFrame)  # per gated metric: the launch's common factor
    groups: pd.DataFrame = field(default_factory=pd.DataFrame)  # per gated metric and group (collective, algorithm, ...)
    confirmation: dict = field(default_factory=dict)  # {"run_dir", "cases", "error"}
    notes: list = field(default_factory=list)
    warn_only: bool = False
    facts: dict = field(default_factory=dict)  # more lines for the header (A/B: revisions, pairs)

    def to_frame(self) -> pd.DataFrame:
        return public(self.cases)

    def counts(self) -> dict:
        if self.cases.empty:
            return {}
        g = self.cases[self.cases["gated"]]
        return {v: int(n) for v, n in g["verdict"].value_counts().items()}

    def to_json(self) -> dict:
        def records(df):
            return json.loads(public(df).to_json(orient="records")) if len(df) else []

        return {"exit_code": self.exit_code, "status": self.status, "reason": self.reason, "kind": self.kind,
                "baseline": self.baseline_dir, "run": self.run_dir, "fingerprint": self.fingerprint,
                "rules": self.rules, "repeats": self.repeats, "counts": self.counts(), "notes": self.notes,
                "confirmation": self.confirmation, "kinds": records(self.kinds), "groups": records(self.groups),
                "cases": records(self.cases)}

    def headline(self) -> str:
        word = {0: "PASS", 1: "FAIL", 3: "NO COMPARABLE BASELINE"}.get(self.exit_code, "?")
        if self.warn_only and self.status in ("regression", "wrong"):
            word = "WARN (--warn-only)"
        return f"gate: {word}: {self.reason}"

    def to_text(self) -> str:
        return self._render("table")

    def to_markdown(self) -> str:
        return self._render("markdown")

    def _render(self, fmt: str) -> str:
        md = fmt == "markdown"
        lines = [f"## {self.headline()}" if md else self.headline(), ""]
        facts = [("kind", self.kind), ("baseline", self.baseline_dir), ("run", self.run_dir),
                 ("fingerprint", self.fingerprint), ("repeats in baseline", self.repeats), ("rules", self.rules)]
        facts += list(self.facts.items())
        if self.confirmation:
            c = self.confirmation
            facts.append(("confirmation", c.get("run_dir") or c.get("said") or c.get("error", "")))
        for k, v in facts:
            if v not in ("", None):
                lines.append(f"- {k}: `{v}`" if md else f"  {k}: {v}")
        lines.append("")
        # the launch's common factor and the groups first (what a reader needs), then the cases
        if len(self.kinds):
            lines += [render_kinds(self.kinds, fmt), ""]
        if len(self.groups):
            lines += [render_groups(self.groups, fmt), ""]
        if len(self.cases):
            lines += [render_cases(self.cases, fmt), ""]
        lines += [f"- {n}" if md else f"  note: {n}" for n in self.notes]
        if not md:  # the verdict again, last: a terminal or a CI log shows the tail of a long table
            lines += ["", self.headline()]
        return "\n".join(lines).rstrip() + "\n"


def _not_comparable(reason: str, **kw) -> Verdict:
    return make_verdict(exit_code=NOT_COMPARABLE, status="not-comparable", reason=reason, **kw)


def rules_for(baseline: "bl.Baseline", rules_path=None) -> Rules:
    """The rules file given, else `<suite stem>.gate.toml` beside the baseline's suite file, else defaults."""
    if rules_path:
        return Rules.load(rules_path)
    suite = baseline.meta.get("suite_path")
    if suite:
        side = Path(suite).with_suffix("").with_name(Path(suite).stem + ".gate.toml")
        if side.exists():
            return Rules.load(side)
    return Rules()


def gated_regressions(cmp: Comparison) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(case rows, kind-or-group rows) that regressed; a group row has a `group` name. cmp: a
    Comparison, a Verdict, anything with the cases, kinds and groups frames."""
    c = cmp.cases
    cases = c[c["gated"] & (c["verdict"] == "regression")] if len(c) else c
    parts = [f[f["verdict"] == "regression"] for f in (cmp.kinds, cmp.groups) if len(f)]
    kinds = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["metric", "verdict"])
    return cases, kinds


def flagged_keys(cmp: Comparison, keys: list[str]) -> pd.DataFrame:
    """Case keys to re-run: every case in the geometric mean of a metric that regressed, as a case
    or as a kind (so that the kind's mean can be taken over two launches of all its cases)."""
    cases, kinds = gated_regressions(cmp)
    c = cmp.cases
    parts = [cases[keys]]
    for metric in set(kinds["metric"] if len(kinds) else []) | set(cases["metric"]):
        parts.append(c[(c["metric"] == metric) & c["verdict"].isin(AGGREGATED)][keys])
    return pd.concat(parts).drop_duplicates() if parts else pd.DataFrame(columns=keys)


def gate(baseline_dir, run_dir, *, rules: Rules | None = None, rules_path=None,
         rerun: Callable[[pd.DataFrame, dict], Path] | None = None, warn_only: bool = False) -> Verdict:
    """Decide one run against its baseline. rerun(flagged key rows, run meta) -> a new run
    directory (a fresh launch of those cases); None: no confirmation."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    if "results" not in run.tables or run["results"].empty:
        return _not_comparable(f"run {run_dir} has no results rows", run_dir=str(run_dir))
    if run.meta.get("schema_version") != SCHEMA_VERSION:
        return _not_comparable(f"run {run_dir} has result schema version {run.meta.get('schema_version')}, "
                               f"this distbench reads {SCHEMA_VERSION}", run_dir=str(run_dir))
    want = fp.of_run(run.meta)
    try:
        bdir = Path(baseline_dir)
        bdir = bdir if bl.is_baseline(bdir) else bl.find(bdir, want)
        base = bl.load(bdir)
    except bl.NotComparable as e:
        return _not_comparable(str(e), run_dir=str(run_dir), fingerprint=want.slug())
    info = {"baseline_dir": str(base.dir), "run_dir": str(run_dir), "fingerprint": want.slug()}
    diff = fp.differences(base.fingerprint, want)
    if diff:
        return _not_comparable(f"baseline {base.dir.name} is another machine class: {'; '.join(diff)} "
                               "(baseline vs this run)", **info)
    kind = normalize_kind(base.kind)
    run_kind = normalize_kind(run.meta.get("kind") or run["results"]["kind"].dropna().iloc[0])
    if run_kind != kind:
        return _not_comparable(f"baseline is a {kind} baseline, the run is {run_kind}", **info)
    settings = settings_differences(base.meta, base.results, run.meta, run["results"], kind)
    if settings:
        return _not_comparable(f"baseline {base.dir.name} was measured with other settings: {'; '.join(settings)} "
                               "(baseline vs this run)", **info)
    rules = rules or rules_for(base, rules_path)
    info.update(kind=kind, rules=rules.source, warn_only=warn_only)
    current = run["results"]
    cmp = compare_rows(base.results, current, kind, rules)
    info["repeats"] = cmp.repeats
    matched = cmp.cases[~cmp.cases["verdict"].isin(("missing", "new"))] if len(cmp.cases) else cmp.cases
    if matched.empty:
        return _not_comparable(f"no case of run {run_dir.name} is in baseline {base.dir.name} "
                               f"(suite {base.meta.get('suite')})", cases=cmp.cases, **info)
    notes = _notes(cmp)
    wrong = cmp.cases[(cmp.cases["verdict"] == "wrong") & cmp.cases["gated"]]
    if len(wrong):
        return make_verdict(exit_code=REGRESSION, status="wrong",
                        reason=f"{len(wrong)} case(s) with wrong results (fails outright)",
                        cases=cmp.cases, kinds=cmp.kinds, groups=cmp.groups, notes=notes, **info)
    cmp, confirmation = _confirmed(cmp, base, current, run, kind, rules, rerun)
    return _decided(cmp, confirmation, notes, info)


def _confirmed(cmp, base, current: pd.DataFrame, run, kind: str, rules: Rules, rerun) -> tuple:
    """(the comparison to decide on, what the confirmation re-run did)."""
    confirmation = {}
    # With a re-run, the first launch is screened at the looser screen_alpha: a false flag costs one
    # launch, a missed one is a missed regression. The verdict is made at alpha on both launches.
    screen = cmp if rerun is None else compare_rows(base.results, current, kind, rules, alpha=rules.screen_alpha)
    cases_r, kinds_r = gated_regressions(screen)
    if len(cases_r) or len(kinds_r):
        keys = [k for k in cmp.cases.columns if k in key_names(kind)]
        todo = flagged_keys(screen, keys)
        confirmation = {"cases": len(todo), "first": flag_summary(cases_r, kinds_r)}
        if rerun is None:
            confirmation["error"] = "no confirmation re-run (disabled): flagged regressions stand unconfirmed"
        else:
            try:
                again = load_run(rerun(todo, run.meta))
                confirmation["run_dir"] = str(again.dir)
                confirm = _only(again["results"], todo, keys)
                first = cmp
                # a case regresses only if both launches do (the better of the two is judged) ...
                cmp = compare_rows(base.results, with_confirmation(current, confirm, kind), kind, rules)
                # ... a kind and a group on the mean of both launches, against the two-launch band
                both = compare_rows(base.results, pd.concat([_only(current, todo, keys), confirm]), kind, rules)
                cmp.kinds = _screened(both.kinds, screen.kinds, ["metric"])
                cmp.groups = _screened(_confirmed_groups(both.groups, compare_rows(base.results, confirm, kind, rules).groups),
                                       screen.groups, ["metric", "group"])
                cmp.cases["first_verdict"] = first.cases["verdict"].values
                # ... and only a case the first launch's screen flagged: the better of two launches is
                # judged against a launch factor taken from both, which can move a case nobody flagged
                # (seen in gate_eval on unchanged code: first launch ok, then a 'regression')
                unflagged = (cmp.cases["verdict"] == "regression") & (screen.cases["verdict"].values != "regression")
                cmp.cases.loc[unflagged, "verdict"] = "ok"
            except Exception as e:  # noqa: BLE001 - a failed re-run is reported; the flag stands
                confirmation["error"] = f"confirmation re-run failed: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
    return cmp, confirmation


def _decided(cmp, confirmation: dict, notes: list, info: dict) -> Verdict:
    """Regression (confirmed or not), undecidable (no case the baseline can decide) or pass."""
    cases_r, kinds_r = gated_regressions(cmp)
    gated = cmp.cases[cmp.cases["gated"] & ~cmp.cases["verdict"].isin(("missing", "new"))]
    decidable = gated[gated["verdict"].isin(DECIDABLE)]
    if len(cases_r) or len(kinds_r):
        how = "confirmed by a fresh launch" if "run_dir" in confirmation else "unconfirmed: " + confirmation.get("error", "")
        said = dict(exit_code=REGRESSION, status="regression", reason=f"{flag_summary(cases_r, kinds_r)} ({how})")
    elif decidable.empty and not (len(cmp.kinds) and cmp.kinds["verdict"].isin(DECIDABLE).any()):
        said = dict(exit_code=NOT_COMPARABLE, status="undecidable",
                    reason=f"baseline cannot decide any case: all {len(gated)} are unstable/throttled/n/a "
                           f"({cmp.repeats} repeat(s); record more with --repeats)")
    else:
        extra = " after a confirmation re-run" if confirmation else ""
        said = dict(exit_code=PASS, status="pass",
                    reason=f"{len(decidable)} decidable case(s) and the per-kind geometric mean: no regression{extra}; "
                           f"{int((gated['verdict'] == 'unstable').sum())} unstable")
    return make_verdict(**said, cases=cmp.cases, kinds=cmp.kinds, groups=cmp.groups, confirmation=confirmation,
                    notes=notes + _notes(cmp, throttled_only=True), **info)


# ---------------------------------------------------------------------------------------------
# Same-machine A/B: the base revision's launches against the candidate's, interleaved


def gate_ab(base_rows: pd.DataFrame, cand_rows: pd.DataFrame, kind: str, *, rules: Rules | None = None,
            warn_only: bool = False, base_meta: dict | None = None, cand_meta: dict | None = None,
            facts: dict | None = None) -> Verdict:
    """Decide the candidate's launches (P run_ids) against the base revision's (P run_ids) taken
    on this machine, A B A B ... Host speed cancels; interleaving spreads slow drift over both
    arms. Bands are pooled two-sample bounds (2P - 2 df); alpha is shared among the cases and
    among the groups. One look: bench.regress.ab confirms a flag with fresh pairs (confirm_ab)."""
    kind = normalize_kind(kind)
    rules = rules or Rules()
    info = {"kind": kind, "rules": rules.source, "warn_only": warn_only, "facts": dict(facts or {}),
            "baseline_dir": "base revision", "run_dir": "working tree"}
    if base_meta is not None and cand_meta is not None:
        diff = settings_differences(base_meta, base_rows, cand_meta, cand_rows, kind)
        if diff:
            return _not_comparable(f"the two revisions ran with other settings: {'; '.join(diff)} (base vs candidate)", **info)
    cmp = compare_rows(base_rows, cand_rows, kind, rules, ab=True)
    info["repeats"] = cmp.repeats
    notes = _notes(cmp)
    matched = cmp.cases[~cmp.cases["verdict"].isin(("missing", "new"))] if len(cmp.cases) else cmp.cases
    if matched.empty:
        return _not_comparable("no case is in both revisions' runs", cases=cmp.cases, **info)
    wrong = cmp.cases[(cmp.cases["verdict"] == "wrong") & cmp.cases["gated"]]
    cases_r, kinds_r = gated_regressions(cmp)
    if len(wrong):
        said = dict(exit_code=REGRESSION, status="wrong", reason=f"{len(wrong)} case(s) with wrong results (fails outright)")
    elif len(cases_r) or len(kinds_r):
        said = dict(exit_code=REGRESSION, status="regression",
                    reason=f"{flag_summary(cases_r, kinds_r)} (A/B: {cmp.repeats} launches of each revision)")
    else:
        gated = matched[matched["gated"]]
        said = dict(exit_code=PASS, status="pass",
                    reason=f"A/B over {cmp.repeats} launch pair(s): launch factor, {len(cmp.groups)} group(s) and "
                           f"{int(gated['verdict'].isin(DECIDABLE).sum())} decidable case(s): no regression")
    return make_verdict(**said, cases=cmp.cases, kinds=cmp.kinds, groups=cmp.groups, notes=notes, **info)


def _screened(both: pd.DataFrame, first: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The re-run confirms what the first launch's screen flagged; it does not discover. A kind or
    group regression on the mean of two launches stands only when the screen flagged it too (as a
    case); `first_verdict` keeps the screen's word. Seen in gate_eval on unchanged code: the screen
    flagged one case, its group was 1.08x (inside the screen's +9%); the fresh launch alone had it at
    1.17x, so the mean (1.12x) passed the two-launch band (+12%) and failed the gate."""
    if both.empty or first.empty or not set(keys) <= set(both.columns) & set(first.columns):
        return both
    said = first.set_index(keys)["verdict"].rename("first_verdict")
    out = both.join(said, on=keys)
    out["first_verdict"] = out["first_verdict"].fillna("n/a")
    out.loc[(out["verdict"] == "regression") & (out["first_verdict"] != "regression"), "verdict"] = "ok"
    return out


def _confirmed_groups(both: pd.DataFrame, fresh: pd.DataFrame) -> pd.DataFrame:
    """A group regression on the mean of two launches stands only when the fresh launch alone also
    shows the group worse than its tolerance (as a case needs both launches): one case's one-off
    outlier in the first launch is not a group's slowdown."""
    if both.empty or fresh.empty:
        return both
    out = both.copy()
    alone = fresh.set_index(["metric", "group"])["_G"]
    for i, r in out.iterrows():
        g = alone.get((r["metric"], r["group"]))
        if r["verdict"] == "regression" and g is not None and not g > math.log1p(r["tolerance"]):
            out.at[i, "verdict"] = "ok"
    return out


def make_verdict(*, exit_code: int, notes=(), warn_only: bool = False, **fields) -> Verdict:
    """The one place a verdict is made: --warn-only turns a regression into a pass (the reason
    still says regression), each note once."""
    return Verdict(exit_code=PASS if warn_only and exit_code == REGRESSION else exit_code,
                   notes=list(dict.fromkeys(notes)), warn_only=warn_only, **fields)


def key_names(kind: str) -> list[str]:
    return key_columns(kind)


def _only(rows: pd.DataFrame, todo: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    r = _keyed(rows, keys)
    want = set(map(tuple, _keyed(todo, keys)[keys].values))
    return r[[tuple(x) in want for x in r[keys].values]]


def flag_summary(cases_r: pd.DataFrame, kinds_r: pd.DataFrame) -> str:
    parts = []
    if len(cases_r):
        parts.append(f"{len(cases_r)} case(s) regressed")
    for _, k in kinds_r.iterrows():
        group = k.get("group")
        if isinstance(group, str) and group:
            parts.append(f"{group} {k['metric']} {k['worse']:.2f}x worse than the rest of its launch "
                         f"(band +{k['band'] * 100:.0f}%)")
        else:
            parts.append(f"geometric mean of {k['metric']} {k['geomean_worse']:.2f}x worse over {k['decidable']} case(s)")
    return "; ".join(parts) or "none"


def _throttled_cases(gated: pd.DataFrame, kind: str, among_all: bool = False) -> int:
    """Cases (not case x metric rows: a training case has two gated metrics) whose verdict is
    `throttled`; among_all: every case both runs have instead."""
    rows = gated[~gated["verdict"].isin(("missing", "new"))] if among_all else gated[gated["verdict"] == "throttled"]
    keys = [k for k in key_names(kind) if k in rows.columns]
    return len(rows[keys].astype(str).drop_duplicates()) if keys else len(rows)


def _notes(cmp: Comparison, throttled_only: bool = False) -> list[str]:
    c = cmp.cases
    if c.empty:
        return []
    g = c[c["gated"]]
    out = []
    n = _throttled_cases(g, cmp.kind)
    if n:
        out.append(f"{n} of {_throttled_cases(g, cmp.kind, among_all=True)} gated case(s) left undecided because of "
                   f"throttling (telemetry `throttled`: clocks cut at more than {THROTTLED_SHARE:.0%} of the "
                   "case's sampling instants): reported, not decided")
    if throttled_only:
        return out
    for verdict, what in (("unstable", "unstable (baseline band too wide or < 2 repeats): cannot fail on their own"),
                          ("missing", "in the baseline but not in this run"), ("new", "not in the baseline")):
        n = int((g["verdict"] == verdict).sum())
        if n:
            out.append(f"{n} case(s) {what}")
    return out


# ---------------------------------------------------------------------------------------------
# Confirmation re-runs of stored runs


def narrowing_args(kind: str, todo: pd.DataFrame, current: pd.DataFrame) -> list[str]:
    """CLI options that restrict a re-run to (a superset of) the flagged cases."""
    kind = normalize_kind(kind)
    keys = [k for k in key_columns(kind) if k in todo.columns]
    rows = _only(current, todo, keys) if len(todo) else current.iloc[0:0]
    return reading(kind).narrow(rows)


def default_rerun(current: pd.DataFrame, kind: str) -> Callable[[pd.DataFrame, dict], Path]:
    """A re-run of the flagged cases in a fresh launch of the same suite (from the run's meta)."""
    def rerun(todo: pd.DataFrame, meta: dict) -> Path:
        return bl.rerun_from_meta(meta, narrowing_args(kind, todo, current))

    return rerun


__all__ = ["Verdict", "gate", "gate_ab", "confirm_ab", "settings_differences", "default_rerun", "narrowing_args", "rules_for"]
