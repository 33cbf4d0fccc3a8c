"""Decode OTLP trace requests (protobuf, OTLP/JSON) and read their ids and attribute values."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from traces_app.http.json_nesting import MAX_JSON_DEPTH, nesting_exceeds

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
CONTENT_TYPES = (PROTOBUF, JSON)

NAME_MAX = 200
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]+")
ABSENT = object()  # an attribute a span does not carry


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


def decode_protobuf(raw: bytes, max_spans: int) -> ExportTraceServiceRequest:
    """Return the ExportTraceServiceRequest in a protobuf body.

    Raises TooManySpans, before any span is read, for a request over max_spans.
    """
    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(raw)
    except DecodeError as exc:
        raise OtlpDecodeError(f"body is not a protobuf ExportTraceServiceRequest: {exc}") from None
    scopes = (scope for spans in message.resource_spans for scope in spans.scope_spans)
    _check_span_count(sum(len(scope.spans) for scope in scopes), max_spans)
    return message


def decode_json(document: Any, max_spans: int) -> ExportTraceServiceRequest:
    """Return the ExportTraceServiceRequest in a parsed OTLP/JSON body.

    Raises TooManySpans, before any span is read, for a request over max_spans.
    """
    if not isinstance(document, dict):
        raise OtlpDecodeError('body must be a JSON object {"resourceSpans": [...]}')
    # Counted in the parsed JSON: protobuf's JSON reader is slow enough to matter.
    _check_span_count(sum(1 for _ in _json_spans(document)), max_spans)
    message = ExportTraceServiceRequest()
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


def as_text(value: Any) -> str:
    """Return an attribute value as text: strings as they are, other values as JSON."""
    if value is None or value is ABSENT:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def as_name(value: Any) -> str:
    """Return a name fit for a one-line field: control characters out, at most 200 characters."""
    return _CONTROL_CHARS.sub(" ", as_text(value)).strip()[:NAME_MAX]


_JSON_SCALAR = re.compile(
    r'-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?|true|false|null|"([^"\\]|\\.)*"', re.DOTALL
)


def json_decoded(value: Any, scalars: bool = False) -> Any:
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
