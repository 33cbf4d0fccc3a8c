"""OpenTelemetry traces in: decode OTLP/HTTP requests, read each span's dialect, map it to a span.

Three dialects of tool and LLM spans are read, in this order: OpenTelemetry GenAI
(`gen_ai.operation.name`), OpenInference (`openinference.span.kind`) and OpenLLMetry
(`traceloop.span.kind`). Other spans are kept as generic spans of their trace (kind
"other"), so a trace's waterfall stays whole, but are not counted as tool calls.

A span's agent is its own agent attribute, else the resource's `gen_ai.agent.name`, else
the name of its nearest agent span (itself included), else the resource's `service.name`.
The nearest agent span is looked for in the export request, then among stored spans; a
span that lacks one because an ancestor has not arrived yet waits for that ancestor, and
takes its agent when it comes (see settle_agents), in whatever request and order.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from pydantic import ValidationError

from traces_app.bodies import MAX_JSON_DEPTH, nesting_exceeds, parse_json
from traces_app.models import (
    Invocation,
    OtlpProducer,
    SpanKind,
    Trace,
    mark_rollups_dirty,
    rows_as_json,
    rows_from_json,
)
from traces_app.schemas import InvocationFromDict, InvocationIn, field_errors
from traces_app.services import Refused, record_invocations

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
CONTENT_TYPES = (PROTOBUF, JSON)

GENAI, OPENINFERENCE, OPENLLMETRY, GENERIC = "genai", "openinference", "openllmetry", "otel"
UNKNOWN_SERVICE = "unknown_service"  # what OpenTelemetry SDKs report without service.name
# The instrumentation scope's name, kept with the resource's attributes under the key
# OpenTelemetry uses for it outside OTLP.
SCOPE_NAME = "otel.scope.name"
# The OpenAI Agents SDK's OpenInference spans: its trace (a workflow) is an AGENT span too.
_AGENTS_SDK_SCOPE = "openinference.instrumentation.openai_agents"

# Attributes a tool span should carry; their absence is reported per producer. Not the
# status: the OpenTelemetry spec has instrumentations leave a successful span's status
# unset, so UNSET is ok, not missing.
MISSING_TOOL_NAME, MISSING_ARGUMENTS = "tool_name", "arguments"

_GENAI_LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "embeddings"}
_GENAI_AGENT_OPERATIONS = {"invoke_agent", "create_agent"}
_OPENINFERENCE_KINDS = {"TOOL": "tool", "LLM": "llm", "AGENT": "agent"}
_OPENLLMETRY_KINDS = {"tool": "tool", "agent": "agent"}
# OpenLLMetry kinds whose traceloop.entity.name names the agent of the spans below them.
_OPENLLMETRY_AGENT_KINDS = {"agent", "workflow"}
_NAME_MAX = 200
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]+")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ABSENT = object()


class OtlpDecodeError(ValueError):
    """The body is not an ExportTraceServiceRequest in the encoding it claims."""


class TooManySpans(ValueError):
    """An export request holds more spans than one request may (ARES_OTLP_MAX_SPANS)."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(
            f"{count:,} spans in one request; the limit is {limit:,} (ARES_OTLP_MAX_SPANS): "
            "export smaller batches (the SDK's BatchSpanProcessor max_export_batch_size, "
            "the Collector's send_batch_max_size)"
        )


