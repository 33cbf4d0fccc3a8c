"""The agent loop's events: every step of a task, typed and JSON-ready, for a page to stream.

Plan-execute-replan (plan_agent.py) and the sandbox tell their steps with the same events.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

PATH_LLM, PATH_PLANNER, PATH_WORKFLOW, PATH_MCP = 1, 2, 3, 4


@dataclass(frozen=True)
class LoopEvent:
    type: ClassVar[str] = ""

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class Started(LoopEvent):
    type: ClassVar[str] = "started"
    trace_id: str
    agent: str
    model: str
    tools: list[str]
    schema_tokens: int


@dataclass(frozen=True)
class ModelTurn(LoopEvent):
    type: ClassVar[str] = "model_turn"
    iteration: int
    content: str
    tool_calls: list[dict[str, Any]]
    input_tokens: int
    output_tokens: int
    latency_ms: float
    finish_reason: str
    with_tools: bool


@dataclass(frozen=True)
class ToolStarted(LoopEvent):
    type: ClassVar[str] = "tool_started"
    call_id: str
    tool: str
    arguments: Any
    path: int  # 1 LLM, 2 planner, 3 workflow, 4 MCP


@dataclass(frozen=True)
class ToolFinished(LoopEvent):
    type: ClassVar[str] = "tool_finished"
    call_id: str
    tool: str
    path: int
    success: bool
    error_kind: str
    text: str  # as fed back to the model
    latency_ms: float
    tokens: int
    truncated: bool
    ran: bool  # False: refused by the loop (spiral breaker, no replay) and never sent


@dataclass(frozen=True)
class Fallback(LoopEvent):
    type: ClassVar[str] = "fallback"
    reason: str  # unknown_tool, no_tool_call, spiral
    tool: str
    outcome: str  # the Bridge's path: planner, fallback, direct or error
    warnings: list[str]
    path: int = PATH_PLANNER


@dataclass(frozen=True)
class Spiral(LoopEvent):
    type: ClassVar[str] = "spiral"
    tool: str
    kind: str
    attempts: int
    error_kind: str
    resolution: str


@dataclass(frozen=True)
class ToolsDiscovered(LoopEvent):
    type: ClassVar[str] = "tools_discovered"
    requests: list[dict[str, str]]
    loaded: list[str]  # new this time
    offered: list[str]  # every tool the model may call now
    # Per request: how the router found its tools (mode, stage-1 servers, tools with scores).
    routing: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Notice(LoopEvent):
    type: ClassVar[str] = "notice"
    message: str


@dataclass(frozen=True)
class Final(LoopEvent):
    type: ClassVar[str] = "final"
    content: str
    # stop, spiral_breaker, planner_answer, no_answer, max_iterations, budget,
    # discovery_exhausted, error, cancelled
    finish_reason: str
    trace_id: str
    iterations: int
    input_tokens: int
    output_tokens: int
