"""Stored baselines: results/baselines/<fingerprint>/ (docs/gate.md).

A baseline is R fresh launches (repeats) of one suite on one machine class:

    meta.json         baseline_format, schema_version, fingerprint, kind, suite, suite_path, config,
                      repeats [{run_id, started_utc, git_sha, git_dirty}], generation, history
    results.parquet   every repeat's results rows (run_id tells them apart)
    samples.parquet   every repeat's raw samples
    cases.csv         per case and metric: center, band, spread, repeats, unstable (text: a change
                      to the baseline is a readable diff in review)
    history.parquet   append-only: every generation's rows, with generation / action / recorded_utc

Only `distbench baseline record` and `distbench baseline update --from RUN...` write one; both add
a generation to the history and never drop an old one.
"""

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.errors import BenchError
from bench.regress.launch import run_suite  # noqa: F401  (bl.run_suite: what the gate and its tests call)
from bench.regress.compare import Rules, compare_rows, normalize_kind, public
from bench.results import fingerprint as fp
from bench.results.metadata import utc_now
from bench.results.schema import SCHEMA_VERSION, conform
from bench.results.store import load_run, write_json, write_parquet
from bench.suite import tomllib
from bench.timing.progress import Progress

BASELINE_FORMAT = 1
DEFAULT_ROOT = "results/baselines"
DEFAULT_REPEATS = 8  # t_{0.99,7} = 3.0: bands ~30% narrower than with 5


class NotComparable(Exception):
    """No comparable baseline (missing, other machine class, older schema): exit code 3."""


@dataclass
class Baseline:
    dir: Path
    meta: dict
    results: pd.DataFrame
    samples: pd.DataFrame | None

    @property
    def fingerprint(self) -> fp.Fingerprint:
        return fp.Fingerprint.from_dict(self.meta["fingerprint"])

    @property
    def kind(self) -> str:
        return self.meta.get("kind", "")


def is_baseline(path) -> bool:
    p = Path(path) / "meta.json"
    if not p.exists():
        return False
    try:
        return "baseline_format" in json.loads(p.read_text())
    except (OSError, ValueError):
        return False


def load(path) -> Baseline:
    """Read a baseline directory; NotComparable when it is missing or of another schema."""
    d = Path(path)
    if not (d / "meta.json").exists():
        raise NotComparable(f"no baseline at {d} (no meta.json)")
    meta = json.loads((d / "meta.json").read_text())
    if "baseline_format" not in meta:
        raise NotComparable(f"{d} is not a baseline (meta.json has no baseline_format); record one with "
                            f"`distbench baseline record --suite ...`")
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION or meta["baseline_format"] > BASELINE_FORMAT:
        raise NotComparable(
            f"baseline {d} has result schema version {version} (baseline format {meta['baseline_format']}); "
            f"this distbench reads schema version {SCHEMA_VERSION} (format {BASELINE_FORMAT}): re-record it with "
            f"`distbench baseline record --suite {meta.get('suite_path') or '<suite>'}`")
    if not (d / "results.parquet").exists():
        raise NotComparable(f"baseline {d} has no results.parquet")
    results = pd.read_parquet(d / "results.parquet")
    samples = pd.read_parquet(d / "samples.parquet") if (d / "samples.parquet").exists() else None
    return Baseline(dir=d, meta=meta, results=results, samples=samples)


