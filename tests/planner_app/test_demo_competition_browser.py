"""The evidence pages in Chromium on make run's demo: tools compete, and a leader flips."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

from tests.ares_site import conftest as browser_fixtures
from tools_app import site_engine

pytestmark = pytest.mark.browser

browser = browser_fixtures.browser
page = browser_fixtures.page
staff_page = browser_fixtures.staff_page
rollups_and_rules_afresh = browser_fixtures.rollups_and_rules_afresh
screenshot = browser_fixtures.screenshot

ADD = "mcp.demo.add"


@pytest.fixture
def make_run_demo(
    live_server: Any, default_rules: None, rollups_and_rules_afresh: None, settings: Any
) -> Iterator[None]:
    """Load what `make run` loads: 2,000 spans and the demo MCP server with its mappings."""
    settings.ARES_TOOL_SETTINGS_CHECK_S = 0
    call_command("ares_demo", "--invocations", "2000", stdout=io.StringIO(), stderr=io.StringIO())
    yield
    site_engine.shutdown()  # the live server's session with the demo server


def test_the_evidence_page_lists_two_candidates_and_the_leader_flips(
    staff_page: Any, live_server: Any, make_run_demo: None, screenshot: Any
) -> None:
    staff_page.goto(f"{live_server.url}/evidence/")
    row = staff_page.locator("#capabilities tr[data-capability=Summation]")
    assert row.locator("td").nth(2).locator("a").all_inner_texts() == ["calculator", ADD]
    assert row.locator(".badge.ok").count() == 1  # the leader now: the calculator, first
    hashing = staff_page.locator("#capabilities tr[data-capability=Hashing] td").nth(2)
    assert hashing.locator("a").all_inner_texts() == ["hash_tool", "mcp.demo.sha256"]
    row.locator("a", has_text="Summation").click()
    staff_page.wait_for_selector("#flips")
    flips = [
        tr.locator("td").all_inner_texts()[1:3]
        for tr in staff_page.locator("#flips tbody tr").all()
    ]
    assert flips == [["calculator", ADD], [ADD, "calculator"]]
    why = staff_page.locator("#flips tbody tr").first.locator("td").last.inner_text()
    assert why.startswith(f"{ADD} ") and "vs calculator" in why
    parts = staff_page.locator("#parts tbody tr")
    assert sorted(parts.evaluate_all("rows => rows.map(r => r.dataset.tool)")) == [
        "calculator", ADD,
    ]  # fmt: skip
    staff_page.wait_for_selector("figure.chart .js-plotly-plot")
    drawn = staff_page.evaluate(
        "() => document.querySelector('figure.chart .js-plotly-plot').data"
        ".map(trace => [trace.name, trace.x.length])"
    )
    lines = {name: points for name, points in drawn}
    assert {"calculator", ADD} <= set(lines) and lines["Leader changes"] == 2
    screenshot(staff_page, "evidence-summation-demo")
