"""OTLP traces on the dashboards: the dialect on the trace pages, and the issue's "Done when":
an agent reporting in any dialect shows up with its tool calls, tokens, latency and errors.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.test import Client
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.trace import Status, StatusCode

from tests.conftest import make_span
from tests.traces_app.test_otlp_exporters import (
    SUCCESS,
    at,
    child,
    genai_agent_run,
    ids,
    openinference_run,
    openllmetry_run,
    sdk_spans,
)
from traces_app.ingest.otlp_spans import read_request, store_readings
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn


def generic_run(tracer: Any, spans: dict[str, Any]) -> None:
    """A plain service's spans: no dialect an agent speaks."""
    root = tracer.start_span("handle request", start_time=at(0))
    root.end(end_time=at(30))
    spans.update(root=root)


RUNS: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "genai": lambda tracer, spans: genai_agent_run(tracer, spans, Status(StatusCode.OK)),
    "openinference": lambda tracer, spans: openinference_run(tracer, spans, "input.value"),
    "openllmetry": openllmetry_run,
    "otel": generic_run,
}


def export_through_otlp(dialect: str) -> str:
    """Store one agent run in a dialect through the OTLP mapping; return its trace id."""
    spans: dict[str, Any] = {}
    made = sdk_spans(lambda tracer: RUNS[dialect](tracer, spans), {"service.name": "pages"})
    rejected = store_readings(read_request(encode_spans(made)))
    assert not rejected
    return ids(next(iter(spans.values())))[0]


def store_through_rest() -> str:
    trace_id = secrets.token_hex(16)
    record_invocations([InvocationIn.model_validate(make_span(trace_id=trace_id))])
    return trace_id


def row_of(html: str, trace_id: str) -> str:
    """Return the trace list's table row that links to a trace."""
    rows = re.findall(r"<tr>.*?</tr>", html, flags=re.S)
    return next(row for row in rows if f"/traces/{trace_id}/" in row)


@pytest.mark.parametrize(
    ("dialect", "badge"),
    [
        ("genai", "GenAI"),
        ("openinference", "OpenInference"),
        ("openllmetry", "OpenLLMetry"),
        ("otel", "OTel"),
    ],
)
def test_it_shows_the_dialect_of_each_trace_in_the_list(
    admin_client: Client, db: None, dialect: str, badge: str
) -> None:
    trace_id = export_through_otlp(dialect)

    html = admin_client.get("/traces/").content.decode()

    assert ">Source</th>" in html
    row = row_of(html, trace_id)
    assert '<td class="source"><span class="badge source" title="Reported over OTLP: ' in row
    assert f">{badge}</span></td>" in row


def test_it_leaves_the_source_of_a_rest_trace_blank(admin_client: Client, db: None) -> None:
    trace_id = store_through_rest()

    html = admin_client.get("/traces/").content.decode()

    assert '<td class="source"></td>' in row_of(html, trace_id)


@pytest.mark.parametrize(
    ("dialect", "label"),
    [
        ("genai", "OpenTelemetry GenAI"),
        ("openinference", "OpenInference"),
        ("openllmetry", "OpenLLMetry"),
        ("otel", "OpenTelemetry, no known dialect"),
    ],
)
def test_it_shows_the_dialect_in_the_trace_facts(
    admin_client: Client, db: None, dialect: str, label: str
) -> None:
    trace_id = export_through_otlp(dialect)

    html = admin_client.get(f"/traces/{trace_id}/").content.decode()

    assert f'<dd id="trace-source">OTLP, <span class="badge source">{label}</span></dd>' in html


def test_it_shows_no_source_for_a_rest_trace(admin_client: Client, db: None) -> None:
    trace_id = store_through_rest()

    response = admin_client.get(f"/traces/{trace_id}/")

    assert response.status_code == 200
    assert "trace-source" not in response.content.decode()


# The "Done when": an agent in each dialect, its spans sent by the SDK exporter to
# the live server, then the dashboards read as staff would.

TOOL_MS = 40.0  # each run's failing tool call lasts this long


def genai_failing_run(tracer: Any, spans: dict[str, Any]) -> None:
    """GenAI: invoke_agent genai-bot > chat (812/37 tokens), execute_tool get_weather failing."""
    agent = tracer.start_span(
        "invoke_agent genai-bot",
        start_time=at(0),
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "genai-bot"},
    )
    chat = child(
        tracer, agent, "chat gpt-4o", 1,
        **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
           "gen_ai.usage.input_tokens": 812, "gen_ai.usage.output_tokens": 37},
    )  # fmt: skip
    chat.end(end_time=at(300))
    tool = child(
        tracer, agent, "execute_tool get_weather", 301,
        **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
           "gen_ai.tool.call.arguments": '{"city": "Paris"}', "error.type": "TimeoutError"},
    )  # fmt: skip
    tool.set_status(Status(StatusCode.ERROR, "no answer from the weather API in 10 s"))
    tool.end(end_time=at(301 + TOOL_MS))
    agent.end(end_time=at(400))
    spans.update(agent=agent, tool=tool)


