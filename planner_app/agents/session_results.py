"""Serve an agent's earlier tool results of its own session from the trace store, for `recall`.

Own means the same agent (the span's agent) in the same session (the trace's session id;
the same trace when the task has none). Reads are bounded: a session's traces come from
the (session_id, started_at) index, their spans from the trace key, newest first.
"""

from __future__ import annotations

from django.db.models import QuerySet

from planner_app.agents.recall import RECALL_TOOL, EarlierResult, RecallScope
from traces_app.models import Invocation, SpanKind, SpanStatus, Trace


class SessionResults:
    """The trace store as recall reads it (planner_app.agents.recall.RecallStore)."""

    def with_call_id(self, scope: RecallScope, call_id: str) -> list[EarlierResult]:
        """Return the own calls with this id, newest first (a model may reuse an id)."""
        rows = _own_tool_spans(scope).filter(tool_call_id=call_id)[:20]
        return [_earlier(row) for row in rows]

    def searchable(self, scope: RecallScope, limit: int) -> list[EarlierResult]:
        """Return the newest own calls that succeeded, at most `limit`."""
        rows = _own_tool_spans(scope).filter(status=SpanStatus.OK)[:limit]
        return [_earlier(row) for row in rows]


def _own_tool_spans(scope: RecallScope) -> QuerySet[Invocation]:
    """Return the scope's tool spans, newest first, the last attempt of a retried call first."""
    spans = Invocation.objects.filter(kind=SpanKind.TOOL, agent=scope.agent).exclude(
        tool_name=RECALL_TOOL
    )
    if scope.session_id:
        spans = spans.of_trace_set(Trace.objects.filter(session_id=scope.session_id))
    else:
        spans = spans.of_trace_ids([scope.trace_id])
    return spans.order_by("-started_at", "-attempt", "-id")


def _earlier(row: Invocation) -> EarlierResult:
    return EarlierResult(
        call_id=row.tool_call_id,
        tool=row.tool_name,
        arguments=row.arguments,
        result=row.result,
        ok=row.status == SpanStatus.OK,
        error=row.error_message,
        trace_id=row.trace_id,
        started_at=row.started_at,
    )
