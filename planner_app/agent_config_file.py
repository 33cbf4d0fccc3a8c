"""Agents in `ares.toml`, beside the tool settings and MCP servers that tools_app loads.

    [[agents]]                    # or [agents.math-tutor]
    name = "math-tutor"
    model = "gpt-4o-mini"         # empty or absent: ARES_LLM_MODEL
    system_prompt = "You teach arithmetic."
    tools = ["calculator"]        # empty: no tool calls at all
    max_tool_iterations = 10
    parallel_tools = true
    tool_timeout_secs = 30
    discovery = "passive"         # passive | active
    tool_calling = true           # false: a model without tool support
    token_budget = 8000
    base_url = "http://127.0.0.1:11434/v1"
    api_key = "${OLLAMA_KEY}"     # a reference to ARES's environment, never the key

Imports point down: tools_app loads its own sections, and this module adds the agents
after them, so an agent may list the tools of a server defined in the same file.
"""

from __future__ import annotations

import tomllib
from typing import Any

from planner_app.models import Agent
from tools_app import config_file as tools_config
from tools_app.config_file import (
    ImportReport,
    checked_table,
    import_entry,
    named_entries,
    typed_value,
)

AGENT_KEYS = {
    "name", "description", "model", "system_prompt", "tools", "max_tool_iterations",
    "max_iterations", "parallel_tools", "tool_timeout_secs", "discovery", "tool_calling",
    "token_budget", "base_url", "api_key",
}  # fmt: skip


def import_config(text: str) -> ImportReport:
    """Save every section of an ares.toml text (tools, MCP servers, agents); report problems."""
    report = tools_config.import_config(text)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return report  # tools_app has reported it
    if "agents" in document:
        for place, entry in named_entries(document["agents"], "agents", report):
            import_entry(report, place, lambda e=entry: _save_agent(e))
    return report


def export_config() -> str:
    """Return the saved tool settings, MCP servers and agents as an ares.toml text."""
    document: dict[str, Any] = tools_config.export_config()
    document["agents"] = [agent_entry(agent) for agent in Agent.objects.all()]
    return tools_config.dump_toml(document)


def agent_entry(agent: Agent) -> dict[str, Any]:
    """Return one agent as an [[agents]] table, leaving out what is empty."""
    entry: dict[str, Any] = {
        "name": agent.name,
        "description": agent.description,
        "model": agent.model,
        "system_prompt": agent.system_prompt,
        "tools": agent.tools,
        "max_tool_iterations": agent.max_iterations,
        "parallel_tools": agent.parallel_tools,
        "tool_timeout_secs": agent.tool_timeout_s,
        "discovery": agent.discovery,
        "tool_calling": agent.tool_calling,
        "token_budget": agent.token_budget,
        "base_url": agent.base_url,
        "api_key": agent.api_key,
    }
    return {key: value for key, value in entry.items() if value not in ("", None)}


def _save_agent(entry: Any) -> None:
    entry = checked_table(entry, AGENT_KEYS)
    if "max_tool_iterations" in entry and "max_iterations" in entry:
        raise ValueError("give max_tool_iterations or max_iterations, not both")
    name = typed_value(entry, "name", str, "")
    agent = Agent.objects.filter(name=name).first() or Agent(name=name)
    for key, field, kind in [
        ("description", "description", str),
        ("model", "model", str),
        ("system_prompt", "system_prompt", str),
        ("tools", "tools", list),
        ("max_tool_iterations", "max_iterations", int),
        ("max_iterations", "max_iterations", int),
        ("parallel_tools", "parallel_tools", bool),
        ("tool_timeout_secs", "tool_timeout_s", (int, float)),
        ("discovery", "discovery", str),
        ("tool_calling", "tool_calling", bool),
        ("token_budget", "token_budget", int),
        ("base_url", "base_url", str),
        ("api_key", "api_key", str),
    ]:
        setattr(agent, field, typed_value(entry, key, kind, getattr(agent, field)))
    agent.full_clean()
    agent.save()
