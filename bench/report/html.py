"""`distbench report`: stored runs -> reports/<name>/index.html with a PNG per plot beside it.

Reads run directories with bench.results.store.load_run only; nothing is re-run or re-timed.
The page is one Jinja2 template (package data, autoescaped) with inline CSS and no external
resource, so it opens from the file system without a network.
"""

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd

from bench.errors import BenchError
from bench.kind import KINDS
from bench.report.plots import telemetry
from bench.report.plots.common import Section
from bench.report.plots.data import Entry
from bench.report.plots.history import history_section
from bench.results import runs as runs_mod
from bench.results.store import load_run



@dataclass
class RunHeader:
    label: str
    dir: str
    kind: str
    baseline: bool
    facts: list[tuple[str, str]] = field(default_factory=list)
    command: str = ""
    flags: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)


def _launch_values(meta: dict, key: str) -> list:
    out = []
    for la in (meta.get("launches") or {}).values():
        if isinstance(la, dict) and la.get(key) is not None:
            v = la[key]
            out += v if isinstance(v, list) else [v]
    return list(dict.fromkeys(map(str, out)))


def _models(meta: dict) -> tuple[list[str], list[str]]:
    cpus, gpus = [], []
    for la in (meta.get("launches") or {}).values():
        for r in (la.get("ranks") or []) if isinstance(la, dict) else []:
            if r.get("cpu_model"):
                cpus.append(f"{r['cpu_model']} ({r.get('cores', '?')} cores)")
            gpus += [g.get("name", "?") for g in r.get("gpus") or []]
    return list(dict.fromkeys(cpus)), list(dict.fromkeys(gpus))


def honesty_flags(run, label: str) -> list[str]:
    """Every reason a number may not be what it claims: oversubscription, degraded rows, noise,
    wrong results, missing GPU telemetry, skipped combinations and the launches' own notes."""
    meta, res = run.meta, run.tables.get("results")
    flags = [f"NOT READ: {p}" for p in getattr(run, "problems", [])]  # files skipped: the page lacks their rows
    for w, la in sorted((meta.get("launches") or {}).items()):
        if not isinstance(la, dict):
            continue
        if la.get("oversubscribed"):
            flags.append(f"OVERSUBSCRIBED at world {w}: {la.get('world', w)} ranks x {la.get('threads_per_rank', '?')} "
                         "thread(s) exceed the cores; times include time-sharing of the cores")
        for n in la.get("notes") or []:
            if not str(n).startswith("OVERSUBSCRIBED"):
                flags.append(f"world {w}: {n}")
        if la.get("wrong"):
            flags.append(f"world {w}: {la['wrong']} WRONG element(s)/tensor(s)")
    if res is not None and len(res):
        if "degraded" in res:
            deg = res["degraded"].fillna("")
            for why, n in deg[deg != ""].value_counts().items():
                flags.append(f"DEGRADED ({n} of {len(res)} rows): {why}")
        if "noisy" in res and res["noisy"].notna().any():
            n = int(res["noisy"].fillna(False).astype(bool).sum())
            flags.append(f"noisy rows (IQR/median > 0.1): {n} of {len(res)} ({100 * n / len(res):.0f}%)")
        if "telemetry_missing" in res:
            for why in res["telemetry_missing"].dropna().unique():
                if str(why):
                    flags.append(f"telemetry missing: {why}")
    tmeta = meta.get("telemetry") or {}
    if tmeta.get("gpu_metrics") and not any(str(tmeta["gpu_metrics"]) in f for f in flags):
        flags.append(f"NVML / GPU metrics missing: {tmeta['gpu_metrics']}")
    if tmeta.get("enabled") is False:
        flags.append("telemetry off (--no-telemetry)")
    for s in meta.get("skipped") or []:
        flags.append(f"skipped: {s}")
    if meta.get("git_dirty"):
        flags.append("git tree was dirty: the code differs from the recorded sha")
    return flags


def run_header(e: Entry, kind: str) -> RunHeader:
    meta = e.run.meta
    sw = meta.get("software") or {}
    state, why = runs_mod.state_of(e.run.dir, meta)
    cpus, gpus = _models(meta)
    sha = meta.get("git_sha") or "unknown"
    dirty = meta.get("git_dirty")
    facts = [
        ("run", f"{meta.get('suite', '?')} / {meta.get('run_id', e.run.dir.name)}"),
        ("kind", kind),
        ("started (UTC)", str(meta.get("started_utc", "unknown"))),
        ("state", state + (f" ({why})" if why else "")),
        ("git", f"{sha[:12]}{' + uncommitted changes (dirty)' if dirty else ' (clean)' if dirty is False else ''}"),
        ("torch / CUDA / NCCL", f"{sw.get('torch', '?')} / {sw.get('cuda') or 'none'} / {sw.get('nccl') or 'none'}"),
        ("python / platform", f"{sw.get('python', '?')} / {sw.get('platform', '?')}"),
        ("backend", ", ".join(_launch_values(meta, "backend")) or "unknown"),
        ("world sizes", ", ".join(sorted((meta.get("launches") or {}).keys(), key=lambda w: int(w) if str(w).isdigit() else 0))
         or "unknown"),
        ("hosts", ", ".join(_launch_values(meta, "hosts")) or "unknown"),
        ("CPU", "; ".join(cpus) or "unknown"),
        ("GPU", "; ".join(gpus) or "none"),
        ("directory", str(e.run.dir)),
    ]
    src = meta.get("source")
    if isinstance(src, dict):  # an imported run: where its numbers came from
        facts.insert(1, ("imported from", f"{src.get('tool', '?')} {src.get('version', '')}; command: "
                                          f"{src.get('command') or 'not recorded'}; files: "
                                          + ", ".join(str(f.get('path')) for f in src.get('files') or [])))
    return RunHeader(label=e.label, dir=str(e.run.dir), kind=kind, baseline=e.baseline, facts=facts,
                     command=runs_mod.command_of(meta), flags=honesty_flags(e.run, e.label),
                     tables=sorted(e.run.tables))


