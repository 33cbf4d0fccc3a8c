"""GET /api/v1/sessions and /api/v1/sessions/{id} over real HTTP, spans sent through the API."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import make_span
from traces_app import sessions
from traces_app.models import ScoreDefinition

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def turn(session: str, request: str, **common: Any) -> dict[str, Any]:
    """Return the fields every span of one turn (a trace of the session) shares."""
    return {
        "trace_id": secrets.token_hex(16),
        "session_id": session,
        "agent": common.get("agent", "helper"),
        "request_text": request,
    }


def tool(base: dict[str, Any], name: str, offset: float, **fields: Any) -> dict[str, Any]:
    fields = {"latency_ms": 10.0, "arguments": {"q": "paris"}, **fields}
    return make_span(**base, tool_name=name, **{**fields, "started_at": at(offset)})


def other_span(base: dict[str, Any], kind: str, offset: float, **fields: Any) -> dict[str, Any]:
    """Return an LLM or agent span of a turn."""
    none = {"tool_name": "", "tool_call_id": "", "chosen_by": None, "ran_on": None}
    fields = {"arguments": None, "result_tokens": 0, **none, **fields}
    return make_span(**base, kind=kind, **{**fields, "started_at": at(offset)})


def failing(base: dict[str, Any], name: str, offset: float) -> dict[str, Any]:
    return tool(base, name, offset, status="error", error_kind="timeout", result=None)


def conversation_spans() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Return the spans of sessions s-71 and s-72 (and of a trace without one), and their ids.

    s-71 has three turns. Turn 2 starts with three web_search timeouts: a spiral inside the
    turn; with the one that ended turn 1, a run of four that spans turns 1 and 2.
    """
    one = turn("s-71", "What is the weather in Paris?")
    two = turn("s-71", "Try again <b>please</b>")
    three = turn("s-71", "Thanks!")
    other = turn("s-72", "Convert 3 EUR", agent="converter")
    alone = {**turn("", "no session"), "session_id": ""}
    llm = {"model": "gpt-4o", "input_tokens": 100, "output_tokens": 20}
    spans = [
        other_span(one, "llm", 0, **llm, result={"content": "Let me look."}),
        tool(one, "weather", 1, result={"temp": 12}),
        failing(one, "web_search", 2),
        failing(two, "web_search", 61),
        failing(two, "web_search", 62),
        failing(two, "web_search", 63),
        tool(two, "calculator", 64),
        other_span(two, "agent", 60, latency_ms=5000.0, result={
            "answer": "It is 12 °C <script>alert(1)</script>", "finish_reason": "stop"}),
        other_span(three, "llm", 120, **llm, result={"content": "You're welcome."}),
        tool(other, "converter", 31, cost_usd=0.5),
        tool(alone, "calculator", 41),
    ]  # fmt: skip
    ids = {"turns": [one["trace_id"], two["trace_id"], three["trace_id"]], "other": other}
    return spans, ids


@pytest.fixture
def conversation(report: Any) -> dict[str, Any]:
    """Store the conversation through the ingest API; return its ids."""
    spans, ids = conversation_spans()
    response = report(*spans)
    assert response.json()["accepted"] == len(spans), response.text
    return ids


def test_it_lists_sessions_with_their_totals(api, conversation):
    body = api.get("/sessions").json()

    rows = {row["session_id"]: row for row in body["items"]}
    assert list(rows) == ["s-71", "s-72"]  # latest activity first; no row for no session
    row = rows["s-71"]
    assert row["agent"] == "helper"
    assert row["turns"] == 3
    assert row["first_at"].startswith(T0.strftime("%Y-%m-%dT%H:%M:%S"))
    assert row["tools"] == ["calculator", "weather", "web_search"]
    assert row["tool_calls"] == 6
    assert row["failed_calls"] == 4
    assert row["errors"] == 2  # turns 1 and 2
    assert row["input_tokens"] == 200 and row["output_tokens"] == 40
    assert row["spirals"] == 1
    assert rows["s-72"]["cost_usd"] == 0.5
    assert not row["several_agents"]
    assert rows["s-72"]["agent"] == "converter"


def test_it_says_when_a_session_holds_several_agents(api, report):
    report(
        tool(turn("shared", "a", agent="planner-bot"), "calculator", 0),
        tool(turn("shared", "b", agent="writer-bot"), "calculator", 1),
    )

    row = api.get("/sessions").json()["items"][0]

    assert row["agent"] == "writer-bot" and row["several_agents"] is True
    assert api.get("/sessions/shared").json()["totals"]["several_agents"] is True


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({"agent": "converter"}, ["s-72"], id="agent"),
        pytest.param({"q": "S-7"}, ["s-71", "s-72"], id="id text, any case"),
        pytest.param({"q": "72"}, ["s-72"], id="id text"),
        pytest.param({"since": at(50)}, ["s-71"], id="since"),
        pytest.param({"until": at(35)}, ["s-72", "s-71"], id="until"),
        pytest.param({"until": at(10)}, ["s-71"], id="until before s-72"),
        pytest.param({"sort": "-cost"}, ["s-72", "s-71"], id="costliest first"),
        pytest.param({"sort": "-turns"}, ["s-71", "s-72"], id="most turns first"),
        pytest.param({"sort": "-first"}, ["s-72", "s-71"], id="newest start first"),
    ],
)
def test_it_filters_and_sorts_sessions(api, conversation, params, expected):
    response = api.get("/sessions", params=params)

    assert response.status_code == 200, response.text
    assert [row["session_id"] for row in response.json()["items"]] == expected


def test_it_counts_only_the_turns_in_the_range(api, conversation):
    row = api.get("/sessions", params={"since": at(50)}).json()["items"][0]

    assert row["turns"] == 2
    assert row["tools"] == ["calculator", "web_search"]


