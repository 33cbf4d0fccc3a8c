"""The overview in a real Chromium: charts drawn from our own plotly.js, the range picker."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.ares_site.browser import assert_stayed_local
from traces_app.demo_spans import demo_trace_stream
from traces_app.ingest.recording import record_invocations
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.browser


@pytest.fixture
def demo_data(transactional_db: None) -> None:
    """Record 600 demo spans of the last day, rollups included."""
    for trace in demo_trace_stream(600, seed=3):
        record_invocations([InvocationIn.model_validate(span) for span in trace])
    recount_all_marked_rollups()


def test_it_draws_the_overview_charts_with_nothing_from_outside(
    staff_page: Any, live_server: Any, demo_data: None, screenshot: Any
) -> None:
    staff_page.goto(f"{live_server.url}/")
    staff_page.wait_for_selector(".plot[data-rendered=true]")
    staff_page.wait_for_function(
        "document.querySelectorAll('.plot[data-rendered=true]').length === 4"
    )
    assert staff_page.locator("#calls-over-time .plot g.point").count() > 0  # bars drawn
    assert int(staff_page.locator("#calls").inner_text()) == 600
    assert staff_page.locator("#failing-tools tbody tr[data-tool]").count() > 0
    screenshot(staff_page, "overview")
    assert_stayed_local(staff_page, live_server)


def test_it_changes_the_range_from_the_picker(
    staff_page: Any, live_server: Any, demo_data: None
) -> None:
    staff_page.goto(f"{live_server.url}/")
    staff_page.click(".range-picker button[value='7d']")
    staff_page.wait_for_url("**/?range=7d*")
    assert parse_qs(urlparse(staff_page.url).query)["range"] == ["7d"]
    assert "last 7 days" in staff_page.locator(".range-picker .range").inner_text()
    assert staff_page.locator(".range-picker button.current").inner_text() == "7d"
    staff_page.wait_for_selector(".plot[data-rendered=true]")
