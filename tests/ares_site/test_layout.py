"""The code layout: imports between the apps' modules point one way, with no circle.

Function-level imports count too: moving an import into a function hides a circle from
Python at import time but not from a reader. Imports under `if TYPE_CHECKING:` are left
out, as they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("planner_app", "tools_app", "traces_app")


def project_modules() -> dict[str, Path]:
    """Return every module of the apps (migrations left out) by its dotted name."""
    modules = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts:
                continue
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(tree: ast.AST, known: set[str]) -> set[str]:
    """Return the project modules a module imports, at the top or inside functions."""
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & known


def _runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Yield every node below `node` except the bodies of `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _runtime_nodes(other)
            continue
        yield child
        yield from _runtime_nodes(child)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph() -> dict[str, set[str]]:
    """Return, per module of the apps, the modules of the apps it imports."""
    modules = project_modules()
    known = set(modules)
    return {
        name: imported_modules(ast.parse(path.read_text(encoding="utf-8")), known) - {name}
        for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """Return one import circle as a path (first module repeated at the end), or []."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str]:
        path.append(module)
        on_path.add(module)
        for imported in sorted(graph[module]):
            if imported in on_path:
                return [*path[path.index(imported) :], imported]
            if imported not in done and (cycle := visit(imported)):
                return cycle
        path.pop()
        on_path.discard(module)
        done.add(module)
        return []

    for module in sorted(graph):
        if module not in done and (cycle := visit(module)):
            return cycle
    return []


def test_the_apps_have_no_import_circle() -> None:
    cycle = find_cycle(import_graph())
    assert not cycle, "import circle: " + " -> ".join(cycle)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from traces_app.tasks import recount_rollups_task", {"traces_app.tasks"}),
        ("def f():\n    from traces_app.services import rescan", {"traces_app.services"}),
        ("from traces_app import services", {"traces_app.services"}),
        ("import traces_app.tasks", {"traces_app.tasks"}),
        ("if TYPE_CHECKING:\n    from traces_app.tasks import x", set()),
        ("from django.db import models", set()),
    ],
)
def test_it_reads_every_kind_of_import(source: str, expected: set[str]) -> None:
    known = {"traces_app", "traces_app.tasks", "traces_app.services"}
    assert imported_modules(ast.parse(source), known) == expected


def test_it_finds_a_circle_through_a_function_level_import() -> None:
    graph = {
        "traces_app.services": {"traces_app.tasks"},
        "traces_app.tasks": {"traces_app.services"},  # as `from ... import` inside a task
        "traces_app.models": set(),
    }
    assert find_cycle(graph) == ["traces_app.services", "traces_app.tasks", "traces_app.services"]


def test_it_knows_the_modules_of_the_four_paths() -> None:
    modules = project_modules()
    for name in ("planner_app.agents.loop", "planner_app.workflows.graph", "tools_app.mcp"):
        assert name in modules
