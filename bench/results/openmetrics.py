"""Stored runs as Prometheus metrics (docs/export.md): OpenMetrics 1.0 text (the specification:
specification/OpenMetrics.md of prometheus/OpenMetrics), the format Prometheus scrapes and
backfills (`promtool tsdb create-blocks-from openmetrics`), each sample stamped with its run's
start; and the text format 0.0.4 file that node_exporter's textfile collector reads (no
timestamps: the collector refuses a file that has them, collector/textfile.go of
prometheus/node_exporter).

The exposition is prometheus_client's own (its metric families, `generate_latest` of
prometheus_client.openmetrics.exposition and of prometheus_client.exposition, and
`write_to_textfile`, which writes a temp file and renames it). The families are driven by the
columns a run has, never by its kind's name: a results row with the `time_*` statistics is a timed
operation, one with `step_*` a training step, and so on (SUMMARIES, GAUGES below); the labels that name a
case are its kind's reading facts (`Reading.key_columns`, `group`, `settings`: bench.kind) and the
columns that say what a figure means (DESCRIBE); two rows that would still be one series are refused,
never one kept silently. Values are the stored numbers as they are, in base units (seconds, bytes, bytes per second,
ratios); GB/s columns are multiplied by 1e9 (nccl-tests' GB is 1e9 bytes).
"""

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from prometheus_client import exposition
from prometheus_client.core import CollectorRegistry, Metric
from prometheus_client.openmetrics import exposition as om_exposition

from bench.errors import BenchError
from bench.kind import BASE_KEYS, kind_named, kind_of_run
from bench.results import fingerprint
from bench.results.store import Run, load_run

P = "distbench_"
# Summary quantiles from the stored statistics columns (bench.timing.stats.summarize: numpy's linear
# percentiles over the samples): quantile label -> the column's statistic (<prefix><stat>_s). The labels
# are OpenMetrics' canonical numbers (specification/OpenMetrics.md, "Considerations: Canonical Numbers").
QUANTILES = (("0.0", "min"), ("0.05", "p5"), ("0.25", "p25"), ("0.5", "median"), ("0.75", "p75"),
             ("0.95", "p95"), ("1.0", "max"))
# Generic results columns that say what a row is, labelled wherever a run has them, beside its kind's keys: then
# those that say what its figure means (bench.regress.settings.DEFINITION: the timing mode, the reduction over
# ranks, blocking, an imported tool's options such as nccl-tests' -z 1), so rows that differ in one are two series.
DESCRIBE = ("collective", "algorithm", "backend", "layout", "memory_kind", "mode", "rank_reduce", "blocking",
            "tool_options")
# An imported run (meta.json `source`: bench.imports) in these modes stores the tool's own time as time_median_s:
# nccl-tests' `time` is the mean over the timed iterations (its doc/PERFORMANCE.md), not a median over samples. It
# is exported as MEAN (a gauge), and quantile 0.5 only from the tool's own per-iteration median (time_p50_s, -J
# with -I 1); the other quantiles are the per-iteration figures the tool gave (-I 1: min, max, p95).
MEAN_TIME_MODES = ("nccl-tests",)
# PARAM's Time(us):p50 is the median over ranks of each rank's mean over its iterations (bench/imports/param.py):
# no iteration's quantile either, so a PARAM import's time is the MEAN gauge too (its rank_reduce label: median).
MEAN_TIME_TOOLS = ("param",)
MEAN = P + "op_time_mean_seconds"
SUSPECTS = "doctor_suspects"  # the table of ranked suspects (a kind that judges lists it in Kind.tables)


@dataclass(frozen=True)
class Summary:
    """Quantiles of one timed thing from its stored statistics, with count and sum (mean x count)."""

    name: str  # the family name (ends in _seconds)
    prefix: str  # the statistics columns: <prefix>median_s, <prefix>p5_s, ...
    count: str  # the column with the number of samples the statistics were taken over
    help: str


@dataclass(frozen=True)
class Gauge:
    """One value per results row: a column, scaled to a base unit; `source` names the column in a
    label when several columns are one quantity measured or derived several ways."""

    name: str
    unit: str
    help: str
    columns: tuple[str, ...]
    scale: float = 1.0
    source: tuple[str, ...] = ()  # a label value per column (label `source`), or () for one column


