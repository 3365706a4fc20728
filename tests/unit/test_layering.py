"""The package's house rules, read from the imports themselves: no import cycle, no upward import.

Every ``import`` of one of our modules counts (at module top or inside a function), except those
under ``if TYPE_CHECKING:``. ``FLOORS`` lists the package's top-level parts from the ground up: a
module imports only from its own floor or the ones below; within a floor, no module cycle either.
"""

from __future__ import annotations

import ast
import collections
import functools
from pathlib import Path

import swe_sandbox

SRC = Path(swe_sandbox.__file__).parent
PACKAGE = "swe_sandbox"
#: The top-level parts of ``swe_sandbox``, ground floor first (``__init__``: the package's face).
FLOORS = [
    {"errors", "protocols", "redact", "terminal", "capabilities", "backends", "files", "version", "streaming",
     "network"},
    {"config", "runner", "templates", "trajectory"},
    {"environments", "images", "workspace", "aio"},
    {"models", "agent"},
    {"__init__"},
    {"testing"},
    {"batch", "_demo"},
    {"preflight"},
    {"minisweagent", "mini_fields", "harbor", "inspect_sandbox", "cli", "__main__"},
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = [PACKAGE, *path.relative_to(SRC).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(n) for n in ast.walk(node))
    return hidden


def _imported(node: ast.AST, package: str, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parent = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parent + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def _owner(name: str, modules: dict[str, Path]) -> str:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """``{module: {modules of ours it imports}}``."""
    modules = _modules()
    graph: dict[str, set[str]] = collections.defaultdict(set)
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hidden = _type_checking_nodes(tree)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            for name in _imported(node, package, modules):
                owner = _owner(name, modules) if name.split(".")[0] == PACKAGE else ""
                if owner and owner != module:
                    graph[module].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def floor_of(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    for number, parts in enumerate(FLOORS):
        if part in parts:
            return number
    raise AssertionError(f"{module}: its top-level part {part!r} stands on no floor of FLOORS: place it there")


def test_no_module_imports_another_in_a_cycle():
    assert cycles(import_graph()) == []


def test_no_module_imports_from_a_higher_floor():
    upward = sorted(f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
                    if floor_of(b) > floor_of(a))
    assert upward == []


def test_every_module_stands_on_a_floor():
    for module in _modules():
        floor_of(module)


def test_the_check_sees_a_cycle_and_an_upward_import():
    graph = {"swe_sandbox.a": {"swe_sandbox.b"}, "swe_sandbox.b": {"swe_sandbox.a"}, "swe_sandbox.c": set()}
    assert cycles(graph) == [["swe_sandbox.a", "swe_sandbox.b"]]
    assert floor_of("swe_sandbox.errors") < floor_of("swe_sandbox.cli.app")
    assert "swe_sandbox.batch.driver" in import_graph()["swe_sandbox.batch.batch_run"]
