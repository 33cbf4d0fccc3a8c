"""POST /v1/traces with bad input: clear OTLP errors, and a request's valid spans kept.

Three tables: bodies refused as a whole (a google.rpc.Status in the request's encoding),
spans rejected one by one (counted in partial_success, the others stored), and awkward
attributes that must be stored made safe rather than crash anything.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import os
import socket
import time
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from traces_app.models import Invocation, OtlpProducer

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
SECOND = 10**9


def any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    return AnyValue(string_value=value)


def tool_span(**overrides: Any) -> Span:
    """Return a valid GenAI tool span with fresh ids; `attributes` adds to its attributes."""
    now = time.time_ns() - 60 * SECOND
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "calculator",
        "gen_ai.tool.call.arguments": '{"expression": "1+1"}',
        **overrides.pop("attributes", {}),
    }
    fields = {
        "trace_id": os.urandom(16),
        "span_id": os.urandom(8),
        "name": "execute_tool calculator",
        "start_time_unix_nano": now,
        "end_time_unix_nano": now + 3_000_000,
        "status": Status(code=Status.STATUS_CODE_OK),
        "attributes": [KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()],
        **overrides,
    }
    return Span(**fields)


def export_request(*spans: Span) -> ExportTraceServiceRequest:
    resource = Resource(
        attributes=[KeyValue(key="service.name", value=AnyValue(string_value="bad-input"))]
    )
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )


def as_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """Return a request as OTLP/JSON: protobuf's JSON mapping, but hex ids."""
    document = json_format.MessageToDict(request)
    for resource_spans in document["resourceSpans"]:
        for span in resource_spans["scopeSpans"][0]["spans"]:
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in span:
                    span[key] = base64.b64decode(span[key]).hex()
    return document


def is_stored(span: Span) -> bool:
    return Invocation.objects.filter(
        trace_id=span.trace_id.hex(), span_id=span.span_id.hex()
    ).exists()


@pytest.fixture
def post(otlp_url: str, make_key: Callable[..., str]) -> Callable[..., httpx.Response]:
    """Return a function that posts a body to /v1/traces with a report key."""
    key = make_key("report")

    def send(body: bytes, content_type: str | None = PROTOBUF, **headers: str) -> httpx.Response:
        sent = {"Authorization": f"Bearer {key}", **headers}
        if content_type:
            sent["Content-Type"] = content_type
        return httpx.post(otlp_url, content=body, headers=sent, timeout=30)

    return send


def status_of(response: httpx.Response) -> RpcStatus:
    """Return the google.rpc.Status an error response carries, in its own encoding."""
    if response.headers["Content-Type"] == PROTOBUF:
        return RpcStatus.FromString(response.content)
    return json_format.Parse(response.text, RpcStatus())


def valid_body() -> bytes:
    return export_request(tool_span()).SerializeToString()


