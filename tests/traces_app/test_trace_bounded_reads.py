"""Reads of a trace's spans carry the trace's time bounds, and still read every span.

On PostgreSQL the span table is partitioned by day on started_at: a read by trace id alone
probes every day's partition, one bounded by the trace's [started_at, ended_at] only its
days. Each read below is run in-process and its SQL checked for both bounds on the span
table; then the bounded reads are shown to miss nothing: a trace across midnight UTC, and
a span that arrives later with an earlier start.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from planner_app import version_effects
from planner_app.agents import session_results, site_agents
from planner_app.agents.recall import RecallScope
from planner_app.discovery import site_history
from planner_app.proposals import traffic
from tests.conftest import make_span
from tests.traces_app.test_otlp_bad_input import export_request, tool_span
from traces_app import sessions, timeline, tool_chains
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral, Invocation, Score, Trace
from traces_app.partitions.layout import SPAN_TABLE, known_days
from traces_app.rollups.ranges import TimeRange
from traces_app.schemas import InvocationIn
from traces_app.scores.judgements import settle_pending_scores
from traces_app.spirals.scanning import detect_spirals
from traces_app.templatetags.score_panels import tool_scores

pytestmark = pytest.mark.django_db

# A bound on the span table's started_at, by its name or a subquery's alias (U0, V0, ...).
SPAN_BOUND = re.compile(r'(?:"traces_app_invocation"|\b[A-Z]\d+)\."started_at" (>=|<=) ')


@pytest.fixture(autouse=True)
def partitions_asked_again() -> Iterator[None]:
    """Forget the day partitions ingest saw: a test's transaction takes those it made along."""
    known_days.forget()
    yield
    known_days.forget()


def midnight(days_ago: int) -> datetime:
    """Return the start of the UTC day `days_ago` days before today."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days_ago)


def store(*spans: dict[str, Any]) -> None:
    """Store spans through ingest's one write path."""
    outcomes = record_invocations([InvocationIn.model_validate(span) for span in spans])
    assert all(outcome is True for outcome in outcomes)


def spiral_trace(start: datetime) -> Trace:
    """Store a trace across `start` (a midnight): an LLM turn, four failed calls, a fix."""
    trace_id = secrets.token_hex(16)

    def at(seconds: float) -> str:
        return (start + timedelta(seconds=seconds)).isoformat()

    common = {"trace_id": trace_id, "session_id": f"s-{trace_id[:8]}", "latency_ms": 100}
    failed = {"status": "error", "error_kind": "timeout", "error_message": "timed out"}
    store(
        make_span(**common, kind="llm", tool_name="", model="m", started_at=at(-90)),
        *(
            make_span(**common, **failed, started_at=at(-60 + 20 * n), tool_call_id=f"c{n}")
            for n in range(4)
        ),
        make_span(**common, chosen_by="planner", tool_name="lookup", started_at=at(60)),
    )
    return Trace.objects.get(pk=trace_id)


@pytest.fixture
def trace() -> Trace:
    """A trace of six spans, from 90 s before to 60 s after midnight two days ago."""
    return spiral_trace(midnight(2))


def span_statements(captured: CaptureQueriesContext) -> list[str]:
    """Return the SQL of the captured statements that read or change stored spans."""
    return [
        query["sql"]
        for query in captured.captured_queries
        if "traces_app_invocation" in query["sql"]
        and not query["sql"].lstrip().upper().startswith("INSERT")
    ]


def assert_bounded(statements: list[str]) -> None:
    assert statements, "the read read no span"
    for sql in statements:
        assert set(SPAN_BOUND.findall(sql)) == {">=", "<="}, sql


def staff_client(admin_user: Any) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def read_trace_page(trace: Trace, context: dict[str, Any]) -> None:
    response = context["staff"].get(f"/traces/{trace.pk}/")
    assert response.status_code == 200
    assert response.content.count(b"lookup") >= 1


def read_trace_admin(trace: Trace, context: dict[str, Any]) -> None:
    response = context["staff"].get(f"/admin/traces_app/trace/{trace.pk}/change/")
    assert response.status_code == 200
    assert response.content.count(b"lookup") >= 1


def read_trace_api(trace: Trace, context: dict[str, Any]) -> None:
    response = context["api"].get(f"/api/v1/traces/{trace.pk}")
    assert response.status_code == 200, response.content
    assert len(response.json()["spans"]) == 6


def read_traces_with_spans(trace: Trace, context: dict[str, Any]) -> None:
    since = (trace.started_at - timedelta(minutes=1)).isoformat()
    response = context["api"].get("/api/v1/traces", {"include": "spans", "since": since})
    assert response.status_code == 200, response.content
    assert [len(item["spans"]) for item in response.json()["items"]] == [6]