def openinference_failing_run(tracer: Any, spans: dict[str, Any]) -> None:
    """OpenInference: AGENT oi-math > LLM (120/18 tokens), TOOL divide failing."""
    kind = SpanAttributes.OPENINFERENCE_SPAN_KIND
    agent = tracer.start_span(
        "MathAgent.run",
        start_time=at(0),
        attributes={
            kind: OpenInferenceSpanKindValues.AGENT.value,
            SpanAttributes.AGENT_NAME: "oi-math",
        },
    )
    llm = child(
        tracer, agent, "ChatCompletion", 1,
        **{kind: OpenInferenceSpanKindValues.LLM.value,
           SpanAttributes.LLM_MODEL_NAME: "claude-3-5-sonnet",
           SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 120,
           SpanAttributes.LLM_TOKEN_COUNT_COMPLETION: 18},
    )  # fmt: skip
    llm.end(end_time=at(200))
    tool = child(
        tracer, agent, "divide", 201,
        **{kind: OpenInferenceSpanKindValues.TOOL.value, SpanAttributes.TOOL_NAME: "divide",
           SpanAttributes.INPUT_VALUE: '{"a": 1, "b": 0}'},
    )  # fmt: skip
    tool.record_exception(ZeroDivisionError("division by zero"))
    tool.set_status(Status(StatusCode.ERROR))
    tool.end(end_time=at(201 + TOOL_MS))
    agent.end(end_time=at(300))
    spans.update(agent=agent, tool=tool)


def openllmetry_failing_run(tracer: Any, spans: dict[str, Any]) -> None:
    """OpenLLMetry: agent trip-agent > openai.chat (240/31 tokens), tool search_flights failing."""
    agent = tracer.start_span(
        "trip-agent.agent",
        start_time=at(0),
        attributes={"traceloop.span.kind": "agent", "traceloop.entity.name": "trip-agent"},
    )
    llm = child(
        tracer, agent, "openai.chat", 1,
        **{"llm.request.type": "chat", "gen_ai.system": "openai",
           "gen_ai.request.model": "gpt-4o-mini", "gen_ai.usage.prompt_tokens": 240,
           "gen_ai.usage.completion_tokens": 31},
    )  # fmt: skip
    llm.end(end_time=at(150))
    tool = child(
        tracer, agent, "search_flights.tool", 151,
        **{"traceloop.span.kind": "tool", "traceloop.entity.name": "search_flights",
           "traceloop.entity.input": '{"args": [], "kwargs": {"origin": "CDG"}}'},
    )  # fmt: skip
    tool.set_status(Status(StatusCode.ERROR, "flight API answered 503"))
    tool.end(end_time=at(151 + TOOL_MS))
    agent.end(end_time=at(250))
    spans.update(agent=agent, tool=tool)


# dialect: (run, agent, tool, error kind, error message, input tokens, output tokens)
AGENTS = [
    pytest.param(
        genai_failing_run, "genai-bot", "get_weather", "timeout_error",
        "no answer from the weather API in 10 s", 812, 37, id="genai",
    ),
    pytest.param(
        openinference_failing_run, "oi-math", "divide", "zero_division_error",
        "division by zero", 120, 18, id="openinference",
    ),
    pytest.param(
        openllmetry_failing_run, "trip-agent", "search_flights", "tool_error",
        "flight API answered 503", 240, 31, id="openllmetry",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("run", "agent", "tool", "error_kind", "message", "tokens_in", "tokens_out"), AGENTS
)
def test_an_agent_reporting_over_otlp_shows_up_on_the_dashboards(
    sdk_export: Callable[..., list[Any]],
    session_client: Callable[..., httpx.Client],
    settings: Any,
    run: Callable[[Any, dict[str, Any]], None],
    agent: str,
    tool: str,
    error_kind: str,
    message: str,
    tokens_in: int,
    tokens_out: int,
) -> None:
    spans: dict[str, Any] = {}
    # No agent on the resource: the agent span's name is handed down to the tool call.
    assert sdk_export(lambda tracer: run(tracer, spans), {"service.name": "otlp-e2e"}) == SUCCESS
    trace_id = ids(spans["tool"])[0]
    staff = session_client(is_staff=True)

    listed = staff.get("/traces/", params={"agent": agent}).text
    row = row_of(listed, trace_id)
    assert f'href="/tools/{tool}/"' in row
    assert "Has failures" in row and "1 failed" in row
    assert f">{tokens_in + tokens_out}</td>" in row

    detail = staff.get(f"/traces/{trace_id}/").text
    assert f'<a class="tool-link" href="/tools/{tool}/">{tool}</a>' in detail
    assert f"<strong>{error_kind}</strong>" in detail and message in detail
    assert f"<dt>Tokens</dt><dd>{tokens_in} in, {tokens_out} out</dd>" in detail
    assert f"<dt>Latency</dt><dd>{TOOL_MS:.1f} ms</dd>" in detail
    assert 'id="trace-source"' in detail

    tool_page = staff.get(f"/tools/{tool}/").text
    assert '<span class="value" id="calls">1</span>' in tool_page
    assert '<span class="value" id="success-rate">0.0%</span>' in tool_page
    failures = tool_page.split('<table id="failures">', 1)[1]
    assert f'<span class="badge bad">{error_kind}</span>' in failures
    assert message in failures and f"<td>{agent}</td>" in failures
    assert f'<td class="num">{TOOL_MS:.1f}</td>' in failures

    overview = staff.get("/").text
    failing = overview.split('<table id="failing-tools">', 1)[1].split("</table>", 1)[0]
    assert f'data-tool="{tool}"' in failing and f"{error_kind} 1" in failing
    assert f'<span class="value" id="tokens">{tokens_in + tokens_out}</span>' in overview
    assert f"<td>{agent}</td>" in overview.split('<table id="traces">', 1)[1]
