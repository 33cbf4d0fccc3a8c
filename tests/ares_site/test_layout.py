"""The code layout and the rules that keep it; each rule is a test below.

1. Layers: ares_site > planner_app > tools_app > traces_app. A module imports from its
   own app or an app below it, never above: traces_app is the shared base (traces, spans
   and their rollups, the REST plumbing of traces_app/http/), tools_app the tools and the
   engine, planner_app the four paths' choosing and orchestrating, ares_site mounts them.
2. The core has no Django: the modules in CORE (tool contracts, validation, the engine,
   the MCP client; the planner's pipeline, discovery's router, the agent loop, the
   workflow graph; OTLP decoding and dialects, redaction, spiral detection, the histogram,
   the charts) import neither django nor a project module outside the core, and neither
   do the packages that hold them. They take plain data and return plain data; models,
   views, tasks and the site's engine (tools_app/site_engine.py) adapt them to the
   database and the web. A new core module is added to CORE.
3. Names: a core module is named for what it computes, an adapter for what it stores or
   serves, and no two modules share a name except Django's conventional ones
   (CONVENTIONAL: models, admin, views, api, ...).
4. No module outside migrations and tests is over 800 lines.
5. Every page route is listed in ares_site/urls.py: no app has a urls module, and
   nothing is include()d there but the admin and the API (ares_site/api.py mounts each
   app's router under /api/v1/).
6. No import circle. Function-level imports count too: moving an import into a function
   hides a circle from Python at import time but not from a reader.

Imports under `if TYPE_CHECKING:` are left out everywhere, as they never run.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from django.http import HttpResponse
from django.urls import URLPattern, URLResolver, get_resolver, include
from django.urls import path as route
from django.urls.resolvers import RoutePattern

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("ares_site", "planner_app", "tools_app", "traces_app")  # top first

# The modules without Django. A name ending in ".*" is a package and all its modules.
CORE = (
    "tools_app.specs",
    "tools_app.validation",
    "tools_app.engine",
    "tools_app.registry",
    "tools_app.formatting",
    "tools_app.mcp",
    "tools_app.builtins.*",
    "planner_app.pipeline.*",
    "planner_app.discovery.router",
    "planner_app.discovery.routing",
    "planner_app.discovery.learned",
    "planner_app.discovery.outcomes",
    "planner_app.discovery.past_requests",
    "planner_app.discovery.backends",
    "planner_app.discovery.catalogue",
    "planner_app.discovery.text",
    "planner_app.discovery.steps",
    "planner_app.discovery.requests",
    "planner_app.agents.loop",
    "planner_app.agents.loop_discovery",
    "planner_app.agents.loop_events",
    "planner_app.agents.spiral_breaker",
    "planner_app.agents.planner_fallback",
    "planner_app.agents.recall",
    "planner_app.agents.replay_guard",
    "planner_app.agents.task_records",
    "planner_app.agents.replay_guard",
    "planner_app.agents.replan",
    "planner_app.agents.stopping",
    "planner_app.agents.token_budget",
    "planner_app.agents.llm.*",
    "planner_app.workflows.graph",
    "planner_app.workflows.executor",
    "planner_app.tool_charts",
    "traces_app.spirals.detection",
    "traces_app.rollups.histogram",
    "traces_app.rollups.ranges",
    "traces_app.charts",
    "traces_app.demo_spans",
    "traces_app.http.json_nesting",
    "traces_app.ingest.redaction",
    "traces_app.ingest.otlp_decoding",
    "traces_app.ingest.otlp_dialects",
)
CONVENTIONAL = {
    *("models", "admin", "views", "urls", "api", "schemas", "forms", "tasks", "apps"),
    *("services", "signals", "migrations", "management", "commands", "templatetags"),
}
MAX_LINES = 800
URL_INCLUDES_ALLOWED = ("admin", "api-v1")  # the namespaces of the admin's and the API's URLs


def project_modules() -> dict[str, Path]:
    """Return every module of the site and the apps (migrations left out) by its dotted name."""
    modules = {}
    for app in LAYERS:
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


def imports_django(tree: ast.AST) -> bool:
    """Return whether a module imports django, at the top or inside functions."""
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        if any(name == "django" or name.startswith("django.") for name in names):
            return True
    return False


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
    return {name: imported_modules(_tree(path), known) - {name} for name, path in modules.items()}


def django_importers() -> set[str]:
    """Return the modules of the site and the apps that import django themselves."""
    return {name for name, path in project_modules().items() if imports_django(_tree(path))}


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"))


def core_modules(patterns: Iterable[str], modules: Iterable[str]) -> set[str]:
    """Return the modules CORE names ("pkg.*": the package and all below it)."""
    modules = set(modules)
    found = set()
    for pattern in patterns:
        package = pattern.removesuffix(".*")
        matched = {
            m
            for m in modules
            if m == package or (pattern.endswith(".*") and m.startswith(package + "."))
        }
        assert matched, f"CORE names {pattern}, which is no module: update CORE"
        found |= matched
    return found


def core_problems(graph: dict[str, set[str]], with_django: set[str], core: set[str]) -> list[str]:
    """Return what a core module, or a package holding one, imports that the core may not."""
    checked = core | {package for module in core for package in _packages_holding(module)}
    problems = [f"{module} imports django" for module in sorted(checked & with_django)]
    for module in sorted(checked):
        problems += [
            f"{module} imports {other} (not core)" for other in sorted(graph[module] - checked)
        ]
    return problems


def _packages_holding(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Return each import of a module of an app above the importer's (LAYERS, top first)."""
    rank = {app: height for height, app in enumerate(LAYERS)}
    return [
        f"{module} -> {other}"
        for module, others in sorted(graph.items())
        for other in sorted(others)
        if rank[other.split(".")[0]] < rank[module.split(".")[0]]
    ]


