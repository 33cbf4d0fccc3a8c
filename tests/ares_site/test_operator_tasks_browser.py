"""An operator's everyday tasks in a real Chromium, each in at most 3 clicks from the overview."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.ares_site.browser import assert_stayed_local
from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.schemas import InvocationIn

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("rollups_and_rules_afresh")]

NOW = datetime.now(UTC).replace(microsecond=0)


def ago(hours: float) -> str:
    return (NOW - timedelta(hours=hours)).isoformat()


def record(*spans: dict[str, Any]) -> None:
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    recount_all_marked_rollups()


@pytest.fixture
def week_of_calls(transactional_db: None) -> str:
    """Store calls of this week and last week, a flaky tool, and a spiral; return its trace."""
    failing = dict(status="error", result=None)
    record(
        # busy fails most often, flaky most by rate.
        *[make_span(tool_name="busy", started_at=ago(1 + i / 10)) for i in range(8)],
        *[make_span(tool_name="busy", error_kind="timeout", error_message="busy timed out",
                    started_at=ago(2 + i / 10), **failing) for i in range(3)],
        make_span(tool_name="flaky", error_kind="tool_error",
                  error_message="flaky: upstream returned 502", started_at=ago(3), **failing),
        make_span(tool_name="flaky", error_kind="tool_error",
                  error_message="flaky: upstream returned 502", started_at=ago(3.5), **failing),
        # Last week: fewer calls.
        *[make_span(tool_name="busy", started_at=ago(24 * 9 + i)) for i in range(3)],
    )  # fmt: skip
    trace_id = secrets.token_hex(16)
    record(
        *[make_span(trace_id=trace_id, tool_name="web_search", arguments={"query": f"mcp {i}"},
                    error_kind="timeout", started_at=ago(0.5 - i / 1000), **failing)
          for i in range(3)],
    )  # fmt: skip
    return trace_id


def test_the_tool_failing_most_by_rate_and_why(
    staff_page: Any, live_server: Any, week_of_calls: str
) -> None:
    page = staff_page
    page.goto(f"{live_server.url}/")
    page.click("#failing-order a:has-text('highest failure rate')")  # 1
    first = page.locator("#failing-tools tbody tr").first
    assert first.get_attribute("data-tool") in ("flaky", "web_search")  # both at 100%
    page.locator("#failing-tools tr[data-tool=flaky] a.traces-link").click()  # 2
    page.wait_for_url("**tool=flaky**")
    page.locator("#traces td.time a").first.click()  # 3
    page.wait_for_selector("section.span:not([hidden])")
    assert "upstream returned 502" in page.locator("section.span:not([hidden])").inner_text()
    assert_stayed_local(page, live_server)


def test_a_failing_spiral_to_what_changed_and_its_trace(
    staff_page: Any, live_server: Any, week_of_calls: str
) -> None:
    spiral = FailureSpiral.objects.get(trace_id=week_of_calls)
    page = staff_page
    page.goto(f"{live_server.url}/")
    row = page.locator("#active-spirals tbody tr", has_text="web_search")
    assert "Gave up" in row.inner_text()  # a failing spiral, listed as unresolved
    row.locator("a.spiral-link").click()  # 1
    page.wait_for_url("**/spirals/*/")
    assert page.locator("#argument-changes tbody tr").count() == 2
    assert "query" in page.locator("#argument-changes").inner_text()
    page.click("#spiral-facts a.trace-link")  # 2
    page.wait_for_selector("section.span:not([hidden])")
    shown = page.locator("section.span:not([hidden])")
    assert shown.get_attribute("id") == f"span-{spiral.first_span_id}"
    assert "1 of 3 in the spiral" in shown.inner_text()
    assert urlparse(page.url).path == f"/traces/{week_of_calls}/"
    assert_stayed_local(page, live_server)


def test_this_week_against_last_week(staff_page: Any, live_server: Any, week_of_calls: str) -> None:
    page = staff_page
    page.goto(f"{live_server.url}/")
    page.click(".range-picker button:has-text('7d')")  # 1
    page.wait_for_url("**/?range=7d")  # the preset alone, not the custom fields
    calls = page.locator(".card", has=page.locator("#calls"))
    assert "vs the previous 7 days" in calls.inner_text()
    assert "+433.3%" in calls.inner_text()  # 16 calls this week, 3 the week before
    assert_stayed_local(page, live_server)
