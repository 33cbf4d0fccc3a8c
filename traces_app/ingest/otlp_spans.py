"""Read OTLP spans into validated readings (or refusals) and store the valid ones."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any

from django.conf import settings
from django.db import transaction
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from pydantic import ValidationError

from traces_app.ingest.agent_attribution import NOTHING_ABOVE, Above, agents_above, settle_agents
from traces_app.ingest.otlp_decoding import (
    ABSENT,
    NAME_MAX,
    TooManyAttributes,
    any_value,
    as_name,
    as_text,
    attribute_dict,
    json_decoded,
)
from traces_app.ingest.otlp_dialects import GENERIC, DialectFields, error_kind_slug, read_dialect
from traces_app.ingest.recording import Refused, record_invocations
from traces_app.models import OtlpProducer, Trace
from traces_app.schemas import InvocationFromDict, InvocationIn, field_errors

UNKNOWN_SERVICE = "unknown_service"  # what OpenTelemetry SDKs report without service.name
# The instrumentation scope's name, kept with the resource's attributes under the key
# OpenTelemetry uses for it outside OTLP.
SCOPE_NAME = "otel.scope.name"

# Attributes a tool span should carry; their absence is reported per producer. Not the
# status: the OpenTelemetry spec has instrumentations leave a successful span's status
# unset, so UNSET is ok, not missing.
MISSING_TOOL_NAME, MISSING_ARGUMENTS = "tool_name", "arguments"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class SpanReading:
    """One OTLP span as read: the span to store, or why it was rejected, and its producer."""

    trace_id: str
    span_id: str
    producer: str
    dialect: str
    item: InvocationIn | None = None
    error: str = ""
    missing: tuple[str, ...] = ()
    parent_span_id: str = ""
    names_agent: str = ""  # the agent this span stands for (an agent span), else ""
    own_agent: bool = False  # its agent is its own attribute's or its resource's
    above: Above = NOTHING_ABOVE  # what the request holds above it

    @property
    def agent_fell_back(self) -> bool:
        """Whether its agent is its service's name: none of its own, no agent span found."""
        return not self.own_agent and not self.names_agent and not self.above.name

    def agent_below(self) -> Above:
        """Return what the spans below it inherit: its name if an agent span, else above."""
        return Above(name=self.names_agent) if self.names_agent else self.above

    @property
    def is_tool(self) -> bool:
        return self.item is not None and self.item.kind == "tool"

    def incomplete_record(self) -> dict[str, Any]:
        """Return what a producer's report keeps of a tool span that lacked attributes."""
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "tool_name": self.item.tool_name if self.item else "",
            "missing": list(self.missing),
            "started_at": self.item.started_at.isoformat() if self.item else None,
        }


def read_request(request: ExportTraceServiceRequest) -> list[SpanReading]:
    """Return every span of the request, mapped and validated (or rejected) one by one.

    The spans of a resource with more attribute values than a span may have are rejected
    unread, each saying so.
    """
    spans, refused = [], []
    limit = settings.ARES_OTLP_MAX_ATTRIBUTES
    for resource_spans in request.resource_spans:
        try:
            resource = attribute_dict(resource_spans.resource.attributes, limit)
        except TooManyAttributes as exc:
            refused.extend(
                _refused(span, {}, f"its resource {exc}")
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            )
            continue
        for scope_spans in resource_spans.scope_spans:
            scoped = {**resource, SCOPE_NAME: scope_spans.scope.name}
            spans.extend((span, scoped) for span in scope_spans.spans)
    return read_spans(spans) + refused