def find(root, want: fp.Fingerprint) -> Path:
    """The baseline directory for `want` under root, or NotComparable naming the closest one's
    differing fields."""
    root = Path(root)
    exact = root / want.slug()
    if (exact / "meta.json").exists():
        return exact
    candidates = []
    for m in sorted(root.glob("*/meta.json")) if root.is_dir() else []:
        try:
            other = fp.Fingerprint.from_dict(json.loads(m.read_text())["fingerprint"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        diff = fp.differences(other, want)
        if not diff:
            return m.parent
        candidates.append((len(diff), m.parent.name, diff))
    if not candidates:
        raise NotComparable(f"no comparable baseline: none stored under {root} (this machine: {want.slug()})")
    _, name, diff = min(candidates)
    raise NotComparable(f"no comparable baseline for {want.slug()} under {root}; closest is {name}, "
                        f"which differs in {'; '.join(f'{d} (baseline vs this machine)' for d in diff)}")


# ---------------------------------------------------------------------------------------------
# Writing


def _run_facts(run) -> dict:
    m = run.meta
    return {"run_id": m.get("run_id") or run.dir.name, "started_utc": m.get("started_utc"),
            "git_sha": m.get("git_sha"), "git_dirty": m.get("git_dirty"), "command_line": m.get("command_line")}


def _nccl_env(meta: dict) -> dict:
    """Every NCCL_* / TORCH_NCCL_* variable of a run's launches (meta.json launches.*.nccl_env)."""
    out = dict(meta.get("nccl_env") or {})
    for la in (meta.get("launches") or {}).values():
        out.update(la.get("nccl_env") or {})
    return out


def write(root, run_dirs, action: str, suite_path: str | None = None, dest: Path | None = None,
          rules=None) -> Path:
    """Make (or replace the current generation of) the baseline from `run_dirs`, one repeat each.

    Every run must have the same kind, suite and fingerprint. Returns the baseline directory."""
    runs = [load_run(d) for d in run_dirs]
    if not runs:
        raise BenchError("a baseline needs at least one run")
    for r in runs:
        if "results" not in r.tables or r["results"].empty:
            raise BenchError(f"run {r.dir} has no results rows")
        if r.meta.get("schema_version") != SCHEMA_VERSION:
            raise BenchError(f"run {r.dir} has schema version {r.meta.get('schema_version')}, "
                             f"this distbench writes {SCHEMA_VERSION}")
    prints = [fp.of_run(r.meta) for r in runs]
    kinds = [normalize_kind(r.meta.get("kind") or r["results"]["kind"].iloc[0]) for r in runs]
    suites = [r.meta.get("suite") for r in runs]
    for r, p, k, s in zip(runs[1:], prints[1:], kinds[1:], suites[1:]):
        if fp.differences(prints[0], p):
            raise BenchError(f"run {r.dir} is from another machine class than {runs[0].dir}: "
                             f"{'; '.join(fp.differences(prints[0], p))}")
        if (k, s) != (kinds[0], suites[0]):
            raise BenchError(f"run {r.dir} is suite {s} ({k}); {runs[0].dir} is suite {suites[0]} ({kinds[0]})")
    dest = Path(dest) if dest else Path(root) / prints[0].slug()
    old_meta = json.loads((dest / "meta.json").read_text()) if (dest / "meta.json").exists() else {}
    if old_meta and old_meta.get("fingerprint") and fp.differences(fp.Fingerprint.from_dict(old_meta["fingerprint"]), prints[0]):
        raise BenchError(f"baseline {dest} is for another machine class: "
                         f"{'; '.join(fp.differences(fp.Fingerprint.from_dict(old_meta['fingerprint']), prints[0]))}")
    generation = int(old_meta.get("generation", 0)) + 1
    results = conform(pd.concat([r["results"] for r in runs], ignore_index=True), "results")
    samples = [r.tables["samples"] for r in runs if "samples" in r.tables]
    now = utc_now()
    meta = {
        "baseline_format": BASELINE_FORMAT, "schema_version": SCHEMA_VERSION,
        "fingerprint": prints[0].to_dict(), "slug": prints[0].slug(), "kind": kinds[0], "suite": suites[0],
        "suite_path": suite_path or old_meta.get("suite_path"), "config": runs[0].meta.get("config"),
        "software": runs[0].meta.get("software"), "cluster": runs[0].meta.get("cluster"),
        "nccl_env": _nccl_env(runs[0].meta), "repeats": [_run_facts(r) for r in runs],
        "generation": generation, "action": action, "recorded_utc": now,
        "history": [*old_meta.get("history", []), {"generation": generation, "action": action, "recorded_utc": now,
                                                   "runs": [_run_facts(r)["run_id"] for r in runs]}],
    }
    dest.mkdir(parents=True, exist_ok=True)
    history_rows = results.assign(generation=generation, action=action, recorded_utc=now)
    hist_path = dest / "history.parquet"
    if hist_path.exists():
        history_rows = pd.concat([pd.read_parquet(hist_path), history_rows], ignore_index=True)
    write_parquet(history_rows, hist_path)
    write_parquet(results, dest / "results.parquet")
    if samples:
        write_parquet(pd.concat(samples, ignore_index=True), dest / "samples.parquet")
    cmp = compare_rows(results, results.iloc[0:0], kinds[0], rules or Rules())
    summary = public(cmp.cases).drop(columns=["current", "ratio", "worse", "residual", "verdict", "wrong", "throttled"], errors="ignore")
    if len(summary):
        summary["unstable"] = [not (b <= (rules or Rules()).max_case_band) for b in summary["band"]]
    summary.to_csv(dest / "cases.csv", index=False, float_format="%.6g")
    write_json(meta, dest / "meta.json")
    return dest


# ---------------------------------------------------------------------------------------------
# Running a suite in a fresh launch (baseline repeats, confirmation re-runs)


def suite_kind(suite_path) -> str:
    try:
        raw = tomllib.loads(Path(suite_path).read_text())
    except FileNotFoundError:
        raise BenchError(f"suite file '{suite_path}' not found") from None
    except tomllib.TOMLDecodeError as e:
        raise BenchError(f"suite file '{suite_path}': malformed TOML: {e}") from None
    if "kind" not in raw:
        raise BenchError(f"suite file '{suite_path}' has no 'kind' key")
    return str(raw["kind"])


def toml_text(values: dict) -> str:
    """A flat TOML document (str, int, float, bool and lists of them) for a resolved config."""
    def lit(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v) if not (isinstance(v, float) and not math.isfinite(v)) else "nan"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(lit(x) for x in v) + "]"
        return json.dumps(str(v))

    return "".join(f"{k} = {lit(v)}\n" for k, v in values.items() if v is not None)


def record(suite_path, repeats: int, root=DEFAULT_ROOT, out="results", rules=None, log=print) -> Path:
    """Run the suite `repeats` times, each in a fresh launch, and store the runs as the baseline."""
    if repeats < 1:
        raise BenchError(f"--repeats {repeats} must be >= 1 (>= 3 to estimate the between-launch noise)")
    kind = suite_kind(suite_path)
    runs = []
    progress = Progress(repeats, plain=True)
    for i in range(repeats):
        log(f"# baseline repeat {i + 1}/{repeats}: distbench {kind} --suite {suite_path}")
        runs.append(run_suite(kind, suite_path, out))
        progress.tick(f"baseline repeat {i + 1}/{repeats}")
    return write(root, runs, "record", suite_path=str(suite_path), rules=rules)


def rerun_from_meta(meta: dict, extra_args=(), out=None) -> Path:
    """Run the same suite as a stored run (its resolved config from meta.json) in a fresh launch."""
    kind = meta.get("kind")
    config = dict(meta.get("config") or {})
    if not kind or not config:
        raise BenchError("the run's meta.json has no kind/config to re-run it from")
    kind = normalize_kind(kind)
    tmp = Path(tempfile.mkdtemp(prefix="distbench-confirm-"))
    config.pop("out", None)
    suite = tmp / "suite.toml"
    suite.write_text(toml_text({"kind": kind, **config}))
    return run_suite(kind, suite, out or tmp / "results", extra_args, ok_codes=(0, 1))
