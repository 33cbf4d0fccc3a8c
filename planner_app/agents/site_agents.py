"""Agents in the site: an Agent row, its LLM endpoint and the site's services, run as one task.

The loop itself (loop.py) knows no Django; this is where it meets the settings,
the process's tool engine, the Bridge, and traces_app's recorder and spiral rule.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction

from planner_app import bridge
from planner_app.agents.llm.messages import ChatModel, LlmNotConfigured, Message
from planner_app.agents.loop import AgentSpec, LoopResult, LoopServices, run_agent_loop
from planner_app.agents.loop_events import LoopEvent
from planner_app.agents.session_results import SessionResults
from planner_app.models import Agent
from tools_app.site_engine import get_engine
from traces_app.ingest.recording import record_invocations
from traces_app.models import Invocation
from traces_app.schemas import InvocationFromDict
from traces_app.spirals.detection import CallView
from traces_app.spirals.scanning import (
    detect_spirals,
    newest_tool_calls,
    spiral_rule,
    with_llm_turns,
)

if TYPE_CHECKING:
    from planner_app.discovery.router import Routing

logger = logging.getLogger(__name__)

HOW_TO_CONFIGURE = (
    "set ARES_LLM_BASE_URL (an OpenAI-compatible endpoint, e.g. https://api.openai.com/v1, "
    "or http://127.0.0.1:11434/v1 for Ollama) and ARES_LLM_MODEL, with ARES_LLM_API_KEY if "
    "the endpoint needs a key; or give the agent its own base URL and model in the admin"
)


def llm_problem(agent: Agent) -> str | None:
    """Return why the agent has no usable LLM endpoint, or None when it has one."""
    missing = [
        what
        for what, value in (
            ("a base URL", agent.base_url or settings.ARES_LLM_BASE_URL),
            ("a model", agent.model or settings.ARES_LLM_MODEL),
        )
        if not value
    ]
    if not missing:
        return None
    return f"agent {agent.name!r} has no LLM endpoint ({' or '.join(missing)}): {HOW_TO_CONFIGURE}"


def model_name(agent: Agent) -> str:
    return agent.model or settings.ARES_LLM_MODEL


def chat_model(agent: Agent) -> ChatModel:
    """Return the agent's model at its endpoint; LlmNotConfigured says how to set one."""
    # Imported here: the openai SDK costs each process ~15 MB, and ingest never needs it.
    from planner_app.agents.llm.client import OpenAICompatibleModel

    problem = llm_problem(agent)
    if problem:
        raise LlmNotConfigured(problem)
    return OpenAICompatibleModel(
        agent.base_url or settings.ARES_LLM_BASE_URL,
        model_name(agent),
        agent.resolved_api_key() if agent.api_key else settings.ARES_LLM_API_KEY,
        timeout_s=settings.ARES_LLM_TIMEOUT_S,
        stream=settings.ARES_LLM_STREAM,
    )


def agent_spec(agent: Agent) -> AgentSpec:
    """Return the agent as the loop's plain data, with the site's budget defaults."""
    return AgentSpec(
        name=agent.name,
        system_prompt=agent.system_prompt,
        tools=tuple(agent.tools),
        max_iterations=agent.max_iterations,
        parallel_tools=agent.parallel_tools,
        tool_timeout_s=agent.tool_timeout_s,
        tool_calling=agent.tool_calling,
        discovery=agent.discovery,
        token_budget=agent.token_budget or settings.ARES_LLM_TOKEN_BUDGET,
        tool_output_share=settings.ARES_LLM_TOOL_OUTPUT_PERCENT / 100,
    )


def site_services() -> LoopServices:
    """Return the loop's services: the engine, the Bridge, records, the discovery router."""
    return LoopServices(
        engine=get_engine(),
        fallback=bridge.execute,
        plan_without=bridge.plan_without,
        read_calls=trace_calls,
        record=record_spans,
        spiral_rule=spiral_rule(),
        spiral_resolved=_settle_spirals,
        record_reduction=record_reduction,
        discover=discover_tools,
        recall=SessionResults(),
    )


def run_agent(
    agent: Agent,
    messages: Sequence[Message],
    *,
    trace_id: str | None = None,
    session_id: str = "",
    tool_choice: str = "auto",
    on_event: Callable[[LoopEvent], None] | None = None,
    stop: threading.Event | None = None,
) -> LoopResult:
    """Run one task of the agent; LlmNotConfigured when it has no endpoint.

    Setting `stop` from another thread ends the task soon after (finish_reason cancelled).
    """
    return run_agent_loop(
        agent_spec(agent),
        chat_model(agent),
        messages,
        site_services(),
        trace_id=trace_id,
        session_id=session_id,
        tool_choice=tool_choice,
        on_event=on_event,
        stop=stop,
    )


def record_spans(spans: list[dict[str, Any]]) -> None:
    """Store the loop's llm and agent spans through traces_app's one write path."""
    record_invocations([InvocationFromDict.model_validate(span) for span in spans])


def record_reduction(trace_id: str, span_id: str, reduction: str, tokens_dropped: int) -> None:
    """Record on a tool span how the token budget cut its output and the tokens it dropped."""
    Invocation.objects.of_trace_ids([trace_id]).filter(span_id=span_id).update(
        result_reduction=reduction, result_tokens_dropped=tokens_dropped
    )


def trace_calls(trace_id: str) -> list[CallView]:
    """Return the trace's tool calls as the spiral rule reads them, LLM turns included."""
    spans = Invocation.objects.of_trace_ids([trace_id])
    return with_llm_turns(spans, newest_tool_calls(spans))


def discover_tools(tool: str, server: str) -> Routing:
    """Return the tools the router finds for one tool request, best first, with its scores."""
    # Imported here: the router loads scikit-learn (~90 MB), only active-mode agents need it.
    from planner_app.discovery.site_router import get_router

    return get_router().search(tool, server)


def _settle_spirals(trace_id: str) -> None:
    """Re-detect a trace's spirals now that the planner took over (planner_fallback)."""
    with transaction.atomic():
        detect_spirals(trace_id)