# (body, content type, extra headers, status, words the Status message must contain)
BAD_BODIES = [
    pytest.param(
        lambda: valid_body()[:-9], PROTOBUF, {}, 400, "not a protobuf ExportTraceServiceRequest",
        id="truncated protobuf",
    ),
    pytest.param(
        lambda: b"\xff\xff\xff\xff", PROTOBUF, {}, 400, "not a protobuf", id="garbage protobuf"
    ),
    pytest.param(
        lambda: b'{"resourceSpans": [', JSON, {}, 400, "invalid JSON at line 1", id="bad JSON"
    ),
    pytest.param(lambda: b"[]", JSON, {}, 400, "must be a JSON object", id="JSON array"),
    pytest.param(
        lambda: b'{"resourceSpans": "all of them"}', JSON, {}, 400, "not an OTLP/JSON",
        id="JSON of the wrong shape",
    ),
    pytest.param(
        valid_body, "text/plain", {}, 415, "Content-Type must be application/x-protobuf or "
        "application/json, got text/plain", id="wrong content type",
    ),
    pytest.param(valid_body, None, {}, 415, "Content-Type must be", id="no content type"),
    pytest.param(
        valid_body, PROTOBUF, {"Content-Encoding": "br"}, 415, "use gzip, deflate or none",
        id="unsupported encoding",
    ),
    pytest.param(
        lambda: b"\x1f\x8b not gzip", PROTOBUF, {"Content-Encoding": "gzip"}, 400,
        "not valid gzip", id="bad gzip",
    ),
    pytest.param(
        lambda: gzip.compress(valid_body())[:-10], PROTOBUF, {"Content-Encoding": "gzip"}, 400,
        "gzip body is truncated", id="truncated gzip",
    ),
    pytest.param(
        lambda: gzip.compress(valid_body()), PROTOBUF, {"Content-Encoding": "deflate"}, 400,
        "not valid deflate", id="gzip sent as deflate",
    ),
    pytest.param(
        lambda: zlib.compress(valid_body())[:-6], PROTOBUF, {"Content-Encoding": "deflate"}, 400,
        "deflate body is truncated", id="truncated deflate",
    ),
    pytest.param(
        lambda: zlib.compress(valid_body()) + b"extra", PROTOBUF, {"Content-Encoding": "deflate"},
        400, "deflate body has 5 bytes after its end", id="deflate with trailing bytes",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("body", "content_type", "headers", "status", "words"), BAD_BODIES)
def test_it_refuses_a_bad_body_with_an_otlp_status(
    post, body, content_type, headers, status, words
):
    response = post(body(), content_type, **headers)

    assert response.status_code == status
    assert response.headers["Content-Type"] == (
        content_type if content_type in (PROTOBUF, JSON) else JSON
    )
    assert words in status_of(response).message
    assert not Invocation.objects.exists()


def test_it_refuses_a_body_over_the_limit(post, settings):
    settings.ARES_INGEST_MAX_BODY_BYTES = 2048
    body = export_request(*(tool_span() for _ in range(40))).SerializeToString()

    response = post(body)

    assert response.status_code == 413
    assert "larger than 2048 bytes" in status_of(response).message
    assert not Invocation.objects.exists()


@pytest.mark.parametrize(
    ("encoding", "compress"), [("gzip", gzip.compress), ("deflate", zlib.compress)]
)
def test_it_refuses_a_compression_bomb(post, settings, encoding, compress):
    settings.ARES_INGEST_MAX_BODY_BYTES = 64 * 1024

    response = post(compress(b"\0" * 10_000_000), PROTOBUF, **{"Content-Encoding": encoding})

    assert response.status_code == 413
    assert "decompressed body is larger" in status_of(response).message


@pytest.mark.parametrize(
    ("headers", "status", "words"),
    [
        pytest.param({}, 401, "authentication required", id="no key"),
        pytest.param({"Authorization": "Bearer ares_nope"}, 401, "invalid", id="unknown key"),
        pytest.param({"x-api-key": "ares_nope"}, 401, "invalid", id="unknown x-api-key"),
    ],
)
def test_it_refuses_a_request_without_a_valid_key(otlp_url, headers, status, words):
    response = httpx.post(
        otlp_url, content=valid_body(), headers={"Content-Type": PROTOBUF, **headers}
    )

    assert response.status_code == status
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="ares"'
    assert words in status_of(response).message
    assert not Invocation.objects.exists()


def test_it_refuses_a_key_without_the_report_scope(otlp_url, make_key):
    headers = {"Content-Type": PROTOBUF, "x-api-key": make_key("read")}

    response = httpx.post(otlp_url, content=valid_body(), headers=headers)

    assert response.status_code == 403
    assert "lacks the 'report' scope" in status_of(response).message


def test_it_answers_405_to_a_get(otlp_url):
    assert httpx.get(otlp_url).status_code == 405


def far_future() -> int:
    return (2500 - 1970) * 365 * 86400 * SECOND


# (span overrides, words the partial_success message must contain)
BAD_SPANS = [
    pytest.param({"trace_id": b""}, "traceId must be 16 bytes", id="no trace id"),
    pytest.param({"span_id": b""}, "spanId must be 8 bytes", id="no span id"),
    pytest.param({"trace_id": b"\x01" * 8}, "traceId must be 16 bytes", id="short trace id"),
    pytest.param({"trace_id": b"\0" * 16}, "must not be all zeros", id="all-zero trace id"),
    pytest.param({"parent_span_id": b"\x01\x02"}, "parentSpanId must be 8 bytes", id="bad parent"),
    pytest.param({"start_time_unix_nano": 0}, "startTimeUnixNano is missing", id="no start"),
    pytest.param({"end_time_unix_nano": 0}, "endTimeUnixNano is missing", id="no end"),
    pytest.param(
        {"start_time_unix_nano": time.time_ns(), "end_time_unix_nano": time.time_ns() - SECOND},
        "endTimeUnixNano is before startTimeUnixNano", id="ends before it starts",
    ),
    pytest.param(
        {"start_time_unix_nano": 1_700_000_000, "end_time_unix_nano": 1_700_000_100},
        "before 2000-01-01", id="seconds, not nanoseconds",
    ),
    pytest.param(
        {"start_time_unix_nano": far_future(), "end_time_unix_nano": far_future() + SECOND},
        "in the future", id="year 2500",
    ),
    pytest.param(
        {"start_time_unix_nano": time.time_ns() - 30 * 86400 * SECOND,
         "end_time_unix_nano": time.time_ns()},
        "latency_ms", id="a month long",
    ),
    pytest.param(
        {"attributes": {"gen_ai.tool.name": "t" * 500}}, "tool_name", id="500-character tool name"
    ),
    pytest.param(
        {"attributes": {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": -5}},
        "input_tokens", id="negative tokens",
    ),
    pytest.param(
        {"attributes": {"gen_ai.operation.name": "chat", "gen_ai.usage.output_tokens": "many"}},
        "output_tokens", id="tokens as words",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "words"), BAD_SPANS)
def test_it_rejects_a_bad_span_and_keeps_the_valid_ones(post, overrides, words):
    good, bad, also_good = tool_span(), tool_span(**overrides), tool_span()

    response = post(export_request(good, bad, also_good).SerializeToString())

    assert response.status_code == 200
    assert response.headers["Content-Type"] == PROTOBUF
    outcome = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert outcome.rejected_spans == 1
    assert outcome.error_message.startswith("1 of 3 spans rejected: span ")
    assert words in outcome.error_message
    assert is_stored(good) and is_stored(also_good)
    assert Invocation.objects.count() == 2


def test_it_rejects_a_json_span_whose_ids_are_not_hex(post):
    good, bad = tool_span(), tool_span()
    document = as_json(export_request(good, bad))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["traceId"] = "not hex at all"

    response = post(json.dumps(document).encode(), JSON)

    assert response.status_code == 200
    assert response.headers["Content-Type"] == JSON
    outcome = response.json()["partialSuccess"]
    assert outcome["rejectedSpans"] == "1"  # int64, a string in protobuf's JSON mapping
    assert "traceId must be 16 bytes" in outcome["errorMessage"]
    assert is_stored(good)


def test_it_says_how_many_more_were_rejected_than_it_lists(post):
    spans = [tool_span(span_id=b"") for _ in range(8)]

    response = post(export_request(*spans, tool_span()).SerializeToString())

    message = ExportTraceServiceResponse.FromString(response.content).partial_success.error_message
    assert message.startswith("8 of 9 spans rejected")
    assert message.endswith("; and 3 more")


def stored_arguments(post: Callable[..., httpx.Response], span: Span) -> Any:
    response = post(export_request(span).SerializeToString())
    assert response.status_code == 200
    assert ExportTraceServiceResponse.FromString(response.content) == ExportTraceServiceResponse()
    return Invocation.objects.get(span_id=span.span_id.hex()).arguments


def test_it_stores_huge_arguments_bounded(post, settings):
    arguments = json.dumps({"text": "x" * 1_000_000})

    stored = stored_arguments(post, tool_span(attributes={"gen_ai.tool.call.arguments": arguments}))

    assert stored["__truncated__"] is True
    assert stored["original_bytes"] > 1_000_000
    assert len(json.dumps(stored)) <= settings.ARES_PAYLOAD_MAX_BYTES


def test_it_stores_arguments_nested_too_deep_as_text(post):
    arguments = "[" * 50_000 + "]" * 50_000

    stored = stored_arguments(post, tool_span(attributes={"gen_ai.tool.call.arguments": arguments}))

    assert isinstance(stored, str)
    assert stored.startswith("[[[[")


def test_it_rejects_a_span_with_thousands_of_attributes_alone(post):
    hostile = tool_span(attributes={f"app.attribute.{index}": index for index in range(50_000)})
    good = tool_span()

    response = post(export_request(hostile, good).SerializeToString())

    assert response.status_code == 200
    outcome = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert outcome.rejected_spans == 1
    assert f"span {hostile.span_id.hex()} of trace " in outcome.error_message
    assert "span has more than 128 attribute values (ARES_OTLP_MAX_ATTRIBUTES" in (
        outcome.error_message
    )
    assert len(response.content) < 1000
    assert is_stored(good) and not is_stored(hostile)


def test_it_bounds_a_huge_error_message(post):
    failing = tool_span(status=Status(code=Status.STATUS_CODE_ERROR, message="boom " * 100_000))

    response = post(export_request(failing).SerializeToString())

    assert response.status_code == 200
    stored = Invocation.objects.get(span_id=failing.span_id.hex())
    assert (stored.status, stored.error_kind) == ("error", "tool_error")
    assert len(stored.error_message.encode()) < 4200
    assert "truncated" in stored.error_message


def test_it_accepts_an_empty_request(post):
    response = post(b"")

    assert response.status_code == 200
    assert ExportTraceServiceResponse.FromString(response.content) == ExportTraceServiceResponse()


def with_attributes(count: int, **overrides: Any) -> Span:
    """Return a valid tool span carrying exactly `count` attributes."""
    span = tool_span(**overrides)
    filler = [KeyValue(key=f"app.{index}", value=any_value(index)) for index in range(count)]
    span.attributes.extend(filler[: count - len(span.attributes)])
    assert len(span.attributes) == count
    return span


def test_it_takes_a_span_at_the_attribute_limit_and_rejects_one_over_it(post):
    at_limit, over = with_attributes(128), with_attributes(129)

    response = post(export_request(at_limit, over).SerializeToString())

    outcome = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert outcome.rejected_spans == 1
    assert over.span_id.hex() in outcome.error_message
    assert is_stored(at_limit) and not is_stored(over)


def test_it_counts_the_items_of_array_attributes_against_the_limit(post):
    items = AnyValue(array_value=ArrayValue(values=[any_value("x")] * 200))
    hostile = tool_span()
    hostile.attributes.append(KeyValue(key="app.list", value=items))
    nested = AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=items)]))
    also_hostile = tool_span()
    also_hostile.attributes.append(KeyValue(key="app.map", value=nested))

    response = post(export_request(hostile, also_hostile, tool_span()).SerializeToString())

    outcome = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert outcome.rejected_spans == 2
    assert outcome.error_message.count("more than 128 attribute values") == 2
    assert Invocation.objects.count() == 1


