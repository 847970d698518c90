"""A toy benchmark kind defined outside bench/ (issue 19): one trivial measured op, registered
here, driven through run, show, report, compare, gate and preflight by test_kind_plug.py. If any
generic layer needed an edit to run it, the Kind would not be a closed plug."""

import statistics
import time
from dataclasses import dataclass

import torch

from bench.kind import KINDS, Kind, Memory, Metric, Reading, Report
from bench.options import overrides
from bench.report.plots.common import Section
from bench.suite import RunConfig
from bench.units import parse_size

NAME = "toyadd"
# a column of its own: the results table gains it through Kind.columns (bench.results.schema names no kind)
COLUMNS = {"results": {"toy_adds_per_s": "float64"}}


@dataclass(frozen=True, kw_only=True)
class ToyConfig(RunConfig):
    name: str = NAME
    world: tuple[int, ...] = (2,)
    sizes: tuple[str, ...] = ("4K", "64K")
    iters: int = 5


@dataclass(frozen=True)
class Unit:
    size: int  # bytes of the float32 tensor added to

    @property
    def key(self) -> str:
        return f"add@{self.size}B"

    label = key


def add_options(p):
    p.add_argument("--sizes", default=None, help="comma list")


def options(args) -> dict:
    return overrides(args, ("sizes",))


def units(cfg: ToyConfig, world: int, meta: dict):
    return [Unit(parse_size(s)) for s in cfg.sizes], []


def need(cfg: ToyConfig, world: int) -> tuple[int, str]:
    size = max(parse_size(s) for s in cfg.sizes)  # one buffer of the unit's size per rank
    return size, f"add at {size} B"


def fits(cfg: ToyConfig, world: int, budget: float) -> list[str]:
    return [s for s in cfg.sizes if parse_size(s) <= budget]


def measure(unit: Unit, launch) -> dict:
    x = torch.zeros(unit.size // 4)
    times = []
    for _ in range(launch.job.config.iters):
        t0 = time.perf_counter()
        x.add_(1.0)
        launch.comm.barrier()
        times.append(time.perf_counter() - t0)
    wrong = int((x != launch.job.config.iters).sum())
    if launch.info.rank != 0:
        return {"results": []}
    return {"results": [{**launch.base_row(), "case_id": "toy.add", "size_bytes": unit.size,
                         "placement": "in-place", "time_median_s": statistics.median(times), "wrong": wrong,
                         "toy_adds_per_s": 1.0 / statistics.median(times)}]}


def section(entries, out_dir) -> Section:
    sec = Section(NAME, NAME)
    sec.notes.append(f"{len(entries)} toy run(s)")
    return sec


def summary(run) -> str:
    res = run.tables.get("results")
    return f"# toy summary: {0 if res is None else len(res)} row(s)"


class Live:
    def start(self, launch, units): ...
    def unit(self, unit, index: int, total: int): ...
    def done(self, tables: dict): ...


KIND = KINDS.register(Kind(
    module=__name__, name=NAME, help="a toy kind (tests only)", config=ToyConfig, tables=("results",), columns=COLUMNS,
    add_options=add_options, options=options, units=units, measure=measure, memory=Memory(need=need, fits=fits),
    read=Reading(metrics=(Metric("time_median_s", True, True), Metric("toy_adds_per_s", False, False)),
                 group="case_id"),
    report=Report(title="Toy adds", section=section, summary=summary, live=Live),
)) if NAME not in KINDS else KINDS.get(NAME)
