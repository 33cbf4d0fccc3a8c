"""Request and response shapes of the tools API."""

from __future__ import annotations

from typing import Any

from ninja import Field, Schema

from traces_app.schemas import NAME_PATTERN, SPAN_ID_PATTERN, TRACE_ID_PATTERN


class ToolOut(Schema):
    name: str
    llm_name: str
    description: str
    parameters: dict[str, Any]
    returns: dict[str, Any]
    side_effect: str
    idempotent: bool
    cost: float
    deterministic: bool
    composable: bool
    timeout_s: float | None
    max_retries: int
    max_concurrency: int | None
    capabilities: list[str]
    ran_on: str
    enabled: bool


class ExecuteIn(Schema):
    arguments: dict[str, Any] | str | None = Field(
        default=None, description="An object, or a JSON string holding one (as OpenAI sends)"
    )
    call_id: str = Field(default="", max_length=200, pattern=NAME_PATTERN)
    trace_id: str | None = Field(default=None, pattern=TRACE_ID_PATTERN)
    parent_span_id: str | None = Field(default=None, pattern=SPAN_ID_PATTERN)
    agent: str = Field(default="", max_length=200, pattern=NAME_PATTERN)
    request_text: str = Field(default="", max_length=100_000)


class ToolErrorOut(Schema):
    kind: str
    message: str
    problems: list[str] = []


class ToolResultOut(Schema):
    call_id: str
    tool: str
    success: bool
    data: Any
    error: ToolErrorOut | None
    text: str = Field(description="The result as text for an LLM")
    metadata: dict[str, Any]
