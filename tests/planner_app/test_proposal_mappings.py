"""Mapping proposals measured on the labelled corpus: tools that declare nothing, as MCP tools.

Each built-in tool of tests/data/planner_requests.jsonl gets a twin that declares no
capability and is mapped to none (what an MCP server's tool is to the planner); traffic
has an LLM serve that tool's requests with the twin, and the planner serve the others.
A proposal is right when it maps the twin to a capability its built-in has, wrong
otherwise.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from planner_app.pipeline.planner import no_evidence
from planner_app.proposals.candidates import Backtester, Candidate
from planner_app.proposals.mappings import propose_mappings
from planner_app.proposals.traffic import Call, Served
from planner_app.ruleset_versions import ruleset_from_snapshot, take_snapshot
from tools_app.registry import ToolRegistry
from tools_app.site_engine import get_engine

CORPUS = Path(__file__).resolve().parents[1] / "data" / "planner_requests.jsonl"
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def twin(tool: str) -> str:
    return f"mcp.twin.{tool}"


def labelled() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    return [row for row in rows if row["tool"]]


def traffic_for(served_by_twin: str, rows: list[dict[str, Any]]) -> list[Served]:
    """Return the corpus as traffic: the LLM serves `served_by_twin`'s requests with its twin."""
    traffic = []
    for number, row in enumerate(rows):
        mine = row["tool"] == served_by_twin
        tool, chooser = (twin(row["tool"]), "llm") if mine else (row["tool"], "planner")
        call = Call(tool, chooser, True, row["arguments"], None, NOW)
        traffic.append(Served(f"trace-{number}", row["request"], NOW, (call,)))
    return traffic


def mapping_proposals(tool: str, snapshot: dict[str, Any]) -> list[Candidate]:
    """Return the mapping proposals for traffic in which `tool`'s twin served its requests."""
    registry = ToolRegistry()
    for spec in get_engine().registry.list():
        registry.register(spec)
    spec = get_engine().registry.get(tool)
    registry.register(replace(spec, name=twin(tool), capabilities=(), ran_on="mcp:twin"))
    ruleset = ruleset_from_snapshot(snapshot, 1)
    traffic = traffic_for(tool, labelled())
    requests = [served.request for served in traffic]
    backtester = Backtester(requests, ruleset, snapshot, registry, no_evidence)
    return propose_mappings(traffic, backtester, ruleset, registry)


@pytest.mark.django_db
def test_twins_of_the_corpus_tools_are_mapped_back_and_nowhere_else(default_rules: None) -> None:
    snapshot = take_snapshot()
    tools = sorted({row["tool"] for row in labelled()})
    capabilities_of = {
        tool: {m["capability"] for m in snapshot["mappings"] if m["tool"] == tool} for tool in tools
    }
    expected = {(capability, twin(tool)) for tool in tools for capability in capabilities_of[tool]}
    proposed: set[tuple[str, str]] = set()
    for tool in tools:
        for candidate in mapping_proposals(tool, snapshot):
            [op] = candidate.ops
            assert op["op"] == "add_mapping", candidate.title
            proposed.add((op["capability"], op["tool"]))
    restored, wrong = expected & proposed, proposed - expected
    print(f"restored {len(restored)} of {len(expected)}; wrong {len(wrong)} of {len(proposed)}")
    print("missing", sorted(expected - proposed))
    assert not wrong
    assert len(restored) / len(expected) >= 0.8, sorted(expected - proposed)
