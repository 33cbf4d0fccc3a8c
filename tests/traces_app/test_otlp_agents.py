"""Agent names handed down over OTLP: a tool or LLM span without an agent of its own takes
the name of the nearest agent span above it, in the same export request or in any other,
whichever arrives first, and the trace is named after its topmost agent.

Spans come from the real OpenTelemetry SDK, nested as instrumented agents nest them, and
go to the live server through its OTLP/HTTP exporter.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from tests.traces_app.test_otlp_bad_input import export_request, tool_span
from tests.traces_app.test_otlp_exporters import SUCCESS, at, child, ids, stored
from traces_app.models import Invocation, SpanRollup, Trace
from traces_app.rollups.recount import recount_all_marked_rollups

SERVICE = {"service.name": "agents-service"}
OI_KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND


def tool_call(tracer: Any, parent: Any, name: str, start_ms: float) -> Any:
    """Return a finished GenAI tool span under `parent`, with no agent attribute."""
    span = child(
        tracer, parent, f"execute_tool {name}", start_ms,
        **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name},
    )  # fmt: skip
    span.set_status(Status(StatusCode.OK))
    span.end(end_time=at(start_ms + 5))
    return span


def genai_agents(tracer: Any, spans: dict[str, Any]) -> None:
    """planner-bot > (chat, step > lookup, researcher > web_search): two agents, one nested."""
    agent = tracer.start_span(
        "invoke_agent planner-bot",
        start_time=at(0),
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner-bot"},
    )
    chat = child(
        tracer, agent, "chat gpt-4o", 1,
        **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
           "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 2},
    )  # fmt: skip
    chat.end(end_time=at(20))
    step = child(tracer, agent, "plan step", 21)  # a generic span between agent and tool
    lookup = tool_call(tracer, step, "lookup", 22)
    step.end(end_time=at(30))
    researcher = child(
        tracer, agent, "invoke_agent researcher", 31,
        **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
    )  # fmt: skip
    search = tool_call(tracer, researcher, "web_search", 32)
    researcher.end(end_time=at(40))
    agent.end(end_time=at(50))
    spans.update(agent=agent, chat=chat, step=step, lookup=lookup, search=search)


def test_it_hands_a_genai_agent_name_down_to_the_spans_below_it(sdk_export):
    spans: dict[str, Any] = {}
    results = sdk_export(lambda tracer: genai_agents(tracer, spans), resource=SERVICE)

    assert results == SUCCESS
    assert stored(spans["chat"]).agent == "planner-bot"
    assert stored(spans["step"]).agent == "planner-bot"
    assert stored(spans["lookup"]).agent == "planner-bot"  # through a generic span
    assert stored(spans["search"]).agent == "researcher"  # the nearest agent wins


def test_it_keeps_an_agent_named_by_the_resource(sdk_export):
    spans: dict[str, Any] = {}
    resource = {**SERVICE, "gen_ai.agent.name": "resource-bot"}

    sdk_export(lambda tracer: genai_agents(tracer, spans), resource=resource)

    assert stored(spans["lookup"]).agent == "resource-bot"
    assert stored(spans["agent"]).agent == "planner-bot"  # its own attribute first


def test_it_keeps_an_agent_named_by_the_span_itself(sdk_export):
    spans: dict[str, Any] = {}

    def make_with_own_agent(tracer: Any) -> None:
        agent = tracer.start_span(
            "invoke_agent planner-bot",
            start_time=at(0),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "planner-bot",
            },
        )
        tool = child(
            tracer, agent, "execute_tool lookup", 1,
            **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
               "gen_ai.agent.name": "helper-bot"},
        )  # fmt: skip
        tool.end(end_time=at(2))
        agent.end(end_time=at(3))
        spans.update(tool=tool)

    sdk_export(make_with_own_agent, resource=SERVICE)

    assert stored(spans["tool"]).agent == "helper-bot"


def openinference_agents(tracer: Any, spans: dict[str, Any], agent_name: str | None) -> None:
    """An AGENT span (with agent.name, or only its span name) > LLM, TOOL."""
    attributes = {OI_KIND: OpenInferenceSpanKindValues.AGENT.value}
    if agent_name:
        attributes[SpanAttributes.AGENT_NAME] = agent_name
    agent = tracer.start_span("CodeAgent.run", start_time=at(0), attributes=attributes)
    llm = child(
        tracer, agent, "LiteLLMModel.__call__", 1,
        **{OI_KIND: OpenInferenceSpanKindValues.LLM.value,
           SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 50},
    )  # fmt: skip
    llm.end(end_time=at(10))
    tool = child(
        tracer, agent, "final_answer", 11,
        **{OI_KIND: OpenInferenceSpanKindValues.TOOL.value, SpanAttributes.TOOL_NAME: "calc",
           SpanAttributes.INPUT_VALUE: '{"x": 1}'},
    )  # fmt: skip
    tool.end(end_time=at(12))
    agent.end(end_time=at(20))
    spans.update(agent=agent, llm=llm, tool=tool)


def test_it_hands_an_openinference_agent_name_down(sdk_export):
    spans: dict[str, Any] = {}

    sdk_export(lambda tracer: openinference_agents(tracer, spans, "math-agent"), resource=SERVICE)

    assert stored(spans["llm"]).agent == "math-agent"
    assert stored(spans["tool"]).agent == "math-agent"


def test_it_names_an_openinference_agent_after_its_span_without_agent_name(sdk_export):
    spans: dict[str, Any] = {}

    sdk_export(lambda tracer: openinference_agents(tracer, spans, None), resource=SERVICE)

    assert stored(spans["agent"]).agent == "CodeAgent.run"
    assert stored(spans["tool"]).agent == "CodeAgent.run"


def openllmetry_agents(tracer: Any, spans: dict[str, Any]) -> None:
    """workflow trip_planner > (tool book_hotel, agent flight_agent > tool search_flights)."""
    workflow = tracer.start_span(
        "trip_planner.workflow",
        start_time=at(0),
        attributes={"traceloop.span.kind": "workflow", "traceloop.entity.name": "trip_planner"},
    )
    hotel = child(
        tracer, workflow, "book_hotel.tool", 1,
        **{"traceloop.span.kind": "tool", "traceloop.entity.name": "book_hotel"},
    )  # fmt: skip
    hotel.end(end_time=at(5))
    flight_agent = child(
        tracer, workflow, "flight_agent.agent", 6,
        **{"traceloop.span.kind": "agent", "traceloop.entity.name": "flight_agent"},
    )  # fmt: skip
    flights = child(
        tracer, flight_agent, "search_flights.tool", 7,
        **{"traceloop.span.kind": "tool", "traceloop.entity.name": "search_flights"},
    )  # fmt: skip
    flights.end(end_time=at(9))
    flight_agent.end(end_time=at(10))
    workflow.end(end_time=at(11))
    spans.update(workflow=workflow, hotel=hotel, flights=flights)


def test_it_hands_an_openllmetry_workflow_or_agent_name_down(sdk_export):
    spans: dict[str, Any] = {}

    sdk_export(lambda tracer: openllmetry_agents(tracer, spans), resource=SERVICE)

    assert stored(spans["hotel"]).agent == "trip_planner"
    assert stored(spans["flights"]).agent == "flight_agent"


def trace_named(span: Any) -> str:
    """Return the agent that names a span's trace."""
    return Trace.objects.get(pk=ids(span)[0]).agent


