"""What the router offers for a request, explained: the API, the command and Try the planner."""

from __future__ import annotations

import html
import io
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from planner_app.discovery import Server, Tool, ToolRouter
from planner_app.management.commands.route_request import routing_lines
from tests.planner_app.conftest import in_site_registry
from tools_app.specs import ToolSpec

CATALOGUE = (
    Server(
        "math",
        "Calculation.",
        (
            Tool("calculator", "Evaluate an arithmetic expression."),
            Tool("statistics", "Mean, median and deviation of numbers."),
        ),
    ),
    Server(
        "weather", "Weather.", (Tool("get_forecast", "Return the weather forecast of a city."),)
    ),
)
ARITHMETIC = {"tool": "evaluate an arithmetic expression", "server": "math"}
# A tool name as a hostile MCP server could report it.
HOSTILE = '<img src=x onerror="window.__pwned=1">city_forecast'
OBJECT = {"type": "object", "properties": {}}


def explanation(request: str) -> dict[str, Any]:
    return ToolRouter(CATALOGUE).route(request).explain()


@pytest.fixture
def hostile_tool() -> Iterator[None]:
    """A tool with a hostile name in the site's registry, found for a weather forecast."""
    spec = ToolSpec(HOSTILE, "Return the weather forecast of a city.", OBJECT, lambda: {})
    yield from in_site_registry([spec])


@pytest.fixture
def route(live_server: Any, make_key: Callable[..., str]) -> Callable[..., httpx.Response]:
    """Return a function posting to /api/v1/planner/route, with a plan key unless told."""
    key = {"Authorization": f"Bearer {make_key('plan')}"}

    def post(body: Any = None, headers: dict[str, str] | None = None, **options: Any) -> Any:
        url = f"{live_server.url}/api/v1/planner/route"
        return httpx.post(url, json=body, headers=key if headers is None else headers, **options)

    return post


# The routing debug output, from a real router --------------------------------------------


def test_routing_lines_list_each_tool_with_its_server_and_score_best_first() -> None:
    lines = routing_lines(explanation("evaluate an arithmetic expression"))
    assert lines[0] == "mode flat"
    assert re.fullmatch(r"1\. calculator \(math\) 0\.\d{3}.*", lines[1])
    assert [line.split()[1] for line in lines if line[0].isdigit()][0] == "calculator"


def test_routing_lines_say_what_placed_each_tool_when_the_router_says() -> None:
    routed = explanation("evaluate an arithmetic expression")
    why = "3 past requests like this one succeeded with it; closest: 'what is 2+2' 0.81"
    routed["tools"][0] |= {"placed_by": "history", "why": why}
    routed["history"] = {"outcomes": 12, "tools": 2}
    lines = routing_lines(routed)
    assert lines[1] == "history: 12 outcomes of 2 tools"
    assert lines[2].startswith("1. calculator (math) ") and lines[2].endswith(", placed by history")
    assert lines[3] == f"   {why}"


def test_routing_lines_say_when_nothing_fits() -> None:
    assert routing_lines(explanation("zzyzx qwvx"))[-1] == (
        "no tool fits the request (the gate answered nothing)"
    )


# The API -------------------------------------------------------------------------------------


def test_the_api_offers_the_tools_discovery_would(route: Callable[..., httpx.Response]) -> None:
    answer = route(ARITHMETIC)
    assert answer.status_code == 200, answer.text
    routing = answer.json()
    assert routing["mode"] == "flat" and routing["servers"] == []
    best = routing["tools"][0]
    assert (best["tool"], best["server"]) == ("calculator", "builtin:math")
    assert best["score"] > 0 and best["tool_score"] > 0
    assert len(routing["tools"]) == 5  # the site's ARES_ROUTER_TOP_TOOLS


@pytest.mark.parametrize("limit", [1, 2, 20])
def test_the_api_offers_at_most_limit_tools(
    route: Callable[..., httpx.Response], limit: int
) -> None:
    tools = route({**ARITHMETIC, "limit": limit}).json()["tools"]
    assert tools[0]["tool"] == "calculator" and 1 <= len(tools) <= limit
    assert len(tools) == limit or limit == 20


