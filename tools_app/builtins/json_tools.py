"""The json_tools built-in tool: validate JSON, pretty-print it, read a value by JSON Pointer.

Strict JSON (RFC 8259): NaN, Infinity and -Infinity, which Python accepts, are refused.
Paths are JSON Pointers (RFC 6901), implemented here in a few lines: '' is the whole
document, '/a/0/b' is key a, its first element, then key b; '~1' stands for '/' and '~0'
for '~' inside a key. Array indices are decimal without leading zeros; '-' (the element
after the last) never exists when reading.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tools_app.specs import ErrorKind, ToolFailure, ToolSpec

MAX_TEXT_LENGTH = 1_000_000
OPERATIONS = ("validate", "pretty_print", "query")
_ARRAY_INDEX = re.compile(r"^(0|[1-9][0-9]*)$")
_BAD_ESCAPE = re.compile(r"~(?![01])")
_TYPES = {dict: "object", list: "array", str: "string", type(None): "null"}
_CONSTANT_OR_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|(?P<constant>-?Infinity|NaN)')

DESCRIPTION = (
    "Work with JSON text. validate: say whether `text` is valid JSON and, if not, the line "
    "and column where it breaks (never fails for bad JSON). pretty_print: re-indent `text` "
    "(`indent` spaces, 0 for one compact line; optional `sort_keys`). query: return the "
    "value at a JSON Pointer (RFC 6901) `pointer` such as '/users/0/name' ('' is the whole "
    "document, '~1' stands for '/' in a key, '~0' for '~')."
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {"type": "string", "enum": list(OPERATIONS), "description": "What to do."},
        "text": {
            "type": "string",
            "maxLength": MAX_TEXT_LENGTH,
            "description": "The JSON document, as text.",
        },
        "indent": {
            "type": "integer",
            "minimum": 0,
            "maximum": 8,
            "default": 2,
            "description": "pretty_print: spaces per level; 0 for one compact line.",
        },
        "sort_keys": {
            "type": "boolean",
            "default": False,
            "description": "pretty_print: sort object keys alphabetically.",
        },
        "pointer": {
            "type": "string",
            "description": "query: a JSON Pointer, e.g. '/items/0/price'; '' for the whole "
            "document.",
        },
    },
    "required": ["operation", "text"],
    "additionalProperties": False,
}

RETURNS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {"type": "string"},
        "valid": {"type": "boolean", "description": "validate: whether the text is JSON."},
        "type": {"type": "string", "description": "JSON type of the document or value."},
        "error": {"type": "string", "description": "validate: what is wrong, when invalid."},
        "line": {"type": "integer", "description": "validate: 1-based line of the error."},
        "column": {"type": "integer", "description": "validate: 1-based column of the error."},
        "position": {"type": "integer", "description": "validate: 0-based character offset."},
        "result": {"type": "string", "description": "pretty_print: the re-indented JSON."},
        "pointer": {"type": "string"},
        "value": {"description": "query: the value found, any JSON type."},
    },
    "required": ["operation"],
}


class InvalidJson(ValueError):
    """Text that is not JSON, with where it breaks."""

    def __init__(self, message: str, line: int, column: int, position: int) -> None:
        super().__init__(f"{message} at line {line} column {column} (character {position})")
        self.message, self.line, self.column, self.position = message, line, column, position


def run_json_tools(
    operation: str,
    text: str,
    indent: int = 2,
    sort_keys: bool = False,
    pointer: str | None = None,
) -> dict[str, Any]:
    """Validate, pretty-print or query the JSON text."""
    if operation == "validate":
        return validate(text)
    if operation == "query" and pointer is None:
        raise ToolFailure("query needs `pointer`, e.g. '/items/0'", ErrorKind.INVALID_ARGUMENTS)
    try:
        document = parse(text)
    except InvalidJson as error:
        raise ToolFailure(
            f"`text` is not valid JSON: {error}", ErrorKind.INVALID_ARGUMENTS
        ) from None
    if operation == "pretty_print":
        compact = {"separators": (",", ":")} if indent == 0 else {"indent": indent}
        dumped = json.dumps(document, ensure_ascii=False, sort_keys=sort_keys, **compact)
        return {"operation": operation, "result": dumped}
    assert pointer is not None  # Checked above, before the parse, to fail fast.
    value = resolve_pointer(document, pointer)
    return {"operation": operation, "pointer": pointer, "type": json_type(value), "value": value}


def validate(text: str) -> dict[str, Any]:
    """Return whether the text is JSON, its type if so, and where it breaks if not."""
    try:
        document = parse(text)
    except InvalidJson as error:
        return {
            "operation": "validate",
            "valid": False,
            "error": error.message,
            "line": error.line,
            "column": error.column,
            "position": error.position,
        }
    return {"operation": "validate", "valid": True, "type": json_type(document)}


def parse(text: str) -> Any:
    """Return the document the text holds under strict JSON rules, or raise InvalidJson."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise InvalidJson(error.msg, error.lineno, error.colno, error.pos) from None
    except _NotJsonConstant as error:
        # The decoder does not say where the constant was: find the first one outside a string.
        found = next(m for m in _CONSTANT_OR_STRING.finditer(text) if m["constant"])
        position = found.start()
        line = text.count("\n", 0, position) + 1
        column = position - text.rfind("\n", 0, position)
        raise InvalidJson(str(error), line, column, position) from None
    except RecursionError:
        raise InvalidJson("nested too deeply to read", 1, 1, 0) from None