def test_it_pages_sessions_without_repeats_or_gaps(api, report):
    for number in range(7):
        base = turn(f"p-{number}", "hi")
        report(tool(base, "calculator", number), tool({**base, "trace_id": secrets.token_hex(16)},
               "calculator", number + 0.5))  # fmt: skip
    seen, cursor = [], None
    while True:
        params = {"limit": 3, "sort": "-turns", **({"cursor": cursor} if cursor else {})}
        body = api.get("/sessions", params=params).json()
        seen += [row["session_id"] for row in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"p-{number}" for number in reversed(range(7))]  # ties: by id, descending


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"sort": "cost"}, "sort"),
        ({"agent": "x" * 201}, "agent"),
        ({"q": "a\x00b"}, "q"),
    ],
)
def test_it_refuses_a_bad_list_parameter_naming_it(api, problem, params, field):
    response = api.get("/sessions", params=params)

    assert response.status_code == 422
    assert field in problem(response)


def test_it_refuses_a_bad_cursor_and_an_empty_range(api, conversation, problem):
    bad = api.get("/sessions", params={"cursor": "bm90LWEtY3Vyc29y"})
    empty = api.get("/sessions", params={"since": at(10), "until": at(10)})

    assert bad.status_code == 422 and "cursor" in problem(bad)
    assert empty.status_code == 422 and "since must be before until" in problem(empty)


def test_it_shows_a_session_turn_by_turn(api, conversation):
    response = api.get("/sessions/s-71")

    assert response.status_code == 200, response.text
    body = response.json()
    assert [turn["trace"]["trace_id"] for turn in body["turns"]] == conversation["turns"]
    assert [turn["number"] for turn in body["turns"]] == [1, 2, 3]
    first, second, third = body["turns"]
    assert first["request"] == "What is the weather in Paris?"
    assert first["answer"] == "Let me look."  # the last LLM output of the turn
    assert second["answer"] == "It is 12 °C <script>alert(1)</script>"  # the agent span's
    assert third["answer"] == "You're welcome."
    assert [call["tool_name"] for call in second["tool_calls"]] == ["web_search"] * 3 + [
        "calculator"
    ]
    assert [spiral["tool_name"] for spiral in second["spirals"]] == ["web_search"]
    assert [call["tool_name"] for call in body["tool_sequence"]] == [
        "weather", "web_search", "web_search", "web_search", "web_search", "calculator",
    ]  # fmt: skip
    assert body["totals"]["turns"] == 3 and body["next_cursor"] is None


def test_it_finds_the_spiral_that_spans_two_turns(api, conversation):
    spirals = api.get("/sessions/s-71").json()["cross_turn_spirals"]

    assert len(spirals) == 1
    assert spirals[0]["tool_name"] == "web_search" and spirals[0]["error_kind"] == "timeout"
    assert spirals[0]["attempts"] == 4
    assert spirals[0]["turns"] == [1, 2]


def test_it_shows_the_scores_of_a_session(api, make_key, live_server, conversation):
    ScoreDefinition.objects.get_or_create(name="feedback", defaults={"data_type": "boolean"})
    api.headers["Authorization"] = f"Bearer {make_key('score', 'read')}"
    second = conversation["turns"][1]
    sent = api.post("/scores", json={"scores": [
        {"name": "feedback", "value": False, "trace_id": second},
        {"name": "feedback", "value": True, "trace_id": conversation["turns"][0]},
    ]})  # fmt: skip
    assert sent.json()["accepted"] == 2, sent.text

    body = api.get("/sessions/s-71").json()

    assert [score["value"] for score in body["turns"][1]["scores"]] == [False]
    assert body["scores"] == [
        {"name": "feedback", "count": 2, "mean": 0.5, "labels": {"false": 1, "true": 1}}
    ]


def test_it_pages_the_turns_of_a_long_session(api, report):
    bases = [turn("long/one", f"request {number}") for number in range(5)]
    report(*[tool(base, "calculator", number) for number, base in enumerate(bases)])

    first = api.get("/sessions/long/one", params={"limit": 2}).json()
    second = api.get("/sessions/long/one", params={"limit": 2, "cursor": first["next_cursor"]})

    assert [turn["request"] for turn in first["turns"]] == ["request 0", "request 1"]
    assert [turn["number"] for turn in second.json()["turns"]] == [3, 4]
    assert second.json()["totals"]["turns"] == 5


def test_it_answers_404_for_an_unknown_session(api, conversation, problem):
    response = api.get("/sessions/s-999")

    assert response.status_code == 404
    assert "s-999" in problem(response)


def test_it_filters_traces_by_session(api, conversation):
    response = api.get("/traces", params={"session": "s-71", "sort": "started"})
    count = api.get("/traces/count", params={"session": "s-71"}).json()

    assert [trace["trace_id"] for trace in response.json()["items"]] == conversation["turns"]
    assert (count["count"], count["exact"]) == (3, True)


def test_it_needs_a_read_key(anonymous_api, make_key, live_server):
    import httpx

    reporter = httpx.Client(
        base_url=f"{live_server.url}/api/v1",
        headers={"Authorization": f"Bearer {make_key('report')}"},
    )
    with reporter:
        assert reporter.get("/sessions").status_code == 403
    assert anonymous_api.get("/sessions").status_code == 401


def test_a_row_names_the_tools_of_its_latest_turns(api, report, monkeypatch):
    monkeypatch.setattr(sessions, "TOOL_TURNS", 2)
    report(*[tool(turn("long", f"turn {n}"), name, n) for n, name in enumerate(["old", "a", "b"])])

    row = api.get("/sessions").json()["items"][0]

    assert row["turns"] == 3 and row["tools"] == ["a", "b"]