SUMMARIES = (
    Summary(P + "op_time_seconds", "time_", "samples",
            "Time of one iteration of the case's operation, reduced over ranks as label rank_reduce says; "
            "quantile 0.5 is the stored median"),
    Summary(P + "step_time_seconds", "step_", "steps",
            "Training step wall time, earliest start to latest end over ranks; quantile 0.5 is the stored median"),
)
GAUGES = (
    Gauge(P + "op_busbw_bytes_per_second", "bytes_per_second",
          "Bus bandwidth at the row's time: the median, or an imported tool's mean (nccl-tests busbw = algbw x bus "
          "factor)", ("busbw_gbps",), 1e9),
    Gauge(P + "op_algbw_bytes_per_second", "bytes_per_second",
          "Algorithm bandwidth at the row's time (size_bytes / seconds: the median, or an imported tool's mean)",
          ("algbw_gbps",), 1e9),
    Gauge(P + "wrong_elements", "", "Wrong elements found by the correctness check, summed over ranks",
          ("wrong",)),
    Gauge(P + "samples_per_second", "", "Training throughput: global batch / median step time",
          ("samples_per_s",)),
    Gauge(P + "tokens_per_second", "", "Training throughput of a transformer: tokens / median step time",
          ("tokens_per_s",)),
    Gauge(P + "peak_memory_bytes", "bytes",
          "Peak memory, max over devices (CUDA peak reserved, or host peak RSS: label memory_kind)",
          ("peak_memory_bytes",)),
    Gauge(P + "bubble_ratio", "ratio",
          "Pipeline bubble as a fraction of the step: measured (mean over ranks of idle / step wall) "
          "or from a formula or replay (label source)",
          ("bubble_measured", "bubble_theory", "bubble_gpipe_theory", "bubble_megatron_theory", "bubble_exact",
           "replay_bubble"), 1.0, ("measured", "theory", "gpipe_theory", "megatron_theory", "exact", "replay")),
)


