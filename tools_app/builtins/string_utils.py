"""The string_utils built-in tool: case, trimming, splitting, joining, slicing, replacing.

One `operation` picks what to do; the other fields are optional in the schema because each
operation needs different ones, so the tool itself names a needed field that is missing.
Lengths, indices and reversal count Unicode code points, as Python does: an emoji built
from several code points counts as several.
"""

from __future__ import annotations

import re
from typing import Any

from tools_app.specs import ErrorKind, ToolFailure, ToolSpec

MAX_TEXT_LENGTH = 1_000_000
MAX_ITEMS = 10_000

# Which fields each operation needs; the rest of its fields have defaults.
NEEDS: dict[str, tuple[str, ...]] = {
    "upper": ("text",),
    "lower": ("text",),
    "title": ("text",),
    "trim": ("text",),
    "length": ("text",),
    "reverse": ("text",),
    "split": ("text",),
    "join": ("items",),
    "substring": ("text",),
    "replace": ("text", "old", "new"),
}

# Words for `title`: letters and digits, apostrophes inside ("they're" not "They'Re", "3rd").
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")

DESCRIPTION = (
    "Transform or measure text. Operations and the fields they use: upper, lower, title, "
    "trim (strip leading and trailing whitespace), length (characters), reverse: `text`. "
    "split: `text`, optional `separator` (default: any run of whitespace; '' splits into "
    "characters). join: `items`, optional `separator` (default ''). substring: `text`, "
    "optional `start` and `end` (0-based, end exclusive, negative counts from the end). "
    "replace: `text`, `old`, `new`, optional `count` (default: every occurrence)."
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {
            "type": "string",
            "enum": list(NEEDS),
            "description": "What to do; see the tool description for the fields each one uses.",
        },
        "text": {
            "type": "string",
            "maxLength": MAX_TEXT_LENGTH,
            "description": "The input text (every operation but join).",
        },
        "items": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": MAX_ITEMS,
            "description": "join: the strings to join, in order.",
        },
        "separator": {
            "type": "string",
            "description": "split: where to cut (default whitespace); join: what goes between.",
        },
        "start": {
            "type": "integer",
            "description": "substring: first character index, 0-based; negative counts from the "
            "end (-1 is the last). Default 0.",
        },
        "end": {
            "type": "integer",
            "description": "substring: index just past the last character; negative counts from "
            "the end. Default: the end of the text.",
        },
        "old": {"type": "string", "minLength": 1, "description": "replace: the text to find."},
        "new": {"type": "string", "description": "replace: what to put instead (may be '')."},
        "count": {
            "type": "integer",
            "minimum": 1,
            "description": "replace: replace only the first `count` occurrences.",
        },
    },
    "required": ["operation"],
    "additionalProperties": False,
}

RETURNS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {"type": "string"},
        "result": {
            "type": ["string", "integer", "array"],
            "items": {"type": "string"},
            "description": "Text; an integer for length; a list of strings for split.",
        },
        "replacements": {"type": "integer", "description": "replace: how many were made."},
    },
    "required": ["operation", "result"],
}


def run_string_utils(
    operation: str,
    text: str | None = None,
    items: list[str] | None = None,
    separator: str | None = None,
    start: int | None = None,
    end: int | None = None,
    old: str | None = None,
    new: str | None = None,
    count: int | None = None,
) -> dict[str, Any]:
    """Apply the operation to the fields it uses and return the result."""
    given = {"text": text, "items": items, "old": old, "new": new}
    missing = [name for name in NEEDS[operation] if given[name] is None]
    if missing:
        names = " and ".join(f"`{name}`" for name in missing)
        raise ToolFailure(f"{operation} needs {names}", ErrorKind.INVALID_ARGUMENTS)
    if operation == "join":
        return {"operation": operation, "result": (separator or "").join(items or [])}
    assert text is not None  # Every other operation needs it, as checked above.
    if operation == "replace":
        assert old is not None and new is not None
        made = text.count(old) if count is None else min(count, text.count(old))
        return {
            "operation": operation,
            "result": text.replace(old, new, made),
            "replacements": made,
        }
    if operation == "substring":
        first, last = _slice_bounds(len(text), start, end)
        return {"operation": operation, "result": text[first:last]}
    return {"operation": operation, "result": _transform(operation, text, separator)}


def _transform(operation: str, text: str, separator: str | None) -> str | int | list[str]:
    """Return the result of an operation that needs only the text (and split's separator)."""
    if operation == "split":
        if separator == "":
            return list(text)
        return text.split(separator)
    return {
        "upper": str.upper,
        "lower": str.lower,
        "title": lambda t: _WORD.sub(lambda word: word[0][:1].title() + word[0][1:].lower(), t),
        "trim": str.strip,
        "length": len,
        "reverse": lambda t: t[::-1],
    }[operation](text)


def _slice_bounds(length: int, start: int | None, end: int | None) -> tuple[int, int]:
    """Return start and end as plain indices; out-of-range or crossed indices are an error.

    Python would silently clamp or return '', which hides an off-by-one from the caller.
    """
    first = _index("start", 0 if start is None else start, length)
    last = _index("end", length if end is None else end, length)
    if first > last:
        raise ToolFailure(
            f"start ({start}) is after end ({end}) in a text of {length} characters",
            ErrorKind.INVALID_ARGUMENTS,
        )
    return first, last


def _index(name: str, value: int, length: int) -> int:
    if not -length <= value <= length:
        raise ToolFailure(
            f"{name} {value} is out of range for a text of {length} characters: "
            f"use {-length} to {length}",
            ErrorKind.INVALID_ARGUMENTS,
        )
    return value + length if value < 0 else value


SPEC = ToolSpec(
    name="string_utils",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    function=run_string_utils,
    returns=RETURNS,
    timeout_s=5.0,
    capabilities=("StringManipulation",),
)
