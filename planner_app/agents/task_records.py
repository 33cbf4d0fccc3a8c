"""What an LLM task's spans share, and how it stores them and tells its events. No Django.

The agent loop (loop.py) and plan-execute-replan (plan_agent.py) both record through it.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from planner_app.agents.llm.messages import ChatModel, LlmError, LlmReply, ToolsNotSupported
from planner_app.agents.loop_events import LoopEvent
from planner_app.agents.stopping import Stopped, mark_stopped

logger = logging.getLogger(__name__)


class TaskRecords:
    """What an LLM task's spans share (trace, root span, agent, model, request), and how it
    stores them and tells its events; the agent loop and plan-execute-replan both use it."""

    def __init__(
        self,
        agent_name: str,
        model: ChatModel,
        trace_id: str,
        session_id: str,
        record: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[LoopEvent], None] | None,
    ) -> None:
        self.agent_name, self.model, self.record = agent_name, model, record
        self.trace_id, self.root_span_id = trace_id, secrets.token_hex(8)
        self.session_id, self.request = session_id, ""
        self.on_event = on_event
        self.events: list[LoopEvent] = []

    def emit(self, event: LoopEvent) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def span(self, kind: str, started_at: datetime, latency_ms: float) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "span_id": secrets.token_hex(8),
            "parent_span_id": self.root_span_id,
            "kind": kind,
            "agent": self.agent_name,
            "session_id": self.session_id,
            "request_text": self.request,
            "model": self.model.model[:200],
            "started_at": started_at,
            "latency_ms": latency_ms,
            "status": "ok",
        }

    def llm_span(
        self,
        started_at: datetime,
        clock: float,
        arguments: dict[str, Any],
        reply: LlmReply | None,
        error: LlmError | Stopped | None,
    ) -> dict[str, Any]:
        """Return the span of one LLM call: its tokens and reply, or its error (or its stop)."""
        span = self.span("llm", started_at, (time.perf_counter() - clock) * 1000)
        span["arguments"] = arguments
        if reply is not None:
            span["model"] = (reply.model or self.model.model)[:200]
            span.update(input_tokens=reply.usage.input_tokens,
                        output_tokens=reply.usage.output_tokens)  # fmt: skip
            arguments["usage_estimated"] = reply.usage.estimated
            span["result"] = {"content": reply.content, "finish_reason": reply.finish_reason}
        elif isinstance(error, Stopped):
            mark_stopped(span)
        else:
            kind = "tools_not_supported" if isinstance(error, ToolsNotSupported) else "llm_error"
            span.update(status="error", error_kind=kind, error_message=str(error))
        return span

    def store(self, spans: list[dict[str, Any]]) -> None:
        try:
            self.record(spans)
        except Exception:  # a lost record must not lose the user's answer
            logger.exception("could not record %d span(s) of trace %s", len(spans), self.trace_id)
