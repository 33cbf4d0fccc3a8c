"""Chains and drill-down in a real Chromium: the chains page, a chart bucket opening its traces."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.ares_site.browser import assert_stayed_local
from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("rollups_and_rules_afresh")]

NOW = datetime.now(UTC)


def store_trace(hours_ago: float, *steps: tuple[str, str]) -> str:
    """Store one trace calling the (tool, status) steps in order; return its id."""
    trace_id, start = secrets.token_hex(16), NOW - timedelta(hours=hours_ago)
    spans = [
        make_span(trace_id=trace_id, tool_name=tool, status=status,
                  error_kind="tool_error" if status == "error" else "",
                  started_at=(start + timedelta(seconds=index)).isoformat())
        for index, (tool, status) in enumerate(steps)
    ]  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    return trace_id


# The index of the tallest bar of the chart's first series (its busiest bucket).
TALLEST = """(id) => {
  const bars = document.querySelector('#' + id + ' .trace.bars');
  const heights = [...bars.querySelectorAll('.point path')].map(
    (path) => path.getBoundingClientRect().height);
  return heights.indexOf(Math.max(...heights));
}"""


def test_a_bucket_of_the_overview_chart_opens_its_traces(staff_page: Any, live_server: Any) -> None:
    busy = [store_trace(3.5, ("search", "ok"), ("fetch", "error")) for _ in range(2)]
    other = store_trace(10.5, ("search", "ok"))
    page = staff_page
    page.goto(f"{live_server.url}/?range=24h")
    page.wait_for_selector("#calls-over-time .plot[data-rendered=true]")
    assert page.locator("#calls-over-time .drill-note").count() == 1
    tallest = page.evaluate(TALLEST, "calls-over-time")
    bars = page.locator("#calls-over-time .trace.bars").first.locator(".point path")
    bars.nth(tallest).click(force=True)
    page.wait_for_url("**/traces/?since=*")
    listed = page.locator("#traces").inner_html()
    assert all(trace_id in listed for trace_id in busy) and other not in listed
    query = parse_qs(urlparse(page.url).query)
    since, until = (datetime.fromisoformat(query[name][0]) for name in ("since", "until"))
    assert until - since == timedelta(hours=1) and since <= NOW - timedelta(hours=3.5) < until
    assert_stayed_local(page, live_server)


def test_a_bucket_of_a_tool_chart_opens_that_tools_traces(
    staff_page: Any, live_server: Any
) -> None:
    failing = store_trace(2.5, ("search", "ok"), ("fetch", "error"))
    store_trace(2.5, ("search", "ok"))  # the same bucket, without fetch
    page = staff_page
    page.goto(f"{live_server.url}/tools/fetch/?range=24h")
    page.wait_for_selector("#error-kinds .plot[data-rendered=true]")
    page.locator("#error-kinds .trace.bars .point path").first.click(force=True)
    page.wait_for_url("**/traces/?*tool=fetch*")
    listed = page.locator("#traces").inner_html()
    assert failing in listed and listed.count("/traces/") == 1
    assert "status=error" in page.url


def test_the_chains_page_lists_chains_and_links_their_traces(
    staff_page: Any, live_server: Any
) -> None:
    ids = [store_trace(1 + n, ("search", "ok"), ("<b>fetch</b>", "error")) for n in range(3)]
    page = staff_page
    page.goto(f"{live_server.url}/chains/")
    row = page.locator("#chains tbody tr").first
    assert row.locator(".chain").inner_text() == "search → <b>fetch</b>"  # escaped, shown as text
    assert row.locator(".count").inner_text() == "3"
    assert row.locator(".failure-rate").inner_text() == "100.0%"
    assert page.locator("#chains b").count() == 0
    row.locator("a.trace-link").first.click()
    page.wait_for_url(f"**/traces/{ids[0]}/")
    assert_stayed_local(page, live_server)
