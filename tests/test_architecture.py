"""Dependency directions of bench/, read from the source with `ast` (top-level imports and those
inside functions alike): no module but bench/__main__.py imports bench.cli; the launch package,
the timing package, the store and the shared vocabulary import no kind; the store never imports
the report; and no import cycle between bench modules counting top-level imports."""

import ast
from pathlib import Path

import pytest

from conftest import ROOT

BENCH = ROOT / "bench"
KIND_PACKAGES = ("bench.collectives", "bench.allreduce", "bench.strategies", "bench.pipeline", "bench.kinds")
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
    assert "bench.cli" in MODULES and "bench.harness.kind" in MODULES and len(MODULES) > 40


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
