"""The json_tools built-in: validation with positions, pretty-printing, RFC 6901 pointers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.tools_app.tool_calls import call
from tools_app.builtins.json_tools import SPEC
from tools_app.specs import ErrorKind, ToolFailure
from tools_app.validation import ArgumentsError

# The example document of RFC 6901, section 5.
RFC_DOCUMENT = json.dumps(
    {"foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3, "g|h": 4,
     "i\\j": 5, 'k"l': 6, " ": 7, "m~n": 8}
)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "type_"),
    [
        ('{"a": [1, 2.5, "x", null, true]}', "object"),
        ("[]", "array"),
        ('"just a string"', "string"),
        ("  42 \n", "number"),
        ("null", "null"),
    ],
)
def test_it_validates_json(text: str, type_: str) -> None:
    assert call(SPEC, operation="validate", text=text) == {
        "operation": "validate",
        "valid": True,
        "type": type_,
    }


@pytest.mark.parametrize(
    ("text", "error", "line", "column"),
    [
        ('{"a": 1,}', "Expecting property name enclosed in double quotes", 1, 9),
        ('{\n  "a": 1\n  "b": 2\n}', "Expecting ',' delimiter", 3, 3),
        ("{'a': 1}", "Expecting property name enclosed in double quotes", 1, 2),
        ("", "Expecting value", 1, 1),
        ("[1, 2] [3]", "Extra data", 1, 8),
        ('{"a": "NaN",\n "b": NaN}', "NaN is not allowed in JSON (use null or a string)", 2, 7),
        ("[-Infinity]", "-Infinity is not allowed in JSON (use null or a string)", 1, 2),
    ],
)
def test_it_says_where_invalid_json_breaks(text: str, error: str, line: int, column: int) -> None:
    result = call(SPEC, operation="validate", text=text)
    assert result["valid"] is False
    assert (result["error"], result["line"], result["column"]) == (error, line, column)


def test_it_reports_json_nested_too_deeply_as_invalid() -> None:
    result = call(SPEC, operation="validate", text="[" * 100_000)
    assert result["valid"] is False
    assert result["error"] == "nested too deeply to read"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, '{\n  "b": [\n    1,\n    2\n  ],\n  "a": "é"\n}'),
        (
            {"indent": 4, "sort_keys": True},
            '{\n    "a": "é",\n    "b": [\n        1,\n        2\n    ]\n}',
        ),
        ({"indent": 0}, '{"b":[1,2],"a":"é"}'),
    ],
)
def test_it_pretty_prints(arguments: dict[str, Any], expected: str) -> None:
    result = call(SPEC, operation="pretty_print", text='{"b":[1, 2], "a": "\\u00e9"}', **arguments)
    assert result["result"] == expected


@pytest.mark.parametrize(
    ("pointer", "value"),
    [
        ("", json.loads(RFC_DOCUMENT)),
        ("/foo", ["bar", "baz"]),
        ("/foo/0", "bar"),
        ("/", 0),
        ("/a~1b", 1),
        ("/c%d", 2),
        ("/e^f", 3),
        ("/g|h", 4),
        ("/i\\j", 5),
        ('/k"l', 6),
        ("/ ", 7),
        ("/m~0n", 8),
    ],
)
def test_it_resolves_the_rfc_6901_examples(pointer: str, value: Any) -> None:
    result = call(SPEC, operation="query", text=RFC_DOCUMENT, pointer=pointer)
    assert result["value"] == value
    assert result["pointer"] == pointer


def test_it_unescapes_tilde_one_before_tilde_zero() -> None:
    text = json.dumps({"~1": "tilde-one", "/": "slash"})
    assert call(SPEC, operation="query", text=text, pointer="/~01")["value"] == "tilde-one"


def test_it_reports_the_type_of_the_value_found() -> None:
    text = '{"users": [{"name": "Ada", "admin": true, "age": 36}]}'
    result = call(SPEC, operation="query", text=text, pointer="/users/0/admin")
    assert (result["type"], result["value"]) == ("boolean", True)


@pytest.mark.parametrize(
    ("pointer", "message"),
    [
        ("/users/0/email", "no key 'email' in the object at '/users/0'; its keys: 'name', 'tags'"),
        ("/users/1", "no element '1' in the array at '/users': indices 0 to 0"),
        ("/users/01", "no element '01' in the array at '/users'"),
        ("/users/-", "no element '-' in the array at '/users'"),
        ("/users/0/tags/0", "no element '0' in the array at '/users/0/tags': it is empty"),
        ("/users/0/name/x", "cannot look up 'x' at '/users/0/name': the value there is a string"),
        ("/people", "no key 'people' in the object at the top level; its keys: 'users'"),
        ("users/0", "pointer 'users/0' must be '' or start with '/', e.g. '/users/0'"),
        ("/users~2", "has a '~' not followed by 0 or 1"),
    ],
)
def test_it_says_which_step_of_a_pointer_fails(pointer: str, message: str) -> None:
    text = '{"users": [{"name": "Ada", "tags": []}]}'
    with pytest.raises(ToolFailure) as failure:
        call(SPEC, operation="query", text=text, pointer=pointer)
    assert failure.value.kind == ErrorKind.INVALID_ARGUMENTS
    assert message in str(failure.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"operation": "pretty_print", "text": "{"}, "`text` is not valid JSON: Expecting"),
        ({"operation": "query", "text": "[1]"}, "query needs `pointer`"),
        ({"operation": "query", "text": "[1,", "pointer": "/0"}, "at line 1 column 4"),
    ],
)
def test_it_refuses_what_it_cannot_work_on(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolFailure) as failure:
        call(SPEC, **arguments)
    assert failure.value.kind == ErrorKind.INVALID_ARGUMENTS
    assert message in str(failure.value)


@pytest.mark.parametrize(
    "arguments",
    [
        {"operation": "minify", "text": "{}"},
        {"operation": "pretty_print", "text": "{}", "indent": 9},
        {"operation": "validate"},
        {"operation": "validate", "text": "{}", "strict": True},
    ],
)
def test_its_schema_rejects_malformed_arguments(arguments: dict[str, Any]) -> None:
    with pytest.raises(ArgumentsError):
        call(SPEC, **arguments)