def read_spiral_page(trace: Trace, context: dict[str, Any]) -> None:
    spiral = FailureSpiral.objects.get(trace=trace)
    response = context["staff"].get(f"/spirals/{spiral.pk}/")
    assert response.status_code == 200
    assert response.content.count(b"timed out") >= 1


def read_session(trace: Trace, context: dict[str, Any]) -> None:
    detail = sessions.session_detail(trace.session_id)
    assert len(detail.tool_sequence) == 5


def read_session_rows(trace: Trace, context: dict[str, Any]) -> None:
    page = sessions.session_rows(sessions.SessionFilters(), limit=10)
    assert page.rows[0].tools == {"calculator", "lookup"}


def read_recall(trace: Trace, context: dict[str, Any]) -> None:
    for scope in (
        RecallScope(agent="math-tutor", session_id=trace.session_id, trace_id=trace.pk),
        RecallScope(agent="math-tutor", session_id="", trace_id=trace.pk),
    ):
        assert len(session_results._own_tool_spans(scope)) == 5


def write_agents_over_otlp(trace: Trace, context: dict[str, Any]) -> None:
    """A tool span waits for its agent span, which the next request brings."""
    agent_id, trace_id = bytes.fromhex("ab" * 8), bytes.fromhex(trace.pk)
    start = int(trace.started_at.timestamp() * 1e9)
    child = tool_span(trace_id=trace_id, parent_span_id=agent_id, start_time_unix_nano=start)
    named = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "otlp-agent"}
    agent = tool_span(
        trace_id=trace_id,
        span_id=agent_id,
        name="invoke_agent otlp-agent",
        start_time_unix_nano=start - 10**9,
        attributes=named,
    )
    for request in (export_request(child), export_request(agent)):
        response = context["otlp"](request.SerializeToString())
        assert response.status_code == 200, response.content
    stored = Invocation.objects.filter(trace_id=trace.pk, span_id=child.span_id.hex())
    assert list(stored.values_list("agent", flat=True)) == ["otlp-agent"]


def read_recorded_requests(trace: Trace, context: dict[str, Any]) -> None:
    Trace.objects.filter(pk=trace.pk).update(request_text="add one and one")
    outcomes, _ = version_effects.recorded_requests(Trace.objects.filter(pk=trace.pk))
    assert [outcome.trace_id for outcome in outcomes] == [trace.pk]


def read_traffic(trace: Trace, context: dict[str, Any]) -> None:
    Trace.objects.filter(pk=trace.pk).update(request_text="add one and one")
    [served] = traffic.recorded_traffic(limit=10)
    assert len(served.calls) == 5


def settle_scores(trace: Trace, context: dict[str, Any]) -> None:
    span = context["first_span"]
    Score.objects.create(
        name="quality", data_type="numeric", value=1, source="human", trace_id=trace.pk,
        span_id=span.span_id, reported_by="t", pending=True,
    )  # fmt: skip
    assert settle_pending_scores() == (1, 0)


def read_tool_scores(trace: Trace, context: dict[str, Any]) -> None:
    span = context["lookup_span"]
    Score.objects.create(
        name="quality", data_type="numeric", value=1, source="human", trace_id=trace.pk,
        span_id=span.span_id, reported_by="t",
    )  # fmt: skip
    now = datetime.now(UTC)
    panel = tool_scores("lookup", TimeRange(now - timedelta(hours=1), now + timedelta(hours=1), ""))
    assert sum(row["count"] for row in panel["rows"]) == 1


# Each read of a trace's spans, run on the trace; each asserts what it read.
READS: dict[str, Callable[[Trace, dict[str, Any]], Any]] = {
    "trace page": read_trace_page,
    "trace admin page": read_trace_admin,
    "trace API": read_trace_api,
    "traces API include=spans": read_traces_with_spans,
    "traces list rows": lambda trace, _: timeline.trace_rows([trace]),
    "spiral page": read_spiral_page,
    "session detail": read_session,
    "session rows": read_session_rows,
    "tool chains": lambda trace, _: tool_chains.chain_report(
        trace.started_at, trace.ended_at + timedelta(seconds=1)
    ),
    "recompute totals": lambda trace, _: trace.recompute_totals(),
    "detect spirals": lambda trace, _: detect_spirals(trace.pk),
    "breaker reads calls": lambda trace, _: site_agents.trace_calls(trace.pk),
    "token budget cut": lambda trace, context: site_agents.record_reduction(
        trace.pk, context["first_span"].span_id, "truncated", 5
    ),
    "recorded requests": read_recorded_requests,
    "planned requests": lambda trace, _: list(
        version_effects.planned_requests(Trace.objects.filter(pk=trace.pk))
    ),
    "discovery offers": lambda trace, _: site_history.discovery_offers({trace.pk}),
    "proposal traffic": read_traffic,
    "recall": read_recall,
    "agent attribution": write_agents_over_otlp,
    "pending scores": settle_scores,
    "tool score panel": read_tool_scores,
}


