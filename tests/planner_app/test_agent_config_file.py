"""Agents in ares.toml: imported beside tools and MCP servers, each entry alone, and exported."""

from __future__ import annotations

import io
import tomllib
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from planner_app.agent_config_file import export_config, import_config
from planner_app.models import Agent
from tools_app.models import McpServer, ToolSetting

pytestmark = pytest.mark.django_db

FULL = """
[tools.calculator]
timeout_secs = 10

[mcp_servers.time]
command = "python"
args = ["-m", "mcp_server_time"]
env = { TZ = "UTC" }

[[agents]]
name = "math-tutor"
model = "qwen2.5:7b"
system_prompt = "You teach arithmetic.\\nShow your steps."
tools = ["calculator", "mcp.time.get_current_time"]
max_tool_iterations = 4
parallel_tools = false
tool_timeout_secs = 12.5
token_budget = 6000
base_url = "http://127.0.0.1:11434/v1"
api_key = "${OLLAMA_KEY}"

[[agents]]
name = "chatty"
tools = []
tool_calling = false
"""


def test_it_saves_agents_after_the_tools_and_servers_they_name() -> None:
    report = import_config(FULL)
    assert report.problems == []
    assert report.saved == ["mcp_servers.time", "tools.calculator", "agents[0]", "agents[1]"]
    tutor = Agent.objects.get(name="math-tutor")
    assert tutor.tools == ["calculator", "mcp.time.get_current_time"]
    assert (tutor.max_iterations, tutor.parallel_tools, tutor.tool_timeout_s) == (4, False, 12.5)
    assert (tutor.model, tutor.token_budget, tutor.api_key) == ("qwen2.5:7b", 6000, "${OLLAMA_KEY}")
    assert tutor.system_prompt == "You teach arithmetic.\nShow your steps."
    chatty = Agent.objects.get(name="chatty")
    assert (chatty.tools, chatty.tool_calling, chatty.max_iterations) == ([], False, 10)


def test_it_accepts_the_table_form() -> None:
    report = import_config('[agents.helper]\nsystem_prompt = "Be brief."\n')
    assert report.saved == ["agents.helper"]
    assert Agent.objects.get(name="helper").system_prompt == "Be brief."


def test_it_updates_an_agent_that_exists() -> None:
    import_config(FULL)
    import_config('[[agents]]\nname = "math-tutor"\nmax_iterations = 7\n')
    tutor = Agent.objects.get(name="math-tutor")
    assert (tutor.max_iterations, tutor.model) == (7, "qwen2.5:7b")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[agents]]\nname = 'a'\ntools = ['calculater']",
         "agents[0]: tools: no tool named 'calculater'"),
        ("[[agents]]\nname = 'a'\napi_key = 'sk-live-123'",
         'agents[0]: api_key: a reference like "${OPENAI_API_KEY}"'),
        ("[[agents]]\nname = 'a'\nmax_tool_iterations = 0",
         "agents[0]: max_iterations: Ensure this value is greater than or equal to 1"),
        ("[[agents]]\nname = 'a'\ndiscovery = 'psychic'", "agents[0]: discovery: Value 'psychic'"),
        ("[[agents]]\nname = 'a'\ntools = 'calculator'", "agents[0]: tools: expected list"),
        ("[[agents]]\nname = 'a'\ntemperature = 0.2", "agents[0]: unknown key(s) temperature"),
        ("[[agents]]\nname = 'a'\nmax_iterations = 2\nmax_tool_iterations = 3",
         "agents[0]: give max_tool_iterations or max_iterations, not both"),
        ("[[agents]]\nmodel = 'x'", "agents[0]: name: This field cannot be blank"),
        ("agents = 3", "agents: expected [agents.NAME] tables or [[agents]]"),
    ],
)  # fmt: skip
def test_it_reports_each_bad_agent_where_it_is(text: str, problem: str) -> None:
    report = import_config(text)
    assert report.saved == []
    assert len(report.problems) == 1 and problem in report.problems[0], report.problems
    assert not Agent.objects.exists()


def test_a_bad_agent_does_not_stop_the_good_ones() -> None:
    report = import_config(FULL + "\n[[agents]]\nname = 'bad'\ntools = ['nope']\n")
    assert "agents[2]: tools: no tool named 'nope'" in report.problems[0]
    assert set(Agent.objects.values_list("name", flat=True)) == {"math-tutor", "chatty"}


def test_the_admins_checks_refuse_a_key_in_clear() -> None:
    agent = Agent(name="leaky", api_key="sk-abcdefabcdefabcdef")
    with pytest.raises(ValidationError, match="api_key"):
        agent.full_clean()


def test_an_agent_reads_its_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_KEY", "s3cret")
    assert Agent(name="a", api_key="${OLLAMA_KEY}").resolved_api_key() == "s3cret"


def test_export_gives_back_what_import_took() -> None:
    import_config(FULL)
    text = export_config()
    document = tomllib.loads(text)
    assert document["tools"]["calculator"] == {"enabled": True, "timeout_secs": 10.0}
    assert document["mcp_servers"]["time"]["env"] == {"TZ": "UTC"}
    assert [agent["name"] for agent in document["agents"]] == ["chatty", "math-tutor"]
    Agent.objects.all().delete()
    McpServer.objects.all().delete()
    ToolSetting.objects.all().delete()
    assert import_config(text).problems == []
    assert export_config() == text


def test_export_quotes_names_that_are_not_bare_keys() -> None:
    import_config(FULL + '\n[tools."mcp.time.convert_time"]\nenabled = false\n')
    assert '[tools."mcp.time.convert_time"]\nenabled = false\n' in export_config()


def test_the_commands_import_and_export_a_file(tmp_path: Path) -> None:
    source, target = tmp_path / "in.toml", tmp_path / "out.toml"
    source.write_text(FULL + "\n[[agents]]\nname = 'bad'\ntools = ['nope']\n")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="1 entr"):
        call_command("import_ares_config", str(source), stdout=out, stderr=err)
    assert "saved agents[1]" in out.getvalue()
    assert "refused agents[2]: tools:" in err.getvalue()
    call_command("export_ares_config", str(target), stderr=io.StringIO())
    assert tomllib.loads(target.read_text())["agents"][1]["name"] == "math-tutor"
