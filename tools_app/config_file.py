"""Load tool settings and MCP servers from an `ares.toml` file into the database, and back.

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

import json
import re
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
    for place, entry in named_entries(document.get("mcp_servers", {}), "mcp_servers", report):
        import_entry(report, place, lambda e=entry: _mcp_server(e))
    for name, entry in tools.items():
        import_entry(report, f"tools.{name}", lambda n=name, e=entry: _tool_setting(n, e))
    return report


def import_entry(report: ImportReport, place: str, build: Any) -> None:
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


def named_entries(
    value: Any, section: str, report: ImportReport
) -> list[tuple[str, dict[str, Any]]]:
    """Return (place, entry) for both the [SECTION.NAME] and the [[SECTION]] forms."""
    if isinstance(value, dict):
        return [
            (f"{section}.{name}", {**entry, "name": name} if isinstance(entry, dict) else entry)
            for name, entry in value.items()
        ]
    if isinstance(value, list):
        return [(f"{section}[{index}]", entry) for index, entry in enumerate(value)]
    report.problems.append(f"{section}: expected [{section}.NAME] tables or [[{section}]]")
    return []


def checked_table(entry: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise TypeError(f"expected a table, got {type(entry).__name__}")
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
    return entry


def _tool_setting(name: str, entry: Any) -> None:
    entry = checked_table(entry, TOOL_KEYS)
    setting = ToolSetting.objects.filter(name=name).first() or ToolSetting(name=name)
    setting.enabled = typed_value(entry, "enabled", bool, setting.enabled)
    setting.description = typed_value(entry, "description", str, setting.description)
    setting.timeout_s = typed_value(entry, "timeout_secs", (int, float), setting.timeout_s)
    setting.full_clean()
    setting.save()


def _mcp_server(entry: Any) -> None:
    entry = checked_table(entry, SERVER_KEYS)
    name = typed_value(entry, "name", str, "")
    server = McpServer.objects.filter(name=name).first() or McpServer(name=name)
    server.transport = typed_value(entry, "transport", str, server.transport)
    server.command = typed_value(entry, "command", str, server.command)
    server.args = typed_value(entry, "args", list, server.args)
    server.env = typed_value(entry, "env", dict, server.env)
    server.url = typed_value(entry, "url", str, server.url)
    server.timeout_s = typed_value(entry, "timeout_secs", (int, float), server.timeout_s)
    server.enabled = typed_value(entry, "enabled", bool, server.enabled)
    server.full_clean()
    server.save()


def typed_value(
    entry: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any
) -> Any:
    if key not in entry:
        return default
    value = entry[key]
    if isinstance(value, bool) and kind in ((int, float), int):
        raise TypeError(f"{key}: expected a number, got a boolean")
    if not isinstance(value, kind):
        expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise TypeError(f"{key}: expected {expected}, got {type(value).__name__} {value!r}")
    return value


def export_config() -> dict[str, Any]:
    """Return the saved tool settings and MCP servers as an ares.toml document (a dict)."""
    tools = {}
    for setting in ToolSetting.objects.all():
        entry: dict[str, Any] = {"enabled": setting.enabled}
        if setting.description:
            entry["description"] = setting.description
        if setting.timeout_s is not None:
            entry["timeout_secs"] = setting.timeout_s
        tools[setting.name] = entry
    servers = {}
    for server in McpServer.objects.all():
        entry = {"transport": server.transport}
        if server.transport == McpServer.Transport.STDIO:
            entry.update(command=server.command, args=server.args, env=server.env)
        else:
            entry["url"] = server.url
        entry.update(timeout_secs=server.timeout_s, enabled=server.enabled)
        servers[server.name] = entry
    return {"tools": tools, "mcp_servers": servers}


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")


def dump_toml(document: dict[str, Any]) -> str:
    """Return an ares.toml text for a document of tables and arrays of tables.

    Enough TOML for ares.toml (tomllib reads, but does not write): sections are tables
    of tables ([tools.NAME]) or lists of tables ([[agents]]); values are strings,
    numbers, booleans, lists and flat tables of those. JSON's string escapes are TOML's.
    """
    blocks = []
    for section, content in document.items():
        if isinstance(content, dict):
            for name, entry in content.items():
                blocks.append(_table(f"[{_key(section)}.{_key(name)}]", entry))
        else:
            blocks.extend(_table(f"[[{_key(section)}]]", entry) for entry in content)
    return "\n".join(blocks)


def _table(header: str, entry: dict[str, Any]) -> str:
    lines = [header, *(f"{_key(key)} = {_value(value)}" for key, value in entry.items())]
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        pairs = ", ".join(f"{_key(key)} = {_value(item)}" for key, item in value.items())
        return "{ " + pairs + " }" if pairs else "{}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")