def shared_names(modules: Iterable[str]) -> dict[str, list[str]]:
    """Return the module names, other than the conventional ones, that several modules hold."""
    holders: dict[str, list[str]] = defaultdict(list)
    for module in sorted(modules):
        holders[module.rsplit(".", 1)[-1]].append(module)
    return {
        name: found
        for name, found in holders.items()
        if len(found) > 1 and name not in CONVENTIONAL
    }


def source_files(root: Path) -> list[Path]:
    """Return the project's Python files outside tests and migrations."""
    skipped = {"tests", "migrations", ".venv", "node_modules", "var"}
    return [
        path
        for path in sorted(root.rglob("*.py"))
        if not skipped & set(path.relative_to(root).parts)
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
    ]


def long_modules(root: Path, limit: int = MAX_LINES) -> list[str]:
    """Return the files of source_files(root) over `limit` lines, with their length."""
    lengths = {
        path: len(path.read_text(encoding="utf-8").splitlines()) for path in source_files(root)
    }
    return [f"{path.relative_to(root)}: {n} lines" for path, n in lengths.items() if n > limit]


def routes_included(resolver: URLResolver) -> list[str]:
    """Return the page routes `resolver` reaches through an include() (admin, API left out)."""
    found = []
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver) and entry.namespace not in URL_INCLUDES_ALLOWED:
            found += [f"{entry.pattern}{route}" for route in _routes_below(entry)]
    return found


def _routes_below(resolver: URLResolver) -> list[str]:
    routes = []
    for entry in resolver.url_patterns:
        if isinstance(entry, URLPattern):
            routes.append(str(entry.pattern))
        else:
            routes += [f"{entry.pattern}{route}" for route in _routes_below(entry)]
    return routes


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


def test_the_core_imports_neither_django_nor_an_adapter() -> None:
    graph = import_graph()
    problems = core_problems(graph, django_importers(), core_modules(CORE, graph))
    assert not problems, "\n".join(problems)


