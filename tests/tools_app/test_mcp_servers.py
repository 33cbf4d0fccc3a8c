"""MCP servers configured in the database: their tools join the engine (Path 4)."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.test import Client

from tools_app import site_engine
from tools_app.engine import CallContext
from tools_app.models import McpServer, ToolSetting
from tools_app.specs import ErrorKind, SideEffect, ToolCall
from traces_app.models import Invocation

pytestmark = pytest.mark.django_db(transaction=True)

TIME_SERVER = {
    "command": sys.executable,
    "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
}


@pytest.fixture(autouse=True)
def look_every_call(settings: Any) -> None:
    settings.ARES_TOOL_SETTINGS_CHECK_S = 0


def tool_names() -> list[str]:
    return [spec.name for spec in site_engine.get_engine().registry.list(enabled_only=False)]


def test_it_registers_a_servers_tools_and_runs_them() -> None:
    McpServer.objects.create(name="time", **TIME_SERVER)
    assert {"mcp.time.get_current_time", "mcp.time.convert_time"} <= set(tool_names())
    context = CallContext(chosen_by="llm", agent="clock-bot")
    call = ToolCall("mcp__time__get_current_time", '{"timezone": "Asia/Shanghai"}', "call_1")
    result = site_engine.get_engine().execute(call, context)
    assert result.success, result.text
    assert result.data["structured"]["timezone"] == "Asia/Shanghai"
    assert result.text.startswith(
        'mcp.time.get_current_time returned: {"timezone": "Asia/Shanghai"'
    )
    span = Invocation.objects.get(trace_id=context.trace_id)
    assert (span.tool_name, span.ran_on, span.chosen_by) == (
        "mcp.time.get_current_time", "mcp:time", "llm",
    )  # fmt: skip
    server = McpServer.objects.get(name="time")
    assert server.last_error == "" and server.last_synced_at is not None
    assert "mcp.time.convert_time" in server.tool_names


def test_it_validates_mcp_arguments_against_the_servers_schema() -> None:
    McpServer.objects.create(name="time", **TIME_SERVER)
    result = site_engine.get_engine().execute(ToolCall("mcp.time.get_current_time", {"tz": "UTC"}))
    assert result.error.kind == ErrorKind.INVALID_ARGUMENTS
    assert "timezone: required but missing" in result.text


def test_it_takes_mcp_tools_away_with_their_server() -> None:
    server = McpServer.objects.create(name="time", **TIME_SERVER)
    assert "mcp.time.convert_time" in tool_names()
    server.enabled = False
    server.save()
    assert not any(name.startswith("mcp.time.") for name in tool_names())
    server.delete()
    assert "calculator" in tool_names()


def test_it_keeps_other_tools_when_a_server_cannot_start() -> None:
    McpServer.objects.create(name="broken", command="/nonexistent/mcp-server", timeout_s=5)
    assert "calculator" in tool_names()
    server = McpServer.objects.get(name="broken")
    assert server.last_error and server.tool_names == []


def test_it_applies_tool_settings_to_mcp_tools() -> None:
    McpServer.objects.create(name="time", **TIME_SERVER)
    ToolSetting.objects.create(name="mcp.time.convert_time", enabled=False)
    call = ToolCall("mcp.time.convert_time", {"source_timezone": "UTC", "time": "12:00",
                                              "target_timezone": "Europe/Paris"})  # fmt: skip
    assert site_engine.get_engine().execute(call).error.kind == ErrorKind.DISABLED


def test_it_marks_the_time_servers_tools_read_only() -> None:
    McpServer.objects.create(name="time", **TIME_SERVER)
    spec = site_engine.get_engine().registry.get("mcp.time.get_current_time")
    assert (spec.side_effect, spec.capabilities, spec.ran_on) == (
        SideEffect.READ_ONLY, (), "mcp:time",
    )  # fmt: skip


def test_it_refuses_a_secret_stored_in_clear_and_resolves_references(monkeypatch: Any) -> None:
    server = McpServer(name="gh", command="gh-mcp", env={"GITHUB_TOKEN": "ghp_secret"})
    with pytest.raises(ValidationError, match='reference it as "\\$\\{GITHUB_TOKEN\\}"'):
        server.full_clean()
    monkeypatch.setenv("ARES_GH_TOKEN", "from-the-environment")
    server.env = {"GITHUB_TOKEN": "${ARES_GH_TOKEN}", "LOG": "debug"}
    server.full_clean()
    assert server.config().env == {"GITHUB_TOKEN": "from-the-environment", "LOG": "debug"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"transport": "stdio", "command": ""}, "needs a command"),
        ({"transport": "http", "url": ""}, "needs an http(s) URL"),
        ({"args": "not a list"}, "args must be a list of strings"),
        ({"name": "bad name!"}, "letters, digits"),
    ],
)
def test_it_refuses_a_bad_server_with_a_clear_message(fields: dict, message: str) -> None:
    server = McpServer(**{"name": "srv", "command": "x", **fields})
    with pytest.raises(ValidationError, match=re.escape(message)):
        server.full_clean()


def test_the_admin_syncs_servers_and_shows_their_tools() -> None:
    McpServer.objects.create(name="time", **TIME_SERVER)
    McpServer.objects.create(name="broken", command="/nonexistent/mcp-server", timeout_s=5)
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("ops", "", "pw-for-tests"))
    response = client.post(
        "/admin/tools_app/mcpserver/",
        {
            "action": "sync_tools",
            "_selected_action": list(McpServer.objects.values_list("pk", flat=True)),
        },
        follow=True,
    )
    page = response.content.decode()
    messages = re.findall(r'<li class="(?:info|error)">(.*?)</li>', page)
    assert "Time: mcp.time.get_current_time, mcp.time.convert_time" in messages
    assert any(m.startswith("Broken: ToolFailure: could not connect") for m in messages)