def test_it_names_spans_after_an_agent_span_that_arrives_in_a_later_request(sdk_export):
    spans: dict[str, Any] = {}

    # One request per span, as each ends: every span goes before the agent spans above it.
    results = sdk_export(
        lambda tracer: genai_agents(tracer, spans), resource=SERVICE, processor=SimpleSpanProcessor
    )

    assert results == SUCCESS * 6
    assert stored(spans["chat"]).agent == "planner-bot"
    assert stored(spans["step"]).agent == "planner-bot"
    assert stored(spans["lookup"]).agent == "planner-bot"  # waited for step, then its agent
    assert stored(spans["search"]).agent == "researcher"  # the nearest agent wins
    assert trace_named(spans["agent"]) == "planner-bot"  # created as "agents-service"
    assert not Invocation.objects.filter(agent_awaits__isnull=False).exists()


def agents_alone(tracer: Any, spans: dict[str, Any]) -> None:
    """planner-bot > researcher, ended and exported before any span below them."""
    agent = tracer.start_span(
        "invoke_agent planner-bot",
        start_time=at(0),
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner-bot"},
    )
    researcher = child(
        tracer, agent, "invoke_agent researcher", 1,
        **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
    )  # fmt: skip
    researcher.end(end_time=at(40))
    agent.end(end_time=at(50))
    spans.update(agent=agent, researcher=researcher)


def spans_below(tracer: Any, spans: dict[str, Any]) -> None:
    """planner-bot > step > lookup and researcher > web_search, made after their agents."""
    step = child(tracer, spans["agent"], "plan step", 2)
    lookup = tool_call(tracer, step, "lookup", 3)
    step.end(end_time=at(10))
    search = tool_call(tracer, spans["researcher"], "web_search", 20)
    spans.update(step=step, lookup=lookup, search=search)


@pytest.mark.parametrize("processor", [BatchSpanProcessor, SimpleSpanProcessor])
def test_it_hands_a_stored_agent_spans_name_to_spans_arriving_later(sdk_export, processor):
    spans: dict[str, Any] = {}

    assert sdk_export(lambda tracer: agents_alone(tracer, spans), resource=SERVICE) == SUCCESS
    sdk_export(lambda tracer: spans_below(tracer, spans), resource=SERVICE, processor=processor)

    assert stored(spans["step"]).agent == "planner-bot"
    assert stored(spans["lookup"]).agent == "planner-bot"  # up through step, then stored
    assert stored(spans["search"]).agent == "researcher"  # the nearest agent wins
    assert trace_named(spans["agent"]) == "planner-bot"