def test_the_core_runs_without_django() -> None:
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))"
    )
    core = sorted(core_modules(CORE, project_modules()))
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    ran = subprocess.run(
        [sys.executable, "-c", code, *core], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("graph", "with_django", "expected"),
    [
        ({"tools_app": set(), "tools_app.engine": set()}, set(), []),
        (
            {"tools_app": set(), "tools_app.engine": set()},
            {"tools_app.engine"},
            ["tools_app.engine imports django"],
        ),
        (
            {
                "tools_app": set(),
                "tools_app.engine": {"tools_app.models"},
                "tools_app.models": set(),
            },
            {"tools_app.models"},
            ["tools_app.engine imports tools_app.models (not core)"],
        ),
        (  # through another core module: the one that imports the adapter is named
            {
                "tools_app": set(),
                "tools_app.engine": {"tools_app.specs"},
                "tools_app.specs": {"tools_app.site_engine"},
                "tools_app.site_engine": set(),
            },
            set(),
            ["tools_app.specs imports tools_app.site_engine (not core)"],
        ),
        (  # the package that holds a core module runs first
            {"tools_app": set(), "tools_app.engine": set()},
            {"tools_app"},
            ["tools_app imports django"],
        ),
    ],
)
def test_it_finds_what_the_core_may_not_import(
    graph: dict[str, set[str]], with_django: set[str], expected: list[str]
) -> None:
    assert (
        core_problems(graph, with_django, {"tools_app.engine", "tools_app.specs"} & set(graph))
        == expected
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from django.db import models", True),
        ("import django", True),
        ("def f():\n    from django.conf import settings", True),
        ("if TYPE_CHECKING:\n    from django.http import HttpRequest", False),
        ("from djangoish import x\nimport json", False),
    ],
)
def test_it_sees_every_kind_of_django_import(source: str, expected: bool) -> None:
    assert imports_django(ast.parse(source)) is expected


def test_it_expands_a_package_in_core() -> None:
    modules = {"planner_app.pipeline", "planner_app.pipeline.planner", "planner_app.models"}
    assert core_modules(["planner_app.pipeline.*"], modules) == modules - {"planner_app.models"}
    with pytest.raises(AssertionError, match="update CORE"):
        core_modules(["planner_app.renamed"], modules)


def test_no_app_imports_an_app_above_it() -> None:
    upward = upward_imports(import_graph())
    assert not upward, "imports pointing up the layers: " + ", ".join(upward)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"planner_app.views": {"traces_app.models", "tools_app.engine"}}, []),
        ({"ares_site.urls": {"planner_app.views"}}, []),
        (
            {"traces_app.models": {"planner_app.models"}},
            ["traces_app.models -> planner_app.models"],
        ),
        ({"tools_app.api": {"ares_site.api"}}, ["tools_app.api -> ares_site.api"]),
    ],
)
def test_it_finds_an_import_pointing_up(graph: dict[str, set[str]], expected: list[str]) -> None:
    assert upward_imports(graph) == expected


def test_no_two_modules_share_a_name() -> None:
    shared = shared_names(project_modules())
    assert not shared, f"modules sharing a name: {shared}"


def test_it_finds_a_shared_name_but_not_a_conventional_one() -> None:
    modules = [
        "planner_app.sandbox",
        "planner_app.agents.sandbox",
        "tools_app.admin",
        "traces_app.admin",
    ]
    assert shared_names(modules) == {
        "sandbox": ["planner_app.agents.sandbox", "planner_app.sandbox"]
    }


def test_no_module_is_over_800_lines() -> None:
    long = long_modules(ROOT)
    assert not long, "modules over 800 lines: " + ", ".join(long)


def test_it_finds_a_module_over_800_lines(tmp_path: Path) -> None:
    for folder in ("tests", "app/migrations"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "long_one.py").write_text("x = 1\n" * 900)
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_modules(tmp_path) == [f"long.py: {MAX_LINES + 1} lines"]


def test_every_page_route_is_listed_in_the_site_urls() -> None:
    resolver = get_resolver()
    assert resolver.urlconf_name == "ares_site.urls"
    assert not routes_included(resolver), "routes from an app's urls: " + ", ".join(
        routes_included(resolver)
    )
    assert [module for module in project_modules() if module.endswith(".urls")] == [
        "ares_site.urls"
    ]


def _page(request: object) -> HttpResponse:
    return HttpResponse()


def test_it_finds_a_route_included_from_elsewhere() -> None:
    site = URLResolver(
        RoutePattern(""),
        [
            route("traces/", _page, name="traces"),
            route(
                "", include([route("tools/", _page), route("a/", include([route("b/", _page)]))])
            ),
        ],
    )
    assert routes_included(site) == ["tools/", "a/b/"]
