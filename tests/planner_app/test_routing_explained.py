"""What the router offers for a request, explained: the API, the command and Try the planner."""

from __future__ import annotations

import html
import io
import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from planner_app.discovery import Server, Tool, ToolRouter
from planner_app.discovery.outcomes import Outcome
from planner_app.discovery.site_history import reset_site_history
from planner_app.management.commands.route_request import routing_lines
from tests.planner_app.conftest import in_site_registry
from tools_app.specs import ToolSpec
from traces_app.ingest.recording import new_span_id, new_trace_id, record_invocation

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
# Requests the hostile tool served, in words its description lacks, with markup of their own.
MARKUP = "<script>window.__pwned=3</script>"
RAIN = [f"{MARKUP} will it rain in Oslo tomorrow", f"{MARKUP} rain in Oslo tomorrow?"]
RAIN += [f"{MARKUP} is rain coming to Oslo tomorrow"]
RAIN_AGAIN = "will it rain in Oslo tomorrow"


def explanation(request: str, outcomes: tuple[Outcome, ...] = ()) -> dict[str, Any]:
    router = ToolRouter(CATALOGUE)
    learned = router.learned_index(outcomes, time.time()) if outcomes else None
    return router.route(request, learned=learned).explain()


@pytest.fixture
def hostile_tool() -> Iterator[None]:
    """A tool with a hostile name in the site's registry, found for a weather forecast."""
    spec = ToolSpec(HOSTILE, "Return the weather forecast of a city.", OBJECT, lambda: {})
    yield from in_site_registry([spec])


@pytest.fixture
def rain_served(settings: Any, hostile_tool: None) -> Iterator[None]:
    """The hostile tool's recorded successes for RAIN; the history read before each routing."""
    settings.ARES_ROUTER_HISTORY_REFRESH_S = 0
    reset_site_history()  # an earlier test's outcomes went with its database
    for request in RAIN:
        record_invocation(
            trace_id=new_trace_id(), span_id=new_span_id(), tool_name=HOSTILE,
            request_text=request, status="ok", started_at=datetime.now(UTC), latency_ms=1.0,
            ran_on="builtin", chosen_by="llm",
        )  # fmt: skip
    yield
    reset_site_history()


def assert_placed_by_rain(tool: dict[str, Any]) -> None:
    """Assert a tool's explanation names the rain requests it served and the closest of them."""
    assert tool["tool"] == HOSTILE and tool["succeeded_like"] == 3 and tool["failed_like"] == 0
    assert tool["closest"] in RAIN and 0 < tool["closest_similarity"] <= 1
    assert "3 past requests like this one succeeded" in tool["why"]
    assert f"'{tool['closest']}'" in tool["why"]


@pytest.fixture
def route(live_server: Any, make_key: Callable[..., str]) -> Callable[..., httpx.Response]:
    """Return a function posting to /api/v1/planner/route, with a plan key unless told."""
    key = {"Authorization": f"Bearer {make_key('plan')}"}

    def post(body: Any = None, headers: dict[str, str] | None = None, **options: Any) -> Any:
        url = f"{live_server.url}/api/v1/planner/route"
        return httpx.post(url, json=body, headers=key if headers is None else headers, **options)

    return post


# The routing debug output, from a real router --------------------------------------------


def test_routing_lines_list_each_tool_with_its_score_and_why_best_first() -> None:
    routed = explanation("evaluate an arithmetic expression")
    lines = routing_lines(routed)
    assert lines[0] == "mode flat"
    assert re.fullmatch(r"1\. calculator \(math\) 0\.\d{3}, placed by description", lines[1])
    assert lines[2] == f"   {routed['tools'][0]['why']}"
    assert "description matches" in lines[2]


def test_routing_lines_say_which_past_requests_placed_a_tool() -> None:
    served = ("what is the forecast for Oslo", "forecast for Bergen tomorrow", "Oslo forecast")
    outcomes = tuple(
        Outcome(request, "get_forecast", at=time.time(), source=f"t/{n}")
        for n, request in enumerate(served)
    )
    routed = explanation("the forecast for Oslo tomorrow", outcomes)
    lines = routing_lines(routed)
    assert lines[1] == "history: 3 outcomes of 1 tools"
    forecast = next(tool for tool in routed["tools"] if tool["tool"] == "get_forecast")
    assert forecast["succeeded_like"] >= 1 and forecast["closest"] in served
    assert f"   {forecast['why']}" in lines
    assert f"closest: '{forecast['closest']}'" in forecast["why"]


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
    assert best["placed_by"] == "description" and "description matches" in best["why"]
    assert all(tool["why"] for tool in routing["tools"])


def test_the_api_says_which_past_requests_placed_a_tool(
    route: Callable[..., httpx.Response], rain_served: None
) -> None:
    routing = route({"tool": RAIN_AGAIN}).json()
    assert routing["history"] == {"outcomes": 3, "tools": 1}
    assert_placed_by_rain(routing["tools"][0])


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


@pytest.mark.django_db(transaction=True)
def test_the_command_prints_why_with_the_closest_past_request(rain_served: None) -> None:
    routing = json.loads(command(RAIN_AGAIN, "--json"))
    assert_placed_by_rain(routing["tools"][0])
    lines = command(RAIN_AGAIN).splitlines()
    assert lines[1] == "history: 3 outcomes of 1 tools"
    assert lines[2].startswith(f"1. {HOSTILE} (builtin:other) ")
    assert lines[3] == f"   {routing['tools'][0]['why']}"


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
    assert rows[0][3] == "description" and "description matches" in rows[0][4]


def test_try_the_planner_escapes_the_names_it_lists(
    admin_client: Client, default_rules: None, hostile_tool: None
) -> None:
    page = admin_client.get("/planner/try", {"request": "weather forecast of a city"})
    text = page.content.decode()
    assert HOSTILE not in text and html.escape(HOSTILE) in text
    assert routed_rows(text)[0][0] == HOSTILE


def test_try_the_planner_says_which_past_requests_placed_a_tool_escaped(
    admin_client: Client, default_rules: None, rain_served: None
) -> None:
    page = admin_client.get("/planner/try", {"request": RAIN_AGAIN}).content.decode()
    assert MARKUP not in page and "learned from 3 recorded outcomes of 1 tools" in page
    tool, server, _, placed_by, why = routed_rows(page)[0]
    assert (tool, server) == (HOSTILE, "builtin:other") and placed_by in ("history", "description")
    assert "3 past requests like this one succeeded" in why and MARKUP in why
