"""REST endpoints for scores: send a batch (POST /api/v1/scores), read them back with filters."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema
from pydantic import ConfigDict, field_validator

from traces_app.http.auth import key_or_staff, sender_of
from traces_app.http.bodies import batch_items, batch_request_body, batch_response, read_json_body
from traces_app.http.errors import WITH_BODY, InvalidRequestOut, responses
from traces_app.ingest.redaction import storable_text
from traces_app.models import SCORE_NAME_PATTERN, Score
from traces_app.schemas import (
    NAME_PATTERN,
    SPAN_ID_PATTERN,
    TRACE_ID_PATTERN,
    FieldError,
    FilterMoment,
    InvalidItem,
    validated,
)
from traces_app.scores.judgements import ScoreItem, check_values, score_value, store_scores

router = Router(tags=["scores"])


class ScoreIn(Schema):
    """A score of one span (trace_id and span_id) or of a whole trace (trace_id only)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(pattern=SCORE_NAME_PATTERN, description="A score definition's name")
    value: Any = Field(description="A number, true or false, or a label, as the definition says")
    source: Literal["human", "agent", "evaluator"] = "agent"
    comment: str = Field(default="", max_length=2000)
    trace_id: str = Field(pattern=TRACE_ID_PATTERN, description="32 hex characters")
    span_id: str = Field(default="", description="16 hex characters; empty for the whole trace")
    client_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=NAME_PATTERN,
        description="Your id for the score: sending it again stores nothing new",
    )

    @field_validator("trace_id")
    @classmethod
    def _trace_id(cls, value: str) -> str:
        if not int(value, 16):
            raise ValueError("trace_id must not be all zeros")
        return value.lower()

    @field_validator("span_id")
    @classmethod
    def _span_id(cls, value: str) -> str:
        if value and not re.fullmatch(SPAN_ID_PATTERN, value):
            raise ValueError("span_id must be 16 hex characters, or empty for the whole trace")
        if value and not int(value, 16):
            raise ValueError("span_id must not be all zeros")
        return value.lower()

    @field_validator("comment", mode="before")
    @classmethod
    def _comment(cls, value: Any) -> Any:
        return storable_text(value) if isinstance(value, str) else value


class ScoreOutcome(Schema):
    index: int
    status: Literal["accepted", "duplicate", "rejected"]
    id: int | None = None
    pending: bool = Field(False, description="Its span or trace is not stored yet")
    errors: list[FieldError] = []


class ScoreBatchOut(Schema):
    accepted: int
    duplicates: int
    rejected: int
    items: list[ScoreOutcome]


class ScoreOut(Schema):
    id: int
    name: str
    data_type: str
    value: Any
    source: str
    comment: str
    trace_id: str
    span_id: str
    client_id: str | None
    reported_by: str
    created_at: datetime
    pending: bool

    @staticmethod
    def resolve_value(score: Score) -> Any:
        return score_value(score)


@router.post(
    "/scores",
    auth=key_or_staff("score"),
    response=responses(ScoreBatchOut, *WITH_BODY, others={422: ScoreBatchOut | InvalidRequestOut}),
    summary="Send a batch of scores of calls and traces",
    openapi_extra=batch_request_body("scores", ScoreIn.model_json_schema()),
)
def send_scores(request: HttpRequest) -> HttpResponse:
    """Check each score on its own against its definition; store the valid ones.

    Idempotent on client_id. A score for a span or trace not stored yet is kept pending
    and joined when it arrives. The status is 422 only when every item was rejected.
    """
    raw_items = batch_items(read_json_body(request), "scores")
    items = [read_item(index, raw) for index, raw in enumerate(raw_items)]
    check_values(items)
    store_scores(items, sender_of(request, anonymous="?"))
    return batch_response(request, [_outcome(item) for item in items])  # a ScoreBatchOut


def read_item(index: int, raw: Any) -> ScoreItem:
    item = ScoreItem(index)
    if not isinstance(raw, dict):
        item.errors.append(("(item)", f"each score must be an object, got {type(raw).__name__}"))
        return item
    try:
        score = validated(ScoreIn, raw)
    except InvalidItem as exc:
        item.errors.extend((error.field, error.reason) for error in exc.errors)
        return item
    row = score.model_dump()
    row["raw_value"] = row.pop("value")
    item.row = row
    return item


def _outcome(item: ScoreItem) -> dict[str, Any]:
    status = item.status or "rejected"
    return {
        "index": item.index,
        "status": status,
        "id": item.score_id,
        "pending": item.pending if status != "rejected" else False,
        "errors": [{"field": field, "reason": reason} for field, reason in item.errors],
    }


class ScoreFilter(Schema):
    trace_id: str | None = Field(None, pattern=TRACE_ID_PATTERN)
    span_id: str | None = Field(None, pattern=SPAN_ID_PATTERN)
    name: str | None = Field(None, pattern=SCORE_NAME_PATTERN)
    source: Literal["human", "agent", "evaluator"] | None = None
    pending: bool | None = None
    since: FilterMoment | None = None
    until: FilterMoment | None = None
    before_id: int | None = Field(None, ge=1, description="Scores older than this id (paging)")
    limit: int = Field(100, ge=1, le=1000)


@router.get(
    "/scores",
    auth=key_or_staff("read"),
    response=responses(list[ScoreOut], *WITH_BODY),
    summary="Read scores, newest first",
)
def list_scores(request: HttpRequest, filters: Query[ScoreFilter]) -> QuerySet:
    scores = Score.objects.order_by("-pk")
    for name in ("trace_id", "span_id", "name", "source", "pending"):
        value = getattr(filters, name)
        if value is not None:
            scores = scores.filter(**{name: value.lower() if name.endswith("_id") else value})
    if filters.since is not None:
        scores = scores.filter(created_at__gte=filters.since)
    if filters.until is not None:
        scores = scores.filter(created_at__lt=filters.until)
    if filters.before_id is not None:
        scores = scores.filter(pk__lt=filters.before_id)
    return scores[: filters.limit]
