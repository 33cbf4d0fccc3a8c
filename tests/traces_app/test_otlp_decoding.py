"""Decoding OTLP requests and attribute values, with limits passed in: no database, no settings."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from traces_app.ingest.otlp_decoding import (
    OtlpDecodeError,
    TooManyAttributes,
    TooManySpans,
    as_name,
    attribute_dict,
    decode_json,
    decode_protobuf,
    json_decoded,
)

TRACE_ID, SPAN_ID = "5b8aa5a2d2c872e8321cf37308d69df2", "051581bf3cb55c13"


def document(*span_ids: str) -> dict:
    spans = [{"traceId": TRACE_ID, "spanId": span_id, "name": "s"} for span_id in span_ids]
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def test_it_reads_hex_ids_of_an_otlp_json_document() -> None:
    request = decode_json(document(SPAN_ID), max_spans=10)

    [span] = request.resource_spans[0].scope_spans[0].spans
    assert (span.trace_id.hex(), span.span_id.hex()) == (TRACE_ID, SPAN_ID)


def test_it_refuses_more_spans_than_the_limit_before_reading_them() -> None:
    raw = decode_json(document(SPAN_ID, "051581bf3cb55c14"), max_spans=10).SerializeToString()

    with pytest.raises(TooManySpans):
        decode_protobuf(raw, max_spans=1)
    with pytest.raises(TooManySpans):
        decode_json(document(SPAN_ID, "051581bf3cb55c14"), max_spans=1)


def test_it_refuses_a_body_that_is_not_a_request() -> None:
    with pytest.raises(OtlpDecodeError):
        decode_json([1, 2], max_spans=10)
    with pytest.raises(OtlpDecodeError):
        decode_protobuf(b"\xff\xff not protobuf", max_spans=10)
    assert decode_protobuf(ExportTraceServiceRequest().SerializeToString(), 10).resource_spans == []


def test_it_reads_attribute_values_as_plain_values_keeping_a_repeated_keys_first() -> None:
    pairs = [
        KeyValue(key="n", value=AnyValue(int_value=3)),
        KeyValue(key="n", value=AnyValue(int_value=4)),
        KeyValue(key="raw", value=AnyValue(bytes_value=b"\x01\xff")),
        KeyValue(key="list", value=AnyValue(array_value=ArrayValue(values=[
            AnyValue(string_value="a"), AnyValue(bool_value=True)]))),
        KeyValue(key="map", value=AnyValue(kvlist_value=KeyValueList(values=[
            KeyValue(key="x", value=AnyValue(double_value=1.5))]))),
    ]  # fmt: skip

    assert attribute_dict(pairs) == {"n": 3, "raw": "01ff", "list": ["a", True], "map": {"x": 1.5}}
    with pytest.raises(TooManyAttributes):
        attribute_dict(pairs, limit=6)  # 5 pairs, 2 list items, 1 map item


@pytest.mark.parametrize(
    ("value", "scalars", "decoded"),
    [
        ('{"a": [1]}', False, {"a": [1]}),
        ("42", False, "42"),
        ("42", True, 42),
        ('"quoted"', True, "quoted"),
        ("[" * 101 + "]" * 101, False, "[" * 101 + "]" * 101),  # deeper than bodies accept
        ("not JSON", True, "not JSON"),
    ],
)
def test_it_decodes_json_sent_as_text(value, scalars, decoded) -> None:
    assert json_decoded(value, scalars=scalars) == decoded


def test_it_makes_a_name_fit_one_line() -> None:
    assert as_name("poll\nqueue " + "x" * 300) == "poll queue " + "x" * 189
