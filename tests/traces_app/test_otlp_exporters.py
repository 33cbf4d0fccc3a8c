"""POST /v1/traces fed by the real OpenTelemetry SDK: each dialect, stored field by field.

Spans go through the SDK's BatchSpanProcessor and OTLP/HTTP protobuf exporter to the live
server, as from an instrumented agent; the JSON encoding is the SDK's own spans turned
into OTLP/JSON (hex ids, lowerCamelCase), as JavaScript exporters send it.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Status, StatusCode

from traces_app.models import Invocation, OtlpProducer, Trace

SUCCESS = [SpanExportResult.SUCCESS]
T0 = time.time_ns() - 3_600 * 10**9  # an hour ago, in whole microseconds below
MS = 10**6


def at(ms: float) -> int:
    """Return the nanosecond timestamp `ms` milliseconds after T0."""
    return T0 - T0 % 1000 + int(ms * MS)


def as_datetime(nanoseconds: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=nanoseconds // 1000)


def ids(span: Any) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def stored(span: Any) -> Invocation:
    trace_id, span_id = ids(span)
    return Invocation.objects.get(trace_id=trace_id, span_id=span_id)


def child(tracer: Any, parent: Any, name: str, start_ms: float, **attributes: Any) -> Any:
    return tracer.start_span(
        name, context=trace.set_span_in_context(parent), start_time=at(start_ms),
        attributes=attributes,
    )  # fmt: skip


def genai_agent_run(tracer: Any, spans: dict[str, Any], tool_status: Status) -> None:
    """An agent run in GenAI conventions: invoke_agent > chat, execute_tool."""
    agent = tracer.start_span(
        "invoke_agent weather-bot",
        start_time=at(0),
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather-bot"},
    )
    chat = child(
        tracer, agent, "chat gpt-4o", 1,
        **{
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.usage.input_tokens": 812,
            "gen_ai.usage.output_tokens": 37,
        },
    )  # fmt: skip
    chat.end(end_time=at(451.5))
    tool = child(
        tracer, agent, "execute_tool get_weather", 452,
        **{
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_Vf3a",
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": "Current weather for a city",
            "gen_ai.tool.call.arguments": '{"city": "Paris", "unit": "C"}',
            "gen_ai.tool.call.result": '{"temperature": 21}',
        },
    )  # fmt: skip
    if tool_status.status_code == StatusCode.ERROR:
        tool.set_attribute("error.type", "TimeoutError")
    tool.set_status(tool_status)
    tool.end(end_time=at(464.25))
    agent.end(end_time=at(500))
    spans.update(agent=agent, chat=chat, tool=tool)


def test_it_stores_a_genai_tool_span_field_by_field(sdk_export):
    spans: dict[str, Any] = {}
    resource = {"service.name": "weather-service", "gen_ai.agent.name": "weather-bot"}
    results = sdk_export(
        lambda tracer: genai_agent_run(tracer, spans, Status(StatusCode.OK)), resource=resource
    )

    assert results == SUCCESS
    tool = stored(spans["tool"])
    assert tool.kind == "tool"
    assert tool.tool_name == "get_weather"
    assert tool.tool_call_id == "call_Vf3a"
    assert tool.arguments == {"city": "Paris", "unit": "C"}
    assert tool.result == {"temperature": 21}
    assert tool.status == "ok"
    assert tool.error_kind == ""
    assert tool.started_at == as_datetime(at(452))
    assert tool.latency_ms == pytest.approx(12.25)
    assert tool.parent_span_id == ids(spans["agent"])[1]
    assert tool.chosen_by == "external"
    assert tool.ran_on == "remote"
    assert tool.agent == "weather-bot"  # the resource's gen_ai.agent.name, before service.name


def test_it_stores_a_genai_llm_span_with_its_tokens_and_model(sdk_export):
    spans: dict[str, Any] = {}
    sdk_export(
        lambda tracer: genai_agent_run(tracer, spans, Status(StatusCode.OK)),
        resource={"service.name": "weather-service", "session.id": "sess-9"},
    )

    chat = stored(spans["chat"])
    assert chat.kind == "llm"
    assert chat.model == "gpt-4o"
    assert (chat.input_tokens, chat.output_tokens) == (812, 37)
    assert chat.latency_ms == pytest.approx(450.5)
    assert chat.agent == "weather-bot"  # no agent attribute: the invoke_agent span's above it
    assert stored(spans["agent"]).kind == "agent"


def test_it_adds_genai_spans_to_their_trace_with_the_dialect(sdk_export):
    spans: dict[str, Any] = {}
    sdk_export(
        lambda tracer: genai_agent_run(tracer, spans, Status(StatusCode.OK)),
        resource={"service.name": "weather-service", "session.id": "sess-9"},
    )

    record = Trace.objects.get(trace_id=ids(spans["agent"])[0])
    assert record.dialect == "genai"
    assert (record.span_count, record.tool_calls, record.llm_calls) == (3, 1, 1)
    assert (record.input_tokens, record.output_tokens) == (812, 37)
    assert record.session_id == "sess-9"
    assert record.started_at == as_datetime(at(0))
    assert record.duration_ms == pytest.approx(500)


def test_it_shows_the_dialect_of_a_trace_in_the_api(sdk_export, api):
    spans: dict[str, Any] = {}
    sdk_export(lambda tracer: genai_agent_run(tracer, spans, Status(StatusCode.OK)))

    body = api.get(f"/traces/{ids(spans['agent'])[0]}").json()

    assert body["dialect"] == "genai"
    assert {span["kind"] for span in body["spans"]} == {"agent", "llm", "tool"}


def test_it_stores_a_failed_genai_tool_call_with_its_error(sdk_export):
    spans: dict[str, Any] = {}
    sdk_export(
        lambda tracer: genai_agent_run(
            tracer, spans, Status(StatusCode.ERROR, "no answer from weather API in 10 s")
        ),
        resource={"service.name": "weather-service"},
    )

    tool = stored(spans["tool"])
    assert tool.status == "error"
    assert tool.error_kind == "timeout_error"
    assert tool.error_message == "no answer from weather API in 10 s"
    record = Trace.objects.get(trace_id=tool.trace_id)
    assert (record.status, record.failed_calls) == ("error", 1)


def openinference_run(tracer: Any, spans: dict[str, Any], arguments_in: str) -> None:
    """An OpenInference agent: AGENT > LLM, TOOL (arguments where `arguments_in` says)."""
    kind = SpanAttributes.OPENINFERENCE_SPAN_KIND
    agent = tracer.start_span(
        "Agent.run",
        start_time=at(0),
        attributes={
            kind: OpenInferenceSpanKindValues.AGENT.value,
            SpanAttributes.INPUT_VALUE: "What is 12 * 7?",
            SpanAttributes.SESSION_ID: "oi-session",
        },
    )
    llm = child(
        tracer, agent, "ChatCompletion", 2,
        **{
            kind: OpenInferenceSpanKindValues.LLM.value,
            SpanAttributes.LLM_MODEL_NAME: "claude-3-5-sonnet",
            SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 120,
            SpanAttributes.LLM_TOKEN_COUNT_COMPLETION: 18,
            SpanAttributes.SESSION_ID: "oi-session",
        },
    )  # fmt: skip
    llm.end(end_time=at(300))
    schema = {"type": "object", "properties": {"expression": {"type": "string"}}}
    arguments = '{"expression": "12 * 7"}'
    attributes = {
        kind: OpenInferenceSpanKindValues.TOOL.value,
        SpanAttributes.TOOL_NAME: "calculator",
        SpanAttributes.TOOL_DESCRIPTION: "Evaluates arithmetic",
        SpanAttributes.TOOL_ID: "toolu_01",
        SpanAttributes.OUTPUT_VALUE: "84",
        SpanAttributes.SESSION_ID: "oi-session",
    }
    if arguments_in == "input.value":
        attributes[SpanAttributes.TOOL_PARAMETERS] = json.dumps(schema)
        attributes[SpanAttributes.INPUT_VALUE] = arguments
    else:  # a producer that puts the call's arguments where the schema belongs
        attributes[SpanAttributes.TOOL_PARAMETERS] = arguments
    tool = child(tracer, agent, "calculator", 301, **attributes)
    tool.set_status(Status(StatusCode.OK))
    tool.end(end_time=at(303.5))
    agent.end(end_time=at(320))
    spans.update(agent=agent, llm=llm, tool=tool)


@pytest.mark.parametrize("arguments_in", ["input.value", "tool.parameters"])
def test_it_stores_an_openinference_tool_span_field_by_field(sdk_export, arguments_in):
    spans: dict[str, Any] = {}
    results = sdk_export(
        lambda tracer: openinference_run(tracer, spans, arguments_in),
        resource={"service.name": "calc-agent"},
    )

    assert results == SUCCESS
    tool = stored(spans["tool"])
    assert tool.kind == "tool"
    assert tool.tool_name == "calculator"
    assert tool.tool_call_id == "toolu_01"
    assert tool.arguments == {"expression": "12 * 7"}  # never the parameter schema
    assert tool.result == 84  # a number sent as JSON text (producers encode "JSON unless a str")
    assert tool.status == "ok"
    assert tool.started_at == as_datetime(at(301))
    assert tool.latency_ms == pytest.approx(2.5)
    assert tool.agent == "Agent.run"  # the name of the AGENT span above it
    assert tool.parent_span_id == ids(spans["agent"])[1]


def test_it_stores_an_openinference_llm_span_and_the_trace_dialect(sdk_export):
    spans: dict[str, Any] = {}
    sdk_export(
        lambda tracer: openinference_run(tracer, spans, "input.value"),
        resource={"service.name": "calc-agent"},
    )

    llm = stored(spans["llm"])
    assert (llm.kind, llm.model, llm.input_tokens, llm.output_tokens) == (
        "llm", "claude-3-5-sonnet", 120, 18,
    )  # fmt: skip
    record = Trace.objects.get(trace_id=llm.trace_id)
    assert record.dialect == "openinference"
    assert (record.tool_calls, record.llm_calls, record.session_id) == (1, 1, "oi-session")


def openllmetry_run(tracer: Any, spans: dict[str, Any]) -> None:
    """An OpenLLMetry (Traceloop) workflow: workflow > LLM call (gen_ai.*), tool."""
    workflow = tracer.start_span(
        "trip_planner.workflow",
        start_time=at(0),
        attributes={
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "trip_planner",
            "traceloop.workflow.name": "trip_planner",
        },
    )
    llm = child(
        tracer, workflow, "openai.chat", 1,
        **{
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.prompt_tokens": 240,
            "gen_ai.usage.completion_tokens": 31,
        },
    )  # fmt: skip
    llm.end(end_time=at(201))
    tool = child(
        tracer, workflow, "search_flights.tool", 202,
        **{
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "search_flights",
            "traceloop.workflow.name": "trip_planner",
            "traceloop.entity.input": json.dumps(
                {"args": [], "kwargs": {"origin": "CDG", "destination": "NRT"}}
            ),
            "traceloop.entity.output": json.dumps({"flights": 3}),
        },
    )  # fmt: skip
    tool.set_status(Status(StatusCode.OK))
    tool.end(end_time=at(242))
    workflow.end(end_time=at(250))
    spans.update(workflow=workflow, llm=llm, tool=tool)


def test_it_stores_openllmetry_spans_field_by_field(sdk_export):
    spans: dict[str, Any] = {}
    results = sdk_export(
        lambda tracer: openllmetry_run(tracer, spans), resource={"service.name": "trips"}
    )

    assert results == SUCCESS
    tool = stored(spans["tool"])
    assert (tool.kind, tool.tool_name, tool.status) == ("tool", "search_flights", "ok")
    assert tool.arguments == {"origin": "CDG", "destination": "NRT"}
    assert tool.result == {"flights": 3}
    assert tool.latency_ms == pytest.approx(40)
    llm = stored(spans["llm"])
    assert (llm.kind, llm.model, llm.input_tokens, llm.output_tokens) == (
        "llm", "gpt-4o-mini", 240, 31,
    )  # fmt: skip
    workflow = stored(spans["workflow"])
    assert (workflow.kind, workflow.tool_name) == ("other", "trip_planner.workflow")
    assert Trace.objects.get(trace_id=tool.trace_id).dialect == "openllmetry"


def test_it_keeps_generic_spans_in_the_trace_without_counting_them_as_tools(sdk_export):
    spans: dict[str, Any] = {}

    def make(tracer: Any) -> None:
        root = tracer.start_span("handle request", start_time=at(0))
        http = child(tracer, root, "GET /weather", 5, **{"http.request.method": "GET"})
        http.end(end_time=at(25))
        root.end(end_time=at(30))
        spans.update(root=root, http=http)

    sdk_export(make, resource={"service.name": "plain-service"})

    http = stored(spans["http"])
    assert (http.kind, http.tool_name, http.status) == ("other", "GET /weather", "ok")
    assert http.parent_span_id == ids(spans["root"])[1]
    record = Trace.objects.get(trace_id=http.trace_id)
    assert (record.span_count, record.tool_calls, record.dialect) == (2, 0, "otel")
    assert not OtlpProducer.objects.filter(name="plain-service").exists()


def test_it_accepts_the_key_in_an_x_api_key_header(sdk_export, make_key):
    spans: dict[str, Any] = {}
    results = sdk_export(
        lambda tracer: genai_agent_run(tracer, spans, Status(StatusCode.OK)),
        headers={"x-api-key": make_key("report")},
    )

    assert results == SUCCESS
    assert stored(spans["tool"]).tool_name == "get_weather"


@pytest.mark.parametrize("compression", [Compression.Gzip, Compression.Deflate])
def test_it_accepts_a_compressed_export(sdk_export, compression):
    spans: dict[str, Any] = {}
    results = sdk_export(
        lambda tracer: genai_agent_run(tracer, spans, Status(StatusCode.OK)),
        compression=compression,
    )

    assert results == SUCCESS
    assert Invocation.objects.filter(trace_id=ids(spans["tool"])[0]).count() == 3


def test_it_refuses_an_exporter_without_a_key(sdk_export):
    results = sdk_export(lambda tracer: tracer.start_span("x").end(), headers={})

    assert results == [SpanExportResult.FAILURE]
    assert not Invocation.objects.exists()


# The SDK's BatchSpanProcessor, holding spans until it is shut down, then exporting them in
# requests of its default max_export_batch_size (512).
FullBatches = functools.partial(BatchSpanProcessor, schedule_delay_millis=60_000)


def tool_calls(count: int) -> Callable[[Any], None]:
    """Return a function making `count` GenAI tool spans, one trace each."""

    def make(tracer: Any) -> None:
        for index in range(count):
            tracer.start_span(
                "execute_tool calculator",
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calc",
                            "gen_ai.tool.call.arguments": f'{{"n": {index}}}'},
            ).end()  # fmt: skip

    return make


def test_it_takes_the_sdks_default_batch_in_one_request(sdk_export):
    results = sdk_export(tool_calls(512), processor=FullBatches)

    assert results == SUCCESS  # one export: 512 spans, within the default limit of 1,000
    assert Invocation.objects.count() == 512


def test_it_refuses_a_batch_over_the_span_limit_so_the_exporter_fails(sdk_export, settings):
    settings.ARES_OTLP_MAX_SPANS = 100

    results = sdk_export(tool_calls(512), processor=FullBatches)

    assert results == [SpanExportResult.FAILURE]  # a 413: not retried, nothing stored
    assert not Invocation.objects.exists()


class Collector(SpanExporter):
    """Keeps the SDK's finished spans, to encode them as an exporter would."""

    def __init__(self) -> None:
        self.spans: list[Any] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def sdk_spans(make_spans: Any, resource: dict[str, Any]) -> list[Any]:
    collector = Collector()
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(SimpleSpanProcessor(collector))
    make_spans(provider.get_tracer("ares-tests"))
    provider.shutdown()
    return collector.spans