def test_the_api_gives_names_as_they_are(
    route: Callable[..., httpx.Response], hostile_tool: None
) -> None:
    tools = route({"tool": "weather forecast of a city"}).json()["tools"]
    assert tools[0]["tool"] == HOSTILE


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "tool"),
        ({"tool": ""}, "tool"),
        ({"tool": "   "}, "tool"),
        ({"tool": "x" * 4001}, "tool"),
        ({"tool": 5}, "tool"),
        ({"tool": "add", "server": "x" * 4001}, "server"),
        ({"tool": "add", "limit": 0}, "limit"),
        ({"tool": "add", "limit": 21}, "limit"),
        ({"tool": "add", "limit": "5"}, "limit"),
        ({"tool": "add", "limit": 2.5}, "limit"),
        ({"tool": "add", "limit": True}, "limit"),
        (["add"], "(request)"),
    ],
)
def test_the_api_refuses_a_bad_body_with_the_field(
    route: Callable[..., httpx.Response], body: Any, field: str
) -> None:
    answer = route(body)
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["detail"]
    if field != "(request)":
        assert f"payload.{field}" in {error["field"] for error in problem["errors"]}, problem


def test_the_api_says_a_blank_request_needs_words(route: Callable[..., httpx.Response]) -> None:
    answer = route({"tool": " \n "})
    assert answer.json()["errors"][0]["reason"] == "Value error, the tool text must have some words"


def test_the_api_refuses_a_body_that_is_not_json(
    route: Callable[..., httpx.Response], make_key: Callable[..., str]
) -> None:
    headers = {"Authorization": f"Bearer {make_key('plan')}", "Content-Type": "application/json"}
    answer = route(content=b"{tool: add}", headers=headers)
    assert answer.status_code == 400 and "JSON" in answer.json()["detail"]


@pytest.mark.parametrize(("scopes", "status"), [((), 401), (("read", "execute"), 403)])
def test_the_api_needs_a_key_with_the_plan_scope(
    route: Callable[..., httpx.Response], make_key: Callable[..., str], scopes: tuple, status: int
) -> None:
    headers = {"Authorization": f"Bearer {make_key(*scopes)}"} if scopes else {}
    assert route(ARITHMETIC, headers=headers).status_code == status


def test_the_api_documents_the_endpoint_and_its_errors() -> None:
    from ares_site.api import api

    schema = api.get_openapi_schema()
    operation = schema["paths"]["/api/v1/planner/route"]["post"]
    assert {200, 400, 401, 403, 413, 415, 422} <= set(operation["responses"])
    fields = schema["components"]["schemas"]["RoutedToolOut"]["properties"]
    assert {"tool", "score", "placed_by", "why", "closest"} <= set(fields)


# The command -------------------------------------------------------------------------------


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("route_request", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_the_command_prints_each_offered_tool_with_its_score() -> None:
    lines = command("evaluate an arithmetic expression", "--server", "math").splitlines()
    assert lines[0].startswith("mode flat")
    assert re.fullmatch(r"1\. calculator \(builtin:math\) 0\.\d{3}.*", lines[1])
    assert len([line for line in lines if re.match(r"\d+\. ", line)]) == 5


@pytest.mark.django_db
def test_the_command_prints_the_explanation_as_json() -> None:
    routing = json.loads(command("evaluate an arithmetic expression", "--json", "--limit", "2"))
    assert [tool["tool"] for tool in routing["tools"]][:1] == ["calculator"]
    assert len(routing["tools"]) == 2 and routing["mode"] == "flat"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("  ",), "some words"),
        (("add", "--limit", "0"), "--limit"),
        (("add", "--limit", "21"), "--limit"),
    ],
)
def test_the_command_refuses_what_it_cannot_route(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        command(*args)


# Try the planner -----------------------------------------------------------------------------


def routed_rows(page: str) -> list[list[str]]:
    """Return the rows of the page's "Tools the router would offer" table, as text."""
    table = re.search(r'(?s)<table id="routed-tools">.*?</table>', page)[0]
    rows = re.findall(r"(?s)<tr>(.*?)</tr>", table.split("<tbody>")[1])
    return [[text_of(cell) for cell in re.findall(r"(?s)<td[^>]*>(.*?)</td>", row)] for row in rows]


def text_of(cell: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()


def test_try_the_planner_lists_the_tools_the_router_would_offer(
    admin_client: Client, default_rules: None
) -> None:
    page = admin_client.get("/planner/try", {"request": "calculate 12*34"}).content.decode()
    assert "Tools the router would offer" in page
    rows = routed_rows(page)
    assert rows[0][:2] == ["calculator", "builtin:math"]
    assert float(rows[0][2]) > 0 and len(rows) == 5


def test_try_the_planner_escapes_the_names_it_lists(
    admin_client: Client, default_rules: None, hostile_tool: None
) -> None:
    page = admin_client.get("/planner/try", {"request": "weather forecast of a city"})
    text = page.content.decode()
    assert HOSTILE not in text and html.escape(HOSTILE) in text
    assert routed_rows(text)[0][0] == HOSTILE
