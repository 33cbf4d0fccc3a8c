"""The offline routing benchmark of the site's own tools: 10 labelled tasks, English and Chinese.

tests/data/discovery/site-catalogue.json holds the built-in tools as the registry groups
them and a demo catalogue of MCP servers; site-tasks-en.json and site-tasks-zh.json the
same 10 tasks, each with the <tool_request> an agent would write for it. With the default
settings every task must find all its expected tools in the 5 returned, flat and
two-stage, from the user's words and from the agent's request. A correctness check of
the router on this catalogue; bench/router.py --dataset site prints the figures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from planner_app.discovery import BenchQuery, Routing, ToolRouter
from planner_app.discovery.catalogue import load_catalogue, load_queries
from planner_app.discovery.site_router import catalogue_from_specs
from tools_app.configured_builtins import builtin_specs

DATA = Path(__file__).resolve().parents[1] / "data" / "discovery"
CATALOGUE = load_catalogue(DATA / "site-catalogue.json")
TASKS = {lang: load_queries(DATA / f"site-tasks-{lang}.json") for lang in ("en", "zh")}


def from_users_words(search: Callable[..., Routing]) -> Callable[[BenchQuery], Routing]:
    return lambda task: search(task.query)


def from_tool_request(search: Callable[..., Routing]) -> Callable[[BenchQuery], Routing]:
    return lambda task: search(task.tool_request[1], task.tool_request[0])


@pytest.fixture(scope="module")
def router() -> ToolRouter:
    return ToolRouter(CATALOGUE)


def test_the_task_sets_are_ten_tasks_each_with_a_tool_request() -> None:
    for tasks in TASKS.values():
        assert [task.id for task in tasks] == [f"t{i:02}" for i in range(1, 11)]
        assert all(task.tool_request for task in tasks)
    assert [t.expected for t in TASKS["en"]] == [t.expected for t in TASKS["zh"]]


def test_every_expected_tool_is_in_the_catalogue() -> None:
    tools = {(server.name, tool.name) for server in CATALOGUE for tool in server.tools}
    for tasks in TASKS.values():
        for task in tasks:
            assert {(e.server, e.tool) for e in task.expected} <= tools, task.id


def test_the_catalogues_built_ins_are_the_sites() -> None:
    everything = [dataclasses.replace(spec, enabled=True) for spec in builtin_specs()]
    site = catalogue_from_specs(everything)
    in_file = [server for server in CATALOGUE if server.name.startswith("builtin:")]
    assert in_file == site, "regenerate the built-ins of site-catalogue.json from the registry"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(
    ("strategy", "searches"),
    [
        ("two-stage, the user's words", lambda r: from_users_words(r.search)),
        ("flat, the user's words", lambda r: from_users_words(r.search_flat)),
        ("two-stage, the agent's request", lambda r: from_tool_request(r.search)),
    ],
)
def test_it_finds_every_expected_tool_of_the_ten_tasks(
    router: ToolRouter, lang: str, strategy: str, searches: Callable
) -> None:
    search = searches(router)
    missed = []
    for task in TASKS[lang]:
        routing = search(task)
        assert len(routing.matches) <= 5
        found = [
            e for e in task.expected if any(e.matches(m.server, m.tool) for m in routing.matches)
        ]
        if found != list(task.expected):
            missed.append((task.id, routing.tool_names))
    assert missed == [], f"{lang}, {strategy}: recall {10 - len(missed)}/10"


def test_stage_1_finds_the_server_a_chinese_request_names(router: ToolRouter) -> None:
    routing = router.search("获取某地的天气预报", server="天气服务")
    assert routing.servers[0][0] == "mcp:weather"
    assert routing.tool_names[0] == "mcp.weather.get_forecast"
