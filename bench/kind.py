"""What a benchmark kind is: one `Kind` per kind, registered once, one name everywhere (the CLI
subcommand, the package, meta.json's `kind`, the rows' `kind` column).

A Kind is a closed plug, read as a small table of three parts:
- run: config, options, units, measure, plan, memory (what the harness and preflight call);
- read (`Reading`): which columns identify a case, its metrics and their direction, which are
  gated, how cases group for the gate and how a re-run is narrowed (what results/ asks);
- report (`Report`): its title, its report section and its terminal summary (what report/ asks).
The generic layers (harness, results, report, preflight, CLI) ask the Kind and never name one,
the way nccl-tests' common harness never names a collective (each answers getBuffSize, getBw).
This module sits on the ground floor: it imports nothing of bench but the registry.
"""

import argparse
import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from bench.registry import Registry


@dataclass(frozen=True, kw_only=True)
class LaunchPlan:
    """One fresh launch (one process group) of a run."""

    world: int
    config: Any  # the config this launch runs (a variant launch may narrow it)
    env: dict = field(default_factory=dict)  # environment changes for this launch only (e.g. NCCL_ALGO)
    key: str = ""  # meta.json `launches` key; "" = str(world)
    part_prefix: str = ""  # part file prefix; "" = f"w{world}-"


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Every launch of one run, and the launcher-side facts for meta.json."""

    launches: list[LaunchPlan]
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Metric:
    """A measured column of the results table and which way is better."""

    column: str
    lower_is_better: bool
    gated: bool  # decides the gate; the others are shown only


# Every kind's case key starts with these (bench.results.schema's common columns).
BASE_KEYS = ("case_id", "size_bytes", "placement", "world")


def no_narrowing(rows) -> list[str]:
    return []


@dataclass(frozen=True, kw_only=True)
class Reading:
    """How the generic readers (runs, compare, gate, export, report) read this kind's stored rows."""

    keys: tuple[str, ...] = ()  # columns that identify a case, after BASE_KEYS
    metrics: tuple[Metric, ...]  # compared metrics, gated or shown
    group: str  # the column whose values group cases for the gate's per-group mean (e.g. a collective)
    narrow: Callable[[Any], list[str]] = no_narrowing  # (results rows to re-run) -> CLI options that
    # restrict a fresh launch of the run's own suite to (a superset of) them; [] re-runs the whole suite
    aliases: tuple[str, ...] = ()  # other names stored runs use for this kind (older result kinds)
    claims: Callable[[dict], bool] = lambda meta: False  # a stored run whose meta names another kind
    # (or none) but is this kind's (older runs); checked after meta["kind"]
    settings: tuple[str, ...] = ()  # result columns that change the numbers without being in the key:
    # a run and a baseline are compared only when they agree (the gate's like-with-like check)
    sized: bool = False  # cases sweep message sizes (`world` of a suite is the sweep of worlds)

    def key_columns(self) -> tuple[str, ...]:
        return (*BASE_KEYS, *self.keys)

    def gated(self) -> tuple[Metric, ...]:
        return tuple(m for m in self.metrics if m.gated)


@dataclass(frozen=True, kw_only=True)
class Memory:
    """What a launch of this kind needs per rank, built from what each unit says of itself (a
    collective its buffers, like nccl-tests' getBuffSize; an algorithm its scratch; a strategy its
    parameters, gradients, optimizer state and activations). Preflight compares it with what is
    free and knows no unit by name."""

    need: Callable[[Any, int], tuple[int, str]]  # (cfg, world) -> (bytes per rank of the largest
    # case, which case it is); 0 when no case runs at this world
    fits: Callable[[Any, int, float], list[str]]  # (cfg, world, budget bytes) -> what of this sweep
    # would fit (e.g. the sizes, a smaller batch), for the refusal's hint


@dataclass(frozen=True, kw_only=True)
class Report:
    """What a person sees of this kind: its report section and its terminal output."""

    title: str  # the report section's heading
    section: Callable[[list, Any], Any]  # (report entries of this kind, out dir) -> report Section
    summary: Callable[[Any], str]  # loaded Run -> the closing summary text
    live: Callable[[], "Live"]  # a fresh terminal printer for one launch
    headline: Callable[[list, Any], Any] | None = None  # (report entries of this kind, out dir) -> a
    # report Section with the answer a reader came for: one small plot and a short table (the page's
    # first screen shows every kind's, before the details and the run metadata)


class Live(Protocol):
    """Rank 0's terminal output while a launch runs (bench.report.terminal implements one per kind)."""

    def start(self, launch) -> None: ...
    def unit(self, unit, index: int, total: int) -> None: ...
    def done(self, tables: dict) -> None: ...


def first_doc_line(doc: str | None) -> str:
    """A module's or a unit's one-line description (for `distbench list`)."""
    lines = (doc or "").strip().splitlines()
    return lines[0] if lines else ""


def drawn_by(module: str, name: str, *args, **kwargs) -> Callable:
    """A report function of `module` (a kind's plots), imported when first called with
    (entries, out, *args, **kwargs): plots pull matplotlib (about 1-2 s), which a command that draws
    nothing (runs, history, gate, a benchmark) should not pay at its start."""

    def draw(entries, out):
        return getattr(importlib.import_module(module), name)(entries, out, *args, **kwargs)

    draw.__qualname__ = f"{module}.{name}"
    return draw


