"""The tools, tool detail and evidence pages in a real Chromium."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from planner_app import ruleset_versions
from planner_app.models import Capability, CapabilityMapping
from tests.ares_site.browser import assert_stayed_local
from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("rollups_and_rules_afresh")]

HOSTILE = "<img src=x onerror='window.__pwned=1'>"


def record(tool: str, count: int, hours_ago: int = 1, **fields: Any) -> None:
    started = datetime.now(UTC) - timedelta(hours=hours_ago)
    spans = [
        make_span(tool_name=tool, started_at=started.isoformat(), **fields) for _ in range(count)
    ]
    record_invocations([InvocationIn.model_validate(span) for span in spans])


def test_it_sorts_the_tools_and_opens_one_with_its_evidence_chart(
    staff_page: Any, live_server: Any, screenshot: Callable[[Any, str], Path]
) -> None:
    record("calculator", 2, latency_ms=40.0)
    record("calculator", 1, status="error", error_kind="timeout", hours_ago=2)
    record("web_search", 5, latency_ms=250.0)
    record(HOSTILE, 1)
    staff_page.goto(f"{live_server.url}/tools/")
    assert "last 24 hours" in staff_page.locator(".range-picker .range").inner_text()
    staff_page.click("#tools-table th a[data-sort=calls]")
    staff_page.wait_for_url("**sort=-calls")
    first = staff_page.locator("#tools-table tbody tr").first
    assert first.get_attribute("data-tool") == "web_search"
    assert HOSTILE in staff_page.locator("#tools-table").inner_text()
    assert staff_page.evaluate("window.__pwned") is None
    screenshot(staff_page, "tools")

    staff_page.click("#tools-table a.tool-link >> text=calculator")
    staff_page.wait_for_selector("#evidence-score .plot[data-rendered=true]")
    assert staff_page.locator("#tool-name").inner_text() == "calculator"
    assert staff_page.locator("#calls").inner_text() == "3"
    assert staff_page.locator("#evidence-score table tbody tr").count() >= 24
    assert staff_page.locator("#error-kinds .plot[data-rendered=true]").count() == 1
    assert "timeout" in staff_page.locator("#failures").inner_text()
    screenshot(staff_page, "tool-detail")
    assert_stayed_local(staff_page, live_server)


def test_it_shows_a_capabilitys_candidates_and_where_the_leader_changed(
    staff_page: Any, live_server: Any, screenshot: Callable[[Any, str], Path]
) -> None:
    checksum = Capability.objects.create(name="Checksum", description="Digest some bytes")
    for tool in ("hash_tool", "json_tools"):
        CapabilityMapping.objects.create(capability=checksum, tool=tool)
    ruleset_versions.record_version("two candidates for Checksum")
    record("hash_tool", 3, hours_ago=4)
    record("json_tools", 3, hours_ago=4, status="error", error_kind="tool_error")
    record("hash_tool", 3, hours_ago=3, status="error", error_kind="timeout")
    record("json_tools", 3, hours_ago=3)
    staff_page.goto(f"{live_server.url}/evidence/")
    staff_page.click("#capabilities a >> text=Checksum")
    staff_page.wait_for_selector("#capability-scores .plot[data-rendered=true]")
    assert staff_page.locator("#capability-name").inner_text() == "Checksum"
    flips = staff_page.locator("#flips tbody").inner_text()
    assert "hash_tool\tjson_tools" in flips
    parts = staff_page.locator("#parts tbody tr")
    assert sorted(parts.nth(i).get_attribute("data-tool") for i in range(2)) == [
        "hash_tool", "json_tools"
    ]  # fmt: skip
    legend = staff_page.locator("#capability-scores .legend").text_content() or ""
    assert "hash_tool" in legend and "Leader changes" in legend
    screenshot(staff_page, "evidence")
    assert_stayed_local(staff_page, live_server)
