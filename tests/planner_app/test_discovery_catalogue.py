"""The benchmark's JSON format for catalogues and query sets (bench/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner_app.discovery import ExpectedTool, Server, Tool, ToolRouter
from planner_app.discovery.catalogue import (
    CatalogueError,
    catalogue_from_dict,
    catalogue_to_dict,
    load_catalogue,
    load_queries,
    queries_from_dict,
    queries_to_dict,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "discovery"


def test_it_loads_a_catalogue_file() -> None:
    servers = load_catalogue(DATA / "catalogue.json")
    assert [server.name for server in servers] == ["weather", "calendar"]
    assert servers[0].tools[0].parameters == (
        ("city", "The city's name, e.g. Oslo"),
        ("days", "How many days ahead, 1 to 7"),
    )
    assert servers[0].tools[1] == Tool(
        "get_alerts", "Storm and heat warnings for a region", ("region",)
    )
    assert servers[1] == Server(
        "calendar", "", (Tool("create_event", "Create an event on a date"), Tool("list_events"))
    )


def test_it_loads_a_query_file() -> None:
    queries = load_queries(DATA / "queries.json")
    assert [query.id for query in queries] == ["q1", "q2", "2"]  # the position when no id
    assert queries[0].expected == (ExpectedTool("get_forecast", "weather"),)
    assert queries[1].expected == (ExpectedTool("create_event"),)
    assert len(queries[2].expected) == 2


def test_an_expected_tool_without_a_server_matches_that_tool_on_any_server() -> None:
    anywhere, there = ExpectedTool("create_event"), ExpectedTool("create_event", "calendar")
    assert anywhere.matches("calendar", "create_event") and anywhere.matches(
        "other", "create_event"
    )
    assert there.matches("calendar", "create_event") and not there.matches("other", "create_event")
    assert not anywhere.matches("calendar", "list_events")


def test_it_routes_the_loaded_queries_to_their_tools() -> None:
    router = ToolRouter(load_catalogue(DATA / "catalogue.json"))
    for query in load_queries(DATA / "queries.json")[:2]:
        best = router.search(query.query).matches[0]
        assert query.expected[0].matches(best.server, best.tool)


def test_it_writes_what_it_reads() -> None:
    catalogue = json.loads((DATA / "catalogue.json").read_text())
    servers = catalogue_from_dict(catalogue)
    assert catalogue_from_dict(catalogue_to_dict(servers)) == servers
    queries = load_queries(DATA / "queries.json")
    assert queries_from_dict(queries_to_dict(queries)) == queries


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "an object with a 'servers' list"),
        ({}, "'servers' must be a list"),
        ({"servers": ["weather"]}, r"servers\[0\] must be an object"),
        ({"servers": [{"tools": []}]}, "'name' is missing"),
        ({"servers": [{"name": "", "tools": []}]}, "'name' must be a non-empty string"),
        ({"servers": [{"name": "w"}]}, "'tools' must be a list"),
        ({"servers": [{"name": "w", "tools": [{"description": "x"}]}]}, r"tools\[0\]: 'name'"),
        ({"servers": [{"name": "w", "tools": [{"name": "t", "keywords": "x"}]}]}, "keywords"),
        (
            {"servers": [{"name": "w", "tools": [{"name": "t", "parameters": ["city"]}]}]},
            r"tools\[0\]: 'parameters' must be an object",
        ),
        (
            {"servers": [{"name": "w", "tools": [{"name": "t", "parameters": {"city": 1}}]}]},
            "parameter names to descriptions",
        ),
    ],
)
def test_it_refuses_a_malformed_catalogue(data: Any, message: str) -> None:
    with pytest.raises(CatalogueError, match=message):
        catalogue_from_dict(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"queries": [{"query": "q", "expected": []}]}, "names no tool"),
        ({"queries": [{"expected": [{"tool": "t"}]}]}, "'query' is missing"),
        ({"queries": [{"query": "q", "expected": [{"server": "s"}]}]}, "'tool' is missing"),
        ({"queries": [{"query": "q"}]}, "'expected' must be a list"),
    ],
)
def test_it_refuses_a_malformed_query_set(data: Any, message: str) -> None:
    with pytest.raises(CatalogueError, match=message):
        queries_from_dict(data)


def test_it_says_which_file_is_not_json(tmp_path: Path) -> None:
    broken = tmp_path / "catalogue.json"
    broken.write_text("{not json")
    with pytest.raises(CatalogueError, match="catalogue.json: not JSON"):
        load_catalogue(broken)
