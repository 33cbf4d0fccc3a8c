"""Load tool settings and MCP servers from an `ares.toml` file into the database.

    [tools.calculator]
    enabled = true
    description = "Evaluate arithmetic."
    timeout_secs = 10

    [mcp_servers.time]            # or [[mcp_servers]] with name = "time"
    transport = "stdio"           # stdio | http | sse
    command = "uvx"
    args = ["mcp-server-time"]
    env = { API_TOKEN = "${TIME_API_TOKEN}" }
    timeout_secs = 30
    enabled = true

Every entry is checked on its own: valid ones are saved, invalid ones are reported with
their place in the file and nothing of them is saved.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from tools_app.models import McpServer, ToolSetting

SECTIONS = {"tools", "mcp_servers", "agents"}  # agents belong to the planner's importer
TOOL_KEYS = {"enabled", "description", "timeout_secs"}
SERVER_KEYS = {"name", "transport", "command", "args", "env", "url", "timeout_secs", "enabled"}


@dataclass
class ImportReport:
    saved: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def import_config(text: str) -> ImportReport:
    """Save the [tools.*] and [mcp_servers.*] entries of an ares.toml text; report problems."""
    report = ImportReport()
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        report.problems.append(f"not valid TOML: {exc}")
        return report
    for section in sorted(set(document) - SECTIONS):
        report.problems.append(f"{section}: unknown section; known: {', '.join(sorted(SECTIONS))}")
    tools = document.get("tools", {})
    if not isinstance(tools, dict):
        report.problems.append("tools: expected a table like [tools.calculator]")
        tools = {}
    # Servers first: a [tools."mcp.time.convert_time"] entry needs its server to exist.
    for place, entry in _server_entries(document.get("mcp_servers", {}), report):
        _import_entry(report, place, lambda e=entry: _mcp_server(e))
    for name, entry in tools.items():
        _import_entry(report, f"tools.{name}", lambda n=name, e=entry: _tool_setting(n, e))
    return report


def _import_entry(report: ImportReport, place: str, build: Any) -> None:
    try:
        with transaction.atomic():
            build()
    except (ValueError, TypeError) as exc:
        report.problems.append(f"{place}: {exc}")
    except ValidationError as exc:
        messages = "; ".join(
            f"{key}: {' '.join(errors)}" if key != "__all__" else " ".join(errors)
            for key, errors in exc.message_dict.items()
        )
        report.problems.append(f"{place}: {messages}")
    else:
        report.saved.append(place)


def _server_entries(servers: Any, report: ImportReport) -> list[tuple[str, dict[str, Any]]]:
    """Return (place, entry) for both [mcp_servers.NAME] and [[mcp_servers]] forms."""
    if isinstance(servers, dict):
        return [
            (f"mcp_servers.{name}", {**entry, "name": name} if isinstance(entry, dict) else entry)
            for name, entry in servers.items()
        ]
    if isinstance(servers, list):
        return [(f"mcp_servers[{index}]", entry) for index, entry in enumerate(servers)]
    report.problems.append("mcp_servers: expected [mcp_servers.NAME] tables or [[mcp_servers]]")
    return []


def _checked(entry: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise TypeError(f"expected a table, got {type(entry).__name__}")
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
    return entry


def _tool_setting(name: str, entry: Any) -> None:
    entry = _checked(entry, TOOL_KEYS)
    setting = ToolSetting.objects.filter(name=name).first() or ToolSetting(name=name)
    setting.enabled = _typed(entry, "enabled", bool, setting.enabled)
    setting.description = _typed(entry, "description", str, setting.description)
    setting.timeout_s = _typed(entry, "timeout_secs", (int, float), setting.timeout_s)
    setting.full_clean()
    setting.save()


def _mcp_server(entry: Any) -> None:
    entry = _checked(entry, SERVER_KEYS)
    name = _typed(entry, "name", str, "")
    server = McpServer.objects.filter(name=name).first() or McpServer(name=name)
    server.transport = _typed(entry, "transport", str, server.transport)
    server.command = _typed(entry, "command", str, server.command)
    server.args = _typed(entry, "args", list, server.args)
    server.env = _typed(entry, "env", dict, server.env)
    server.url = _typed(entry, "url", str, server.url)
    server.timeout_s = _typed(entry, "timeout_secs", (int, float), server.timeout_s)
    server.enabled = _typed(entry, "enabled", bool, server.enabled)
    server.full_clean()
    server.save()


def _typed(entry: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    if key not in entry:
        return default
    value = entry[key]
    if isinstance(value, bool) and kind in ((int, float), int):
        raise TypeError(f"{key}: expected a number, got a boolean")
    if not isinstance(value, kind):
        expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise TypeError(f"{key}: expected {expected}, got {type(value).__name__} {value!r}")
    return value