def service_name_notes(request: ExportTraceServiceRequest) -> list[str]:
    """Return a warning per resource whose service.name is cut to fit a name (200 characters).

    Its spans are stored under the first 200 characters: a warning in partial_success
    (which OTLP allows with nothing rejected), never a rejection of the request.
    """
    notes = []
    limit = settings.ARES_OTLP_MAX_ATTRIBUTES
    for index, resource_spans in enumerate(request.resource_spans):
        pairs = resource_spans.resource.attributes
        if len(pairs) > limit:  # its spans are rejected, saying why
            continue
        name = as_text(next((any_value(p.value) for p in pairs if p.key == "service.name"), ""))
        if len(name) > NAME_MAX:
            notes.append(
                f"resource {index}: service.name is {len(name):,} characters, more than "
                f"{NAME_MAX}; its spans are stored under its first {NAME_MAX}"
            )
    return notes


def read_span(span: Span, resource: dict[str, Any]) -> SpanReading:
    """Map one span, on its own, onto a validated InvocationIn, or say why it cannot be stored."""
    return read_spans([(span, resource)])[0]


@dataclass
class ParsedSpan:
    """A span with its attributes read and its dialect recognised: the first pass of a request."""

    span: Span
    resource: dict[str, Any]
    attributes: dict[str, Any]
    dialect: str
    said: DialectFields

    @property
    def key(self) -> tuple[bytes, bytes]:
        return self.span.trace_id, self.span.span_id


def read_spans(spans: Iterable[tuple[Span, dict[str, Any]]]) -> list[SpanReading]:
    """Map spans (each with its resource's attributes) that arrived together, in their order.

    Two passes: every span's attributes first, so that a span can inherit the agent name
    of an agent span above it that comes later in the request.
    """
    read, refused = [], []
    limit = settings.ARES_OTLP_MAX_ATTRIBUTES
    for span, resource in spans:
        try:
            attributes = attribute_dict(span.attributes, limit)
        except TooManyAttributes as exc:  # refused before its attributes are read
            refused.append(_refused(span, resource, f"span {exc}"))
            continue
        dialect, said = read_dialect(attributes, span.name, as_text(resource.get(SCOPE_NAME)))
        read.append(ParsedSpan(span, resource, attributes, dialect, said))
    _calls_from_parents(read)
    aboves = agents_above(read)
    readings = []
    for one in read:
        above = aboves[one.key]
        reading = _reading(one, one.said.names_agent or above.name)
        reading.parent_span_id = one.span.parent_span_id.hex()
        reading.names_agent = one.said.names_agent
        reading.own_agent = bool(as_text(one.said.agent or one.resource.get("gen_ai.agent.name")))
        reading.above = above
        readings.append(reading)
    return readings + refused


def _calls_from_parents(spans: Sequence[ParsedSpan]) -> None:
    """Fill in tool spans' arguments and call ids from the tool calls their parent ran.

    LangChain's tool spans (OpenInference) carry a one-argument tool's input as bare text
    (`Paris`, not `{"city": "Paris"}`); the LangGraph node above them carries the calls
    as the model made them: `[{"name": ..., "args": {...}, "id": ...}]`. Used when the
    parent came in the same request.
    """
    by_key = {one.key: one for one in spans}
    for one in spans:
        said = one.said
        if said.kind != "tool" or isinstance(said.arguments, dict):
            continue
        parent = by_key.get((one.span.trace_id, one.span.parent_span_id))
        if parent is None:
            continue
        made = json_decoded(parent.attributes.get("input.value"))
        matching = [
            call
            for call in (made if isinstance(made, list) else [])
            if isinstance(call, dict)
            and call.get("name") == as_text(said.tool_name)
            and isinstance(call.get("args"), dict)
            and (said.tool_call_id is ABSENT or call.get("id") == said.tool_call_id)
        ]
        if len(matching) == 1:
            said.arguments = matching[0]["args"]
            if said.tool_call_id is ABSENT and matching[0].get("id"):
                said.tool_call_id = matching[0]["id"]


