"""Agent names handed down over OTLP: a tool or LLM span without an agent of its own takes
the name of the nearest agent span above it in the same export request.

Spans come from the real OpenTelemetry SDK, nested as instrumented agents nest them, and
go to the live server through its OTLP/HTTP exporter.
"""

from __future__ import annotations

from typing import Any

from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from tests.traces_app.test_otlp_exporters import SUCCESS, at, child, stored

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


def test_it_looks_for_the_agent_only_in_the_same_request(sdk_export):
    spans: dict[str, Any] = {}

    # One request per span, as each ends: the tool calls go before their agent spans.
    results = sdk_export(
        lambda tracer: genai_agents(tracer, spans), resource=SERVICE, processor=SimpleSpanProcessor
    )

    assert results == SUCCESS * 6
    assert stored(spans["lookup"]).agent == "agents-service"  # the service's name, as before
    assert stored(spans["agent"]).agent == "planner-bot"
