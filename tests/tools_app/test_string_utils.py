"""The string_utils built-in: each operation, validated slicing, and naming missing fields."""

from __future__ import annotations

from typing import Any

import pytest

from tests.tools_app.tool_calls import call
from tools_app.builtins.string_utils import SPEC
from tools_app.specs import ErrorKind, ToolFailure
from tools_app.validation import ArgumentsError


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"operation": "upper", "text": "hello world"}, "HELLO WORLD"),
        ({"operation": "lower", "text": "Hello WÖRLD"}, "hello wörld"),
        ({"operation": "title", "text": "hello wORLD"}, "Hello World"),
        ({"operation": "title", "text": "they're o'neil's 3rd"}, "They're O'neil's 3rd"),
        ({"operation": "title", "text": "hello-world"}, "Hello-World"),
        ({"operation": "trim", "text": "  \t hi there \n"}, "hi there"),
        ({"operation": "length", "text": "héllo"}, 5),
        ({"operation": "length", "text": ""}, 0),
        ({"operation": "reverse", "text": "abc déf"}, "féd cba"),
        ({"operation": "split", "text": "a, b, c", "separator": ", "}, ["a", "b", "c"]),
        ({"operation": "split", "text": "  a  b\tc\n"}, ["a", "b", "c"]),
        ({"operation": "split", "text": "abc", "separator": ""}, ["a", "b", "c"]),
        ({"operation": "split", "text": "a,,b", "separator": ","}, ["a", "", "b"]),
        ({"operation": "join", "items": ["a", "b", "c"], "separator": "-"}, "a-b-c"),
        ({"operation": "join", "items": ["a", "b"]}, "ab"),
        ({"operation": "join", "items": []}, ""),
        ({"operation": "substring", "text": "hello world", "start": 6}, "world"),
        ({"operation": "substring", "text": "hello world", "end": 5}, "hello"),
        ({"operation": "substring", "text": "hello world", "start": -5, "end": -1}, "worl"),
        ({"operation": "substring", "text": "hello", "start": 5}, ""),
        ({"operation": "substring", "text": "hello", "start": -5, "end": 5}, "hello"),
        ({"operation": "replace", "text": "a-b-c", "old": "-", "new": "+"}, "a+b+c"),
        ({"operation": "replace", "text": "a-b-c", "old": "-", "new": "", "count": 1}, "ab-c"),
    ],
)
def test_it_applies_each_operation(arguments: dict[str, Any], expected: Any) -> None:
    assert call(SPEC, **arguments)["result"] == expected


@pytest.mark.parametrize(
    ("count", "replacements"),
    [(None, 3), (2, 2), (5, 3)],
)
def test_it_reports_how_many_replacements_it_made(count: int | None, replacements: int) -> None:
    arguments = {"operation": "replace", "text": "aaa", "old": "a", "new": "b"}
    if count is not None:
        arguments["count"] = count
    assert call(SPEC, **arguments)["replacements"] == replacements


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"operation": "upper"}, "upper needs `text`"),
        ({"operation": "join", "text": "a b"}, "join needs `items`"),
        ({"operation": "replace", "text": "abc"}, "replace needs `old` and `new`"),
        ({"operation": "replace", "text": "abc", "old": "a"}, "replace needs `new`"),
    ],
)
def test_it_names_the_fields_an_operation_is_missing(
    arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolFailure) as failure:
        call(SPEC, **arguments)
    assert failure.value.kind == ErrorKind.INVALID_ARGUMENTS
    assert str(failure.value) == message


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (6, None, "start 6 is out of range for a text of 5 characters: use -5 to 5"),
        (None, -6, "end -6 is out of range for a text of 5 characters: use -5 to 5"),
        (3, 1, "start (3) is after end (1) in a text of 5 characters"),
        (-1, 2, "start (-1) is after end (2) in a text of 5 characters"),
    ],
)
def test_it_refuses_substring_indices_python_would_clamp(
    start: int | None, end: int | None, message: str
) -> None:
    arguments: dict[str, Any] = {"operation": "substring", "text": "hello"}
    arguments |= {k: v for k, v in {"start": start, "end": end}.items() if v is not None}
    with pytest.raises(ToolFailure) as failure:
        call(SPEC, **arguments)
    assert failure.value.kind == ErrorKind.INVALID_ARGUMENTS
    assert str(failure.value) == message


@pytest.mark.parametrize(
    "arguments",
    [
        {"operation": "capitalize", "text": "x"},
        {"text": "x"},
        {"operation": "replace", "text": "abc", "old": "", "new": "x"},
        {"operation": "replace", "text": "abc", "old": "a", "new": "x", "count": 0},
        {"operation": "join", "items": ["a", 1]},
        {"operation": "upper", "text": "x", "locale": "tr"},
    ],
)
def test_its_schema_rejects_malformed_arguments(arguments: dict[str, Any]) -> None:
    with pytest.raises(ArgumentsError):
        call(SPEC, **arguments)