def store_readings(readings: Sequence[SpanReading]) -> list[SpanReading]:
    """Store the valid spans, note their traces' dialects and producers' gaps; return the rest.

    Spans already stored (a retried export) are accepted again and counted once.
    """
    valid = [reading for reading in readings if reading.item is not None]
    with transaction.atomic():
        outcomes = record_invocations([reading.item for reading in valid]) if valid else []
        stored = [
            (reading, outcome is True)
            for reading, outcome in zip(valid, outcomes, strict=True)
            if not isinstance(outcome, Refused)
        ]
        settle_agents([reading for reading, _ in stored], [new for _, new in stored])
    refused = [
        replace(reading, item=None, error=f"{outcome.field}: {outcome.reason}")
        for reading, outcome in zip(valid, outcomes, strict=True)
        if isinstance(outcome, Refused)
    ]
    is_new = [outcome is True for outcome in outcomes]
    traces_by_dialect: dict[str, set[str]] = {}
    for reading in valid:
        traces_by_dialect.setdefault(reading.dialect, set()).add(reading.trace_id)
    for dialect, trace_ids in traces_by_dialect.items():
        Trace.objects.note_dialect(trace_ids, dialect)
    new_tool_spans: dict[str, list[SpanReading]] = {}
    for reading, new in zip(valid, is_new, strict=True):
        if new and reading.is_tool:
            new_tool_spans.setdefault(reading.producer, []).append(reading)
    for producer, tool_spans in new_tool_spans.items():
        incomplete = [reading.incomplete_record() for reading in tool_spans if reading.missing]
        OtlpProducer.objects.record(producer, tool_spans[0].dialect, len(tool_spans), incomplete)
    return [reading for reading in readings if reading.item is None] + refused


def rejection_summary(rejected: Sequence[SpanReading], total: int, shown: int = 5) -> str:
    """Return the partial_success error message: how many spans were rejected, and why."""
    reasons = [
        f"span {reading.span_id or '(none)'} of trace {reading.trace_id or '(none)'}: "
        f"{reading.error}"
        for reading in rejected[:shown]
    ]
    more = f"; and {len(rejected) - shown} more" if len(rejected) > shown else ""
    return f"{len(rejected)} of {total} spans rejected: " + "; ".join(reasons)[:2000] + more


def _reading(read: ParsedSpan, inherited_agent: str) -> SpanReading:
    """Map one span onto a validated InvocationIn, or say why it cannot be stored."""
    span, resource = read.span, read.resource
    reading = SpanReading(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        producer=_producer(resource),
        dialect=read.dialect,
    )
    problem = _id_problem(span)
    if problem:
        reading.error = problem
        return reading
    timing = _timing(span)
    if isinstance(timing, str):
        reading.error = timing
        return reading
    fields, missing = _invocation_fields(read, inherited_agent)
    fields.update(timing)
    try:
        reading.item = InvocationFromDict.model_validate(fields)
    except ValidationError as exc:
        reading.error = "; ".join(f"{e.field}: {e.reason}" for e in field_errors(exc))
        return reading
    reading.missing = missing if reading.item.kind == "tool" else ()
    return reading


def _producer(resource: dict[str, Any]) -> str:
    """Return the service a resource names, fit for a name (see service_name_notes)."""
    return as_name(resource.get("service.name")) or UNKNOWN_SERVICE


def _refused(span: Span, resource: dict[str, Any], problem: str) -> SpanReading:
    """Return the reading of a span refused unread, for `problem`."""
    return SpanReading(
        trace_id=span.trace_id.hex()[:64],
        span_id=span.span_id.hex()[:32],
        producer=_producer(resource),
        dialect=GENERIC,
        error=problem,
    )


def _id_problem(span: Span) -> str:
    """Return why the span's ids are unusable, or an empty string."""
    if len(span.trace_id) != 16:
        return f"traceId must be 16 bytes (32 hex characters), got {len(span.trace_id)} bytes"
    if len(span.span_id) != 8:
        return f"spanId must be 8 bytes (16 hex characters), got {len(span.span_id)} bytes"
    if span.parent_span_id and len(span.parent_span_id) != 8:
        return f"parentSpanId must be 8 bytes or empty, got {len(span.parent_span_id)} bytes"
    return ""


