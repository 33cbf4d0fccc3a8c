"""Read the tool requests an agent in active mode writes into its reply.

    <tool_request>
    server: a service that manages calendars
    tool: create an event on a date
    </tool_request>

`<tool_assistant>` (MCP-Zero's own tag) is read the same way. Every block in a reply
counts, and a task may make at most MAX_TOOL_REQUESTS of them in all. A block needs both
fields: the server text steers stage 1 of the router, the tool text stage 2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TOOL_REQUESTS = 5
TAGS = ("tool_request", "tool_assistant")

_OPEN_OR_CLOSE = re.compile(r"<(/?)\s*(tool_request|tool_assistant)\s*>", re.IGNORECASE)
_FIELD = re.compile(r"^\s*([A-Za-z_]+)\s*[:：]\s*(.*)$")  # a full-width colon too (Chinese)
_FIELDS = ("server", "tool")


class ToolRequestError(ValueError):
    """A reply's tool requests cannot be served as written; the message says how to fix them."""


class TooManyToolRequests(ToolRequestError):
    """The reply would take the task past its request limit; `allowed` are the ones that fit."""

    def __init__(self, message: str, allowed: list[ToolRequest]) -> None:
        super().__init__(message)
        self.allowed = allowed


@dataclass(frozen=True)
class ToolRequest:
    server: str
    tool: str


def parse_tool_requests(
    reply: str, *, already_made: int = 0, limit: int = MAX_TOOL_REQUESTS
) -> list[ToolRequest]:
    """Return every tool request in a reply, in order; raise ToolRequestError if one is bad.

    `already_made` is how many requests the task made before this reply: the limit is per
    task. Past it, TooManyToolRequests carries the requests that still fit.
    """
    requests = [_parse_block(body, number) for number, body in enumerate(_blocks(reply), 1)]
    room = max(0, limit - already_made)
    if len(requests) > room:
        raise TooManyToolRequests(
            f"at most {limit} tool requests per task: {already_made} made before, "
            f"{len(requests)} in this reply; only the first {room} can be served",
            requests[:room],
        )
    return requests


def _blocks(reply: str) -> list[str]:
    """Return the bodies of the reply's blocks; raise for a block left open or closed twice."""
    bodies = []
    open_tag: re.Match[str] | None = None
    for tag in _OPEN_OR_CLOSE.finditer(reply):
        closing, name = tag.group(1) == "/", tag.group(2).lower()
        if not closing:
            if open_tag is not None:
                raise ToolRequestError(
                    f"<{open_tag.group(2).lower()}> is not closed before the next <{name}>"
                )
            open_tag = tag
        elif open_tag is None or open_tag.group(2).lower() != name:
            raise ToolRequestError(f"</{name}> closes no open <{name}> block")
        else:
            bodies.append(reply[open_tag.end() : tag.start()])
            open_tag = None
    if open_tag is not None:
        raise ToolRequestError(f"<{open_tag.group(2).lower()}> is not closed")
    return bodies


def _parse_block(body: str, number: int) -> ToolRequest:
    """Return the request of one block: 'server:' and 'tool:' lines, a value may wrap."""
    values: dict[str, str] = {}
    current: str | None = None
    for line in body.splitlines():
        if not line.strip():
            continue
        field = _FIELD.match(line)
        if field and field.group(1).lower() in _FIELDS:
            current = field.group(1).lower()
            if current in values:
                raise ToolRequestError(f"tool request {number}: '{current}:' is given twice")
            values[current] = field.group(2).strip()
        elif current is not None:  # a value that wraps, or contains a colon itself
            values[current] = f"{values[current]} {line.strip()}".strip()
        else:
            raise ToolRequestError(
                f"tool request {number}: cannot read {line.strip()!r}; "
                "write 'server: <what kind of service>' and 'tool: <what it should do>'"
            )
    if not values.get("server"):
        raise ToolRequestError(
            f"tool request {number}: 'server:' is missing or empty; "
            "say what kind of service would have the tool"
        )
    if not values.get("tool"):
        raise ToolRequestError(
            f"tool request {number}: 'tool:' is missing or empty; say what the tool should do"
        )
    return ToolRequest(server=values["server"], tool=values["tool"])
