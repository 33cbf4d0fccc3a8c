"""POST /api/v1/invocations with bad input: a clear 4xx naming the problem, nothing stored.

Three tables: bodies refused as a whole, items rejected one by one, and awkward
payloads that must be stored (made safe) rather than crash the database.
"""

from __future__ import annotations

import gzip
import json
import random
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from traces_app.models import Invocation, Trace

JSON = {"Content-Type": "application/json"}
GZIP = {**JSON, "Content-Encoding": "gzip"}
MISSING = object()


def batch(span: Callable[..., dict], **overrides: Any) -> bytes:
    """Return a one-span batch body with the span's fields overridden."""
    return json.dumps({"invocations": [span(**overrides)]}).encode()


def with_raw_field(span: Callable[..., dict], field: str, raw_value: str) -> bytes:
    """Return a one-span batch body whose `field` holds raw, possibly non-JSON, text."""
    text = batch(span, **{field: "PLACEHOLDER"}).decode()
    return text.replace('"PLACEHOLDER"', raw_value).encode()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def ago(**delta: float) -> str:
    return (datetime.now(UTC) - timedelta(**delta)).isoformat()


def ahead(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


# (body builder, headers, status, words the answer must contain)
BAD_BODIES = [
    pytest.param(
        lambda span: batch(span)[:-3] + b",]}",
        JSON,
        400,
        "invalid JSON at line 1 column",
        id="malformed JSON says where",
    ),
    pytest.param(
        lambda span: b'{\n"invocations":\n[{"trace_id": }]}',
        JSON,
        400,
        "line 3 column 15",
        id="malformed JSON on line 3",
    ),
    pytest.param(
        lambda span: b'{"invocations": [{"agent": "caf\xe9"}]}',
        JSON,
        400,
        "not UTF-8: byte 0xe9 at offset 31",
        id="latin-1 bytes",
    ),
    pytest.param(lambda span: b"", JSON, 422, "a JSON object body is required", id="empty body"),
    pytest.param(lambda span: b"  \n\t ", JSON, 400, "body is empty", id="whitespace body"),
    pytest.param(
        lambda span: with_raw_field(span, "latency_ms", "NaN"),
        JSON,
        400,
        "NaN is not valid JSON",
        id="NaN",
    ),
    pytest.param(
        lambda span: with_raw_field(span, "cost_usd", "Infinity"),
        JSON,
        400,
        "Infinity is not valid JSON",
        id="Infinity",
    ),
    pytest.param(
        lambda span: with_raw_field(span, "arguments", "-Infinity"),
        JSON,
        400,
        "-Infinity is not valid JSON",
        id="-Infinity in arguments",
    ),
    pytest.param(
        lambda span: batch(span),
        {"Content-Type": "text/plain"},
        415,
        "Content-Type must be application/json, got text/plain",
        id="text/plain",
    ),
    pytest.param(
        lambda span: batch(span),
        {"Content-Type": "application/x-www-form-urlencoded"},
        415,
        "must be application/json",
        id="form content type",
    ),
    pytest.param(
        lambda span: batch(span),
        {"Content-Type": ""},
        415,
        "must be application/json, got none",
        id="no content type",
    ),
    pytest.param(
        lambda span: batch(span),
        {**JSON, "Content-Encoding": "br"},
        415,
        "Content-Encoding 'br' is not supported",
        id="brotli encoding",
    ),
    pytest.param(
        lambda span: zlib.compress(b"\x00" * (9 * 1024 * 1024)),
        {**JSON, "Content-Encoding": "deflate"},
        413,
        "decompressed body is larger than 8388608 bytes",
        id="deflate bomb",
    ),
    pytest.param(
        lambda span: batch(span), GZIP, 400, "body is not valid gzip", id="gzip header, plain body"
    ),
    pytest.param(
        lambda span: gzip.compress(batch(span))[:-12],
        GZIP,
        400,
        "gzip body is truncated",
        id="truncated gzip",
    ),
    pytest.param(
        lambda span: gzip.compress(batch(span))[:10] + b"\x00garbage" * 8,
        GZIP,
        400,
        "body is not valid gzip",
        id="corrupt gzip",
    ),
    pytest.param(
        lambda span: gzip.compress(b"\x00" * (9 * 1024 * 1024)),
        GZIP,
        413,
        "decompressed body is larger than 8388608 bytes",
        id="gzip bomb",
    ),
    pytest.param(
        lambda span: json.dumps({"invocations": [span(arguments="x" * 9 * 1024 * 1024)]}).encode(),
        JSON,
        413,
        "request body is larger than 8388608 bytes",
        id="too-large body",
    ),
    pytest.param(
        lambda span: json.dumps({"invocations": [span() for _ in range(1001)]}).encode(),
        JSON,
        413,
        "1001 items in one batch; the limit is 1000",
        id="too many items",
    ),
    pytest.param(
        lambda span: b'{"invocations": []}', JSON, 422, "invocations is empty", id="empty list"
    ),
    pytest.param(
        lambda span: json.dumps([span()]).encode(),
        JSON,
        422,
        'body must be an object {"invocations": [...]}',
        id="bare list",
    ),
    pytest.param(lambda span: b"null", JSON, 422, "body must be an object", id="null"),
    pytest.param(lambda span: b'"spans"', JSON, 422, "body must be an object", id="string"),
    pytest.param(lambda span: b"{}", JSON, 422, "body must be an object", id="no invocations"),
    pytest.param(
        lambda span: json.dumps({"invocations": [span()], "agent": "x"}).encode(),
        JSON,
        422,
        "unknown top-level field(s): agent",
        id="unknown top-level field",
    ),
    pytest.param(
        lambda span: json.dumps({"invocations": span()}).encode(),
        JSON,
        422,
        "invocations must be a list, got dict",
        id="invocations not a list",
    ),
    pytest.param(
        lambda span: with_raw_field(span, "arguments", nested(150)),
        JSON,
        400,
        "nested deeper than 100 levels",
        id="arguments nested 150 deep",
    ),
    pytest.param(
        lambda span: with_raw_field(span, "result", nested(990)),
        JSON,
        400,
        "nested deeper than 100 levels",
        id="result nested 990 deep",
    ),
    pytest.param(
        lambda span: with_raw_field(span, "arguments", nested(100_000)),
        JSON,
        400,
        "nested deeper than 100 levels",
        id="arguments nested 100000 deep",
    ),
    pytest.param(
        lambda span: with_raw_field(span, "tool_name", nested(990)),
        JSON,
        400,
        "nested deeper than 100 levels",
        id="a name nested 990 deep",
    ),
]


@pytest.mark.parametrize(("build", "headers", "status", "words"), BAD_BODIES)
def test_it_refuses_a_bad_body_saying_why(api, span, problem, build, headers, status, words):
    response = api.post("/invocations", content=build(span), headers=headers)

    assert response.status_code == status
    assert response.headers["Content-Type"].startswith("application/json")
    assert words in problem(response)
    assert not Invocation.objects.exists()
    assert not Trace.objects.exists()


# (field overrides, field named in the error, words of the reason)
BAD_ITEMS = [
    pytest.param({"trace_id": MISSING}, "trace_id", "Field required", id="no trace_id"),
    pytest.param({"span_id": MISSING}, "span_id", "Field required", id="no span_id"),
    pytest.param({"status": MISSING}, "status", "Field required", id="no status"),
    pytest.param({"started_at": MISSING}, "started_at", "Field required", id="no started_at"),
    pytest.param({"latency_ms": MISSING}, "latency_ms", "Field required", id="no latency_ms"),
    pytest.param({"trace_id": "abc123"}, "trace_id", "should match pattern", id="short trace_id"),
    pytest.param({"trace_id": "g" * 32}, "trace_id", "should match pattern", id="trace_id not hex"),
    pytest.param({"trace_id": "0" * 32}, "trace_id", "must not be all zeros", id="zero trace_id"),
    pytest.param({"trace_id": 12345}, "trace_id", "should be a valid string", id="trace_id int"),
    pytest.param({"span_id": "a" * 17}, "span_id", "should match pattern", id="long span_id"),
    pytest.param({"span_id": "0" * 16}, "span_id", "must not be all zeros", id="zero span_id"),
    pytest.param(
        {"parent_span_id": "xyz"}, "parent_span_id", "should match pattern", id="bad parent id"
    ),
    pytest.param(
        {"parent_span_id": "0" * 16}, "parent_span_id", "must not be all zeros", id="zero parent"
    ),
    pytest.param({"started_at": ahead(days=2)}, "started_at", "in the future", id="two days ahead"),
    pytest.param(
        {"started_at": "1999-12-31T23:59:59Z"}, "started_at", "before 2000", id="before 2000"
    ),
    pytest.param(
        {"started_at": "2026-01-31T12:00:00"}, "started_at", "needs a time zone", id="naive time"
    ),
    pytest.param(
        {"started_at": "last tuesday"}, "started_at", "valid datetime", id="time not a date"
    ),
    pytest.param({"latency_ms": -0.5}, "latency_ms", "greater than or equal to 0", id="neg ms"),
    pytest.param(
        {"latency_ms": 8 * 24 * 3600 * 1000}, "latency_ms", "less than or equal", id="8-day call"
    ),
    pytest.param({"latency_ms": "fast"}, "latency_ms", "valid number", id="latency a word"),
    pytest.param({"latency_ms": "NaN"}, "latency_ms", "finite number", id="latency 'NaN'"),
    pytest.param(
        {"input_tokens": -1}, "input_tokens", "greater than or equal to 0", id="neg input tokens"
    ),
    pytest.param(
        {"output_tokens": -7}, "output_tokens", "greater than or equal", id="neg output tokens"
    ),
    pytest.param(
        {"result_tokens": 2**31}, "result_tokens", "less than or equal", id="huge result tokens"
    ),
    pytest.param({"input_tokens": 1.5}, "input_tokens", "valid integer", id="fractional tokens"),
    pytest.param({"cost_usd": -0.01}, "cost_usd", "greater than or equal to 0", id="neg cost"),
    pytest.param({"attempt": 0}, "attempt", "greater than or equal to 1", id="attempt 0"),
    pytest.param(
        {"status": "maybe"}, "status", "Input should be 'ok', 'error' or 'stopped'", id="status"
    ),
    pytest.param({"kind": "robot"}, "kind", "Input should be 'tool'", id="unknown kind"),
    pytest.param({"chosen_by": "human"}, "chosen_by", "Input should be 'llm'", id="chosen_by"),
    pytest.param({"ran_on": "mars"}, "ran_on", "should match pattern", id="ran_on"),
    pytest.param(
        {"error_kind": "Time Out!", "status": "error"},
        "error_kind",
        "should match pattern",
        id="error_kind not a slug",
    ),
    pytest.param(
        {"error_kind": "timeout", "status": "ok"},
        "error_kind",
        "error_kind is set but status is 'ok'",
        id="error_kind with status ok",
    ),
    pytest.param(
        {"tool_name": ""},
        "tool_name",
        "tool_name is required when kind is 'tool'",
        id="tool span without tool_name",
    ),
    pytest.param(
        {"tool_name": MISSING},
        "tool_name",
        "tool_name is required when kind is 'tool'",
        id="tool span with no tool_name key",
    ),
    pytest.param(
        {"tool_name": "t" * 201}, "tool_name", "at most 200 characters", id="long tool_name"
    ),
    pytest.param(
        {"tool_name": "calc\nrm -rf"}, "tool_name", "should match pattern", id="newline in name"
    ),
    pytest.param({"agent": "bot\x00"}, "agent", "should match pattern", id="NUL in agent"),
    pytest.param(
        {"agent": "bot\ud800"},
        "agent",
        "unable to parse raw data as a unicode string",
        id="lone surrogate in agent",
    ),
    pytest.param(
        {"tool_name": "\udfffcalc"},
        "tool_name",
        "unable to parse raw data as a unicode string",
        id="lone surrogate in name",
    ),
    pytest.param({"tool_name": ["calc"]}, "tool_name", "valid string", id="tool_name a list"),
    pytest.param({"request_text": 42}, "request_text", "valid string", id="request_text int"),
    pytest.param({"colour": "blue"}, "colour", "unknown field", id="unknown item field"),
    pytest.param({"a\ud800": 1}, "(item)", "unicode string", id="surrogate field name"),
    pytest.param({"trace_id": "\ud800" * 32}, "trace_id", "unicode string", id="surrogate id"),
]


@pytest.mark.parametrize(("overrides", "field", "words"), BAD_ITEMS)
def test_it_rejects_a_bad_item_naming_the_field(api, span, overrides, field, words):
    item = span(**{key: value for key, value in overrides.items() if value is not MISSING})
    for key in [key for key, value in overrides.items() if value is MISSING]:
        del item[key]
    # ensure_ascii keeps lone surrogates as \ud800 escapes, as a JSON encoder sends them.
    body = json.dumps({"invocations": [item]}, ensure_ascii=True)

    response = api.post("/invocations", content=body, headers=JSON)

    assert response.status_code == 422
    errors = response.json()["items"][0]["errors"]
    assert any(e["field"] == field and words in e["reason"] for e in errors), errors
    assert not Invocation.objects.exists()
    assert not Trace.objects.exists()


@pytest.mark.parametrize(
    ("item", "words"),
    [
        pytest.param("a span", "valid dictionary", id="string"),
        pytest.param(None, "valid dictionary", id="null"),
        pytest.param([1, 2], "valid dictionary", id="list"),
    ],
)
def test_it_rejects_an_item_that_is_not_an_object(report, item, words):
    response = report(item)

    assert response.status_code == 422
    assert response.json()["items"][0]["errors"][0]["field"] == "(item)"
    assert words in response.json()["items"][0]["errors"][0]["reason"]


# Text a JSON body can carry but databases refuse (NUL, lone surrogates): stored made safe.
# (field, value sent, what the stored row holds)
AWKWARD_PAYLOADS = [
    pytest.param("arguments", {"q": "a\x00b"}, {"q": "a\ufffdb"}, id="NUL in arguments"),
    pytest.param("arguments", {"k\x00": 1}, {"k\ufffd": 1}, id="NUL in an arguments key"),
    pytest.param("result", "half \ud83d", "half \ufffd", id="lone surrogate in result"),
    pytest.param("result", ["\udc00", "ok"], ["\ufffd", "ok"], id="lone low surrogate"),
    pytest.param("arguments", {"\ud800": "x"}, {"\ufffd": "x"}, id="surrogate key"),
    pytest.param(
        "error_message", "boom\x00\ud800", "boom\ufffd\ufffd", id="NUL and surrogate in error"
    ),
    pytest.param("result", "emoji 🎉 kept", "emoji 🎉 kept", id="real astral characters"),
    pytest.param("arguments", {"n": 10**30}, {"n": 10**30}, id="big integer"),
]


@pytest.mark.parametrize(("field", "sent", "stored"), AWKWARD_PAYLOADS)
def test_it_stores_awkward_text_made_safe(api, span, field, sent, stored):
    extra = {"status": "error"} if field == "error_message" else {}
    body = json.dumps({"invocations": [span(**{field: sent}, **extra)]}, ensure_ascii=True)

    response = api.post("/invocations", content=body, headers=JSON)

    assert response.status_code == 200, response.text
    assert getattr(Invocation.objects.get(), field) == stored


def test_it_stores_a_request_text_with_nul_and_surrogates_made_safe(api, span):
    body = json.dumps({"invocations": [span(request_text="sum\x00 \ud800")]}, ensure_ascii=True)

    response = api.post("/invocations", content=body, headers=JSON)

    assert response.status_code == 200, response.text
    assert Trace.objects.get().request_text == "sum\ufffd \ufffd"


def test_it_stores_arguments_nested_within_the_limit(report, span):
    deep: Any = "bottom"
    for _ in range(90):
        deep = {"d": deep}

    response = report(span(arguments=deep))

    assert response.status_code == 200
    assert Invocation.objects.get().arguments == deep


def test_it_bounds_a_huge_argument_string_with_a_marker(report, span):
    response = report(span(arguments="x" * 1_000_000))

    assert response.status_code == 200
    stored = Invocation.objects.get().arguments
    assert stored.startswith("x" * 16384)
    assert stored.endswith("…[truncated 983616 of 1000000 bytes]")


def test_it_bounds_a_huge_result_object_with_a_truncation_record(report, span):
    response = report(span(result={"rows": ["row"] * 200_000}))

    assert response.status_code == 200
    stored = Invocation.objects.get().result
    assert stored["__truncated__"] is True
    assert stored["original_bytes"] == len(
        json.dumps({"rows": ["row"] * 200_000}, separators=(",", ":"))
    )
    assert stored["preview"].startswith('{"rows":["row","row"')
    assert len(stored["preview"].encode()) <= 16 * 1024


def test_it_bounds_a_huge_error_message_with_a_marker(report, span):
    response = report(span(status="error", error_message="e" * 100_000))

    assert response.status_code == 200
    stored = Invocation.objects.get().error_message
    assert stored == "e" * 4096 + "…[truncated 95904 of 100000 bytes]"


def test_it_bounds_a_huge_request_text_with_a_marker(report, span):
    response = report(span(request_text="r" * 50_000))

    assert response.status_code == 200
    assert Trace.objects.get().request_text.endswith("…[truncated 33616 of 50000 bytes]")


def test_it_never_answers_500_to_a_stream_of_random_bytes(api):
    for seed in range(20):
        body = random.Random(seed).randbytes(64 + seed * 16)
        response = api.post("/invocations", content=body, headers=JSON)
        assert response.status_code == 400, (body, response.text)
    assert not Invocation.objects.exists()


def test_it_refuses_a_body_over_a_lowered_limit(api, span, settings, problem):
    settings.ARES_INGEST_MAX_BODY_BYTES = 2048
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048

    response = api.post("/invocations", json={"invocations": [span() for _ in range(8)]})

    assert response.status_code == 413
    assert "larger than 2048 bytes" in problem(response)
    assert not Invocation.objects.exists()


def test_it_refuses_more_items_than_a_lowered_limit(api, span, settings, problem):
    settings.ARES_INGEST_MAX_ITEMS = 3

    response = api.post("/invocations", json={"invocations": [span() for _ in range(4)]})

    assert response.status_code == 413
    assert "4 items in one batch; the limit is 3" in problem(response)


def test_it_refuses_an_item_with_thousands_of_unknown_keys_listing_the_first(api, span):
    item = {**span(), **{f"app.key.{index}": index for index in range(50_000)}}

    response = api.post("/invocations", json={"invocations": [item, span()]})

    assert response.status_code == 200
    assert len(response.content) < 10_000
    rejected, accepted = response.json()["items"]
    assert accepted["status"] == "accepted"
    assert rejected["status"] == "rejected"
    assert rejected["errors"][:2] == [
        {"field": "app.key.0", "reason": "unknown field"},
        {"field": "app.key.1", "reason": "unknown field"},
    ]
    assert len(rejected["errors"]) == 21
    assert rejected["errors"][-1] == {
        "field": "(item)",
        "reason": "and 49,980 more problems, not listed",
    }


def test_it_lists_at_most_twenty_problems_of_an_item(api, span):
    item = span(**{f"unknown_{index}": 1 for index in range(5)}, latency_ms=-1, status="maybe")
    item.update({"coercions": [1] * 30})

    response = api.post("/invocations", json={"invocations": [item]})

    assert response.status_code == 422
    errors = response.json()["items"][0]["errors"]
    assert len(errors) == 21
    assert (
        errors[-1]["reason"].startswith("and ")
        and "more problems, not listed" in errors[-1]["reason"]
    )


def test_it_lists_at_most_twenty_problems_of_a_score(api, make_key):
    api.headers["Authorization"] = f"Bearer {make_key('score')}"
    score = {
        "name": "result_correct",
        "value": True,
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    }
    score.update({f"extra_{index}": 1 for index in range(1_000)})

    response = api.post("/scores", json={"scores": [score]})

    assert response.status_code == 422
    errors = response.json()["items"][0]["errors"]
    assert len(errors) == 21
    assert errors[-1] == {"field": "(item)", "reason": "and 980 more problems, not listed"}


def test_it_lists_at_most_twenty_problems_of_a_request(live_server, make_key):
    messages = [{"role": "robot", "content": "hi"} for _ in range(200)]

    response = httpx.post(
        f"{live_server.url}/api/v1/chat",
        json={"agent": "nobody", "messages": messages},
        headers={"Authorization": f"Bearer {make_key('chat')}"},
    )

    assert response.status_code == 422
    body = response.json()
    assert len(body["errors"]) == 21
    assert body["errors"][-1] == {
        "field": "(request)",
        "reason": "and 180 more problems, not listed",
    }
    assert body["detail"].endswith("(request): and 180 more problems, not listed")
