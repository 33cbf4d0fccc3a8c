"""Turn tool results into text for an LLM: one generic formatter driven by the data's shape.

No per-tool switch: scalars print as they are (numbers in full precision), objects as
compact JSON, lists as their first items plus "and N more", and text is cut to a token
budget with an explicit marker. The tool's `returns` schema supplies field descriptions
for the keys it names, so the model knows what a bare number means.
"""

from __future__ import annotations

import json
from typing import Any

from tools_app.specs import ErrorKind, ToolError

CHARS_PER_TOKEN = 4  # a rough, conservative rule for English text and JSON
DEFAULT_MAX_TOKENS = 800
LIST_HEAD = 5


def estimate_tokens(text: str) -> int:
    """Return a cheap estimate of the tokens in text (about 4 characters a token)."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def format_result(
    tool: str,
    data: Any,
    returns: dict[str, Any] | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    view: tuple[str, ...] = (),
) -> str:
    """Return a successful result as text for the model, within max_tokens.

    `view` names keys of a result object, the first present and not null of which is
    shown instead of the whole object (an MCP result's structured content, say).
    """
    if isinstance(data, dict):
        shown = next((key for key in view if data.get(key) is not None), None)
        if shown is not None:
            data = data[shown]
            returns = (returns or {}).get("properties", {}).get(shown)
    body = _render(_shorten(data), returns or {})
    return truncate(f"{tool} returned: {body}", max_tokens)


def format_error(tool: str, error: ToolError) -> str:
    """Return a failed call as text for the model: what failed, why, and what to fix."""
    if error.kind == ErrorKind.CANCELLED:  # not run, or stopped: no failure of the tool
        text = f"{tool} was cancelled: {error.message}"
    else:
        text = f"{tool} failed ({error.kind}): {error.message}"
    if error.problems:
        text += "\n" + "\n".join(f"- {problem}" for problem in error.problems)
    return text


def truncate(text: str, max_tokens: int) -> str:
    """Return text cut to max_tokens, marker included, ending with how much was cut."""
    limit = max_tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    marker = "… [truncated: showing {} of " + f"{len(text)} characters]"
    keep = max(0, limit - len(marker.format(limit)))
    return text[:keep] + marker.format(keep)


def _shorten(value: Any) -> Any:
    """Return the value with every list cut to its first items plus a count of the rest."""
    if isinstance(value, list):
        head = [_shorten(item) for item in value[:LIST_HEAD]]
        if len(value) > LIST_HEAD:
            head.append(f"… and {len(value) - LIST_HEAD} more")
        return head
    if isinstance(value, dict):
        return {key: _shorten(item) for key, item in value.items()}
    return value


def _render(value: Any, returns: dict[str, Any]) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)  # full precision: 0.1 + 0.2 stays 0.30000000000000004
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    described = {
        key: prop["description"]
        for key, prop in returns.get("properties", {}).items()
        if isinstance(value, dict) and key in value and isinstance(prop, dict)
        and prop.get("description")
    }  # fmt: skip
    if described:
        text += " (" + "; ".join(f"{key}: {doc}" for key, doc in described.items()) + ")"
    return text