class _NotJsonConstant(ValueError):
    pass


def _refuse_constant(name: str) -> None:
    raise _NotJsonConstant(f"{name} is not allowed in JSON (use null or a string)")


def resolve_pointer(document: Any, pointer: str) -> Any:
    """Return the value a JSON Pointer names, or fail saying which step does not exist."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        raise ToolFailure(
            f"pointer {pointer!r} must be '' or start with '/', e.g. '/{pointer}'",
            ErrorKind.INVALID_ARGUMENTS,
        )
    if _BAD_ESCAPE.search(pointer):
        raise ToolFailure(
            f"pointer {pointer!r} has a '~' not followed by 0 or 1: write '~0' for '~' and '~1' "
            "for '/'",
            ErrorKind.INVALID_ARGUMENTS,
        )
    value, walked = document, ""
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")  # In this order, per RFC 6901.
        value = _step(value, token, walked)
        walked += f"/{raw}"
    return value


def _step(value: Any, token: str, walked: str) -> Any:
    """Return the member or element `token` of value, found at pointer `walked`."""
    where = f"at {walked!r}" if walked else "at the top level"
    if isinstance(value, dict):
        if token in value:
            return value[token]
        keys = ", ".join(repr(key) for key in list(value)[:20]) or "none"
        raise ToolFailure(
            f"no key {token!r} in the object {where}; its keys: {keys}",
            ErrorKind.INVALID_ARGUMENTS,
        )
    if isinstance(value, list):
        if _ARRAY_INDEX.match(token) and int(token) < len(value):
            return value[int(token)]
        size = f"indices 0 to {len(value) - 1}" if value else "it is empty"
        raise ToolFailure(
            f"no element {token!r} in the array {where}: {size}", ErrorKind.INVALID_ARGUMENTS
        )
    raise ToolFailure(
        f"cannot look up {token!r} {where}: the value there is a {json_type(value)}, "
        "not an object or array",
        ErrorKind.INVALID_ARGUMENTS,
    )


def json_type(value: Any) -> str:
    """Return the JSON type name of a parsed value."""
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, int | float) else _TYPES[type(value)]


SPEC = ToolSpec(
    name="json_tools",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    function=run_json_tools,
    returns=RETURNS,
    timeout_s=10.0,
    capabilities=("JSONProcessing",),
)