def decode_request(raw: bytes, content_type: str) -> ExportTraceServiceRequest:
    """Return the ExportTraceServiceRequest in a protobuf or OTLP/JSON body.

    Raises TooManySpans, before any span is read, for a request over the span limit.
    """
    message = ExportTraceServiceRequest()
    limit = settings.ARES_OTLP_MAX_SPANS
    if content_type == PROTOBUF:
        try:
            message.ParseFromString(raw)
        except DecodeError as exc:
            raise OtlpDecodeError(
                f"body is not a protobuf ExportTraceServiceRequest: {exc}"
            ) from None
        scopes = (scope for spans in message.resource_spans for scope in spans.scope_spans)
        _check_span_count(sum(len(scope.spans) for scope in scopes), limit)
        return message
    document = parse_json(raw)  # raises HttpError 400 for bad JSON, saying where
    if not isinstance(document, dict):
        raise OtlpDecodeError('body must be a JSON object {"resourceSpans": [...]}')
    # Counted in the parsed JSON: protobuf's JSON reader is slow enough to matter.
    _check_span_count(sum(1 for _ in _json_spans(document)), limit)
    try:
        json_format.ParseDict(_ids_as_base64(document), message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise OtlpDecodeError(
            f"body is not an OTLP/JSON ExportTraceServiceRequest: {exc}"
        ) from None
    return message


def _check_span_count(count: int, limit: int) -> None:
    if count > limit:
        raise TooManySpans(count, limit)


def _json_spans(document: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """Yield the span objects of an OTLP/JSON document."""
    for resource_spans in _objects(document.get("resourceSpans")):
        for scope_spans in _objects(resource_spans.get("scopeSpans")):
            yield from _objects(scope_spans.get("spans"))


def _ids_as_base64(document: dict[str, Any]) -> dict[str, Any]:
    """Return the OTLP/JSON document with its hex trace and span ids in protobuf's base64.

    OTLP/JSON departs from protobuf's JSON mapping for ids: they are hex, not base64. An
    id that is not hex becomes empty, so its span alone is rejected for a missing id.
    """
    for span in _json_spans(document):
        _convert_ids(span)
        for link in _objects(span.get("links")):
            _convert_ids(link)
    return document


def _objects(value: Any) -> Iterable[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _convert_ids(node: dict[str, Any]) -> None:
    for key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"):
        value = node.get(key)
        if isinstance(value, str):
            try:
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                node[key] = ""


def encode_message(message: Message, content_type: str) -> bytes:
    """Return a response message in the request's encoding: protobuf or OTLP/JSON."""
    if content_type == PROTOBUF:
        return message.SerializeToString()
    return json_format.MessageToJson(message, indent=None).encode()


@dataclass(frozen=True)
class Above:
    """What a walk up from a span's parent found: an agent's name, or a missing ancestor.

    The nearest agent span's name; else the id of the first ancestor not there (yet);
    neither when the walk reached a root or went round a parent loop.
    """

    name: str = ""
    awaits: str = ""


NOTHING_ABOVE = Above()


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
        name = _text(next((any_value(p.value) for p in pairs if p.key == "service.name"), ""))
        if len(name) > _NAME_MAX:
            notes.append(
                f"resource {index}: service.name is {len(name):,} characters, more than "
                f"{_NAME_MAX}; its spans are stored under its first {_NAME_MAX}"
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
        dialect, said = _read_dialect(attributes, span.name, _text(resource.get(SCOPE_NAME)))
        read.append(ParsedSpan(span, resource, attributes, dialect, said))
    _calls_from_parents(read)
    aboves = agents_above(read)
    readings = []
    for one in read:
        above = aboves[one.key]
        reading = _reading(one, one.said.names_agent or above.name)
        reading.parent_span_id = one.span.parent_span_id.hex()
        reading.names_agent = one.said.names_agent
        reading.own_agent = bool(_text(one.said.agent or one.resource.get("gen_ai.agent.name")))
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
        made = _decoded(parent.attributes.get("input.value"))
        matching = [
            call
            for call in (made if isinstance(made, list) else [])
            if isinstance(call, dict)
            and call.get("name") == _text(said.tool_name)
            and isinstance(call.get("args"), dict)
            and (said.tool_call_id is _ABSENT or call.get("id") == said.tool_call_id)
        ]
        if len(matching) == 1:
            said.arguments = matching[0]["args"]
            if said.tool_call_id is _ABSENT and matching[0].get("id"):
                said.tool_call_id = matching[0]["id"]


def agents_above(spans: Sequence[ParsedSpan]) -> dict[tuple[bytes, bytes], Above]:
    """Return, per span, what a walk up from its parent through these spans finds.

    The name of the nearest agent span above it; else the id of the first ancestor that
    is not among them (exported in another request: settle_agents goes on from there);
    else nothing (the walk reached a root, or a parent loop). Each span is walked once.
    """
    by_key = {one.key: one for one in spans}
    found: dict[tuple[bytes, bytes], Above] = {}  # from a span, itself included

    def walk_from(start: tuple[bytes, bytes]) -> Above:
        path: list[tuple[bytes, bytes]] = []
        seen: set[tuple[bytes, bytes]] = set()
        key = start
        while True:
            if key in found:
                result = found[key]
                break
            if key not in by_key:
                result = Above(awaits=key[1].hex())
                break
            if key in seen:  # a parent loop
                result = NOTHING_ABOVE
                break
            path.append(key)
            seen.add(key)
            current = by_key[key]
            if current.said.names_agent:
                result = Above(name=current.said.names_agent)
                break
            if not current.span.parent_span_id:
                result = NOTHING_ABOVE
                break
            key = (current.span.trace_id, current.span.parent_span_id)
        found.update(dict.fromkeys(path, result))
        return result

    return {
        one.key: walk_from((one.span.trace_id, one.span.parent_span_id))
        if one.span.parent_span_id
        else NOTHING_ABOVE
        for one in spans
    }


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


# Agent attribution across requests. The batch exporter splits a trace over requests, and
# an agent span ends (and is exported) after the spans below it. A span without an agent
# whose walk up stops at an ancestor that is not stored yet keeps its service's name and
# records that ancestor in agent_awaits (a partial index holds only such spans); the
# ancestor's arrival settles it. An agent span records its name in names_agent, so spans
# arriving later find it. Only these few spans are written again after the insert.

SpanKey = tuple[str, str]  # (trace id, span id), hex
MAX_STORED_ANCESTORS = 32  # database look-ups (one query each) a walk up may take


@dataclass
class AgentChanges:
    """What settling a request's agents writes: span fields, spans renamed, trace names."""

    # Per span, what it holds now (see hold) and, once changed, its new values.
    held: dict[SpanKey, dict[str, Any]] = field(default_factory=dict)
    span_fields: dict[SpanKey, dict[str, Any]] = field(default_factory=dict)
    renamed: list[tuple[datetime, str]] = field(default_factory=list)  # (started_at, tool)
    roots: dict[str, str] = field(default_factory=dict)  # trace: its root span's own agent
    topmost: dict[str, tuple[datetime, str]] = field(default_factory=dict)
    fallback_names: dict[str, set[str]] = field(default_factory=dict)

    def hold(self, key: SpanKey, agent: str, names_agent: str, agent_awaits: str | None) -> None:
        """Note a span's stored agent fields: a change writes them all, changed or not."""
        self.held[key] = {"agent": agent, "names_agent": names_agent, "agent_awaits": agent_awaits}

    def set(self, key: SpanKey, **fields: Any) -> None:
        self.span_fields.setdefault(key, dict(self.held[key])).update(fields)

    def rename(self, key: SpanKey, agent: str, started_at: datetime, kind: str, tool: str) -> None:
        """Give a span whose agent was its service's name the agent of its agent span."""
        self.set(key, agent=agent, agent_awaits=None)
        self.renamed.append((started_at, tool if kind == SpanKind.TOOL else ""))

    def note_topmost(self, trace_id: str, started_at: datetime, name: str) -> None:
        """Note an agent span with no agent span above it; the earliest one names its trace."""
        if trace_id not in self.topmost or started_at < self.topmost[trace_id][0]:
            self.topmost[trace_id] = (started_at, name)


def settle_agents(readings: Sequence[SpanReading], is_new: Sequence[bool]) -> None:
    """Settle the agents of stored spans, in the transaction that stored them.

    A new span without an agent takes that of its nearest agent span stored earlier, or
    waits for the missing ancestor it stopped at; stored spans waiting for a span of this
    request take what that span hands down. A trace is named after its root span's own
    agent, else after its topmost agent span when its name was a service's. Runs after
    the insert, under the trace's row lock, so concurrent requests of one trace take turns.
    """
    in_request = {(reading.trace_id, reading.span_id): reading for reading in readings}
    waiters = _stored_waiters(set(in_request))
    new = [reading for reading, new in zip(readings, is_new, strict=True) if new]
    open_ends = {
        (reading.trace_id, reading.above.awaits)
        for reading in new
        if (reading.agent_fell_back or reading.names_agent) and reading.above.awaits
    }
    for trace_id, _, awaits, *_ in waiters:
        below = in_request[(trace_id, awaits)].agent_below()
        if below.awaits:
            open_ends.add((trace_id, below.awaits))
    found = _walk_stored(open_ends, in_request)

    def settled(trace_id: str, above: Above) -> Above:
        return found[(trace_id, above.awaits)] if above.awaits else above

    changes = AgentChanges()
    for reading in new:
        walked = reading.agent_fell_back or reading.names_agent  # as in open_ends
        above = settled(reading.trace_id, reading.above) if walked else reading.above
        _settle_new(reading, above, changes)
    for trace_id, span_id, awaits, agent, names_agent, kind, tool, started_at in waiters:
        below = settled(trace_id, in_request[(trace_id, awaits)].agent_below())
        key = (trace_id, span_id)
        changes.hold(key, agent, names_agent, awaits)
        if below.awaits:
            changes.set(key, agent_awaits=below.awaits)
        elif names_agent:  # an agent span that waited to learn whether it is topmost
            changes.set(key, agent_awaits=None)
            if not below.name:
                changes.note_topmost(trace_id, started_at, names_agent)
        elif below.name:
            changes.rename(key, below.name, started_at, kind, tool)
            changes.fallback_names.setdefault(trace_id, set()).add(agent)
        else:
            changes.set(key, agent_awaits=None)
    for reading in readings:
        changes.fallback_names.setdefault(reading.trace_id, set()).add(reading.producer)
    _write_agent_changes(changes)


def _settle_new(reading: SpanReading, above: Above, changes: AgentChanges) -> None:
    """Note what a newly stored span's walk up (through the request, then stored spans) gives."""
    item = reading.item
    assert item is not None  # only stored spans are settled
    key = (reading.trace_id, reading.span_id)
    changes.hold(key, item.agent, "", None)
    if not reading.parent_span_id and (reading.own_agent or reading.names_agent):
        changes.roots[reading.trace_id] = item.agent
    if reading.names_agent:
        changes.set(key, names_agent=reading.names_agent)
        if above.awaits:
            changes.set(key, agent_awaits=above.awaits)
        elif not above.name:
            changes.note_topmost(reading.trace_id, item.started_at, reading.names_agent)
    elif reading.agent_fell_back:
        changes.fallback_names.setdefault(reading.trace_id, set()).add(item.agent)
        if above.name:  # found among stored spans
            changes.rename(key, above.name, item.started_at, item.kind, item.tool_name)
        elif above.awaits:
            changes.set(key, agent_awaits=above.awaits)


def _stored_waiters(keys: set[SpanKey]) -> list[tuple]:
    """Return the stored spans waiting for one of these spans, with what settling them needs."""
    rows = (
        # By trace alone, matching the partial index's condition: fewer parameters to bind.
        Invocation.objects.filter(
            trace_id__in={trace_id for trace_id, _ in keys}, agent_awaits__isnull=False
        )
        .order_by()
        .values_list(
            "trace_id", "span_id", "agent_awaits", "agent", "names_agent", "kind", "tool_name",
            "started_at",
        )
    )  # fmt: skip
    return [row for row in rows if (row[0], row[2]) in keys]


def _walk_stored(
    starts: set[SpanKey], in_request: dict[SpanKey, SpanReading]
) -> dict[SpanKey, Above]:
    """Return, per span missing from the request, what a walk up through stored spans finds.

    A stored agent span gives its name; a stored span that waits goes on from the span it
    waits for, others from their parent; a span of the request goes on as its walk in the
    request did; a span not stored is where the walk stops, to wait. One query per step
    up for all walks, at most MAX_STORED_ANCESTORS; a parent loop or a deeper chain finds
    nothing.
    """
    found: dict[SpanKey, Above] = {}
    stored: dict[SpanKey, tuple[str, str, str | None] | None] = {}
    walks = {start: (start, {start}) for start in starts}  # start: (where it is, seen)
    for _ in range(MAX_STORED_ANCESTORS):
        for start, (key, seen) in list(walks.items()):
            while key in in_request or key in stored:
                step = _step(key, in_request, stored)
                if isinstance(step, Above):
                    found[start] = step
                    del walks[start]
                    break
                if step in seen:
                    found[start] = NOTHING_ABOVE
                    del walks[start]
                    break
                seen.add(step)
                key = step
            else:
                walks[start] = (key, seen)
        if not walks:
            return found
        _fetch_stored({key for key, _ in walks.values()}, stored)
    found.update(dict.fromkeys(walks, NOTHING_ABOVE))
    return found


def _step(
    key: SpanKey,
    in_request: dict[SpanKey, SpanReading],
    stored: dict[SpanKey, tuple[str, str, str | None] | None],
) -> Above | SpanKey:
    """Return where a walk up goes from a span it reached, or what it found there."""
    trace_id, span_id = key
    if key in in_request:
        below = in_request[key].agent_below()
        return (trace_id, below.awaits) if below.awaits else below
    row = stored[key]
    if row is None:
        return Above(awaits=span_id)
    parent, names_agent, awaits = row
    if names_agent:
        return Above(name=names_agent)
    if awaits or parent:
        return (trace_id, awaits or parent)
    return NOTHING_ABOVE


def _fetch_stored(
    keys: set[SpanKey], stored: dict[SpanKey, tuple[str, str, str | None] | None]
) -> None:
    """Read these spans' parent, names_agent and agent_awaits into `stored` (None: not stored)."""
    rows = (
        Invocation.objects.filter(
            trace_id__in={trace_id for trace_id, _ in keys},
            span_id__in={span_id for _, span_id in keys},
        )
        .order_by()
        .values_list("trace_id", "span_id", "parent_span_id", "names_agent", "agent_awaits")
    )
    stored.update(dict.fromkeys(keys))
    for trace_id, span_id, *row in rows:
        if (trace_id, span_id) in keys:
            stored[(trace_id, span_id)] = tuple(row)


def _write_agent_changes(changes: AgentChanges) -> None:
    """Write the settled agents: the spans' in one statement, then the traces' names."""
    if changes.span_fields:
        _update_span_agents(
            [{"trace": trace_id, "span_id": span_id, **fields}
             for (trace_id, span_id), fields in changes.span_fields.items()]
        )  # fmt: skip
    if changes.renamed:
        mark_rollups_dirty(changes.renamed)
    wanted = {trace_id: (agent, None) for trace_id, agent in changes.roots.items()}
    for trace_id, (_, agent) in changes.topmost.items():
        # Only a name that came from a fallback (a service's) gives way to an agent's.
        fallbacks = {"", *changes.fallback_names.get(trace_id, ())}
        wanted.setdefault(trace_id, (agent, fallbacks))
    if not wanted:
        return
    renames: dict[str, list[str]] = {}
    for trace_id, agent in Trace.objects.filter(pk__in=wanted).values_list("pk", "agent"):
        name, fallbacks = wanted[trace_id]
        if agent != name and (fallbacks is None or agent in fallbacks):
            renames.setdefault(name, []).append(trace_id)
    for name, trace_ids in renames.items():
        Trace.objects.filter(pk__in=trace_ids).update(agent=name)


_AGENT_FIELDS = ("trace", "span_id", "agent", "names_agent", "agent_awaits")


def _update_span_agents(rows: Sequence[dict[str, Any]]) -> None:
    """Set agent, names_agent and agent_awaits of spans, rows keyed as _AGENT_FIELDS, at once.

    One statement whatever the changes: a filter and an UPDATE per distinct change cost
    ingest a third of its speed in Django's query building alone.
    """
    fields = {name: Invocation._meta.get_field(name) for name in _AGENT_FIELDS}
    quote = connection.ops.quote_name
    table = quote(Invocation._meta.db_table)
    assignments = ", ".join(
        f"{quote(name)} = changed.{quote(name)}"
        for name in ("agent", "names_agent", "agent_awaits")
    )
    sql = (
        f"UPDATE {table} SET {assignments} FROM ({rows_from_json(fields.values())}) AS changed "
        f"WHERE {table}.trace_id = changed.trace_id AND {table}.span_id = changed.span_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [rows_as_json(rows, fields)])


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
    return _name(resource.get("service.name")) or UNKNOWN_SERVICE


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


@dataclass
class DialectFields:
    """What a dialect's attributes say about a span; _ABSENT where they say nothing."""

    kind: str = "other"
    tool_name: Any = _ABSENT
    tool_call_id: Any = _ABSENT
    arguments: Any = _ABSENT
    result: Any = None
    model: Any = None
    input_tokens: Any = None
    output_tokens: Any = None
    error_type: Any = None
    failed: bool = False  # the dialect's own payload says the call failed
    tool_type: Any = None
    tool_description: Any = None
    request_text: str = ""  # the user's request: the first user message the model was sent
    # An LLM span's exchange, stored as its arguments and result for the trace view:
    # {"messages": [...], "tools": [...]} sent, and the output messages or {"content", ...}.
    llm_input: Any = None
    llm_output: Any = None
    session: Any = None
    agent: Any = None
    names_agent: str = ""  # the agent this span stands for, inherited by the spans below it
    fallback_name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _read_dialect(
    attributes: dict[str, Any], name: str, scope: str = ""
) -> tuple[str, DialectFields]:
    """Return which dialect a span speaks and what it says, trying the dialects in order."""
    if "gen_ai.operation.name" in attributes:
        # OpenLLMetry's LLM spans speak GenAI, beside traceloop.* attributes.
        traceloop = any(key.startswith("traceloop.") for key in attributes)
        return (OPENLLMETRY if traceloop else GENAI), _read_genai(attributes, name)
    if "openinference.span.kind" in attributes:
        return OPENINFERENCE, _read_openinference(attributes, name, scope)
    if "traceloop.span.kind" in attributes:
        return OPENLLMETRY, _read_openllmetry(attributes, name)
    if any(key.startswith("gen_ai.") for key in attributes):
        # LLM spans without an operation name: older GenAI producers, and OpenLLMetry,
        # whose LLM spans carry gen_ai.* attributes beside its own llm.* ones.
        traceloop = any(key.startswith(("traceloop.", "llm.")) for key in attributes)
        return (OPENLLMETRY if traceloop else GENAI), _read_genai(attributes, name)
    return GENERIC, DialectFields(fallback_name=name)


def _read_genai(attributes: dict[str, Any], name: str) -> DialectFields:
    operation = _text(attributes.get("gen_ai.operation.name"))
    model = attributes.get("gen_ai.request.model") or attributes.get("gen_ai.response.model")
    input_tokens = _first(attributes, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
    output_tokens = _first(
        attributes, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"
    )
    if operation == "execute_tool":
        kind = "tool"
    elif operation in _GENAI_LLM_OPERATIONS or (
        not operation and (model or input_tokens is not None or output_tokens is not None)
    ):
        kind = "llm"
    elif operation in _GENAI_AGENT_OPERATIONS:
        kind = "agent"
    else:
        kind = "other"
    return DialectFields(
        kind=kind,
        tool_name=attributes.get("gen_ai.tool.name", _ABSENT),
        tool_call_id=attributes.get("gen_ai.tool.call.id", _ABSENT),
        arguments=attributes.get("gen_ai.tool.call.arguments", _ABSENT),
        result=attributes.get("gen_ai.tool.call.result"),
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        error_type=attributes.get("error.type"),
        tool_type=attributes.get("gen_ai.tool.type"),
        tool_description=attributes.get("gen_ai.tool.description"),
        request_text=_genai_request_text(attributes) if kind == "llm" else "",
        llm_input=_genai_llm_input(attributes) if kind == "llm" else None,
        llm_output=_decoded(attributes.get("gen_ai.output.messages")) if kind == "llm" else None,
        agent=attributes.get("gen_ai.agent.name"),
        names_agent=_name(attributes.get("gen_ai.agent.name")) if kind == "agent" else "",
        # GenAI names tool spans "execute_tool {gen_ai.tool.name}".
        fallback_name=name.removeprefix("execute_tool").strip() if kind == "tool" else name,
    )


def _read_openinference(attributes: dict[str, Any], name: str, scope: str = "") -> DialectFields:
    kind = _OPENINFERENCE_KINDS.get(_text(attributes["openinference.span.kind"]).upper(), "other")
    if kind == "agent" and scope == _AGENTS_SDK_SCOPE and "agent.name" not in attributes:
        # The Agents SDK's trace ("Agent workflow" unless named): a workflow above the
        # agents, which name themselves in agent.name.
        kind = "other"
    arguments = attributes.get("input.value", _ABSENT)
    parameters = attributes.get("tool.parameters", _ABSENT)
    # tool.parameters is the tool's parameter schema, but some producers put the call's
    # arguments there: use it when input.value is absent and it is not a JSON Schema.
    if arguments is _ABSENT and parameters is not _ABSENT and not _is_json_schema(parameters):
        arguments = parameters
    # Decoded once here; _invocation_fields leaves a decoded value as it is.
    result = _decoded(attributes.get("output.value")) if kind == "tool" else None
    tool_call_id = attributes.get("tool.id", attributes.get("tool_call.id", _ABSENT))
    failed = False
    message = _langchain_tool_message(result)
    if message is not None:  # LangChain's ToolMessage, around what the tool returned
        result = message.get("content")
        failed = message.get("status") == "error"
        if tool_call_id is _ABSENT and message.get("tool_call_id"):
            tool_call_id = message["tool_call_id"]
    return DialectFields(
        kind=kind,
        tool_name=attributes.get("tool.name", _ABSENT),
        tool_call_id=tool_call_id,
        arguments=arguments if kind == "tool" else _ABSENT,
        result=result,
        failed=failed,
        tool_description=attributes.get("tool.description") if kind == "tool" else None,
        request_text=_openinference_request_text(attributes) if kind == "llm" else "",
        llm_input=_openinference_llm_input(attributes) if kind == "llm" else None,
        llm_output=_openinference_llm_output(attributes) if kind == "llm" else None,
        model=attributes.get("llm.model_name"),
        input_tokens=attributes.get("llm.token_count.prompt"),
        output_tokens=attributes.get("llm.token_count.completion"),
        error_type=attributes.get("exception.type"),
        agent=attributes.get("agent.name"),
        names_agent=_name(attributes.get("agent.name") or name) if kind == "agent" else "",
        fallback_name=name,
    )


def _read_openllmetry(attributes: dict[str, Any], name: str) -> DialectFields:
    span_kind = _text(attributes["traceloop.span.kind"]).lower()
    kind = _OPENLLMETRY_KINDS.get(span_kind, "other")
    arguments = attributes.get("traceloop.entity.input", _ABSENT)
    if arguments is not _ABSENT:
        arguments = _unwrap_call(_decoded(arguments))
    names_agent = ""
    if span_kind in _OPENLLMETRY_AGENT_KINDS:
        names_agent = _name(attributes.get("traceloop.entity.name"))
    # OpenLLMetry JSON-encodes every output, text too: _decoded(scalars=True) decodes it.
    return DialectFields(
        kind=kind,
        tool_name=attributes.get("traceloop.entity.name", _ABSENT),
        arguments=arguments,
        result=attributes.get("traceloop.entity.output"),
        names_agent=names_agent,
        # OpenLLMetry names tool spans "{name}.tool".
        fallback_name=name.removesuffix(".tool") if kind == "tool" else name,
    )


def _langchain_tool_message(message: Any) -> dict[str, Any] | None:
    """Return the data of a (decoded) serialised LangChain ToolMessage, or None if not one."""
    if (
        isinstance(message, dict)
        and message.get("type") == "tool"
        and isinstance(message.get("data"), dict)
        and message["data"].get("type") == "tool"
        and "content" in message["data"]
    ):
        return message["data"]
    return None


def _genai_request_text(attributes: dict[str, Any]) -> str:
    """Return the first user message of a GenAI LLM span's input.

    gen_ai.input.messages (JSON: role and parts) in current conventions; the indexed
    gen_ai.prompt.N.role/content attributes in older ones.
    """
    messages = _decoded(attributes.get("gen_ai.input.messages"))
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            parts = message.get("parts")
            texts = [
                _text(part.get("content"))
                for part in (parts if isinstance(parts, list) else [])
                if isinstance(part, dict) and part.get("type") == "text"
            ]
            if "content" in message and not texts:
                texts = [_text(message["content"])]
            return "\n".join(texts)
    return _indexed_user_message(attributes, "gen_ai.prompt.{}.role", "gen_ai.prompt.{}.content")


def _genai_llm_input(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """Return a GenAI LLM span's input messages and offered tools, when it recorded them."""
    sent = {}
    messages = _decoded(attributes.get("gen_ai.input.messages"))
    if isinstance(messages, list):
        sent["messages"] = messages
    tools = _decoded(attributes.get("gen_ai.tool.definitions"))
    if isinstance(tools, list):
        sent["tools"] = tools
    return sent or None


def _openinference_llm_input(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """Return an OpenInference LLM span's input messages and offered tools, rebuilt."""
    sent = {}
    messages = _indexed_messages(attributes, "llm.input_messages")
    if messages:
        sent["messages"] = messages
    tools = []
    index = 0
    while f"llm.tools.{index}.tool.json_schema" in attributes:
        tools.append(_decoded(attributes[f"llm.tools.{index}.tool.json_schema"]))
        index += 1
    if tools:
        sent["tools"] = tools
    return sent or None


def _openinference_llm_output(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """Return an OpenInference LLM span's answer: its first output message, and why it ended."""
    messages = _indexed_messages(attributes, "llm.output_messages")
    if not messages:
        return None
    answer = {key: value for key, value in messages[0].items() if key != "role"}
    if "llm.finish_reason" in attributes:
        answer["finish_reason"] = _text(attributes["llm.finish_reason"])
    return answer


def _indexed_messages(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Return OpenInference's flattened messages (prefix.N.message.*) as chat messages."""
    start = f"{prefix}."
    numbers = {key[len(start) :].split(".", 1)[0] for key in attributes if key.startswith(start)}
    messages = []
    for index in sorted(int(number) for number in numbers if number.isdigit())[:1000]:
        at = f"{prefix}.{index}.message."
        message: dict[str, Any] = {"role": _text(attributes.get(at + "role"))}
        if at + "content" in attributes:
            message["content"] = _text(attributes[at + "content"])
        if at + "tool_call_id" in attributes:
            message["tool_call_id"] = _text(attributes[at + "tool_call_id"])
        calls = []
        while f"{at}tool_calls.{len(calls)}.tool_call.function.name" in attributes:
            call = f"{at}tool_calls.{len(calls)}.tool_call."
            calls.append({
                "id": _text(attributes.get(call + "id")),
                "function": {"name": _text(attributes[call + "function.name"]),
                             "arguments": _text(attributes.get(call + "function.arguments"))},
            })  # fmt: skip
        if calls:
            message["tool_calls"] = calls
        messages.append(message)
    return messages


def _openinference_request_text(attributes: dict[str, Any]) -> str:
    """Return the first user message of an OpenInference LLM span's input messages."""
    return _indexed_user_message(
        attributes, "llm.input_messages.{}.message.role", "llm.input_messages.{}.message.content"
    )


def _indexed_user_message(attributes: dict[str, Any], role: str, content: str) -> str:
    index = 0
    while role.format(index) in attributes:
        if _text(attributes[role.format(index)]).lower() in ("user", "human"):
            return _text(attributes.get(content.format(index)))
        index += 1
    return ""


def _unwrap_call(value: Any) -> Any:
    """Return the keyword arguments of an OpenLLMetry {"args": [], "kwargs": {...}} input."""
    if isinstance(value, dict) and set(value) <= {"args", "kwargs"} and not value.get("args"):
        return value.get("kwargs", {})
    return value


def _is_json_schema(value: Any) -> bool:
    schema = _decoded(value)
    return isinstance(schema, dict) and (
        "$schema" in schema or (schema.get("type") == "object" and "properties" in schema)
    )


def _invocation_fields(
    read: ParsedSpan, inherited_agent: str
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Return the InvocationIn fields of a span, and which tool attributes were missing."""
    span, attributes, resource, said = read.span, read.attributes, read.resource, read.said
    missing = []
    # A name the producer gave is checked as the REST API checks it; a span name we fall
    # back on is made to fit.
    tool_name = _text(said.tool_name).strip() if said.tool_name is not _ABSENT else ""
    if said.kind == "tool" and not tool_name:
        missing.append(MISSING_TOOL_NAME)
        tool_name = _name(said.fallback_name) or "unknown"
    elif said.kind in ("other", "agent"):
        # Not a tool: the span's name labels it in the trace's waterfall.
        tool_name = _name(said.fallback_name)
    failed = span.status.code == Status.STATUS_CODE_ERROR or bool(said.error_type) or said.failed
    if said.arguments is _ABSENT:
        missing.append(MISSING_ARGUMENTS)
    fields = {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex() or None,
        "kind": said.kind,
        "tool_name": tool_name,
        "tool_call_id": _text(said.tool_call_id) if said.tool_call_id is not _ABSENT else "",
        "agent": _text(said.agent or resource.get("gen_ai.agent.name"))
        or inherited_agent
        or _name(resource.get("service.name")),
        "session_id": _text(
            attributes.get("session.id")
            or attributes.get("gen_ai.conversation.id")
            or attributes.get("traceloop.association.properties.session_id")
            or resource.get("session.id")
        ),
        "request_text": said.request_text,
        "model": _text(said.model),
        "tool_type": _name(said.tool_type)[:40] if said.kind == "tool" else "",
        "tool_description": _text(said.tool_description)[:2000] if said.kind == "tool" else "",
        "arguments": None if said.arguments is _ABSENT else _decoded(said.arguments),
        "result": _decoded(said.result, scalars=True),
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
    error_type = _text(said.error_type) or _text(exception.get("exception.type"))
    message = (
        span.status.message or _text(exception.get("exception.message")) or error_type or "error"
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


def error_kind_slug(error_type: str) -> str:
    """Return an error type ("TimeoutError", "java.net.SocketTimeout", "500") as an error kind.

    Error kinds are slugs (`timeout_error`); a dotted name keeps its last part.
    """
    last = error_type.rsplit(".", 1)[-1]
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", last).lower()
    slug = re.sub(r"[^a-z0-9]+", "_", snake).strip("_")
    if slug and not slug[0].isalpha():
        slug = f"error_{slug}"
    return slug[:40].rstrip("_")


def _first(attributes: dict[str, Any], *keys: str) -> Any:
    return next((attributes[key] for key in keys if key in attributes), None)


def _text(value: Any) -> str:
    """Return an attribute value as text: strings as they are, other values as JSON."""
    if value is None or value is _ABSENT:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _name(value: Any) -> str:
    """Return a name fit for a one-line field: control characters out, at most 200 characters."""
    return _CONTROL_CHARS.sub(" ", _text(value)).strip()[:_NAME_MAX]


_JSON_SCALAR = re.compile(
    r'-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?|true|false|null|"([^"\\]|\\.)*"', re.DOTALL
)


def _decoded(value: Any, scalars: bool = False) -> Any:
    """Return a JSON object or array sent as text decoded; other values unchanged.

    Producers send arguments and results as JSON strings (attributes hold no objects).
    With `scalars`, a text that is a whole JSON number, true, false, null or quoted string
    is decoded too: what producers that encode "JSON unless a string" (GenAI, LangChain,
    OpenInference's decorators) make of a tool's number or boolean, and what agents that
    JSON-encode every result make of a text. Text that does not decode, or nests deeper
    than bodies accept, stays text.
    """
    if scalars and isinstance(value, str) and _JSON_SCALAR.fullmatch(value.strip()):
        try:
            return json.loads(value)
        except ValueError:  # a quoted string with an escape JSON does not know
            return value
    if not isinstance(value, str) or value.lstrip()[:1] not in ("{", "["):
        return value
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return value if nesting_exceeds(decoded, MAX_JSON_DEPTH) else decoded


class TooManyAttributes(ValueError):
    """A span, resource or event with more attribute values than ARES_OTLP_MAX_ATTRIBUTES."""


def attribute_dict(pairs: Sequence[KeyValue], limit: int | None = None) -> dict[str, Any]:
    """Return OTLP attributes as a dict of plain values; a repeated key keeps its first value.

    With a limit, raises TooManyAttributes when they hold more values than that, items of
    arrays and maps included; a list longer than the limit is refused before it is read.
    """
    return _ValueReader(limit).attributes(pairs)


def any_value(value: AnyValue) -> Any:
    """Return an OTLP AnyValue as a plain value: lists, dicts, scalars; bytes as hex."""
    return _ValueReader(None).value(value)


class _ValueReader:
    """Reads attribute values, counting them against a limit shared by all it reads."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.left = limit if limit is not None else -1

    def spend(self, count: int) -> None:
        if self.limit is None:
            return
        self.left -= count
        if self.left < 0:
            raise TooManyAttributes(
                f"has more than {self.limit:,} attribute values (ARES_OTLP_MAX_ATTRIBUTES; "
                "items of array and map values count)"
            )

    def attributes(self, pairs: Sequence[KeyValue]) -> dict[str, Any]:
        self.spend(len(pairs))
        values: dict[str, Any] = {}
        read = self.value  # looked up once: this loop runs for every attribute of a request
        for pair in pairs:
            key = pair.key
            if key not in values:
                values[key] = read(pair.value)
        return values

    def value(self, value: AnyValue) -> Any:
        which = value.WhichOneof("value")
        if which is None:
            return None
        if which == "array_value":
            items = value.array_value.values
            self.spend(len(items))
            return [self.value(item) for item in items]
        if which == "kvlist_value":
            return self.attributes(value.kvlist_value.values)
        if which == "bytes_value":
            return binascii.hexlify(value.bytes_value).decode()
        return getattr(value, which)
