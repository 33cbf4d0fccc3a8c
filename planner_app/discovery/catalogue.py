"""What the router searches: servers (tool groups) and their tools, as plain data or JSON.

The JSON forms are the benchmark's exchange format (bench/README.md):

    catalogue: {"servers": [{"name": "...", "description": "...",
                             "tools": [{"name": "...", "description": "...",
                                        "keywords": ["..."],
                                        "parameters": {"name": "description"}}]}]}
    queries:   {"queries": [{"id": "...", "query": "...",
                             "tool_request": {"server": "...", "tool": "..."},
                             "expected": [{"server": "...", "tool": "..."}]}]}

`description`, `keywords` and `parameters` (each parameter's name and description) may
be left out or empty; an expected tool without "server" matches a tool
of that name on any server. `tool_request` (optional) is what an agent in active mode
would write for the query in its <tool_request> block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class CatalogueError(ValueError):
    """A catalogue or query file that does not follow the format."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    keywords: tuple[str, ...] = ()  # extra matching words: capabilities, synonyms
    parameters: tuple[tuple[str, str], ...] = ()  # (name, description) of each parameter


@dataclass(frozen=True)
class Server:
    """A group of tools: a category of built-ins, or one MCP server."""

    name: str
    description: str = ""
    tools: tuple[Tool, ...] = ()


@dataclass(frozen=True)
class ExpectedTool:
    tool: str
    server: str | None = None

    def matches(self, server: str, tool: str) -> bool:
        return tool == self.tool and self.server in (None, server)


@dataclass(frozen=True)
class BenchQuery:
    id: str
    query: str
    expected: tuple[ExpectedTool, ...] = field(default_factory=tuple)
    # What an agent in active mode would ask for: (server, tool) texts, or None.
    tool_request: tuple[str, str] | None = None


def _text(item: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = item.get(key, "" if not required else None)
    if value is None:
        raise CatalogueError(f"{where}: {key!r} is missing")
    if not isinstance(value, str) or (required and not value):
        raise CatalogueError(f"{where}: {key!r} must be a non-empty string")
    return value


def _list(item: dict[str, Any], key: str, where: str) -> list[Any]:
    value = item.get(key)
    if not isinstance(value, list):
        raise CatalogueError(f"{where}: {key!r} must be a list")
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise CatalogueError(f"{where}: {key}[{i}] must be an object")
    return value


def _keywords(item: dict[str, Any], where: str) -> tuple[str, ...]:
    value = item.get("keywords", [])
    if not isinstance(value, list) or not all(isinstance(word, str) for word in value):
        raise CatalogueError(f"{where}: 'keywords' must be a list of strings")
    return tuple(value)


def _parameters(item: dict[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    value = item.get("parameters", {})
    if not isinstance(value, dict) or not all(
        isinstance(description, str) for description in value.values()
    ):
        raise CatalogueError(
            f"{where}: 'parameters' must be an object of parameter names to descriptions"
        )
    return tuple(value.items())


def catalogue_from_dict(data: Any) -> tuple[Server, ...]:
    """Return the servers of a catalogue in the JSON format; raise CatalogueError if invalid."""
    if not isinstance(data, dict):
        raise CatalogueError("a catalogue is an object with a 'servers' list")
    servers = []
    for i, item in enumerate(_list(data, "servers", "catalogue")):
        where = f"servers[{i}]"
        name = _text(item, "name", where)
        tools = tuple(
            Tool(
                name=_text(tool, "name", f"{where}.tools[{j}]"),
                description=_text(tool, "description", f"{where}.tools[{j}]", required=False),
                keywords=_keywords(tool, f"{where}.tools[{j}]"),
                parameters=_parameters(tool, f"{where}.tools[{j}]"),
            )
            for j, tool in enumerate(_list(item, "tools", where))
        )
        description = _text(item, "description", where, required=False)
        servers.append(Server(name=name, description=description, tools=tools))
    return tuple(servers)


def catalogue_to_dict(servers: tuple[Server, ...] | list[Server]) -> dict[str, Any]:
    """Return a catalogue in the JSON format."""

    def tool_dict(tool: Tool) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": tool.name, "description": tool.description}
        if tool.keywords:
            entry["keywords"] = list(tool.keywords)
        if tool.parameters:
            entry["parameters"] = dict(tool.parameters)
        return entry

    return {
        "servers": [
            {
                "name": server.name,
                "description": server.description,
                "tools": [tool_dict(tool) for tool in server.tools],
            }
            for server in servers
        ]
    }


def queries_from_dict(data: Any) -> tuple[BenchQuery, ...]:
    """Return the queries of a query set in the JSON format; raise CatalogueError if invalid."""
    if not isinstance(data, dict):
        raise CatalogueError("a query set is an object with a 'queries' list")
    queries = []
    for i, item in enumerate(_list(data, "queries", "query set")):
        where = f"queries[{i}]"
        expected = tuple(
            ExpectedTool(
                tool=_text(entry, "tool", f"{where}.expected[{j}]"),
                server=_text(entry, "server", f"{where}.expected[{j}]", required=False) or None,
            )
            for j, entry in enumerate(_list(item, "expected", where))
        )
        if not expected:
            raise CatalogueError(f"{where}: 'expected' names no tool")
        query_id = item.get("id", str(i))
        queries.append(
            BenchQuery(
                id=str(query_id),
                query=_text(item, "query", where),
                expected=expected,
                tool_request=_tool_request(item, where),
            )
        )
    return tuple(queries)


def _tool_request(item: dict[str, Any], where: str) -> tuple[str, str] | None:
    request = item.get("tool_request")
    if request is None:
        return None
    if not isinstance(request, dict):
        raise CatalogueError(f"{where}: 'tool_request' must be an object")
    where = f"{where}.tool_request"
    return _text(request, "server", where), _text(request, "tool", where)


def queries_to_dict(queries: tuple[BenchQuery, ...] | list[BenchQuery]) -> dict[str, Any]:
    """Return a query set in the JSON format."""
    return {
        "queries": [
            {
                "id": query.id,
                "query": query.query,
                **(
                    {"tool_request": dict(zip(("server", "tool"), query.tool_request, strict=True))}
                    if query.tool_request
                    else {}
                ),
                "expected": [
                    {"tool": e.tool, **({"server": e.server} if e.server else {})}
                    for e in query.expected
                ],
            }
            for query in queries
        ]
    }


def _read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CatalogueError(f"{path}: not JSON ({exc})") from None


def load_catalogue(path: str | Path) -> tuple[Server, ...]:
    """Return the servers of a catalogue JSON file."""
    return catalogue_from_dict(_read_json(path))


def load_queries(path: str | Path) -> tuple[BenchQuery, ...]:
    """Return the queries of a query-set JSON file."""
    return queries_from_dict(_read_json(path))
