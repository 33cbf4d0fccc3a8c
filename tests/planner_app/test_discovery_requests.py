"""Reading <tool_request> and <tool_assistant> blocks from an agent's reply."""

from __future__ import annotations

import pytest

from planner_app.discovery import (
    ToolRequest,
    ToolRequestError,
    TooManyToolRequests,
    parse_tool_requests,
)


def block(tool: str, server: str = "any", tag: str = "tool_request") -> str:
    return f"<{tag}>\nserver: {server}\ntool: {tool}\n</{tag}>"


def test_it_reads_every_block_of_a_reply_in_order() -> None:
    reply = (
        "I need two tools.\n"
        + block("get the forecast", "weather service")
        + "\nand then\n"
        + block("create an event", "calendar")
    )
    assert parse_tool_requests(reply) == [
        ToolRequest(server="weather service", tool="get the forecast"),
        ToolRequest(server="calendar", tool="create an event"),
    ]


def test_it_reads_tool_assistant_blocks_too() -> None:
    reply = block("read a file", "files", tag="tool_assistant") + block("list issues", "github")
    assert [r.tool for r in parse_tool_requests(reply)] == ["read a file", "list issues"]


def test_it_reads_a_reply_without_blocks_as_no_requests() -> None:
    assert parse_tool_requests("The answer is 42.") == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("server: weather\ntool: forecast", ToolRequest("weather", "forecast")),
        ("tool: forecast\nserver: weather", ToolRequest("weather", "forecast")),
        ("  Server :  weather \n TOOL: forecast  ", ToolRequest("weather", "forecast")),
        ("server: w\ntool: the forecast\n  of a city", ToolRequest("w", "the forecast of a city")),
        (
            "server: units\ntool: convert units, e.g.: km to miles",
            ToolRequest("units", "convert units, e.g.: km to miles"),
        ),
        ("server：天气服务\ntool：查询天气预报", ToolRequest("天气服务", "查询天气预报")),
        (
            "server: weather tool: forecast".replace(" tool", "\ntool"),
            ToolRequest("weather", "forecast"),
        ),
    ],
)
def test_it_reads_the_fields_of_a_block(body: str, expected: ToolRequest) -> None:
    assert parse_tool_requests(f"<tool_request>{body}</tool_request>") == [expected]


def test_it_accepts_tags_in_any_case() -> None:
    reply = "<TOOL_REQUEST>server: s\ntool: x</Tool_Request>"
    assert parse_tool_requests(reply) == [ToolRequest("s", "x")]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("<tool_request>server: weather</tool_request>", "'tool:' is missing"),
        ("<tool_request>server: weather\ntool:</tool_request>", "'tool:' is missing or empty"),
        ("<tool_request>tool: forecast</tool_request>", "'server:' is missing"),
        ("<tool_request>server:\ntool: forecast</tool_request>", "'server:' is missing or empty"),
        ("<tool_request>\nplease find me a tool\n</tool_request>", "cannot read"),
        ("<tool_request>server: s\ntool: a\ntool: b</tool_request>", "given twice"),
        ("<tool_request>tool: forecast", "not closed"),
        ("tool: forecast</tool_request>", "closes no open"),
        ("<tool_request>tool: a</tool_assistant>", "closes no open"),
        ("<tool_request>tool: a<tool_request>tool: b</tool_request>", "not closed before"),
    ],
)
def test_it_refuses_malformed_blocks_with_a_reason(reply: str, message: str) -> None:
    with pytest.raises(ToolRequestError, match=message):
        parse_tool_requests(reply)


def test_it_numbers_the_bad_block_in_its_error() -> None:
    reply = block("forecast") + "<tool_request>server: only</tool_request>"
    with pytest.raises(ToolRequestError, match="tool request 2"):
        parse_tool_requests(reply)


def test_it_allows_five_requests_per_task() -> None:
    assert len(parse_tool_requests(block("x") * 5)) == 5


def test_it_refuses_a_sixth_request_and_keeps_the_five_that_fit() -> None:
    reply = "".join(block(f"tool {i}") for i in range(6))
    with pytest.raises(TooManyToolRequests, match="at most 5") as error:
        parse_tool_requests(reply)
    assert [r.tool for r in error.value.allowed] == [f"tool {i}" for i in range(5)]


def test_it_counts_the_requests_the_task_made_before() -> None:
    reply = block("a") + block("b") + block("c")
    assert len(parse_tool_requests(reply, already_made=2)) == 3
    with pytest.raises(TooManyToolRequests) as error:
        parse_tool_requests(reply, already_made=3)
    assert [r.tool for r in error.value.allowed] == ["a", "b"]
    with pytest.raises(TooManyToolRequests) as error:
        parse_tool_requests(block("a"), already_made=5)
    assert error.value.allowed == []


def test_it_takes_another_limit() -> None:
    with pytest.raises(TooManyToolRequests, match="at most 1"):
        parse_tool_requests(block("a") + block("b"), limit=1)