def test_it_follows_a_raised_attribute_limit(post, settings):
    settings.ARES_OTLP_MAX_ATTRIBUTES = 1000

    response = post(export_request(with_attributes(1000)).SerializeToString())

    assert ExportTraceServiceResponse.FromString(response.content) == ExportTraceServiceResponse()
    assert Invocation.objects.count() == 1


def resource_spans(service: str, *spans: Span, extra: int = 0) -> ResourceSpans:
    attributes = [KeyValue(key="service.name", value=any_value(service))]
    attributes += [KeyValue(key=f"host.{index}", value=any_value(index)) for index in range(extra)]
    return ResourceSpans(
        resource=Resource(attributes=attributes), scope_spans=[ScopeSpans(spans=spans)]
    )


def test_it_rejects_the_spans_of_a_resource_with_too_many_attributes_only(post):
    hostile, good = tool_span(), tool_span()
    body = ExportTraceServiceRequest(
        resource_spans=[resource_spans("noisy", hostile, extra=50_000), resource_spans("ok", good)]
    ).SerializeToString()

    response = post(body)

    outcome = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert outcome.rejected_spans == 1
    assert "its resource has more than 128 attribute values" in outcome.error_message
    assert is_stored(good) and not is_stored(hostile)


@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
def test_it_stores_the_spans_of_an_over_long_service_name_under_its_first_200(post, content_type):
    long_name = "svc-" + "x" * 246
    cut, other = tool_span(), tool_span()
    request = ExportTraceServiceRequest(
        resource_spans=[resource_spans(long_name, cut), resource_spans("short-service", other)]
    )
    body = request.SerializeToString() if content_type == PROTOBUF else json.dumps(as_json(request))

    response = post(body if isinstance(body, bytes) else body.encode(), content_type)

    assert response.status_code == 200
    if content_type == PROTOBUF:
        outcome = ExportTraceServiceResponse.FromString(response.content).partial_success
        rejected, message = outcome.rejected_spans, outcome.error_message
    else:
        outcome = response.json()["partialSuccess"]
        rejected, message = int(outcome.get("rejectedSpans", 0)), outcome["errorMessage"]
    assert rejected == 0
    assert message == (
        "resource 0: service.name is 250 characters, more than 200; its spans are stored "
        "under its first 200"
    )
    assert is_stored(cut) and is_stored(other)
    stored = Invocation.objects.get(span_id=cut.span_id.hex())
    assert stored.agent == long_name[:200]
    assert OtlpProducer.objects.filter(name=long_name[:200], tool_spans=1).exists()
    assert OtlpProducer.objects.filter(name="short-service", tool_spans=1).exists()


