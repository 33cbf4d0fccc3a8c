"""REST endpoints of the planner: plan a request, route it to tools, execute through the
Bridge, chat with agents."""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict, StrictBool, StrictInt, field_validator

from planner_app import bridge
from planner_app.agents.llm.messages import LlmNotConfigured, Message
from planner_app.agents.site_agents import model_name, run_agent
from planner_app.discovery.backends import BackendUnavailable
from planner_app.discovery.site_router import get_router
from planner_app.models import Agent
from planner_app.services import plan_request
from tools_app.engine import CallContext
from traces_app.http.auth import ApiKeyAuth
from traces_app.http.errors import WITH_BODY, responses
from traces_app.schemas import NAME_PATTERN, TRACE_ID_PATTERN

router = Router(tags=["planner"])


class PlanIn(Schema):
    request: str = Field(min_length=1, max_length=4000, description="The user's request")


class BridgeExecuteIn(Schema):
    # Not ExecuteIn: OpenAPI names schemas by class, and tools_app's ExecuteIn has that name.
    tool: str | None = Field(default=None, max_length=200, description="A tool name, if any")
    arguments: dict[str, Any] | str | None = None
    request: str = Field(default="", max_length=4000, description="The user's request")
    # Strict: JSON true or false only, as the schema says (not 0, 1.0 or "yes").
    fallback: StrictBool = Field(
        default=True, description="Plan from the request if the tool fails"
    )
    call_id: str = Field(default="", max_length=200, pattern=NAME_PATTERN)
    trace_id: str | None = Field(default=None, pattern=TRACE_ID_PATTERN)
    agent: str = Field(default="", max_length=200, pattern=NAME_PATTERN)


@router.post(
    "/plan",
    auth=ApiKeyAuth("plan"),
    response=responses(dict[str, Any], *WITH_BODY),
    summary="Plan a request, with the explanation",
)
def create_plan(request: HttpRequest, payload: PlanIn) -> dict[str, Any]:
    return plan_request(payload.request).as_dict()


class RouteIn(Schema):
    tool: str = Field(min_length=1, max_length=4000, description="The tool asked for, in words")
    server: str = Field(default="", max_length=4000, description="The server asked for, if any")
    limit: StrictInt | None = Field(
        default=None, ge=1, le=20, description="Tools to offer (default ARES_ROUTER_TOP_TOOLS)"
    )

    @field_validator("tool")
    @classmethod
    def _has_words(cls, tool: str) -> str:
        if not tool.strip():
            raise ValueError("the tool text must have some words")
        return tool


class RoutedToolOut(Schema):
    # Open: a field the router adds shows up without a change here.
    model_config = ConfigDict(extra="allow")

    server: str
    tool: str
    score: float
    server_score: float
    tool_score: float
    semantic_score: float | None = None
    placed_by: str | None = Field(
        default=None, description="What put it there: history, description or new tool slot"
    )
    why: str | None = Field(default=None, description="The same, in words, with the evidence")
    history_score: float | None = None
    succeeded_like: int | None = Field(
        default=None, description="Past requests like this one it served"
    )
    failed_like: int | None = Field(
        default=None, description="Past requests like this one it failed"
    )
    closest: str | None = Field(default=None, description="The most similar past request")
    closest_similarity: float | None = None


class RoutedServerOut(Schema):
    server: str
    score: float


class RoutingOut(Schema):
    model_config = ConfigDict(extra="allow")

    mode: str = Field(description="flat, two_stage or flat_fallback")
    cached: bool
    steps: list[str] | None = Field(default=None, description="The steps routed one by one")
    servers: list[RoutedServerOut] = Field(description="Stage 1's kept servers (none when flat)")
    tools: list[RoutedToolOut] = Field(description="The tools offered, best first")
    history: dict[str, Any] | None = Field(
        default=None, description="The recorded outcomes the router learned from"
    )


@router.post(
    "/planner/route",
    auth=ApiKeyAuth("plan"),
    response=responses(RoutingOut, *WITH_BODY),
    exclude_none=True,
    summary="Route a tool request: the tools discovery would offer, each with why",
)
def route_request(request: HttpRequest, payload: RouteIn) -> dict[str, Any]:
    try:
        routing = get_router().search(payload.tool, payload.server, limit=payload.limit)
    except BackendUnavailable as exc:
        raise HttpError(503, f"the router cannot run: {exc}") from None
    return routing.explain()