@pytest.fixture
def context(admin_user: Any, make_key: Callable[..., str]) -> dict[str, Any]:
    key = make_key("report", "read")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    def otlp(body: bytes) -> Any:
        return api.post("/v1/traces", data=body, content_type="application/x-protobuf")

    return {"staff": staff_client(admin_user), "api": api, "otlp": otlp}


@pytest.mark.parametrize("name", list(READS))
def test_each_read_by_trace_carries_the_trace_bounds(
    name: str, trace: Trace, context: dict[str, Any]
) -> None:
    trace.refresh_from_db()
    spans = Invocation.objects.filter(trace=trace)
    context.update(first_span=spans.first(), lookup_span=spans.get(tool_name="lookup"))
    with CaptureQueriesContext(connection) as captured:
        READS[name](trace, context)
    statements = span_statements(captured)
    if name == "agent attribution":  # the attribution's own, not ingest's insert path
        statements = [sql for sql in statements if "agent_awaits" in sql]
    assert_bounded(statements)


def test_the_bound_check_sees_an_unbounded_read(trace: Trace) -> None:
    with CaptureQueriesContext(connection) as captured:
        list(trace.invocations.all())
    with pytest.raises(AssertionError):
        assert_bounded(span_statements(captured))


def test_a_trace_across_midnight_reads_all_its_spans(trace: Trace, context: dict[str, Any]) -> None:
    days = {span.started_at.date() for span in Invocation.objects.filter(trace=trace)}
    assert len(days) == 2
    detail = context["api"].get(f"/api/v1/traces/{trace.pk}").json()
    assert len(detail["spans"]) == 6
    assert {span["started_at"][:10] for span in detail["spans"]} == {str(d) for d in days}
    spans, more = timeline.trace_spans(trace)
    assert (len(spans), more) == (6, False)
    Trace.objects.filter(pk=trace.pk).update(span_count=0, tool_calls=0, failed_calls=0)
    trace.recompute_totals()
    trace.refresh_from_db()
    assert (trace.span_count, trace.tool_calls, trace.failed_calls) == (6, 5, 4)


def test_a_span_arriving_later_with_an_earlier_start_is_read(
    trace: Trace, context: dict[str, Any]
) -> None:
    first_start = trace.started_at
    earlier = first_start - timedelta(days=1, hours=3)
    store(make_span(trace_id=trace.pk, tool_name="early", started_at=earlier.isoformat()))
    trace.refresh_from_db()
    assert trace.started_at == earlier
    detail = context["api"].get(f"/api/v1/traces/{trace.pk}").json()
    assert [span["tool_name"] for span in detail["spans"]][:1] == ["early"]
    assert len(detail["spans"]) == 7
    page = context["staff"].get(f"/traces/{trace.pk}/")
    assert b"early" in page.content
    assert len(Invocation.objects.of_trace(trace)) == 7
    assert len(Invocation.objects.of_trace_ids([trace.pk])) == 7


def test_reads_of_several_traces_cover_each_of_their_days(context: dict[str, Any]) -> None:
    traces = [spiral_trace(midnight(days)) for days in (1, 3, 5)]
    assert {len(Invocation.objects.of_traces(traces).filter(trace=t)) for t in traces} == {6}
    assert len(Invocation.objects.of_trace_ids([t.pk for t in traces])) == 18
    rows = timeline.trace_rows(traces)
    assert [row.tools for row in rows] == [["calculator", "lookup"]] * 3


def test_no_trace_reads_no_span() -> None:
    assert list(Invocation.objects.of_trace_ids(["0" * 32])) == []
    assert list(Invocation.objects.of_traces([])) == []


def scanned_partitions(spans: Any) -> set[str]:
    """Return the span table's day partitions that PostgreSQL's plan of a query scans."""
    sql, params = spans.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    found, nodes = set(), [plan[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        if node.get("Relation Name", "").startswith(f"{SPAN_TABLE}_p"):
            found.add(node["Relation Name"])
        nodes += node.get("Plans", [])
    return found


@pytest.mark.postgres
def test_the_trace_detail_read_scans_only_its_days_partitions(trace: Trace) -> None:
    for days in range(3, 9):  # six more days of spans, each day its partition
        spiral_trace(midnight(days) + timedelta(hours=12))
    everything = scanned_partitions(Invocation.objects.filter(trace=trace))
    assert len(everything) >= 7  # by trace id alone: every day's partition
    detail = Invocation.objects.of_trace(trace).order_by("started_at", "pk")
    scanned = scanned_partitions(detail)
    assert len(scanned) == 2  # the trace runs across midnight: its two days
    days = {f"{SPAN_TABLE}_p{moment:%Y%m%d}" for moment in (trace.started_at, trace.ended_at)}
    assert scanned == days
    assert len(list(detail)) == 6