def otlp_json(spans: list[Any]) -> bytes:
    """Return spans as an OTLP/JSON body: protobuf's JSON mapping with hex ids."""
    document = json_format.MessageToDict(encode_spans(spans))
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_it_stores_spans_sent_as_otlp_json(otlp_url, make_key, compressed):
    spans: dict[str, Any] = {}
    body = otlp_json(
        sdk_spans(lambda tracer: openllmetry_run(tracer, spans), {"service.name": "json-producer"})
    )
    headers = {"Authorization": f"Bearer {make_key('report')}", "Content-Type": "application/json"}
    if compressed:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"

    response = httpx.post(otlp_url, content=body, headers=headers)

    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == {}  # no partial_success: every span accepted
    tool = stored(spans["tool"])
    assert (tool.tool_name, tool.arguments) == (
        "search_flights", {"origin": "CDG", "destination": "NRT"},
    )  # fmt: skip
    assert tool.started_at == as_datetime(at(202))
    assert tool.parent_span_id == ids(spans["workflow"])[1]
    assert tool.agent == "trip_planner"  # the workflow above it, before the service's name


def test_it_stores_a_span_sent_twice_once(otlp_url, make_key):
    spans: dict[str, Any] = {}
    made = sdk_spans(
        lambda tracer: genai_agent_run(tracer, spans, Status(StatusCode.OK)),
        {"service.name": "retrying-service"},
    )
    body = encode_spans(made).SerializeToString()
    headers = {
        "Authorization": f"Bearer {make_key('report')}",
        "Content-Type": "application/x-protobuf",
    }

    first = httpx.post(otlp_url, content=body, headers=headers)
    again = httpx.post(otlp_url, content=body, headers=headers)

    assert (first.status_code, again.status_code) == (200, 200)
    assert ExportTraceServiceResponse.FromString(again.content) == ExportTraceServiceResponse()
    trace_id = ids(spans["tool"])[0]
    assert Invocation.objects.filter(trace_id=trace_id).count() == 3
    assert Trace.objects.get(trace_id=trace_id).span_count == 3
    assert OtlpProducer.objects.get(name="retrying-service").tool_spans == 1
