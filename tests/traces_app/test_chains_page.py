"""The chains page through the test client, and the drill-down links charts carry."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.test import Client

from tests.conftest import make_span
from traces_app.charts import bucket_drilldown, category_drilldown, make_chart
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def chain(db: None) -> str:
    """Store one trace: search, then fetch failing; return its id."""
    trace_id = secrets.token_hex(16)
    spans = [
        make_span(trace_id=trace_id, tool_name="search",
                  started_at=(NOW - timedelta(minutes=9)).isoformat()),
        make_span(trace_id=trace_id, tool_name="fetch", status="error", error_kind="timeout",
                  started_at=(NOW - timedelta(minutes=8)).isoformat()),
    ]  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    return trace_id


def test_it_sends_anonymous_visitors_to_the_login_page(client: Client, db: None) -> None:
    response = client.get("/chains/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_it_lists_a_chain_with_its_trace(admin_client: Client, chain: str) -> None:
    response = admin_client.get("/chains/", {"min_count": "1"})
    [listed] = response.context["report"].chains
    assert listed.tools == ("search", "fetch") and listed.trace_ids == [chain]
    assert f'href="/traces/{chain}/"' in response.content.decode()


def test_bad_filters_are_explained_and_left_out(admin_client: Client, chain: str) -> None:
    response = admin_client.get("/chains/", {"min_count": "0", "min_calls": "many"})
    assert response.status_code == 200
    errors = " ".join(response.context["filter_errors"])
    assert "Seen at least" in errors and "Fewest calls" in errors
    assert response.context["report"].chains == []  # the default: seen at least twice


def test_the_api_link_gives_the_same_report(admin_client: Client, chain: str) -> None:
    response = admin_client.get("/chains/", {"min_count": "1", "tool": "fetch"})
    query = parse_qs(response.context["api_query"])
    assert (query["min_count"], query["tool"]) == (["1"], ["fetch"])
    api = admin_client.get(f"/api/v1/chains?{response.context['api_query']}").json()
    assert [chain["tools"] for chain in api["chains"]] == [["search", "fetch"]]


def test_a_bucket_link_covers_its_bucket_with_the_filters() -> None:
    import plotly.graph_objects as go

    start = datetime(2026, 11, 30, 13, tzinfo=UTC)
    bars = [go.Bar(x=[start], y=[3], name="Calls"), go.Bar(x=[start], y=[1], name="Failures")]
    chart = make_chart("c", "C", bars, ["x"], [[1]])
    drilled = bucket_drilldown(chart, timedelta(hours=1), {"tool": "fetch"},
                               by_series={"Failures": {"status": "error"}})  # fmt: skip
    calls, failures = (parse_qs(urlparse(links[0]).query) for links in drilled.drill)
    assert urlparse(drilled.drill[0][0]).path == "/traces/"
    assert calls == {"since": ["2026-11-30T13:00:00+00:00"], "until": ["2026-11-30T14:00:00+00:00"],
                     "tool": ["fetch"]}  # fmt: skip
    assert failures["status"] == ["error"] and "status" not in calls


def test_a_category_chart_links_only_the_categories_it_knows() -> None:
    import plotly.graph_objects as go

    chart = make_chart("k", "K", [go.Bar(x=["timeout", "other"], y=[2, 1])], ["x"], [[1]])
    drilled = category_drilldown(chart, {"timeout": "/traces/?status=error"})
    assert drilled.drill == [["/traces/?status=error", ""]]
