"""Command-line vocabulary shared by every subcommand: the parser that turns argparse errors into
one-line usage errors, the options every kind has, and option -> config-field overrides."""

import argparse
import copy
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.suite import int_list, shipped_suites, split_list

# The suite `gate --against REV` and `bisect` run when --suite is left out: what `make gate-ab` runs.
AB_SUITE = "suites/smoke.toml"


def ab_suite(given: str | None) -> str:
    """--suite of `gate --against` and `bisect`: the file given, else AB_SUITE (relative to the working
    directory when it is there, else the shipped copy)."""
    if given:
        return given
    if Path(AB_SUITE).is_file():
        return AB_SUITE
    shipped = shipped_suites().get(Path(AB_SUITE).stem)
    return str(shipped) if shipped else AB_SUITE


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the whole usage otherwise)
        raise BenchError(message)


# One meaning per option name across every subcommand. An option that two subcommands define
# differently (another dest or help) is listed here, and each definition's help names the meaning
# (tests/test_cli_vocabulary.py walks every subcommand's parser and checks this).
VOCABULARY = {
    "--out": "results root",  # where runs are written and read: <out>/<suite>/<run_id>/, readers and writers alike
    "--output-dir": "directory",  # where a report or a plot is written (never a results root)
    "--output": "file",  # one file to write (default: stdout)
    "--format": "format",  # what is printed; its choices enumerated by argparse
    "--profile": "torch.profiler",  # training kinds: 1 traces steps; the sweeps name the size to trace: --profile-size
    "--suite": "suite",
    "--nproc": "ranks",
    "--world": "ranks",
    "--backend": "backend",
    "--baseline": "baseline",
    "--sizes": "sizes",
    "--budget-s": "seconds",
    "--repeats": "repeated",
    "--mode": "latency",  # a timing mode: latency | throughput (| nccl-tests)
    "--dtype": "dtype",
    "--dtypes": "dtype",
    "--op": "sum",
    "--ops": "sum",
    "-b": "sweep start",
    "--min-bytes": "sweep start",
    "--warmup": "warm-up",
    "--reps": "timed repetitions",
    "--cluster-fingerprint": "cluster fingerprint",  # doctor: measure one; plan: read one
    "--check": "correctness check",
    "--model": "model",
    "--schedule": "schedule",
    "--schedules": "schedule",
    "--chunks": "micro-batch",
    "--stages": "pipeline ranks",
    "--dp": "replicas",
    "--tp": "tensor-parallel",
    "--fsdp": "FSDP2 shards",
    "--ranks-per-node": "node",
    "--nodes": "number of nodes",
    "--checkpoint": "checkpoint",
    "--batch": "mini-batch",
    "--collective": "collective",
    "--case": "case",
    "--group": "group",
    "--kind": "kind",
    "--pairs": "pairs",
    "--rules": "rules",
    "--against": "judge",  # what the figures are judged against: gate's git revision, injob's stored run
}


class _Deprecated:
    """Mixed into a copy of the canonical option's action: parses the same, says once on stderr that
    the spelling is old (one line), and stays out of --help."""
    use = ""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"distbench: note: {option_string} is deprecated, use {self.use}", file=sys.stderr)
        super().__call__(parser, namespace, values, option_string)


def deprecated(p: argparse.ArgumentParser, old: str, use: str, **store):
    """Accept the old spelling `old` of option `use` (same dest, type and action), with a one-line note.
    An old option with no one-option equivalent gives its own `store` arguments (dest, type...) instead."""
    if store:
        p.add_argument(old, **store, help=argparse.SUPPRESS,
                       action=type("DeprecatedStore", (_Deprecated, argparse._StoreAction), {"use": use}))
        return
    canon = p._option_string_actions[use]
    alias = copy.copy(canon)
    alias.__class__ = type(f"Deprecated{type(canon).__name__}", (_Deprecated, type(canon)), {"use": use})
    alias.option_strings, alias.help, alias.required = [old], argparse.SUPPRESS, False
    p._add_action(alias)


def add_common(p: argparse.ArgumentParser, default_suite: str):
    """The options of bench.suite.RunConfig (every kind) plus --suite and --nproc."""
    p.add_argument("--suite", default=None, help=f"TOML suite file or shipped suite name (default {default_suite})")
    p.add_argument("--nproc", "--world", dest="world", default=None,
                   help="ranks to launch here, comma list for several launches (suite field 'world')")
    p.add_argument("--backend", default=None, help="process-group backend: auto | gloo | nccl (auto: nccl with CUDA, "
                   "else gloo)")
    p.add_argument("--out", default=None, metavar="DIR", help="results root (default results/)")
    p.add_argument("--timeout-s", type=float, default=None, help="process-group timeout in seconds")
    p.add_argument("--no-telemetry", dest="telemetry", action="store_const", const=False, default=None,
                   help="do not sample NVML / host telemetry during cases (suite field 'telemetry')")
    p.add_argument("--telemetry-interval-s", dest="telemetry_interval_s", type=float, default=None,
                   help="seconds between telemetry samples (default 0.1)")
    p.add_argument("--case-timeout-s", dest="case_timeout_s", type=float, default=None,
                   help="wall-clock limit of one case (default: derived from its budget, at least 60 s)")
    p.add_argument("--keep-going", dest="keep_going", action="store_const", const=True, default=None,
                   help="after a failed or hung case, continue in a fresh launch from the next case")
    p.add_argument("--resume", default=None, metavar="RUN_ID",
                   help="continue an interrupted or failed run without redoing its finished cases")
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="print the planned cases, sizes and an estimated duration; write nothing")


COMMON = ("backend", "out", "timeout_s", "telemetry", "telemetry_interval_s", "case_timeout_s", "keep_going")
SCALARS = ("backend", "out", "min_bytes", "max_bytes", "chunk_bytes", "model", "min_busbw")  # strings that are not lists


def overrides(args, names) -> dict:
    """{field: value} for the options given; comma strings become tuples except SCALARS."""
    out = {}
    for n in (*COMMON, *names):
        v = getattr(args, n, None)
        if v is None:
            continue
        out[n] = split_list(v) if isinstance(v, str) and n not in SCALARS else v
    return out


def ints(args, names, one: tuple = ()) -> dict:
    """Integer-list options; those in `one` take exactly one value."""
    out = {}
    for n in names:
        v = getattr(args, n, None)
        if v is None:
            continue
        vals = int_list(v, n.replace("_", "-"))
        if not vals:
            raise BenchError(f"bad {n.replace('_', '-')} '{v}': expected comma-separated integers, e.g. 1,4")
        if n in one:
            if len(vals) != 1:
                raise BenchError(f"{n.replace('_', '-')} takes one value, got {v}")
            vals = vals[0]
        out[n] = vals
    return out


def add_training_options(p: argparse.ArgumentParser):
    """Options of the training kinds (strategies, pipeline)."""
    p.add_argument("--batch", default=None, help="global mini-batch, samples")
    p.add_argument("--steps", default=None, help="timed steps (>= 5)")
    p.add_argument("--warmup", default=None, help="discarded warm-up steps")
    p.add_argument("--check", default=None,
                   help="1: correctness check, the first step against the single-process reference")
    p.add_argument("--seed", default=None,
                   help="seed of the model's initial weights and of the data (default 0, or the suite's 'seed')")
