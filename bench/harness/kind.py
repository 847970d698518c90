"""What a benchmark kind is: one `Kind` per kind, registered once, one name everywhere (the CLI
subcommand, the package, meta.json's `kind`, the rows' `kind` column)."""

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


class Live(Protocol):
    """Rank 0's terminal output while a launch runs (bench.report.terminal implements one per kind)."""

    def start(self, launch) -> None: ...
    def unit(self, unit, index: int, total: int) -> None: ...
    def done(self, tables: dict) -> None: ...


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
    config: type  # a bench.suite.RunConfig subclass
    tables: tuple[str, ...]  # the tables its runs hold (bench.results.schema.TABLES keys)
    add_options: Callable[[argparse.ArgumentParser], None]  # its own CLI options (common ones are added for it)
    options: Callable[[argparse.Namespace], dict]  # parsed options -> config field overrides
    units: Callable[[Any, int, dict], tuple[list, list[str]]]  # (cfg, world, run meta) -> (units, notes); pure;
    # each unit has a stable `key` (str) and a `label` (what a person calls it)
    measure: Callable[[Any, Any], dict]  # (unit, launch) -> {table: rows}, on every rank (rows on rank 0)
    summary: Callable[[Any], str]  # loaded Run -> the closing summary text
    live: Callable[[], Live]  # a fresh terminal printer for one launch
    worlds: Callable[[Any], tuple[int, ...]] = lambda cfg: tuple(cfg.world)  # self-launch world sizes
    at_world: Callable[[Any, int], Any] = lambda cfg, world: dataclasses.replace(cfg, world=(world,))  # the
    # config at the world torchrun / srun / mpirun chose (raises BenchError where the suite cannot run there)
    plan: Callable[[Any, str, tuple], Plan] = one_launch_per_world  # (cfg, backend, worlds) -> Plan; validates
    after_units: Callable[[Any, Any], dict | None] | None = None  # (cfg, launch) -> extra tables, every rank
    finish: Callable[[Any, Any], None] | None = None  # (run_dir, cfg) after every launch (e.g. a model fit)
    acceptance: Callable[[Any, Any], list[str]] | None = None  # (loaded run, cfg) -> failures: exit 1
    # (e.g. collectives' --min-busbw, nccl-tests' NCCL_TESTS_MIN_BW)
    estimate_s: Callable[[Any, Any], float | None] = lambda cfg, unit: None  # a unit's expected seconds
    # (for --dry-run and the derived wall-clock limit); None: cannot tell before measuring


    def __reduce__(self):
        return (_kind_of_module, (self.module,))


KINDS: Registry[Kind] = Registry("benchmark kind")