def _labels(dirs: list[Path]) -> list[str]:
    """Short unique legend labels: the run id, prefixed by the suite when two suites share ids."""
    labels = [f"{d.parent.name}/{d.name}" for d in dirs]
    return [lab if labels.count(lab) == 1 else f"{lab}#{i}" for i, lab in enumerate(labels)]


def _gate_section(pairs: list[tuple[Entry, Entry]]) -> Section | None:
    """The regression gate's verdict table (bench.regress.gate) of each run against its baseline."""
    from bench.regress import gate  # lazy: the gate's modules only for a report with a baseline

    sec = Section("gate", "Regression gate (vs baseline)")
    for base, cand in pairs:
        try:
            # rerun=None: a report never launches anything, so no confirmation re-run either
            v = gate.gate(base.run.dir, cand.run.dir, rerun=None)
        except Exception as err:  # noqa: BLE001 - the gate is optional; its failure must not lose the report
            sec.missing.append(f"gate failed for {cand.label} vs {base.label}: {type(err).__name__}: {err}")
            continue
        sec.notes.append(f"{cand.label} vs {base.label}: {getattr(v, 'status', '?')}: {getattr(v, 'reason', '')}")
        df = v.to_frame() if callable(getattr(v, "to_frame", None)) else None
        if isinstance(df, pd.DataFrame) and len(df):
            sec.tables.append((f"gate verdicts: {cand.label} vs {base.label}",
                               df.to_html(index=False, escape=True, na_rep="-", classes="data", border=0)))
    return sec


def _section_for(kind: str, entries: list[Entry], out_dir: Path) -> Section:
    """The kind's own report section (its plots and tables), titled by the kind."""
    if kind in KINDS:
        sec = KINDS.get(kind).report.section(entries, out_dir)
        sec.title = KINDS.get(kind).report.title
        return sec
    sec = Section(kind, f"Unknown kind '{kind}'")
    sec.missing.append(f"no plots for kind '{kind}': " + ", ".join(e.label for e in entries))
    return sec


def _headline_for(kind: str, entries: list[Entry], out_dir: Path) -> Section | None:
    """The kind's headline (one small plot and a short table: what the reader came for), or None
    when the kind declares none. A failing headline is a note, never a lost report."""
    if kind not in KINDS or KINDS.get(kind).report.headline is None:
        return None
    k = KINDS.get(kind)
    try:
        sec = k.report.headline(entries, out_dir)
    except Exception as err:  # noqa: BLE001 - the details below still hold every plot
        sec = Section(f"{kind}-headline", k.report.title)
        sec.missing.append(f"no headline: {type(err).__name__}: {err}")
    if sec is not None:
        sec.title = k.report.title
    return sec


def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("bench.report", "templates"),
                             autoescape=True,  # every run string (command lines, notes) is data, never markup
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html.j2")


def build_report(run_dirs, out_dir, baseline_dirs=(), title: str | None = None) -> Path:
    """Write out_dir/index.html and its PNGs from stored runs; returns the index path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):  # a re-made report must not keep plots of runs no longer in it
        old.unlink()
    dirs = [Path(d) for d in run_dirs]
    bdirs = [Path(d) for d in baseline_dirs]
    labels = _labels(dirs + bdirs)
    entries = [Entry(lab, load_run(d), baseline=i >= len(dirs)) for i, (lab, d) in enumerate(zip(labels, dirs + bdirs))]
    for e in entries:
        if not e.run.tables and e.run.problems:  # nothing of it can be shown: the real problem, in one line
            raise BenchError(f"run '{e.run.dir}' cannot be read: {e.run.problems[0]}")
    for e in entries:
        if e.baseline:
            e.label = f"baseline {e.label}"
    kinds = {id(e): runs_mod.kind_of(e.run.meta, results=e.run.tables.get("results")) for e in entries}
    order = [k for k in KINDS.names() if k in kinds.values()] + sorted(set(kinds.values()) - set(KINDS.names()))
    sections, headlines = [], []
    for kind in order:
        group = [e for e in entries if kinds[id(e)] == kind]
        if any(not e.baseline for e in group):
            head = _headline_for(kind, group, out_dir)
            sections.append(_section_for(kind, group, out_dir))
            if head is not None:
                head.id = f"{sections[-1].id}-headline"  # the card links to the kind's details
                headlines.append(head)
    sections.append(telemetry.section(entries, out_dir))
    hist = history_section(entries, out_dir)
    if hist is not None:
        sections.append(hist)
    if bdirs:
        pairs = [(b, c) for c in entries if not c.baseline for b in entries
                 if b.baseline and kinds[id(b)] == kinds[id(c)]]
        sections.append(_gate_section(pairs))
    headers = [run_header(e, kinds[id(e)]) for e in entries]
    html = _template().render(
        title=title or f"distbench report: {', '.join(dict.fromkeys(kinds[id(e)] for e in entries if not e.baseline))}",
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        headers=headers, sections=sections, headlines=headlines,
        flag_count=sum(len(h.flags) for h in headers))
    index = out_dir / "index.html"
    index.write_text(html, encoding="utf-8")
    return index
