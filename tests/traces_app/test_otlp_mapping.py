"""Reading OTLP spans: which dialect wins, what each attribute becomes. No database needed."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from traces_app.ingest.otlp_dialects import error_kind_slug
from traces_app.ingest.otlp_spans import read_span, read_spans


def value(plain: Any) -> AnyValue:
    """Return a plain value as an OTLP AnyValue (dicts as kvlists, lists as arrays)."""
    if isinstance(plain, bool):
        return AnyValue(bool_value=plain)
    if isinstance(plain, int):
        return AnyValue(int_value=plain)
    if isinstance(plain, float):
        return AnyValue(double_value=plain)
    if isinstance(plain, bytes):
        return AnyValue(bytes_value=plain)
    if isinstance(plain, list):
        return AnyValue(array_value=ArrayValue(values=[value(item) for item in plain]))
    if isinstance(plain, dict):
        pairs = [KeyValue(key=key, value=value(item)) for key, item in plain.items()]
        return AnyValue(kvlist_value=KeyValueList(values=pairs))
    return AnyValue(string_value=plain)


def span(attributes: dict[str, Any], name: str = "a span", **fields: Any) -> Span:
    now = time.time_ns() - 10**9
    return Span(
        trace_id=os.urandom(16),
        span_id=os.urandom(8),
        name=name,
        start_time_unix_nano=now,
        end_time_unix_nano=now + 2_000_000,
        attributes=[KeyValue(key=key, value=value(item)) for key, item in attributes.items()],
        **fields,
    )


RESOURCE = {"service.name": "mapper"}


@pytest.mark.parametrize(
    ("attributes", "dialect", "kind"),
    [
        pytest.param(
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
             "openinference.span.kind": "TOOL"},
            "genai", "tool", id="GenAI first",
        ),
        pytest.param(
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
             "traceloop.association.properties.session_id": "s"},
            "openllmetry", "llm", id="OpenLLMetry's LLM span in GenAI's words",
        ),
        pytest.param(
            {"openinference.span.kind": "TOOL", "tool.name": "t", "gen_ai.system": "openai"},
            "openinference", "tool", id="OpenInference before stray gen_ai attributes",
        ),
        pytest.param(
            {"traceloop.span.kind": "tool", "traceloop.entity.name": "t"},
            "openllmetry", "tool", id="OpenLLMetry tool",
        ),
        pytest.param(
            {"gen_ai.system": "openai", "llm.request.type": "chat",
             "gen_ai.request.model": "gpt-4o"},
            "openllmetry", "llm", id="OpenLLMetry LLM call",
        ),
        pytest.param(
            {"gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 5},
            "genai", "llm", id="GenAI LLM call without an operation name",
        ),
        pytest.param(
            {"gen_ai.operation.name": "generate_content"}, "genai", "llm", id="generate_content"
        ),
        pytest.param({"gen_ai.operation.name": "invoke_agent"}, "genai", "agent", id="agent"),
        pytest.param(
            {"openinference.span.kind": "RETRIEVER"}, "openinference", "other", id="retriever"
        ),
        pytest.param({"http.request.method": "GET"}, "otel", "other", id="no dialect"),
    ],
)  # fmt: skip
def test_it_reads_the_first_dialect_a_span_speaks(attributes, dialect, kind):
    reading = read_span(span(attributes), RESOURCE)

    assert (reading.dialect, reading.item.kind) == (dialect, kind)


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("TimeoutError", "timeout_error"),
        ("java.net.SocketTimeoutException", "socket_timeout_exception"),
        ("500", "error_500"),
        ("_OTHER", "other"),
        ("rate limited!", "rate_limited"),
        ("HTTPError", "httperror"),
        ("", ""),
    ],
)
def test_it_turns_an_error_type_into_an_error_kind(error_type, kind):
    assert error_kind_slug(error_type) == kind


def test_it_reads_the_error_of_an_exception_event():
    failing = span(
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch"},
        status=Status(code=Status.STATUS_CODE_ERROR),
        events=[
            Span.Event(
                name="exception",
                attributes=[
                    KeyValue(key="exception.type", value=value("ConnectionRefusedError")),
                    KeyValue(key="exception.message", value=value("[Errno 111] refused")),
                ],
            )
        ],
    )

    item = read_span(failing, RESOURCE).item

    assert (item.status, item.error_kind, item.error_message) == (
        "error", "connection_refused_error", "[Errno 111] refused",
    )  # fmt: skip


def test_it_takes_structured_arguments_as_they_are():
    arguments = {"query": "otlp", "filters": {"year": 2026}, "tags": ["a", "b"]}

    item = read_span(
        span({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
              "gen_ai.tool.call.arguments": arguments}),
        RESOURCE,
    ).item  # fmt: skip

    assert item.arguments == arguments


def test_it_reports_a_schema_in_tool_parameters_as_missing_arguments():
    schema = '{"type": "object", "properties": {"q": {"type": "string"}}}'

    reading = read_span(
        span({"openinference.span.kind": "TOOL", "tool.name": "search",
              "tool.parameters": schema}, status=Status(code=Status.STATUS_CODE_OK)),
        RESOURCE,
    )  # fmt: skip

    assert reading.item.arguments is None
    assert reading.missing == ("arguments",)


def test_it_names_a_generic_span_after_it_without_control_characters():
    reading = read_span(span({}, name="poll\nqueue " + "x" * 300), RESOURCE)

    assert reading.item.tool_name.startswith("poll queue xxx")
    assert len(reading.item.tool_name) == 200
    assert reading.missing == ()  # only tool spans are reported


def test_it_takes_the_agent_and_session_from_the_span_before_the_resource():
    resource = {"service.name": "svc", "gen_ai.agent.name": "from-resource", "session.id": "r"}

    item = read_span(
        span({"gen_ai.operation.name": "chat", "gen_ai.agent.name": "from-span",
              "gen_ai.conversation.id": "conv-1"}),
        resource,
    ).item  # fmt: skip

    assert (item.agent, item.session_id) == ("from-span", "conv-1")


def test_it_ends_the_walk_to_an_agent_at_a_parent_loop():
    first, second = span({}, name="first"), span({}, name="second")
    second.trace_id = first.trace_id
    first.parent_span_id, second.parent_span_id = second.span_id, first.span_id
    itself = span({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"})
    itself.parent_span_id = itself.span_id

    readings = read_spans([(first, RESOURCE), (second, RESOURCE), (itself, RESOURCE)])

    assert [reading.item.agent for reading in readings] == ["mapper"] * 3


@pytest.mark.parametrize(
    ("output", "result"),
    [
        ('"It is 21\\u00b0C and \\"sunny\\""', 'It is 21°C and "sunny"'),
        ("3", 3),
        ("null", None),
        ('{"temperature": 21}', {"temperature": 21}),
        ("not JSON at all", "not JSON at all"),
    ],
)
def test_it_decodes_an_openllmetry_output_of_any_json_type(output, result):
    reading = read_span(
        span({"traceloop.span.kind": "tool", "traceloop.entity.name": "t",
              "traceloop.entity.output": output}),
        RESOURCE,
    )  # fmt: skip

    assert reading.item.result == result


def test_it_keeps_a_genai_text_result_that_is_not_json_as_text():
    reading = read_span(
        span({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
              "gen_ai.tool.call.result": 'It is "sunny"'}),
        RESOURCE,
    )  # fmt: skip

    assert reading.item.result == 'It is "sunny"'


def langchain_message(content: str, status: str) -> str:
    data = {"content": content, "type": "tool", "name": "t", "tool_call_id": "call_7",
            "status": status}  # fmt: skip
    return json.dumps({"type": "tool", "data": data})


def test_it_unwraps_a_langchain_tool_message_with_its_call_id_and_status():
    ok = read_span(
        span({"openinference.span.kind": "TOOL", "tool.name": "t", "input.value": "{}",
              "output.value": langchain_message("It is sunny", "success")}),
        RESOURCE,
    ).item  # fmt: skip
    failed = read_span(
        span({"openinference.span.kind": "TOOL", "tool.name": "t", "input.value": "{}",
              "output.value": langchain_message("Error: no such city", "error")}),
        RESOURCE,
    ).item  # fmt: skip

    assert (ok.result, ok.tool_call_id, ok.status) == ("It is sunny", "call_7", "ok")
    assert (failed.result, failed.status, failed.error_kind) == (
        "Error: no such city",
        "error",
        "tool_error",
    )


def test_it_reads_the_request_text_from_each_dialects_input_messages():
    genai = read_span(
        span({"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(
            [{"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
             {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}])}),
        RESOURCE,
    ).item  # fmt: skip
    openinference = read_span(
        span({"openinference.span.kind": "LLM",
              "llm.input_messages.0.message.role": "system",
              "llm.input_messages.0.message.content": "Be brief.",
              "llm.input_messages.1.message.role": "user",
              "llm.input_messages.1.message.content": "Weather in Paris?"}),
        RESOURCE,
    ).item  # fmt: skip

    assert genai.request_text == openinference.request_text == "Weather in Paris?"


def test_it_reads_the_tool_type_and_description():
    item = read_span(
        span({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
              "gen_ai.tool.type": "datastore", "gen_ai.tool.description": "Looks it up"}),
        RESOURCE,
    ).item  # fmt: skip

    assert (item.tool_type, item.tool_description) == ("datastore", "Looks it up")


@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ('"It is \\"sunny\\""', 'It is "sunny"'),  # a text JSON-encoded by the agent
        ("42", 42),
        ("true", True),
        ('"unterminated', '"unterminated'),
        ('"bad \\q escape"', '"bad \\q escape"'),
    ],
)
def test_it_decodes_a_genai_result_that_is_a_whole_json_value(sent, stored):
    reading = read_span(
        span({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
              "gen_ai.tool.call.result": sent}),
        RESOURCE,
    )  # fmt: skip

    assert reading.item.result == stored
