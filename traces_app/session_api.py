"""REST endpoints of sessions: GET /api/v1/sessions (a list) and /api/v1/sessions/{id} (one)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from traces_app import sessions
from traces_app.http.auth import key_or_staff
from traces_app.http.errors import query_window, responses
from traces_app.http.paging import BadCursor
from traces_app.schemas import NAME_PATTERN, FilterMoment, TraceOut
from traces_app.scores.score_api import ScoreOut

router = Router(tags=["sessions"])

# Without `since`, a list covers this long before `until`: a bounded read at any size.
DEFAULT_WINDOW = timedelta(days=7)

SessionSort = Literal["-last", "-first", "-turns", "-tokens", "-cost", "-errors"]


class SessionListQuery(Schema):
    agent: str | None = Field(None, max_length=200, description="Only this agent's traces")
    since: FilterMoment | None = Field(
        None, description="Traces from this moment on (ISO 8601; default: 7 days before until)"
    )
    until: FilterMoment | None = Field(None, description="Traces before this moment (default: now)")
    q: str | None = Field(
        None, max_length=200, pattern=NAME_PATTERN, description="Text (any case) in the session id"
    )
    sort: SessionSort = Field(
        "-last",
        description="-last (latest activity first), -first, -turns, -tokens, -cost, -errors",
    )
    cursor: str | None = None
    limit: int = Field(50, ge=1, le=500)


class SessionOut(Schema):
    session_id: str
    agent: str = Field(description="Its agent (the greatest name when several)")
    several_agents: bool = Field(description="Whether its traces name more than one agent")
    turns: int = Field(description="Its traces in the range")
    first_at: datetime
    last_at: datetime
    tools: list[str] = Field(description="The tools its latest 20 turns in the range called")
    tool_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    failed_calls: int
    errors: int = Field(description="Turns with a failed span")
    spirals: int = Field(description="Failure spirals in its turns")

    @staticmethod
    def resolve_tools(row: sessions.SessionRow) -> list[str]:
        return row.tool_names


class SessionListOut(Schema):
    since: datetime
    until: datetime
    items: list[SessionOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= to get the next page")


class ToolCallOut(Schema):
    trace_id: str
    span_id: str
    tool_name: str
    status: str
    error_kind: str
    started_at: datetime


class SpiralOut(Schema):
    id: int
    trace_id: str
    tool_name: str
    kind: str
    error_kind: str
    attempts: int
    resolution: str
    started_at: datetime
    wasted_tokens: int


class TurnOut(Schema):
    number: int
    trace: TraceOut
    request: str = Field(description="The request the turn answered")
    answer: str = Field(description="The agent's answer, or the last LLM output recorded")
    tool_calls: list[ToolCallOut]
    spirals: list[SpiralOut]
    scores: list[ScoreOut]


class CrossTurnSpiralOut(Schema):
    tool_name: str
    error_kind: str
    attempts: int
    turns: list[int] = Field(description="The numbers of the turns it spans")
    calls: list[ToolCallOut]


class ScoreSummaryOut(Schema):
    name: str
    count: int
    mean: float | None
    labels: dict[str, int]


class SessionTotalsOut(Schema):
    agent: str
    several_agents: bool
    turns: int
    first_at: datetime
    last_at: datetime
    tool_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    failed_calls: int
    errors: int


class SessionDetailOut(Schema):
    session_id: str
    totals: SessionTotalsOut = Field(description="Over all its turns")
    turns: list[TurnOut] = Field(description="A page of its turns, oldest first")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next turns")
    tool_sequence: list[ToolCallOut] = Field(description="This page's tool calls across turns")
    tool_calls_truncated: bool
    cross_turn_spirals: list[CrossTurnSpiralOut] = Field(
        description="The same tool failing the same way at the end of a turn and the next's start"
    )
    scores: list[ScoreSummaryOut] = Field(description="This page's scores, per name")


class TurnPageQuery(Schema):
    cursor: str | None = None
    limit: int = Field(sessions.TURNS_PER_PAGE, ge=1, le=sessions.TURNS_PER_PAGE)


@router.get(
    "/sessions",
    auth=key_or_staff("read"),
    response=responses(SessionListOut),
    summary="List sessions: turns, first and last time, tools, tokens, cost, errors, spirals",
)
def list_sessions(request: HttpRequest, query: Query[SessionListQuery]) -> dict[str, Any]:
    """List the sessions of the traces in [since, until), latest activity first by default."""
    since, until = query_window(query.since, query.until, DEFAULT_WINDOW)
    filters = sessions.SessionFilters(
        since=since, until=until, agent=query.agent or "", q=query.q or "", sort=query.sort
    )
    try:
        page = sessions.session_rows(filters, query.limit, after=query.cursor)
    except BadCursor:
        raise HttpError(422, "cursor is not one this API returned") from None
    return {"since": since, "until": until, "items": page.rows, "next_cursor": page.next_cursor}


@router.get(
    "/sessions/{path:session_id}",
    auth=key_or_staff("read"),
    response=responses(SessionDetailOut, 404),
    summary="One session: its turns in order, requests and answers, tools, spirals, scores",
)
def get_session(
    request: HttpRequest, session_id: str, page: Query[TurnPageQuery]
) -> dict[str, Any]:
    if len(session_id) > 200:
        raise HttpError(422, "session_id: at most 200 characters")
    try:
        found = sessions.session_detail(session_id, page.limit, after=page.cursor)
    except sessions.UnknownSession:
        raise HttpError(404, f"no trace has session id {session_id!r}") from None
    except BadCursor:
        raise HttpError(422, "cursor is not one this API returned") from None
    return {
        "session_id": found.session_id,
        "totals": found.totals,
        "turns": [_turn(turn) for turn in found.turns],
        "next_cursor": found.next_cursor,
        "tool_sequence": found.tool_sequence,
        "tool_calls_truncated": found.calls_truncated,
        "cross_turn_spirals": [
            {**vars(spiral), "attempts": spiral.attempts} for spiral in found.cross_turn_spirals
        ],
        "scores": found.score_summary,
    }


def _turn(turn: sessions.Turn) -> dict[str, Any]:
    return {
        "number": turn.number,
        "trace": turn.trace,
        "request": turn.trace.request_text,
        "answer": turn.answer,
        "tool_calls": turn.calls,
        "spirals": turn.spirals,
        "scores": turn.scores,
    }