@router.post(
    "/execute",
    auth=ApiKeyAuth("execute"),
    response=responses(dict[str, Any], *WITH_BODY),
    summary="Run a tool or a request through the Bridge",
)
def execute_through_bridge(request: HttpRequest, payload: BridgeExecuteIn) -> dict[str, Any]:
    """Run the named tool, or plan from the request when there is none or it is unknown."""
    context = CallContext(
        chosen_by="external",
        agent=payload.agent,
        **({"trace_id": payload.trace_id.lower()} if payload.trace_id else {}),
    )
    outcome = bridge.execute(
        payload.tool,
        payload.arguments,
        payload.request,
        context,
        call_id=payload.call_id,
        fallback=payload.fallback,
    )
    return outcome.as_dict()


class ChatMessageIn(Schema):
    role: Literal["system", "user", "assistant"]
    content: str = Field(max_length=100_000)


class ChatIn(Schema):
    agent: str = Field(
        min_length=1, max_length=100, pattern=NAME_PATTERN, description="The agent's name"
    )
    messages: list[ChatMessageIn] = Field(
        min_length=1, max_length=200, description="The conversation so far, ending with the user"
    )
    tool_choice: Literal["auto", "required", "none"] = Field(
        default="auto",
        description="required: the first reply must call a tool (or the planner acts)",
    )
    trace_id: str | None = Field(default=None, pattern=TRACE_ID_PATTERN)
    session_id: str = Field(default="", max_length=200, pattern=NAME_PATTERN)

    @field_validator("messages")
    @classmethod
    def _ends_with_the_user(cls, messages: list[ChatMessageIn]) -> list[ChatMessageIn]:
        if messages[-1].role != "user" or not messages[-1].content.strip():
            raise ValueError("the last message must be the user's, with some text")
        return messages


class TokensOut(Schema):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    schema_tokens: int = Field(description="Of the input: tool definitions sent to the model")
    tool_output_tokens: int = Field(description="Tool output fed back to the model")


class ChatOut(Schema):
    content: str
    finish_reason: str = Field(
        description="stop, spiral_breaker, planner_answer (the model gave none: the planner's "
        "result), no_answer, max_iterations, budget, discovery_exhausted"
    )
    agent: str
    model: str
    trace_id: str
    iterations: int
    tokens_used: TokensOut
    tool_calls: list[dict[str, Any]]


class ChatFailedOut(Schema):
    detail: str
    trace_id: str


@router.post(
    "/chat",
    auth=ApiKeyAuth("chat"),
    response=responses(ChatOut, *WITH_BODY, 404, others={502: ChatFailedOut}),
    summary="Send a conversation to an agent; get its answer, the trace and the tokens used",
)
def chat_with_agent(request: HttpRequest, payload: ChatIn) -> Status:
    """Run the agent's loop (Path 1) on the conversation and return its final answer."""
    agent = Agent.objects.filter(name=payload.agent).first()
    if agent is None:
        known = ", ".join(Agent.objects.values_list("name", flat=True)[:50]) or "none yet"
        raise HttpError(404, f"no agent named {payload.agent!r}; known: {known}")
    messages = [Message(m.role, m.content) for m in payload.messages]
    try:
        result = run_agent(
            agent,
            messages,
            trace_id=payload.trace_id.lower() if payload.trace_id else None,
            session_id=payload.session_id,
            tool_choice=payload.tool_choice,
        )
    except LlmNotConfigured as exc:
        raise HttpError(503, str(exc)) from None
    if result.finish_reason == "error":
        detail = f"the LLM endpoint failed: {result.error}"
        return Status(502, {"detail": detail, "trace_id": result.trace_id})
    usage = result.usage
    return Status(
        200,
        {
            "content": result.content,
            "finish_reason": result.finish_reason,
            "agent": agent.name,
            "model": model_name(agent),
            "trace_id": result.trace_id,
            "iterations": result.iterations,
            "tokens_used": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "total_tokens": usage.total,
                "schema_tokens": result.tokens["schema_tokens"],
                "tool_output_tokens": result.tokens["tool_output_tokens"],
            },
            "tool_calls": result.tool_calls,
        },
    )
