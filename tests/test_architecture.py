"""Dependency directions of bench/, read from the source with `ast` (top-level imports and those
inside functions alike): no module but bench/__main__.py imports bench.cli; the launch package,
the timing package, the store and the shared vocabulary import no kind; the store never imports
the report; no import cycle between bench modules counting top-level imports; and every import
left inside a function says why on its line (`# lazy: <reason>`): the header shows the rest."""

import ast
import re
from pathlib import Path

import pytest

from conftest import ROOT

BENCH = ROOT / "bench"
KIND_PACKAGES = ("bench.collectives", "bench.allreduce", "bench.strategies", "bench.pipeline", "bench.overlap", "bench.kinds")
# Modules that must not import a kind: the launch package, timing, the store (its readers --
# results/cli.py, compare, gate, baseline -- may import more) and the shared vocabulary.
KIND_FREE = ("bench.distributed", "bench.timing", "bench.results.store", "bench.results.schema",
             "bench.results.metadata", "bench.errors", "bench.units", "bench.registry", "bench.suite")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(BENCH.rglob("*.py"))}


def _resolve(name: str, package: str, level: int) -> str:
    if level == 0:
        return name
    base = package.split(".")
    base = base[:len(base) - level + 1]
    return ".".join([*base, name] if name else base)


def imports(module: str, top_level_only: bool = False) -> set[str]:
    """bench modules `module` imports (a `from package import name` counts the submodule when
    `name` is one)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in _flatten(nodes) if top_level_only else nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", package, node.level)
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m == "bench" or m.startswith("bench.")}


def _flatten(body):
    """Top-level statements, looking inside if/try blocks (but not functions or classes)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            for field in ("body", "orelse", "finalbody"):
                yield from _flatten(getattr(node, field, []))
            for h in getattr(node, "handlers", []):
                yield from _flatten(h.body)


def _within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_module_list_is_read():
    assert "bench.cli" in MODULES and "bench.kind" in MODULES and len(MODULES) > 40


def test_only_main_imports_the_cli():
    bad = sorted(m for m in MODULES if m != "bench.__main__" and "bench.cli" in imports(m))
    assert bad == [], f"modules importing bench.cli: {bad}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, KIND_FREE)))
def test_launch_timing_store_and_vocabulary_import_no_kind(module):
    kinds = sorted(m for m in imports(module) if _within(m, KIND_PACKAGES))
    assert kinds == [], f"{module} imports kind module(s) {kinds}"


def test_the_store_never_imports_the_report():
    assert not {m for m in imports("bench.results.store") if _within(m, ("bench.report",))}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first search meets (one per back edge), each as a closed path."""
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return cycles


def test_find_cycles_finds_one():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_bench_modules():
    """Top-level imports only (an import inside a function runs after every module is loaded);
    a package's __init__ counts as a module of its own."""
    graph = {m: {d for d in imports(m, top_level_only=True) if d in MODULES and d != m} for m in MODULES}
    cycles = find_cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


LAZY_REASON = re.compile(r"#\s*lazy:\s*\S")


def unexplained_lazy_imports(source: str) -> list[int]:
    """Lines of imports inside a function (at any depth, in a class or not) whose line -- the
    first line of a multi-line import -- has no `# lazy: <reason>` comment."""
    lines = source.splitlines()
    bad = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function \
                    and not LAZY_REASON.search(lines[child.lineno - 1]):
                bad.append(child.lineno)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(source), False)
    return sorted(bad)


def test_unexplained_lazy_imports_finds_them():
    source = (
        "import os\n"
        "try:\n    import tomllib\nexcept ImportError:\n    tomllib = None\n"  # top level: not lazy
        "def f():\n    import json\n    import re  # lazy: why\n"
        "    from a import (b,  # lazy: the first line counts\n        c)\n"
        "    from x import (y,\n        z)  # lazy: only on the last line\n"
        "    import q  # lazy:\n"  # no reason given
        "class C:\n    import sys\n    def m(self):\n        if True:\n            import csv\n"
        "async def g():\n    def h():\n        import io\n"
    )
    assert unexplained_lazy_imports(source) == [7, 11, 13, 18, 21]


def test_every_import_inside_a_function_says_why_it_is_lazy():
    """An import inside a function hides a dependency from the module header: hoist it, or say
    on its line why it must wait (`# lazy: optional dependency`, `# lazy: cycle a -> b`, ...)."""
    bad = [f"{path.relative_to(ROOT)}:{line}" for path in MODULES.values()
           for line in unexplained_lazy_imports(path.read_text())]
    assert bad == [], "imports inside functions without a `# lazy: <reason>` comment:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------------------------
# Issue 19: the Kind is a closed plug. Generic code asks the registry and never names a kind.