def later(module: str, name: str) -> Callable:
    """`module`'s `name` (a dotted path: "MEMORY.need"), imported when first called: what a kind
    does only when it launches (units, measure, plan, memory) imports torch, which a command that
    reads stored runs or prints help (runs, show, report, `--help`) should not pay at its start."""

    def call(*args, **kwargs):
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj(*args, **kwargs)

    call.__qualname__ = f"{module}.{name}"
    return call


def memory_later(module: str, name: str = "MEMORY") -> Memory:
    """`module`'s Memory (`name`), imported when preflight first asks (see `later`)."""
    return Memory(need=later(module, f"{name}.need"), fits=later(module, f"{name}.fits"))


def one_launch_per_world(cfg, backend: str, worlds) -> Plan:
    return Plan(launches=[LaunchPlan(world=w, config=cfg) for w in worlds])


def _kind_of_module(module: str) -> "Kind":
    return importlib.import_module(module).KIND


@dataclass(frozen=True, kw_only=True)
class Kind:
    """Pickles by reference (module + its KIND), so a Job carries it to spawned ranks."""

    name: str
    module: str  # the module that defines it as KIND (pass __name__)
    help: str
    config: type | str  # a bench.suite.RunConfig subclass, or "module:Class" (imported when a launch configures)
    tables: tuple[str, ...]  # the tables its runs hold (bench.results.schema.TABLES keys)
    columns: dict = field(default_factory=dict)  # {table: {column: dtype}} this kind adds to the generic
    # tables or brings of its own (bench.results.schema.TABLES merges them; the schema file names no kind)
    add_options: Callable[[argparse.ArgumentParser], None]  # its own CLI options (common ones are added for it)
    options: Callable[[argparse.Namespace], dict]  # parsed options -> config field overrides
    units: Callable[[Any, int, dict], tuple[list, list[str]]]  # (cfg, world, run meta) -> (units, notes); pure;
    # each unit has a stable `key` (str) and a `label` (what a person calls it)
    measure: Callable[[Any, Any], dict]  # (unit, launch) -> {table: rows}, on every rank (rows on rank 0)
    memory: Memory  # what a launch needs per rank (preflight)
    read: Reading  # how stored rows are read (results/)
    report: Report  # what a person sees (report/)
    worlds: Callable[[Any], tuple[int, ...]] = lambda cfg: tuple(cfg.world)  # self-launch world sizes
    at_world: Callable[[Any, int], Any] = lambda cfg, world: dataclasses.replace(cfg, world=(world,))  # the
    # config at the world torchrun / srun / mpirun chose (raises BenchError where the suite cannot run there)
    plan: Callable[[Any, str, tuple], Plan] = one_launch_per_world  # (cfg, backend, worlds) -> Plan; validates
    after_units: Callable[[Any, Any], dict | None] | None = None  # (cfg, launch) -> extra tables, every rank
    finish: Callable[[Any, Any], None] | None = None  # (run_dir, cfg) after every launch (e.g. a model fit)
    acceptance: Callable[[Any, Any], list[str]] | None = None  # (loaded run, cfg) -> failures: exit 1
    # (e.g. collectives' --min-busbw, nccl-tests' NCCL_TESTS_MIN_BW)
    listing: Callable[[], list[str]] = lambda: []  # what `distbench list` prints of its units, one line each
    estimate_s: Callable[[Any, Any], float | None] = lambda cfg, unit: None  # a unit's expected seconds
    # (for --dry-run and the derived wall-clock limit); None: cannot tell before measuring


    def __reduce__(self):
        return (_kind_of_module, (self.module,))

    def config_class(self) -> type:
        """The config class (`config`, imported here when it names one "module:Class")."""
        if not isinstance(self.config, str):
            return self.config
        module, _, name = self.config.partition(":")
        return getattr(importlib.import_module(module), name)


KINDS: Registry[Kind] = Registry("benchmark kind")


def kind_named(name) -> Kind:
    """The registered kind a stored name means (its own name or one of its aliases)."""
    key = str(name or "").strip().lower()
    for k in KINDS:
        if key == k.name or key in k.read.aliases:
            return k
    return KINDS.get(key)  # unknown: a did-you-mean BenchError


def kind_of_run(meta: dict, result_kinds=()) -> str:
    """A stored run's kind name: meta.json's `kind` (or an alias), else a kind that claims the run,
    else the results rows' kind column; 'unknown' when nothing says, 'mixed' when rows disagree."""
    for k in KINDS:
        if meta.get("kind") and (meta["kind"] == k.name or meta["kind"] in k.read.aliases):
            return k.name
    for k in KINDS:
        if k.read.claims(meta):
            return k.name
    if meta.get("kind"):
        return str(meta["kind"])
    names = set()
    for r in result_kinds:
        try:
            names.add(kind_named(r).name)
        except Exception:  # noqa: BLE001 - a kind no longer registered is reported by its stored name
            names.add(str(r))
    return names.pop() if len(names) == 1 else ("unknown" if not names else "mixed")


def render_run(run) -> str:
    """A stored run's closing summary, as the live run printed it (`distbench show`)."""
    return kind_named(kind_of_run(run.meta)).report.summary(run)
