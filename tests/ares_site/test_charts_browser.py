"""Charts in a real Chromium: the log-scale switch, no select tools, "no data" for empty ones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.ares_site.browser import assert_stayed_local
from tests.conftest import make_span
from traces_app.schemas import InvocationIn
from traces_app.services import record_invocations

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("rollups_and_rules_afresh")]


def test_a_latency_chart_switches_to_a_log_scale(staff_page: Any, live_server: Any) -> None:
    spans = [
        make_span(tool_name="web_search", latency_ms=latency,
                  started_at=(datetime.now(UTC) - timedelta(hours=hours)).isoformat())
        for hours, latency in [(1, 30_000.0), (2, 12.0), (3, 15.0), (4, 11.0)]
    ]  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    page = staff_page
    page.goto(f"{live_server.url}/tools/web_search/")
    page.wait_for_selector("#latency .plot[data-rendered=true]")
    assert page.evaluate("document.querySelector('#latency .plot').layout.yaxis.type") == "linear"

    page.check("#latency input[data-log-scale]")
    page.wait_for_selector("#latency .plot[data-scale=log]")
    assert page.evaluate("document.querySelector('#latency .plot').layout.yaxis.type") == "log"
    assert page.locator(".modebar-btn[data-val='lasso']").count() == 0

    page.uncheck("#latency input[data-log-scale]")
    page.wait_for_selector("#latency .plot[data-scale=linear]")
    assert_stayed_local(page, live_server)


def test_an_empty_chart_says_no_data(staff_page: Any, live_server: Any) -> None:
    page = staff_page
    page.goto(f"{live_server.url}/")

    assert page.locator("#calls-over-time .no-data").inner_text() == "No data in this range."
    assert page.locator("#calls-over-time .plot").count() == 0  # no bare axes
    assert_stayed_local(page, live_server)
