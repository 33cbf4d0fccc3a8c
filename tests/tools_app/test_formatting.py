"""The generic result formatter: scalars, objects, lists, truncation, descriptions, errors."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tools_app.formatting import (
    CHARS_PER_TOKEN,
    estimate_tokens,
    format_error,
    format_result,
    truncate,
)
from tools_app.specs import ErrorKind, Problem, ToolError
from tools_app.validation import ArgumentsError, validate_arguments

MARKER = re.compile(r"… \[truncated: showing (\d+) of (\d+) characters\]$")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(42, "42", id="int"),
        pytest.param(-7, "-7", id="negative int"),
        pytest.param(10**30, "1000000000000000000000000000000", id="big int"),
        pytest.param(0.1 + 0.2, "0.30000000000000004", id="float full precision"),
        pytest.param(1 / 3, "0.3333333333333333", id="one third"),
        pytest.param(1e16 + 2, "1.0000000000000002e+16", id="large float"),
        pytest.param(1e-7, "1e-07", id="tiny float"),
        pytest.param(True, "true", id="true"),
        pytest.param(False, "false", id="false"),
        pytest.param(None, "null", id="none"),
        pytest.param("2cf24dba5fb0a30e", "2cf24dba5fb0a30e", id="text as is"),
        pytest.param("Zürich", "Zürich", id="unicode text"),
        pytest.param("", "", id="empty text"),
    ],
)
def test_it_formats_a_scalar(data: Any, expected: str) -> None:
    assert format_result("tool", data) == f"tool returned: {expected}"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(
            {"result": 2, "expression": "1+1"},
            '{"result": 2, "expression": "1+1"}',
            id="flat object",
        ),
        pytest.param({"sum": 0.1 + 0.2}, '{"sum": 0.30000000000000004}', id="precise float"),
        pytest.param({"city": "Zürich"}, '{"city": "Zürich"}', id="unicode kept"),
        pytest.param(
            {"ok": True, "error": None, "nested": {"depth": 2}},
            '{"ok": true, "error": null, "nested": {"depth": 2}}',
            id="nested object",
        ),
        pytest.param({}, "{}", id="empty object"),
        pytest.param([], "[]", id="empty list"),
    ],
)
def test_it_formats_an_object_as_compact_json(data: Any, expected: str) -> None:
    assert format_result("tool", data) == f"tool returned: {expected}"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param([1, 2, 3], "[1, 2, 3]", id="short"),
        pytest.param(list(range(5)), "[0, 1, 2, 3, 4]", id="exactly five"),
        pytest.param(list(range(6)), '[0, 1, 2, 3, 4, "… and 1 more"]', id="six"),
        pytest.param(list(range(12)), '[0, 1, 2, 3, 4, "… and 7 more"]', id="twelve"),
        pytest.param(
            [list(range(8)), [1]],
            '[[0, 1, 2, 3, 4, "… and 3 more"], [1]]',
            id="nested lists",
        ),
        pytest.param(
            {"count": 9, "results": [{"title": f"r{n}"} for n in range(9)]},
            '{"count": 9, "results": [{"title": "r0"}, {"title": "r1"}, {"title": "r2"}, '
            '{"title": "r3"}, {"title": "r4"}, "… and 4 more"]}',
            id="list inside object",
        ),
    ],
)
def test_it_shows_the_first_five_items_of_a_list(data: Any, expected: str) -> None:
    assert format_result("tool", data) == f"tool returned: {expected}"


@pytest.mark.parametrize("max_tokens", [20, 100, 800])
def test_it_truncates_long_text_within_the_budget_with_a_marker(max_tokens: int) -> None:
    text = "".join(f"line {n}: the quick brown fox\n" for n in range(2000))
    formatted = format_result("web_search", text, max_tokens=max_tokens)
    marker = MARKER.search(formatted)
    assert marker is not None
    shown, total = int(marker.group(1)), int(marker.group(2))
    assert total == len("web_search returned: " + text)
    assert formatted.startswith("web_search returned: line 0")
    assert formatted == ("web_search returned: " + text)[:shown] + marker.group(0)
    assert len(formatted) <= max_tokens * CHARS_PER_TOKEN
    assert estimate_tokens(formatted) <= max_tokens


def test_it_truncates_a_large_object_within_the_budget() -> None:
    data = {"results": [{"snippet": "x" * 5000}] * 3}
    formatted = format_result("web_search", data, max_tokens=200)
    assert MARKER.search(formatted)
    assert estimate_tokens(formatted) <= 200


@pytest.mark.parametrize("extra", [0, -1])
def test_it_leaves_text_within_the_budget_alone(extra: int) -> None:
    text = "a" * (100 * CHARS_PER_TOKEN + extra)
    assert truncate(text, 100) == text


def test_truncate_cuts_one_character_over_the_budget() -> None:
    text = "a" * (100 * CHARS_PER_TOKEN + 1)
    cut = truncate(text, 100)
    assert MARKER.search(cut)
    assert len(cut) <= 100 * CHARS_PER_TOKEN


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 4000, 1000)],
)
def test_it_estimates_tokens_at_four_characters_each(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


RETURNS = {
    "type": "object",
    "properties": {
        "result": {"type": "number", "description": "the value of the expression"},
        "expression": {"type": "string", "description": "the expression as parsed"},
        "warnings": {"type": "array", "description": "never present in this result"},
        "unit": {"type": "string"},
    },
}


def test_it_appends_descriptions_of_the_fields_present() -> None:
    formatted = format_result("calculator", {"result": 2, "expression": "1+1"}, RETURNS)
    assert formatted == (
        'calculator returned: {"result": 2, "expression": "1+1"} '
        "(result: the value of the expression; expression: the expression as parsed)"
    )


def test_it_adds_no_descriptions_without_a_returns_schema() -> None:
    formatted = format_result("calculator", {"result": 2, "unit": "m"}, {"type": "object"})
    assert formatted == 'calculator returned: {"result": 2, "unit": "m"}'


def test_it_formats_an_error_with_each_problem_on_its_own_line() -> None:
    error = ToolError(
        ErrorKind.INVALID_ARGUMENTS,
        "invalid arguments",
        (
            Problem("expression", "expected string, got number 123"),
            Problem("precision", "unknown field; allowed: expression"),
        ),
    )
    assert format_error("calculator", error) == (
        "calculator failed (invalid_arguments): invalid arguments\n"
        "- expression: expected string, got number 123\n"
        "- precision: unknown field; allowed: expression"
    )


def test_it_formats_an_error_without_problems_on_one_line() -> None:
    error = ToolError(ErrorKind.TIMEOUT, "web_search timed out after 30 s")
    assert format_error("web_search", error) == (
        "web_search failed (timeout): web_search timed out after 30 s"
    )


def test_it_formats_the_problems_validation_found() -> None:
    schema = {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
        "additionalProperties": False,
    }
    with pytest.raises(ArgumentsError) as caught:
        validate_arguments(schema, '{"expresion": "1+1"}')
    error = ToolError(
        ErrorKind.INVALID_ARGUMENTS, "invalid arguments", tuple(caught.value.problems)
    )
    assert format_error("calculator", error).splitlines()[1:] == [
        "- expresion: unknown field; allowed: expression",
        "- expression: required but missing",
    ]


def test_it_shows_only_the_view_a_tool_names() -> None:
    data = {"text": '{"sum": 3}', "content": [{"type": "text"}], "structured": {"sum": 3}}
    returns = {"properties": {"structured": {"properties": {"sum": {"description": "a+b"}}}}}
    text = format_result("mcp.demo.add", data, returns, view=("structured", "text"))
    assert text == 'mcp.demo.add returned: {"sum": 3} (sum: a+b)'


def test_it_falls_back_along_the_view_when_a_key_is_null() -> None:
    data = {"text": "plain answer", "content": [], "structured": None}
    text = format_result("mcp.time.now", data, view=("structured", "text"))
    assert text == "mcp.time.now returned: plain answer"
