"""The overview page through the test client: its numbers come from the rollups of the range."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral, Invocation
from traces_app.rollups.histogram import histogram_of, percentile_from_histogram
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.schemas import InvocationIn

NOW = datetime.now(UTC).replace(microsecond=0)


def at(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).isoformat()


def record(*spans: dict[str, Any]) -> None:
    """Store spans and bring the rollups up to date, as the refresh task would."""
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    recount_all_marked_rollups()


def llm_span(**fields: Any) -> dict[str, Any]:
    return make_span(
        kind="llm", tool_name="", chosen_by=None, ran_on=None, model="gpt-4o-mini", **fields
    )


def chart_rows(response: Any, chart_id: str) -> list[list[Any]]:
    chart = next(c for c in response.context["overview"].charts if c.id == chart_id)
    return [list(row) for row in chart.rows]


def card(response: Any, card_id: str) -> str:
    match = re.search(rf'id="{card_id}">([^<]*)<', response.content.decode())
    assert match, f"no #{card_id} on the page"
    return match.group(1)


@pytest.fixture
def spans(db: None) -> list[dict[str, Any]]:
    """Record tool and LLM spans of the last hours (and one of last week); return them."""
    recorded = [
        make_span(tool_name="web_search", latency_ms=400.0, cost_usd=0.004, started_at=at(10)),
        make_span(tool_name="web_search", status="error", error_kind="timeout", result=None,
                  latency_ms=30_000.0, started_at=at(70)),
        make_span(tool_name="web_search", status="error", error_kind="rate_limited",
                  result=None, latency_ms=20.0, chosen_by="planner", started_at=at(75)),
        make_span(tool_name="calculator", latency_ms=3.0, chosen_by="workflow", started_at=at(5)),
        make_span(tool_name="calculator", status="error", error_kind="invalid_arguments",
                  result=None, latency_ms=2.0, chosen_by="external", started_at=at(125)),
        make_span(tool_name="mcp.time.get_current_time", ran_on="mcp:time", latency_ms=35.0,
                  started_at=at(30)),
        llm_span(input_tokens=1200, output_tokens=80, cost_usd=0.01, latency_ms=700.0,
                 started_at=at(11)),
        llm_span(input_tokens=900, output_tokens=40, cost_usd=0.02, latency_ms=650.0,
                 status="error", error_kind="rate_limited", started_at=at(71)),
    ]  # fmt: skip
    last_week = make_span(tool_name="hash_tool", status="error", error_kind="tool_error",
                          result=None, started_at=at(5 * 24 * 60))  # fmt: skip
    record(*recorded, last_week)
    return recorded


def test_it_shows_totals_that_match_the_recorded_spans(
    admin_client: Client, spans: list[dict[str, Any]]
) -> None:
    response = admin_client.get("/")
    assert response.status_code == 200
    totals = response.context["overview"].totals
    assert (totals.calls, totals.tool_calls, totals.llm_calls, totals.failures) == (8, 6, 2, 4)
    assert (totals.input_tokens, totals.output_tokens) == (2100, 120)
    assert totals.cost_usd == pytest.approx(0.004 + 0.01 + 0.02)
    assert card(response, "calls") == "8"
    assert card(response, "error-rate") == "50.0%"
    assert card(response, "tool-error-rate") == "50.0%"
    assert card(response, "tokens") == "2,220"
    assert card(response, "cost") == "$0.034"  # six significant digits, at least cents
    tool_latencies = [span["latency_ms"] for span in spans if span["kind"] == "tool"]
    p95 = percentile_from_histogram(histogram_of(tool_latencies), 0.95)
    assert card(response, "tool-p95") == f"{p95:,.1f} ms"


def test_it_reads_the_rollups_not_the_raw_spans(
    admin_client: Client, spans: list[dict[str, Any]]
) -> None:
    Invocation.objects.all().delete()  # as the retention purge would
    assert card(admin_client.get("/"), "calls") == "8"


def test_it_charts_calls_failures_tokens_and_cost_per_hour(
    admin_client: Client, spans: list[dict[str, Any]]
) -> None:
    response = admin_client.get("/?range=6h")
    calls = chart_rows(response, "calls-over-time")
    assert len(calls) in (6, 7)  # whole hours overlapping the last 6
    assert sum(row[1] for row in calls) == 8 and sum(row[4] for row in calls) == 4
    tokens = chart_rows(response, "tokens-over-time")
    assert sum(row[1] + row[2] for row in tokens) == 2220
    assert sum(row[3] for row in tokens) == pytest.approx(0.034)
    html = response.content.decode()
    assert html.count('class="plot"') == 4
    assert "vendor/plotly.min.js" in html


def test_it_breaks_tool_calls_down_by_chooser_and_place(
    admin_client: Client, spans: list[dict[str, Any]]
) -> None:
    response = admin_client.get("/")
    assert chart_rows(response, "by-chooser") == [
        ["LLM", 3, "50.0%"],
        ["Outside agent", 1, "16.7%"],
        ["Planner", 1, "16.7%"],
        ["Workflow", 1, "16.7%"],
    ]
    assert chart_rows(response, "by-place") == [["builtin", 5, "83.3%"], ["mcp:time", 1, "16.7%"]]


def test_it_lists_the_top_failing_tools_with_links(
    admin_client: Client, spans: list[dict[str, Any]]
) -> None:
    response = admin_client.get("/?range=24h")
    failing = [
        (item.tool.tool_name, item.rate_text) for item in response.context["overview"].failing_tools
    ]
    assert failing == [("web_search", "66.7%"), ("calculator", "50.0%")]
    html = response.content.decode()
    assert 'href="/tools/web_search/?range=24h"' in html
    assert "rate_limited 1" in html and "timeout 1" in html


def test_it_compares_each_card_with_the_previous_period(admin_client: Client, db: None) -> None:
    record(
        make_span(tool_name="web_search", cost_usd=1.0, started_at=at(60)),
        *[make_span(tool_name="web_search", status="error", error_kind="timeout", result=None,
                    started_at=at(30 * 60 + i)) for i in range(3)],
        make_span(tool_name="web_search", started_at=at(30 * 60 + 5)),
    )  # fmt: skip

    response = admin_client.get("/?range=24h")

    overview = response.context["overview"]
    assert (overview.totals.calls, overview.previous.calls) == (1, 4)
    changes = overview.changes
    assert (changes["calls"].text, changes["calls"].previous) == ("-75.0%", "4")
    assert (changes["error_rate"].text, changes["error_rate"].tone) == ("-75.0 pts", "better")
    assert (changes["cost"].text, changes["cost"].absent) == ("new", True)
    html = response.content.decode()
    assert "-75.0% vs the previous day" in html
    assert "none in the previous day" in html  # the cost, which had nothing to compare with
    assert "Showing <strong>last 24 hours</strong>" in html and "against the previous day" in html


def test_it_ranks_failing_tools_by_count_or_by_rate(admin_client: Client, db: None) -> None:
    many = [make_span(tool_name="busy", started_at=at(5 + i)) for i in range(8)]
    many += [make_span(tool_name="busy", status="error", error_kind="timeout", result=None,
                       started_at=at(20 + i)) for i in range(2)]  # fmt: skip
    few = [make_span(tool_name="flaky", status="error", error_kind="tool_error", result=None,
                     started_at=at(30))]  # fmt: skip
    record(*many, *few)

    by_count = admin_client.get("/?range=24h").context["overview"].failing_tools
    response = admin_client.get("/?range=24h&failing=rate")
    by_rate = response.context["overview"].failing_tools

    assert [item.tool.tool_name for item in by_count] == ["busy", "flaky"]
    assert [(item.tool.tool_name, item.rate_text) for item in by_rate] == [
        ("flaky", "100.0%"), ("busy", "20.0%"),
    ]  # fmt: skip
    assert '<strong aria-current="true">highest failure rate</strong>' in response.content.decode()
    bogus = admin_client.get("/?range=24h&failing=mood").context["overview"].failing_tools
    assert [item.tool.tool_name for item in bogus] == ["busy", "flaky"]


def test_it_links_the_api_and_prefills_the_custom_range(
    admin_client: Client, spans: list[dict[str, Any]]
) -> None:
    since, until = "2026-11-20T10:00", "2026-11-21T12:30"

    html = admin_client.get(f"/?since={since}&until={until}").content.decode()

    assert 'href="/api/v1/tools/stats?since=2026-11-20T10%3A00%3A00%2B00%3A00&amp;until=' in html
    assert f'name="since" step="60" form="custom-range" value="{since}"' in html
    assert f'name="until" step="60" form="custom-range" value="{until}"' in html


@pytest.mark.parametrize(
    ("query", "label", "calls"),
    [("", "last 24 hours", 8), ("?range=6h", "last 6 hours", 8), ("?range=7d", "last 7 days", 9)],
)
def test_it_states_its_range_and_counts_only_what_is_in_it(
    admin_client: Client, spans: list[dict[str, Any]], query: str, label: str, calls: int
) -> None:
    response = admin_client.get(f"/{query}")
    assert f"Showing <strong>{label}</strong>" in response.content.decode()
    assert response.context["overview"].totals.calls == calls


def test_it_takes_a_custom_range(admin_client: Client, spans: list[dict[str, Any]]) -> None:
    since = (NOW - timedelta(hours=3)).strftime("%Y-%m-%dT%H:00")
    response = admin_client.get(f"/?since={since}&until={NOW.strftime('%Y-%m-%dT%H:%M')}")
    assert response.context["time_range"].preset == ""
    assert response.context["range_error"] == ""
    assert response.context["overview"].totals.calls == 8


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?range=forever", "unknown range &#x27;forever&#x27;"),
        ("?since=yesterday&until=today", "is not an ISO 8601 date or time"),
        ("?since=2026-01-01T00:00", "a custom range needs both since and until"),
    ],
)
def test_it_explains_a_bad_range_and_shows_the_default(
    admin_client: Client, spans: list[dict[str, Any]], query: str, message: str
) -> None:
    response = admin_client.get(f"/{query}")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Range not applied" in html and message in html
    assert "Showing <strong>last 24 hours</strong>" in html
    assert response.context["overview"].totals.calls == 8


def repeated_calls(trace_id: str, minutes_ago: float, status: str = "ok") -> list[dict]:
    """Return three identical calls of one tool: a loop (or a failing spiral, if they fail)."""
    error = {"error_kind": "timeout", "result": None} if status == "error" else {}
    return [
        make_span(trace_id=trace_id, tool_name="http_request", arguments={"url": "https://x/1"},
                  status=status, started_at=at(minutes_ago - step), **error)
        for step in range(3)
    ]  # fmt: skip


def test_it_lists_active_spirals_newest_first_with_links(admin_client: Client, db: None) -> None:
    older, newer, ended, old = (secrets.token_hex(16) for _ in range(4))
    record(
        *repeated_calls(older, 90),
        *repeated_calls(newer, 20),
        *repeated_calls(ended, 10, status="error"),  # gave up: unresolved too
        *repeated_calls(old, 3 * 24 * 60),  # active, but outside the range
    )
    response = admin_client.get("/")
    listed = [spiral.trace_id for spiral in response.context["active_spirals"]]
    assert listed == [ended, newer, older]
    html = response.content.decode()
    for trace_id in listed:
        spiral = FailureSpiral.objects.get(trace_id=trace_id)
        assert f'href="/spirals/{spiral.pk}/"' in html
        assert f'href="/traces/{trace_id}/"' in html
    assert FailureSpiral.objects.get(trace_id=ended).resolution == "gave_up"
    assert html.count('<span class="badge resolution gave-up"') == 2  # the note and the row
    assert html.count('<span class="badge resolution ongoing"') == 3


def test_it_says_so_when_the_range_is_empty(admin_client: Client, db: None) -> None:
    html = admin_client.get("/").content.decode()
    assert "No calls in this range" in html
    assert "No tool failed in this range." in html
    assert "No unresolved spirals in this range." in html
    assert "No data in this range." in html  # the charts say so instead of drawing bare axes
    assert 'data-figure="calls-over-time-figure"' not in html


def test_it_sends_anonymous_visitors_to_the_login_page(client: Client, db: None) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_it_refuses_users_who_are_not_staff(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_user("visitor", password="pw-123456"))
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
