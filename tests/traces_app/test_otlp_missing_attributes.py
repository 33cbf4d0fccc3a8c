"""Tool spans arriving without a tool name or arguments: stored, reported per producer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.urls import reverse
from opentelemetry.trace import Status, StatusCode

from traces_app.models import Invocation, OtlpProducer, Trace


def tool_spans(tracer: Any, sent: dict[str, Any]) -> None:
    """One complete GenAI tool span, and one that lacks its name and arguments (status unset)."""
    complete = tracer.start_span(
        "execute_tool refund",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "refund",
            "gen_ai.tool.call.arguments": '{"order": 7}',
        },
    )
    complete.set_status(Status(StatusCode.OK))
    complete.end()
    bare = tracer.start_span(
        "execute_tool lookup_order", attributes={"gen_ai.operation.name": "execute_tool"}
    )
    bare.end()
    sent.update(complete=complete, bare=bare)


def span_ids(span: Any) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


@pytest.fixture
def sent(sdk_export) -> dict[str, Any]:
    spans: dict[str, Any] = {}
    sdk_export(lambda tracer: tool_spans(tracer, spans), resource={"service.name": "shop-agent"})
    return spans


def test_it_stores_a_tool_span_missing_attributes_named_after_its_span(sent):
    trace_id, span_id = span_ids(sent["bare"])

    bare = Invocation.objects.get(trace_id=trace_id, span_id=span_id)

    assert (bare.kind, bare.tool_name, bare.status, bare.arguments) == (
        "tool", "lookup_order", "ok", None,
    )  # fmt: skip
    assert Trace.objects.get(trace_id=trace_id).tool_calls == 1  # a tool call all the same


def test_it_counts_the_producers_tool_spans_and_missing_attributes(sent):
    producer = OtlpProducer.objects.get(name="shop-agent")

    assert producer.dialect == "genai"
    assert producer.tool_spans == 2
    assert (producer.missing_tool_name, producer.missing_status, producer.missing_arguments) == (
        1, 0, 1,
    )  # fmt: skip


def test_it_stores_a_tool_span_with_status_unset_as_ok_and_not_incomplete(sdk_export):
    spans: dict[str, Any] = {}

    def unset_tool_span(tracer: Any) -> None:
        # As the OpenTelemetry spec has instrumentations do: a success leaves the status unset.
        span = tracer.start_span(
            "execute_tool get_weather",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.arguments": '{"city": "Paris"}',
            },
        )
        span.end()
        spans["unset"] = span

    sdk_export(unset_tool_span, resource={"service.name": "weather-agent"})

    trace_id, span_id = span_ids(spans["unset"])
    stored = Invocation.objects.get(trace_id=trace_id, span_id=span_id)
    assert (stored.tool_name, stored.status, stored.error_kind) == ("get_weather", "ok", "")
    producer = OtlpProducer.objects.get(name="weather-agent")
    assert (producer.tool_spans, producer.missing_status, producer.recent_incomplete) == (1, 0, [])


def test_it_lists_producers_with_their_incomplete_tool_spans(sent, api):
    response = api.get("/otlp/producers")

    assert response.status_code == 200
    [producer] = response.json()
    trace_id, span_id = span_ids(sent["bare"])
    assert producer["name"] == "shop-agent"
    assert producer["tool_spans"] == 2
    assert producer["recent_incomplete"] == [
        {
            "trace_id": trace_id,
            "span_id": span_id,
            "tool_name": "lookup_order",
            "missing": ["tool_name", "arguments"],
            "started_at": producer["recent_incomplete"][0]["started_at"],
        }
    ]


def test_it_lists_one_producer_by_name(sent, sdk_export, api):
    sdk_export(lambda tracer: tool_spans(tracer, {}), resource={"service.name": "other-agent"})

    names = [p["name"] for p in api.get("/otlp/producers", params={"name": "other-agent"}).json()]

    assert names == ["other-agent"]


def test_it_asks_for_a_read_key_to_list_producers(sent, live_server, make_key):
    headers = {"Authorization": f"Bearer {make_key('report')}"}

    response = httpx.get(f"{live_server.url}/api/v1/otlp/producers", headers=headers)

    assert response.status_code == 403
    assert "read" in response.json()["detail"]


@pytest.mark.parametrize("page", ["changelist", "change"])
def test_it_shows_producers_in_the_admin(sent, admin_client, page):
    producer = OtlpProducer.objects.get(name="shop-agent")
    args = [producer.pk] if page == "change" else []

    response = admin_client.get(reverse(f"admin:traces_app_otlpproducer_{page}", args=args))

    assert response.status_code == 200
    assert "shop-agent" in response.content.decode()
    if page == "change":
        assert "lookup_order" in response.content.decode()