def _plain(v):
    """A stored cell as a Python value; None for null and NaN."""
    if v is None or v is pd.NA or (not isinstance(v, str) and pd.isna(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def _label(v) -> str:
    v = _plain(v)
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _start(meta: dict) -> float | None:
    """The run's start as Unix seconds: meta.json's started_utc, else the UTC time its run id starts with."""
    try:
        t = datetime.fromisoformat(str(meta.get("started_utc")))
        return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()
    except ValueError:
        pass
    try:
        return datetime.strptime(str(meta.get("run_id", ""))[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def _hosts(meta: dict) -> list[str]:
    """Every host of the run, in rank order (rank 0's first)."""
    seen: dict = {}
    for launch in (meta.get("launches") or {}).values():
        for r in launch.get("ranks", []):
            if r.get("host"):
                seen.setdefault(str(r["host"]), None)
        for h in launch.get("hosts", []):
            seen.setdefault(str(h), None)
    return list(seen)


class Families:
    """The metric families being filled, one per name in a fixed order, every run adding to each;
    a prometheus_client collector (`collect`). `stamp`: each sample carries its run's start time."""

    def __init__(self, stamp: bool):
        self.stamp = stamp
        self.metrics: dict[str, Metric] = {}
        self._seen: set = set()  # (sample name, labels): a series twice is refused by node_exporter and Prometheus
        self._family(P + "run", "A stored distbench run (value 1): where, what and which software", "info")
        self._family(P + "run_start_time_seconds", "When the run started, Unix seconds", "gauge", "seconds")
        for s in SUMMARIES:
            self._family(s.name, s.help, "summary", "seconds")
        self._family(MEAN, "Mean time of one iteration of the case's operation over the timed iterations, as an "
                     "imported tool printed it (nccl-tests' time column), reduced over ranks as label rank_reduce "
                     "says; not a quantile", "gauge", "seconds")
        for g in GAUGES:
            self._family(g.name, g.help, "gauge", g.unit)
        self._family(P + "suspects", "Suspects the run's verdict named (0: none)", "gauge")
        self._family(P + "suspect_slowdown_ratio", "How many times worse than its class median a suspect is "
                     "(the verdict's factor, >= 1)", "gauge", "ratio")
        self._family(P + "suspect_shortfall_ratio", "A suspect's shortfall from its class median: 1 - 1 / factor "
                     "(0.4: 40 percent less bandwidth, or 1 / 0.6 the time)", "gauge", "ratio")
        self._family(P + "suspect_mads", "Median absolute deviations of a suspect from its class median "
                     "(+Inf: the class had no spread)", "gauge")

    def _family(self, name: str, help_: str, typ: str, unit: str = ""):
        self.metrics[name] = Metric(name, help_, typ, unit)

    def add(self, family: str, labels: dict, value: float, when: float | None, suffix: str = ""):
        """One sample of `family` (its name + suffix: "_count", "_sum", "_info"); a series met twice is a BenchError."""
        key = (family + suffix, tuple(sorted(labels.items())))
        if key in self._seen:
            raise BenchError(f"the export would hold {family + suffix}{{{', '.join(f'{k}={v!r}' for k, v in key[1])}}} "
                             "twice, which Prometheus and node_exporter refuse; export the runs apart")
        self._seen.add(key)
        self.metrics[family].add_sample(family + suffix, labels, float(value), when if self.stamp else None)

    def collect(self):
        return [m for m in self.metrics.values() if m.samples]

    def registry(self) -> CollectorRegistry:
        reg = CollectorRegistry(auto_describe=False)
        reg.register(self)
        return reg


def _kind(run: Run):
    """The run's Kind (None for a kind no longer registered: then only the common keys label a case)."""
    res = run.tables.get("results")
    name = kind_of_run(run.meta, res["kind"].dropna().unique() if res is not None and "kind" in res else ())
    try:
        return name, kind_named(name)
    except BenchError:
        return name, None


def _case_columns(kind, results: pd.DataFrame) -> list[str]:
    """The columns that label a results row: the kind's keys, its group, its settings, then DESCRIBE;
    only those the run fills (a label empty on every row says nothing)."""
    read = kind.read if kind is not None else None
    cols = [*(read.key_columns() if read else BASE_KEYS), *((read.group,) if read else ()),
            *(read.settings if read else ()), *DESCRIBE]
    return [c for c in dict.fromkeys(cols) if c in results and c not in ("run_id", "suite", "kind")
            and any(_label(v) for v in results[c])]


def _row(fams: Families, row: dict, labels: dict, when, mean_time: bool):
    """The summaries and gauges of one results row (a column that is null gives no series). `mean_time`: the
    row's time_median_s is a tool's mean (MEAN_TIME_MODES), exported as MEAN, never as quantile 0.5."""
    for s in SUMMARIES:
        mean_row = mean_time and s.prefix == "time_"
        stats = [(q, "p50" if mean_row and stat == "median" else stat) for q, stat in QUANTILES]
        found = [(q, v) for q, stat in stats if (v := _plain(row.get(f"{s.prefix}{stat}_s"))) is not None]
        if mean_row and _plain(row.get("time_median_s")) is not None:
            fams.add(MEAN, labels, _plain(row["time_median_s"]), when)
        if not mean_row and _plain(row.get(f"{s.prefix}median_s")) is None or not found:
            continue
        for q, v in found:
            fams.add(s.name, {**labels, "quantile": q}, v, when)
        n, mean = _plain(row.get(s.count)), _plain(row.get(f"{s.prefix}mean_s"))
        if n is not None and mean is not None:
            fams.add(s.name, labels, n, when, "_count")
            fams.add(s.name, labels, mean * n, when, "_sum")
    for g in GAUGES:
        for i, col in enumerate(g.columns):
            v = _plain(row.get(col))
            if v is not None:
                fams.add(g.name, {**labels, "source": g.source[i]} if g.source else labels, v * g.scale, when)


def _suspects(fams: Families, run: Run, kind, labels: dict, when):
    """The verdict's suspects: their count wherever the kind keeps the table (0 when it holds no row),
    and one series per suspect with its position, name, scope and evidence."""
    table = run.tables.get(SUSPECTS)
    if table is None and (kind is None or SUSPECTS not in kind.tables):
        return
    rows = table.to_dict("records") if table is not None else []
    fams.add(P + "suspects", labels, len(rows), when)
    for r in rows:
        factor = _plain(r.get("factor"))
        if factor is None:
            continue
        lab = {**labels, **{k: _label(r.get(k)) for k in ("position", "suspect", "scope", "evidence")}}
        fams.add(P + "suspect_slowdown_ratio", lab, factor, when)
        if factor > 0:
            fams.add(P + "suspect_shortfall_ratio", lab, 1 - 1 / factor, when)
        mads = _plain(r.get("mads"))
        if mads is not None:
            fams.add(P + "suspect_mads", lab, mads, when)


def add_run(fams: Families, run: Run) -> int:
    """Every series of one loaded run; returns how many results rows it labelled."""
    meta = run.meta
    name, kind = _kind(run)
    when = _start(meta)
    soft = meta.get("software") or {}
    hosts = _hosts(meta)
    labels = {"run_id": _label(meta.get("run_id")) or run.dir.name, "suite": _label(meta.get("suite")),
              "kind": name, "machine": fingerprint.of_run(meta).slug(), "hosts": ",".join(hosts)}
    launches = list((meta.get("launches") or {}).values())
    info = {**labels, "git_sha": _label(meta.get("git_sha")), "git_dirty": _label(meta.get("git_dirty")),
            "torch": _label(soft.get("torch")), "nccl": _label(soft.get("nccl")), "cuda": _label(soft.get("cuda")),
            "python": _label(soft.get("python")), "launcher": _label(meta.get("launcher")),
            "backend": "+".join(sorted({str(la.get("backend")) for la in launches if la.get("backend")})),
            "world": "+".join(str(w) for w in sorted({int(la["world"]) for la in launches if la.get("world")})),
            "started_utc": _label(meta.get("started_utc"))}
    fams.add(P + "run", info, 1, when, "_info")
    if when is not None:
        fams.add(P + "run_start_time_seconds", labels, when, when)
    res = run.tables.get("results")
    rows: dict = {}
    if res is not None and len(res):
        cols = _case_columns(kind, res)
        rows = _keyed(run, res, cols)
        source = meta.get("source") if isinstance(meta.get("source"), dict) else {}
        imported, by_tool = bool(meta.get("source")), source.get("tool") in MEAN_TIME_TOOLS
        for key, row in rows.items():
            _row(fams, row, {**labels, **dict(zip(cols, key))}, when,
                 imported and (by_tool or _label(row.get("mode")) in MEAN_TIME_MODES))
    _suspects(fams, run, kind, labels, when)
    return len(rows)


def _keyed(run: Run, res: pd.DataFrame, cols: list[str]) -> dict:
    """label values -> row, one series per results row; rows that share every label are a BenchError (a
    series can hold one of them only, and which would be a guess)."""
    rows: dict = {}
    twins = []
    for row in res.to_dict("records"):
        key = tuple(_label(row.get(c)) for c in cols)
        if key in rows:
            twins.append((rows[key], row))
        rows[key] = row
    if twins:
        a, b = twins[0]
        differ = [c for c in res.columns if _label(a.get(c)) != _label(b.get(c))]
        raise BenchError(f"run '{run.dir}': {len(twins)} pair(s) of results rows share every label "
                         f"({', '.join(cols)}), e.g. {a.get('case_id')} at {_label(a.get('size_bytes'))} B "
                         f"{_label(a.get('placement'))}; they differ in {', '.join(differ[:6]) or 'no column'}: one "
                         "series cannot hold both; store them as separate runs (one `distbench import` per file)")
    return rows


def load(run_dir) -> Run:
    """A run to export: its results rows, or one BenchError saying why there are none."""
    run = load_run(Path(run_dir))
    if "results" not in run.tables or run["results"].empty:
        if run.problems:  # the real problem first: the file that cannot be read
            raise BenchError(f"run '{run_dir}' cannot be read: {run.problems[0]}")
        raise BenchError(f"run '{run_dir}' has no results rows")
    return run


def families(run_dirs, stamp: bool) -> tuple[Families, list[str]]:
    """The families of these runs, and the problems met reading them (files skipped, each named)."""
    fams = Families(stamp)
    problems: list[str] = []
    ids: dict = {}
    for d in run_dirs:
        run = load(d)
        rid = _label(run.meta.get("run_id")) or run.dir.name
        if rid in ids:
            raise BenchError(f"RUN '{d}' and RUN '{ids[rid]}' are one run (run id {rid}, a copy): every series "
                             "of theirs would be there twice, which Prometheus and node_exporter refuse; give one")
        ids[rid] = d
        add_run(fams, run)
        problems += run.problems
    return fams, problems


def openmetrics_text(run_dirs) -> tuple[str, list[str]]:
    """OpenMetrics 1.0 text of these runs (ends with `# EOF`), every sample at its run's start time."""
    fams, problems = families(run_dirs, stamp=True)
    return om_exposition.generate_latest(fams.registry()).decode(), problems


def write_textfile(run_dirs, path) -> list[str]:
    """The runs' text format file at `path` (*.prom), written to a temp file beside it and renamed
    (prometheus_client.write_to_textfile), so node_exporter never reads half a file."""
    fams, problems = families(run_dirs, stamp=False)
    exposition.write_to_textfile(str(path), fams.registry())
    return problems
