"""Request and response shapes of the traces API, validated with pydantic."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar

from django.conf import settings
from django.utils import timezone
from ninja import Schema
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from traces_app.ingest.redaction import storable_text
from traces_app.rollups.ranges import filter_moment

TRACE_ID_PATTERN = r"^[0-9a-fA-F]{32}$"
SPAN_ID_PATTERN = r"^[0-9a-fA-F]{16}$"
ERROR_KIND_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
RAN_ON_PATTERN = r"^(builtin|remote|none|mcp:[A-Za-z0-9_.\-]{1,100})$"
NAME_PATTERN = r"^[^\x00-\x1f\x7f]*$"  # one line of printable text
TEXT_PATTERN = r"^[^\x00]*$"  # text of any lines, without NUL (PostgreSQL refuses it)
MAX_LATENCY_MS = 7 * 24 * 3600 * 1000.0
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)


def is_trace_id(value: str) -> bool:
    """Return whether value is a trace id: 32 hex digits, nothing around them."""
    return re.fullmatch(TRACE_ID_PATTERN, value) is not None


def _hex_id(value: str, what: str) -> str:
    value = value.lower()
    if value and not value.strip("0"):
        raise ValueError(f"{what} must not be all zeros (an invalid id in W3C trace context)")
    return value


class InvocationIn(Schema):
    """One span reported by an agent: a tool call attempt, an LLM call or another step."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, allow_inf_nan=False)

    trace_id: str = Field(pattern=TRACE_ID_PATTERN, description="32 hex characters")
    span_id: str = Field(pattern=SPAN_ID_PATTERN, description="16 hex characters")
    parent_span_id: str | None = Field(default=None, pattern=SPAN_ID_PATTERN)
    kind: Literal["tool", "llm", "agent", "other"] = "tool"
    tool_name: str = Field(default="", max_length=200, pattern=NAME_PATTERN, validate_default=True)
    tool_call_id: str = Field(default="", max_length=200, pattern=NAME_PATTERN)
    tool_type: str = Field(
        default="",
        max_length=40,
        pattern=NAME_PATTERN,
        description="function, extension or datastore (OpenTelemetry's gen_ai.tool.type)",
    )
    tool_description: str = Field(
        default="", max_length=2000, description="The tool's description, as the agent has it"
    )
    chosen_by: Literal["llm", "planner", "workflow", "external"] | None = Field(
        default=None, description="Who chose the tool; defaults to external for tool spans"
    )
    ran_on: str | None = Field(
        default=None,
        pattern=RAN_ON_PATTERN,
        description="builtin, remote, mcp:<server>, none (never ran); tool spans default to remote",
    )
    agent: str = Field(default="", max_length=200, pattern=NAME_PATTERN)
    session_id: str = Field(default="", max_length=200, pattern=NAME_PATTERN)
    request_text: str = Field(default="", description="The user's request, when known")
    model: str = Field(default="", max_length=200, pattern=NAME_PATTERN)
    arguments: Any = None
    result: Any = None
    status: Literal["ok", "error", "stopped"] = Field(
        description="stopped: ended by its caller's stop (a user's Stop), no failure"
    )
    error_kind: str = Field(default="", pattern=rf"{ERROR_KIND_PATTERN}|^$", validate_default=True)
    error_message: str = ""
    started_at: datetime
    latency_ms: float = Field(ge=0, le=MAX_LATENCY_MS)
    input_tokens: int = Field(default=0, ge=0, le=2**31 - 1)
    output_tokens: int = Field(default=0, ge=0, le=2**31 - 1)
    result_tokens: int = Field(default=0, ge=0, le=2**31 - 1)
    result_reduction: Literal["", "truncated", "compressed", "omitted"] = Field(
        default="",
        description="What the agent's token budget did to the tool output before the model "
        "saw it: truncated (kept its head), compressed (kept a list's top items), omitted",
    )
    result_tokens_dropped: int = Field(
        default=0, ge=0, le=2**31 - 1, description="The output's tokens the budget cut away"
    )
    cost_usd: float = Field(default=0.0, ge=0, le=1e6)
    attempt: int = Field(default=1, ge=1, le=10_000)
    coercions: list[str] = Field(
        # A factory, not default=[]: pydantic deep-copies a mutable default for every span.
        default_factory=list,
        max_length=100,
        description="Lossless fixes made to the arguments, e.g. 'n: string \"12\" -> integer 12'",
        json_schema_extra={"default": []},  # what default=[] published
    )

    @field_validator("trace_id")
    @classmethod
    def _trace_id(cls, value: str) -> str:
        return _hex_id(value, "trace_id")

    @field_validator("span_id", "parent_span_id")
    @classmethod
    def _span_id(cls, value: str | None) -> str | None:
        return None if value is None else _hex_id(value, "span id")

    @field_validator("started_at")
    @classmethod
    def _started_at(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("started_at needs a time zone, e.g. 2026-01-31T12:00:00Z")
        # Stored in UTC: PostgreSQL refuses offsets beyond +/-15:59, which ISO 8601 allows.
        try:
            value = value.astimezone(UTC)
        except OverflowError:
            raise ValueError("started_at is out of range once converted to UTC") from None
        if value < EARLIEST:
            raise ValueError("started_at is before 2000-01-01: is it in seconds, not ms?")
        skew = timedelta(seconds=settings.ARES_MAX_CLOCK_SKEW_SECONDS)
        if value > timezone.now() + skew:
            raise ValueError(f"started_at is more than {skew} in the future")
        return value

    @field_validator("error_message", "request_text", "tool_description", mode="before")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        # Free text is kept even when a client's JSON carries lone surrogates (\ud800),
        # which pydantic refuses as str: they become U+FFFD, as NUL does on storing.
        return storable_text(value) if isinstance(value, str) else value

    @field_validator("tool_name")
    @classmethod
    def _tool_name(cls, value: str, info: ValidationInfo) -> str:
        if not value and info.data.get("kind") == "tool":
            raise ValueError("tool_name is required when kind is 'tool'")
        return value

    @field_validator("error_kind")
    @classmethod
    def _error_kind(cls, value: str, info: ValidationInfo) -> str:
        if value and info.data.get("status") == "ok":
            raise ValueError("error_kind is set but status is 'ok'")
        return value

    @field_validator("result_tokens_dropped")
    @classmethod
    def _tokens_dropped(cls, value: int, info: ValidationInfo) -> int:
        if value and not info.data.get("result_reduction"):
            raise ValueError("result_tokens_dropped is set but result_reduction is empty")
        return value

    @model_validator(mode="after")
    def _defaults(self) -> InvocationIn:
        if self.kind == "tool":
            self.chosen_by = self.chosen_by or "external"
            self.ran_on = self.ran_on or "remote"
        return self


class InvocationFromDict(InvocationIn):
    """InvocationIn validated once: ninja's Schema validates extra="forbid" models twice.

    The second pass reads the item through DjangoGetter, for model instances; a plain
    dict (parsed JSON, the engine's spans) gives the same result, so it only doubles the
    cost. Use this for dicts.
    """

    @model_validator(mode="wrap")
    @classmethod
    def _run_root_validator(
        cls, values: Any, handler: ModelWrapValidatorHandler[InvocationIn], info: ValidationInfo
    ) -> InvocationIn:
        return handler(values)


def _filter_moment(value: datetime) -> datetime:
    try:
        return filter_moment(value)
    except ValueError as exc:
        raise PydanticCustomError("datetime_range", str(exc)) from None


# A date, then a time: what ISO 8601 date-times begin with (pydantic would also read a
# bare number as seconds since 1970, which no client of a date-time filter means).
_ISO_DATE_TIME_START = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _iso_date_time(value: Any) -> Any:
    if isinstance(value, str) and not _ISO_DATE_TIME_START.match(value):
        raise PydanticCustomError(
            "datetime_format", "must be an ISO 8601 datetime like 2026-01-31T12:00:00Z"
        )
    return value


FilterMoment = Annotated[datetime, BeforeValidator(_iso_date_time), AfterValidator(_filter_moment)]
"""A read filter's moment: an ISO 8601 date-time, read as UTC without a zone, in UTC after."""


class DeletedOut(Schema):
    """What a DELETE answers: the id and name of what is gone."""

    deleted: int
    name: str


class FieldError(Schema):
    field: str
    reason: str


class ItemOutcome(Schema):
    index: int
    status: Literal["accepted", "duplicate", "rejected"]
    trace_id: str | None = None
    span_id: str | None = None
    errors: list[FieldError] = []


class BatchOut(Schema):
    accepted: int
    duplicates: int
    rejected: int
    items: list[ItemOutcome]


# An answer lists at most this many problems of one item or request, then how many more:
# a span with 50,000 unknown keys would otherwise cost a second and a 2 MB answer.
MAX_LISTED_ERRORS = 20


def listed(errors: list[FieldError], total: int, whole: str = "(item)") -> list[FieldError]:
    """Return the first MAX_LISTED_ERRORS of `total` errors, then one saying how many are left."""
    shown = errors[:MAX_LISTED_ERRORS]
    if total > len(shown):
        more = f"and {total - len(shown):,} more problems, not listed"
        shown.append(FieldError(field=whole, reason=more))
    return shown


def field_errors(exc: ValidationError) -> list[FieldError]:
    """Return pydantic's errors as field/reason pairs an agent developer can act on (capped)."""
    errors = []
    for error in exc.errors(include_url=False)[:MAX_LISTED_ERRORS]:
        field = ".".join(str(part) for part in error["loc"])[:200] or "(item)"
        reason = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            reason = "unknown field"
        elif "input" in error and error["type"] not in ("missing",):
            shown = repr(error["input"])
            reason += f" (got {shown[:80] + '…' if len(shown) > 80 else shown})"
        errors.append(FieldError(field=field, reason=reason))
    return listed(errors, exc.error_count())


SchemaT = TypeVar("SchemaT", bound=Schema)


class InvalidItem(ValueError):
    """An item of a batch that failed validation, with its (capped) field errors."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{error.field}: {error.reason}" for error in errors))
        self.errors = errors


def validated(model: type[SchemaT], raw: Any) -> SchemaT:
    """Return a batch item validated as `model`, or raise InvalidItem with its errors.

    An object with more unknown keys than an answer lists is refused by their names and
    count without validating it: pydantic would make (and we list) an error per key.
    """
    if isinstance(raw, dict) and len(raw) > len(model.model_fields) + MAX_LISTED_ERRORS:
        unknown = [key for key in raw if key not in model.model_fields]
        if len(unknown) > MAX_LISTED_ERRORS:
            errors = [
                FieldError(field=str(key)[:200], reason="unknown field")
                for key in unknown[:MAX_LISTED_ERRORS]
            ]
            raise InvalidItem(listed(errors, len(unknown)))
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise InvalidItem(field_errors(exc)) from None


class TraceOut(Schema):
    trace_id: str
    agent: str
    session_id: str
    request_text: str
    started_at: datetime
    ended_at: datetime
    duration_ms: float
    status: str
    span_count: int
    tool_calls: int
    llm_calls: int
    failed_calls: int
    stopped_calls: int = Field(description="Spans stopped by their caller: not failures")
    input_tokens: int
    output_tokens: int
    cost_usd: float
    tool_latency_ms: float
    dialect: str = Field(description="The OpenTelemetry dialect that reported it; blank for REST")


class InvocationOut(Schema):
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: str
    tool_name: str
    tool_call_id: str
    tool_type: str
    tool_description: str
    chosen_by: str
    ran_on: str
    agent: str
    model: str
    arguments: Any
    result: Any
    status: str
    error_kind: str
    error_message: str
    started_at: datetime
    latency_ms: float
    input_tokens: int
    output_tokens: int
    result_tokens: int
    result_reduction: str
    result_tokens_dropped: int
    cost_usd: float
    attempt: int
    coercions: list[str]


class TraceDetailOut(TraceOut):
    spans: list[InvocationOut]


class TraceListItemOut(TraceOut):
    """A trace in a listing; with include=spans, its spans too (bounded)."""

    spans: list[InvocationOut] | None = Field(
        None, description="With include=spans only: its first spans_limit spans, in time order"
    )
    spans_truncated: bool | None = Field(
        None,
        description="With include=spans only: true when the trace has more spans than "
        "spans_limit (span_count says how many)",
    )


class CountOut(Schema):
    count: int = Field(description="How many match, counted up to the limit")
    exact: bool = Field(
        description="false when more match than the limit: count is then the limit, and "
        "more than that many match"
    )


class ToolStatsOut(Schema):
    tool_name: str
    calls: int
    failures: int
    stopped: int = Field(description="Calls stopped by their caller: neither failed nor succeeded")
    success_rate: float | None = Field(
        description="Of the calls not stopped, the share that succeeded; null if every one was"
    )
    p50_latency_ms: float | None
    p95_latency_ms: float | None
    input_tokens: int
    output_tokens: int
    result_tokens: int
    cost_usd: float


class ToolStatsWindowOut(Schema):
    since: datetime
    until: datetime
    tools: list[ToolStatsOut]


class IncompleteToolSpanOut(Schema):
    trace_id: str
    span_id: str
    tool_name: str = Field(description="As stored: the span's name when the tool name was missing")
    missing: list[Literal["tool_name", "status", "arguments"]]
    started_at: datetime | None


class OtlpProducerOut(Schema):
    name: str = Field(description="The producer's resource service.name")
    dialect: str
    tool_spans: int = Field(description="Tool spans received from it")
    missing_tool_name: int
    missing_status: int = Field(
        description="No longer grows: an unset status is ok, as the OpenTelemetry spec says"
    )
    missing_arguments: int
    first_seen_at: datetime
    last_seen_at: datetime
    recent_incomplete: list[IncompleteToolSpanOut] = Field(
        description="Its newest tool spans that arrived missing attributes, newest first"
    )