def _timing(span: Span) -> dict[str, Any] | str:
    """Return started_at and latency_ms of a span, or why its timestamps are unusable."""
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if not start:
        return "startTimeUnixNano is missing"
    if not end:
        return "endTimeUnixNano is missing"
    if end < start:
        return "endTimeUnixNano is before startTimeUnixNano"
    # Whole microseconds: what the database keeps. uint64 nanoseconds end in 2554 AD,
    # well within datetime's range; absurd values are refused by the schema's checks.
    started_at = _EPOCH + timedelta(microseconds=start // 1000)
    return {"started_at": started_at, "latency_ms": (end - start) / 1e6}


def _invocation_fields(
    read: ParsedSpan, inherited_agent: str
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Return the InvocationIn fields of a span, and which tool attributes were missing."""
    span, attributes, resource, said = read.span, read.attributes, read.resource, read.said
    missing = []
    # A name the producer gave is checked as the REST API checks it; a span name we fall
    # back on is made to fit.
    tool_name = as_text(said.tool_name).strip() if said.tool_name is not ABSENT else ""
    if said.kind == "tool" and not tool_name:
        missing.append(MISSING_TOOL_NAME)
        tool_name = as_name(said.fallback_name) or "unknown"
    elif said.kind in ("other", "agent"):
        # Not a tool: the span's name labels it in the trace's waterfall.
        tool_name = as_name(said.fallback_name)
    failed = span.status.code == Status.STATUS_CODE_ERROR or bool(said.error_type) or said.failed
    if said.arguments is ABSENT:
        missing.append(MISSING_ARGUMENTS)
    fields = {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex() or None,
        "kind": said.kind,
        "tool_name": tool_name,
        "tool_call_id": as_text(said.tool_call_id) if said.tool_call_id is not ABSENT else "",
        "agent": as_text(said.agent or resource.get("gen_ai.agent.name"))
        or inherited_agent
        or as_name(resource.get("service.name")),
        "session_id": as_text(
            attributes.get("session.id")
            or attributes.get("gen_ai.conversation.id")
            or attributes.get("traceloop.association.properties.session_id")
            or resource.get("session.id")
        ),
        "request_text": said.request_text,
        "model": as_text(said.model),
        "tool_type": as_name(said.tool_type)[:40] if said.kind == "tool" else "",
        "tool_description": as_text(said.tool_description)[:2000] if said.kind == "tool" else "",
        "arguments": None if said.arguments is ABSENT else json_decoded(said.arguments),
        "result": json_decoded(said.result, scalars=True),
        **({"arguments": said.llm_input} if said.kind == "llm" and said.llm_input else {}),
        **({"result": said.llm_output} if said.kind == "llm" and said.llm_output else {}),
        "status": "error" if failed else "ok",
        "input_tokens": said.input_tokens or 0,
        "output_tokens": said.output_tokens or 0,
    }
    if failed:
        fields.update(_error_fields(span, said))
    return fields, tuple(missing)


def _error_fields(span: Span, said: DialectFields) -> dict[str, str]:
    """Return error_kind and error_message from error.type, the status and exception events."""
    exception = _exception_attributes(span)
    error_type = as_text(said.error_type) or as_text(exception.get("exception.type"))
    message = (
        span.status.message or as_text(exception.get("exception.message")) or error_type or "error"
    )
    kind = error_kind_slug(error_type) or ("tool_error" if said.kind == "tool" else "")
    return {"error_kind": kind, "error_message": message}


def _exception_attributes(span: Span) -> dict[str, Any]:
    """Return the attributes of the span's first `exception` event (among its first events).

    Bounded as a span's own attributes are; an event over the limit is passed over.
    """
    limit = settings.ARES_OTLP_MAX_ATTRIBUTES
    for event in islice(span.events, limit):
        if event.name == "exception":
            try:
                return attribute_dict(event.attributes, limit)
            except TooManyAttributes:
                return {}
    return {}
