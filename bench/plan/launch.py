"""The launches the planner measures: `distbench pipeline --suite S [--model M] --out OUT`, each a
process of its own (bench.regress.launch.run_suite). With --calibrate --validate and no
validation runs given, the calibration and validation launches interleave A B B A (C V V C, then
again; bench.regress.launch.interleaved): a host that drifts linearly over the launches
(docs/gate.md) moves both sides alike, so the calibration is not a launch older than what it is
judged on. Every launch measures one model: --model, else the given runs', else the calibration
suite's."""

from dataclasses import dataclass
from pathlib import Path

from bench.regress.launch import interleaved, run_suite
from bench.suite import resolve_suite, tomllib
from bench.timing.progress import Progress

CALIBRATE, VALIDATE = "C", "V"


@dataclass(frozen=True, kw_only=True)
class Launch:
    role: str  # CALIBRATE or VALIDATE
    suite: Path  # the suite file
    name: str  # the suite's name (its TOML `name`, else the file's stem)


def launch(role: str, suite_name: str) -> Launch:
    suite = resolve_suite(suite_name, "pipeline")
    return Launch(role=role, suite=suite, name=tomllib.loads(suite.read_text()).get("name", suite.stem))


def planned(launches: int, calibrate_suite: str, validate_suite: str | None) -> list[Launch]:
    """`launches` calibration launches, interleaved A B B A with as many validation launches when
    `validate_suite` is given (--validate without runs)."""
    if validate_suite is None:
        return [launch(CALIBRATE, calibrate_suite) for _ in range(launches)]
    suites = {CALIBRATE: calibrate_suite, VALIDATE: validate_suite}
    return [launch(s, suites[s]) for s in interleaved(launches, CALIBRATE, VALIDATE)]


def model_for(model: str | None, given_model: str | None, calibrate_suite: str, both: bool) -> str | None:
    """The one model every launch measures: --model, else the given runs', else (when validation
    launches come too) the calibration suite's; None lets a lone calibration suite pick its own."""
    model = model or given_model
    if both and model is None:
        model = tomllib.loads(resolve_suite(calibrate_suite, "pipeline").read_text()).get("model")
    return model


def measure(one: Launch, model: str | None, out: str | None) -> Path:
    """Run one launch (its output shown as it runs); returns the run directory it wrote."""
    return run_suite("pipeline", one.suite, out or "results", ["--model", model] if model else [], timeout_s=None,
                     stream=True)


def measure_all(launches: list[Launch], model: str | None, out: str | None) -> list[Path]:
    """Every launch in order, each named before it starts, with `[n/N] <launch> done, elapsed, ETA`
    on stderr after it (bench.timing.progress); the run directories, in the launches' order."""
    progress = Progress(len(launches), plain=True)
    runs = []
    for one in launches:
        print(f"plan: measuring {one.name}", flush=True)
        runs.append(measure(one, model, out))
        progress.tick(f"plan {'calibration' if one.role == CALIBRATE else 'validation'} launch {one.name}")
    return runs
