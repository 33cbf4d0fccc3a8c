"""ares.toml: tool settings and MCP servers loaded from a file, each entry checked alone."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tools_app.config_file import import_config
from tools_app.models import McpServer, ToolSetting

pytestmark = pytest.mark.django_db

GOOD = """
[tools.calculator]
enabled = false
description = "Do arithmetic."
timeout_secs = 5

[mcp_servers.time]
command = "python"
args = ["-m", "mcp_server_time"]
env = { TZ = "UTC", API_TOKEN = "${TIME_TOKEN}" }
timeout_secs = 12
"""


def test_it_saves_tool_settings_and_servers() -> None:
    report = import_config(GOOD)
    assert report.problems == []
    assert report.saved == ["mcp_servers.time", "tools.calculator"]
    setting = ToolSetting.objects.get(name="calculator")
    assert (setting.enabled, setting.description, setting.timeout_s) == (False, "Do arithmetic.", 5)
    server = McpServer.objects.get(name="time")
    assert (server.transport, server.command, server.args, server.timeout_s) == (
        "stdio", "python", ["-m", "mcp_server_time"], 12,
    )  # fmt: skip
    assert server.env == {"TZ": "UTC", "API_TOKEN": "${TIME_TOKEN}"}


def test_it_accepts_the_array_form_and_updates_what_exists() -> None:
    import_config(GOOD)
    report = import_config('[[mcp_servers]]\nname = "time"\nenabled = false\ncommand = "py"\n')
    assert report.saved == ["mcp_servers[0]"]
    server = McpServer.objects.get(name="time")
    assert (server.enabled, server.command, server.timeout_s) == (False, "py", 12)


def test_it_accepts_settings_for_a_servers_tools_before_they_are_listed() -> None:
    text = GOOD + '\n[tools."mcp.time.convert_time"]\nenabled = false\n'
    assert import_config(text).problems == []
    assert not ToolSetting.objects.get(name="mcp.time.convert_time").enabled


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[tools.calculator\n", "not valid TOML"),
        ("tools = 3", "tools: expected a table"),
        ("[tool.calculator]\nenabled = true", "tool: unknown section; known: agents"),
        ("[tools.calculater]\nenabled = true",
         "tools.calculater: name: no tool named 'calculater'"),
        ("[tools.calculator]\nenabled = 'yes'",
         "tools.calculator: enabled: expected bool, got str"),
        ("[tools.calculator]\ntimeout_secs = -1", "tools.calculator: timeout_s: Ensure this value"),
        ("[tools.calculator]\ntimeout = 3", "unknown key(s) timeout; allowed: description"),
        ("[mcp_servers.gh]\ncommand = 'gh'\nenv = { GITHUB_TOKEN = 'ghp_x' }",
         "mcp_servers.gh: env: GITHUB_TOKEN looks like a secret"),
        ("[mcp_servers.web]\ntransport = 'http'", "mcp_servers.web: web: an http server needs"),
        ("[mcp_servers.x]\ncommand = 'x'\nargs = 'a b'", "mcp_servers.x: args: expected list"),
        ("[[mcp_servers]]\ncommand = 'x'", "mcp_servers[0]: name:"),
        ("mcp_servers = 'x'", "mcp_servers: expected [mcp_servers.NAME]"),
    ],
)  # fmt: skip
def test_it_reports_each_bad_entry_where_it_is(text: str, problem: str) -> None:
    report = import_config(text)
    assert report.saved == []
    assert len(report.problems) == 1 and problem in report.problems[0], report.problems


def test_it_saves_the_good_entries_beside_bad_ones() -> None:
    report = import_config(GOOD + "\n[tools.nope]\nenabled = false\n")
    assert report.saved == ["mcp_servers.time", "tools.calculator"]
    assert report.problems[0].startswith("tools.nope: name: no tool named 'nope'")
    assert ToolSetting.objects.filter(name="calculator").exists()


def test_the_command_reports_and_fails_on_problems(tmp_path: Path) -> None:
    path = tmp_path / "ares.toml"
    path.write_text(GOOD + "\n[tools.nope]\nenabled = false\n")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="1 entr"):
        call_command("import_ares_config", str(path), stdout=out, stderr=err)
    assert "saved tools.calculator" in out.getvalue()
    assert "refused tools.nope" in err.getvalue()