KIND_DIRS = ("bench.collectives", "bench.allreduce", "bench.strategies", "bench.pipeline", "bench.doctor", "bench.overlap")
REGISTRY_MODULE = "bench.kinds"  # the one module that lists the kinds
# The readers of other tools' output (nccl-tests, rccl-tests, PARAM, traces): a room of their own that
# stores runs of the collectives kind, so it may name that kind and import its definitions, no other.
READERS = ("bench.imports",)
# The planner (`distbench plan`): a room of its own above the kinds; it reads the pipeline and
# collectives kinds' stored runs (their names and columns), and no kind imports it at top level.
PLANNER = ("bench.plan",)
GENERIC = ("bench.harness", "bench.results", "bench.regress", "bench.report", "bench.training", "bench.sweep", "bench.distributed", "bench.timing", "bench.telemetry",
           "bench.preflight", "bench.kind", "bench.cli", "bench.options", "bench.suite", "bench.units", "bench.registry",
           "bench.errors", "bench.workloads", "bench.overhead", "bench.simcluster", "bench.jobspec")
# The layers that must not import a kind's folder (the CLI may: it lists the kinds; bench/overhead is
# a benchmark of its own, timing one collective).
KIND_BLIND = ("bench.harness", "bench.results", "bench.regress", "bench.report", "bench.training", "bench.sweep", "bench.distributed", "bench.timing", "bench.telemetry",
              "bench.preflight", "bench.kind")


def kind_words() -> set[str]:
    """Every registered kind's name and the aliases stored runs use, less the shared results
    columns that happen to share an alias's spelling ('collective', 'algorithm', 'strategy' are
    columns of bench.results.schema, documented in docs/schema.md, not kind names)."""
    import bench.kinds  # noqa: F401  (fills the registry)
    from bench.kind import KINDS
    from bench.results.schema import TABLES

    columns = {c for t in TABLES.values() for c in t}
    words = {k.name for k in KINDS} | {a for k in KINDS for a in k.read.aliases}
    return {w for w in words if w not in columns}


def kind_literals(path: Path, words: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(ROOT)}:{n.lineno}: {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.strip().lower() in words]


def test_kind_literals_finds_them(tmp_path):
    f = ROOT / "bench" / "__probe_literals__.py"
    try:
        f.write_text('X = "pipeline"\n"""docstring naming pipeline"""\nY = f"{1}pipeline"\nZ = ("allreduce", "ring")\n')
        # the whole constant, or a literal piece of an f-string; never a word inside a longer text
        assert sorted(x.split(": ")[1] for x in kind_literals(f, {"pipeline", "allreduce"})) == \
            ["'allreduce'", "'pipeline'", "'pipeline'"]
    finally:
        f.unlink()


def test_generic_code_names_no_kind():
    words = kind_words()
    assert {"collectives", "allreduce", "pipeline", "strategies"} <= words
    bad = [hit for m, p in MODULES.items() if not _within(m, KIND_DIRS + READERS + PLANNER) and m != REGISTRY_MODULE
           for hit in kind_literals(p, words)]
    assert bad == [], "kind names outside bench/<kind>/ and bench/kinds.py:\n" + "\n".join(bad)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, KIND_BLIND)))
def test_generic_code_imports_no_kind(module):
    kinds = sorted(m for m in imports(module) if _within(m, KIND_PACKAGES))
    assert kinds == [], f"{module} imports kind module(s) {kinds}"


def test_every_module_is_generic_or_a_kinds():
    stray = sorted(m for m in MODULES if not _within(m, GENERIC + KIND_DIRS + READERS + PLANNER + (REGISTRY_MODULE, "bench.__main__"))
                   and m != "bench")
    assert stray == [], f"modules neither generic nor a kind's (add them to GENERIC or a kind folder): {stray}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, READERS)))
def test_the_readers_import_the_collectives_kind_and_no_other(module):
    others = sorted(m for m in imports(module) if _within(m, KIND_PACKAGES + ("bench.doctor",))
                    and not _within(m, ("bench.collectives",)))
    assert others == [], f"{module} imports kind module(s) {others}"


@pytest.mark.parametrize("room,above", [
    ("bench.results", ("bench.regress", "bench.report", "bench.harness")),  # storage knows no judge, no page
    ("bench.regress", ("bench.report", "bench.harness")),  # judging reads runs; the report draws from it
])
def test_storage_then_judgement_then_report(room, above):
    """bench/results stores and finds runs; bench/regress judges them; bench/report draws both.
    Imports run that way only (inside functions too)."""
    bad = sorted(f"{m} -> {i}" for m in MODULES if _within(m, (room,)) for i in imports(m) if _within(i, above))
    assert bad == [], f"{room} imports a room above it:\n" + "\n".join(bad)


@pytest.mark.parametrize("kind", KIND_DIRS)
def test_no_kind_imports_another(kind):
    """What two kinds share lives in an engine below them (bench/training, bench/sweep), never in
    one kind's folder that the other imports."""
    others = tuple(k for k in KIND_DIRS if k != kind)
    bad = sorted(f"{m} -> {i}" for m in MODULES if _within(m, (kind,)) for i in imports(m) if _within(i, others))
    assert bad == [], f"{kind} imports another kind:\n" + "\n".join(bad)