def many_spans(count: int) -> ExportTraceServiceRequest:
    spans = []
    for index in range(count):
        span = tool_span()
        span.span_id = (index + 1).to_bytes(8, "big")
        spans.append(span)
    return export_request(*spans)


@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
def test_it_refuses_a_request_over_the_span_limit_naming_it(post, content_type):
    request = many_spans(1001)
    body = (
        request.SerializeToString() if content_type == PROTOBUF
        else json.dumps(as_json(request)).encode()
    )  # fmt: skip

    response = post(body, content_type)

    assert response.status_code == 413
    assert response.headers["Content-Type"] == content_type
    status = status_of(response)
    assert status.code == 3  # INVALID_ARGUMENT: not worth retrying as is
    assert status.message.startswith(
        "1,001 spans in one request; the limit is 1,000 (ARES_OTLP_MAX_SPANS): export smaller "
        "batches"
    )
    assert not Invocation.objects.exists()


def test_it_takes_a_request_at_the_span_limit(post):
    response = post(many_spans(1000).SerializeToString())

    assert response.status_code == 200
    assert ExportTraceServiceResponse.FromString(response.content) == ExportTraceServiceResponse()
    assert Invocation.objects.count() == 1000


def test_it_follows_a_lowered_span_limit(post, settings):
    settings.ARES_OTLP_MAX_SPANS = 3

    refused = post(many_spans(4).SerializeToString())
    taken = post(many_spans(3).SerializeToString())

    assert refused.status_code == 413
    assert "4 spans in one request; the limit is 3" in status_of(refused).message
    assert taken.status_code == 200


def test_it_refuses_a_declared_length_over_the_limit_before_reading(
    live_server, make_key, settings
):
    settings.ARES_INGEST_MAX_BODY_BYTES = 2048
    host, port = urlsplit(live_server.url).hostname, urlsplit(live_server.url).port
    head = (
        "POST /v1/traces HTTP/1.1\r\n"
        f"Host: {host}\r\nAuthorization: Bearer {make_key('report')}\r\n"
        f"Content-Type: {PROTOBUF}\r\nContent-Length: 5000000\r\nConnection: close\r\n\r\n"
    )

    # Only the headers are sent: the answer must come from the declared length alone.
    with socket.create_connection((host, port), timeout=10) as connection:
        connection.sendall(head.encode())
        answer = http.client.HTTPResponse(connection)
        answer.begin()
        body = answer.read()

    assert answer.status == 413
    assert (
        "larger than 2048 bytes (ARES_INGEST_MAX_BODY_BYTES)" in RpcStatus.FromString(body).message
    )