def test_it_never_overwrites_an_agent_a_span_names_itself(sdk_export):
    spans: dict[str, Any] = {}

    def make(tracer: Any) -> None:
        agent = tracer.start_span(
            "invoke_agent planner-bot",
            start_time=at(0),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "planner-bot",
            },
        )
        own = child(
            tracer, agent, "execute_tool lookup", 1,
            **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
               "gen_ai.agent.name": "helper-bot"},
        )  # fmt: skip
        own.end(end_time=at(2))
        plain = tool_call(tracer, agent, "web_search", 3)
        agent.end(end_time=at(10))
        spans.update(own=own, plain=plain)

    sdk_export(make, resource=SERVICE, processor=SimpleSpanProcessor)

    assert stored(spans["own"]).agent == "helper-bot"
    assert stored(spans["plain"]).agent == "planner-bot"


def test_it_names_the_trace_after_its_topmost_agent_below_a_root_without_one(sdk_export):
    spans: dict[str, Any] = {}

    def make(tracer: Any) -> None:
        root = tracer.start_span("POST /ask", start_time=at(0))  # an HTTP server span
        agent = child(
            tracer, root, "invoke_agent researcher", 1,
            **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
        )  # fmt: skip
        tool_call(tracer, agent, "web_search", 2)
        agent.end(end_time=at(20))
        root.end(end_time=at(30))
        spans.update(root=root)

    sdk_export(make, resource=SERVICE, processor=SimpleSpanProcessor)

    assert stored(spans["root"]).agent == "agents-service"  # no agent above it
    assert trace_named(spans["root"]) == "researcher"


def test_it_marks_the_rollups_of_spans_it_renames_for_recounting(sdk_export):
    spans: dict[str, Any] = {}

    def make(tracer: Any) -> None:
        # The run crosses an hour: its tool call is in a later hour than the agent span.
        agent = tracer.start_span(
            "invoke_agent planner-bot",
            start_time=at(-3_600_000),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "planner-bot",
            },
        )
        spans["lookup"] = tool_call(tracer, agent, "lookup", 0)
        recount_all_marked_rollups()
        spans["counted_before"] = list(SpanRollup.objects.filter(kind="tool").values("agent"))
        agent.end(end_time=at(10))

    sdk_export(make, resource=SERVICE, processor=SimpleSpanProcessor)
    recount_all_marked_rollups()

    assert spans["counted_before"] == [{"agent": "agents-service"}]
    tool_rollups = SpanRollup.objects.filter(kind="tool").values_list("agent", "calls")
    assert list(tool_rollups) == [("planner-bot", 1)]


def test_it_serves_the_settled_agent_on_the_rest_api(sdk_export, api):
    spans: dict[str, Any] = {}
    sdk_export(
        lambda tracer: genai_agents(tracer, spans), resource=SERVICE, processor=SimpleSpanProcessor
    )
    trace_id, _ = ids(spans["agent"])

    items = api.get("/invocations", params={"agent": "planner-bot", "trace_id": trace_id})
    stale = api.get("/invocations", params={"agent": "agents-service", "trace_id": trace_id})
    traces = api.get("/traces", params={"agent": "planner-bot"})

    assert {item["tool_name"] for item in items.json()["items"] if item["kind"] == "tool"} == {
        "lookup"
    }
    assert stale.json()["items"] == []
    assert [item["trace_id"] for item in traces.json()["items"]] == [trace_id]


def post_spans(otlp_url: str, key: str, *spans: Any) -> httpx.Response:
    """Post spans in one OTLP/HTTP protobuf request, as a producer with its own ids would."""
    body = export_request(*spans).SerializeToString()
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {key}"}
    return httpx.post(otlp_url, content=body, headers=headers, timeout=30)


def test_it_ends_a_walk_up_a_parent_loop_among_stored_spans(otlp_url, make_key):
    key = make_key("report")
    trace_id, a, b = os.urandom(16), os.urandom(8), os.urandom(8)

    answers = [
        post_spans(otlp_url, key, tool_span(trace_id=trace_id, span_id=a, parent_span_id=b)),
        # a is stored and waits for b, whose parent is a: a loop, walked from both ends.
        post_spans(otlp_url, key, tool_span(trace_id=trace_id, span_id=b, parent_span_id=a)),
        post_spans(otlp_url, key, tool_span(trace_id=trace_id, parent_span_id=a)),
    ]

    assert [answer.status_code for answer in answers] == [200, 200, 200]
    spans = Invocation.objects.filter(trace_id=trace_id.hex())
    assert sorted(spans.values_list("agent", "agent_awaits")) == [("bad-input", None)] * 3
