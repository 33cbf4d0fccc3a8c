"""The trace and spiral pages in a real Chromium: filter, waterfall, spirals, hostile output."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.ares_site.browser import assert_stayed_local
from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.browser

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
RENDERED = '.plot[data-rendered="true"]'


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def record(*spans: dict[str, Any]) -> None:
    record_invocations([InvocationIn.model_validate(span) for span in spans])


def agent_trace(agent: str, tool: str, request_text: str, start: float) -> list[dict[str, Any]]:
    """Return a trace's spans: an LLM turn, a tool call, and a final LLM turn."""
    trace_id = secrets.token_hex(16)
    llm = {"trace_id": trace_id, "agent": agent, "kind": "llm", "tool_name": "",
           "chosen_by": None, "ran_on": None, "model": "gpt-4o-mini", "input_tokens": 900,
           "output_tokens": 40, "latency_ms": 800.0}  # fmt: skip
    return [
        make_span(**llm, request_text=request_text, started_at=at(start)),
        make_span(trace_id=trace_id, agent=agent, tool_name=tool, started_at=at(start + 0.9),
                  latency_ms=350.0),
        make_span(**llm, started_at=at(start + 1.3)),
    ]  # fmt: skip


def spiral_trace() -> str:
    """Store a trace where web_search times out three times and the planner takes over."""
    trace_id = secrets.token_hex(16)
    failing = [
        make_span(trace_id=trace_id, tool_name="web_search", arguments={"query": f"mcp {i}"},
                  status="error", error_kind="timeout", result=None, started_at=at(100 + i),
                  latency_ms=900.0, result_tokens=12)
        for i in range(3)
    ]  # fmt: skip
    record(
        *failing,
        make_span(trace_id=trace_id, tool_name="http_get", chosen_by="planner",
                  arguments={"url": "https://example.org/mcp"}, started_at=at(104)),
    )  # fmt: skip
    return trace_id


def test_it_filters_traces_and_draws_a_trace_waterfall(
    staff_page: Any, live_server: Any, screenshot: Callable[[Any, str], Path]
) -> None:
    record(
        *agent_trace("math-tutor", "calculator", "What is 17% of 2,340?", 0),
        *agent_trace("research-bot", "web_search", "Find articles about MCP", 10),
    )
    page = staff_page
    page.goto(f"{live_server.url}/traces/")
    assert page.locator("#traces tbody tr").count() == 2
    screenshot(page, "traces")

    page.fill("#trace-filters input[name=agent]", "research")  # part of the name is enough
    page.click("#trace-filters button[type=submit]")
    page.wait_for_url("**agent=research**")
    rows = page.locator("#traces tbody tr")
    assert rows.count() == 1
    assert "Find articles about MCP" in rows.first.inner_text()
    assert "web_search" in rows.first.locator("td.tools-used").inner_text()

    rows.first.locator("td a").first.click()
    page.wait_for_selector(f"#waterfall {RENDERED}")
    bars = page.evaluate(
        "Array.from(document.querySelector('#waterfall .plot').data, t => t.y.length)"
    )
    assert sorted(bars) == [1, 2]  # two LLM turns, one tool call
    assert page.locator("section.span").count() == 3
    assert page.locator("a.tool-link").first.get_attribute("href") == "/tools/web_search/"
    screenshot(page, "trace-detail")
    assert_stayed_local(page, live_server)


def test_it_follows_a_spiral_to_its_trace(
    staff_page: Any, live_server: Any, screenshot: Callable[[Any, str], Path]
) -> None:
    trace_id = spiral_trace()
    spiral = FailureSpiral.objects.get(trace_id=trace_id)
    page = staff_page
    page.goto(f"{live_server.url}/spirals/")
    assert page.locator("#spirals tbody tr").count() == 1
    screenshot(page, "spirals")

    page.click("#spirals a.spiral-link")
    page.wait_for_selector(f"#attempts {RENDERED}")
    assert "Planner fallback" in page.locator("#ending").inner_text()
    assert page.locator("#argument-changes tbody tr").count() == 2
    screenshot(page, "spiral-detail")

    page.click("#spiral-facts a.trace-link")
    page.wait_for_selector(f"#waterfall {RENDERED}")
    assert urlparse(page.url).path == f"/traces/{trace_id}/"
    first_attempt = page.locator(f"#span-{spiral.first_span_id}")
    assert "spiral: web_search × 3" in first_attempt.inner_text()
    assert page.locator(".badge.fallback").count() == 1
    assert_stayed_local(page, live_server)


def test_it_shows_a_malicious_tool_result_as_text(staff_page: Any, live_server: Any) -> None:
    hostile = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>"
    trace_id = secrets.token_hex(16)
    record(
        make_span(trace_id=trace_id, tool_name="<img src=x onerror=alert(1)>",
                  result={"html": hostile}, request_text=hostile, latency_ms=40.0),
    )  # fmt: skip
    page = staff_page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

    page.goto(f"{live_server.url}/traces/{trace_id}/")
    page.wait_for_selector(f"#waterfall {RENDERED}")
    # Plotly listens on a drag layer above the bars: move the mouse there, over a bar.
    page.hover("#waterfall .plot .bars .point path", force=True)
    page.wait_for_selector("#waterfall .hoverlayer text")

    assert "<img src=x onerror=alert(1)>" in page.locator("#waterfall .hoverlayer").text_content()
    page.click("details.payload-block:has(pre.result) summary")  # payloads start collapsed
    assert hostile in page.locator("pre.result").inner_text()
    assert "<img src=x onerror=alert(1)>" in page.locator("section.span h3").inner_text()
    page.goto(f"{live_server.url}/traces/")
    assert hostile in page.locator("#traces td.request").inner_text()
    assert page.evaluate("window.__pwned") is None
    assert dialogs == []
    assert_stayed_local(page, live_server)


def test_it_picks_a_span_from_the_tree_and_the_waterfall(staff_page: Any, live_server: Any) -> None:
    trace_id, root = secrets.token_hex(16), secrets.token_hex(8)
    record(
        make_span(trace_id=trace_id, span_id=root, kind="agent", tool_name="", chosen_by=None,
                  ran_on=None, started_at=at(0), latency_ms=3000.0),
        make_span(trace_id=trace_id, parent_span_id=root, tool_name="calculator",
                  started_at=at(0.5), latency_ms=400.0),
        make_span(trace_id=trace_id, parent_span_id=root, tool_name="web_search",
                  status="error", error_kind="timeout", result=None, started_at=at(1.5),
                  latency_ms=1400.0),
    )  # fmt: skip
    page = staff_page
    page.goto(f"{live_server.url}/traces/{trace_id}/")
    page.wait_for_selector(f"#waterfall {RENDERED}")
    visible = "section.span:not([hidden])"
    assert page.locator(visible).count() == 1  # the first span, until another is picked
    nested = page.locator("#span-tree li ul li")
    assert nested.count() == 2  # nested under the agent step
    page.click("#span-tree button.tree-toggle")  # folds them away, then back
    assert nested.first.is_hidden()
    page.click("#span-tree button.tree-toggle")
    assert nested.first.is_visible()
    assert "+" in page.locator("#waterfall .xtick text").first.text_content()
    assert (
        page.locator("#waterfall .modebar-btn[data-attr='dragmode'][data-val='lasso']").count() == 0
    )
    assert (
        page.locator("#waterfall .modebar-btn[data-attr='dragmode'][data-val='select']").count()
        == 0
    )

    page.click("#span-tree a.span-pick:has-text('calculator')")
    assert "calculator" in page.locator(visible).inner_text()
    assert page.locator("#span-tree a.selected").inner_text().endswith("calculator")

    # Click the bar of web_search: bars are drawn in tree order, web_search's the lowest.
    failed = page.evaluate(
        "Array.from(document.querySelectorAll('#waterfall .plot .bars .point path'))"
        ".map(p => p.getBoundingClientRect().top)"
    )
    lowest = max(range(len(failed)), key=lambda index: failed[index])
    box = page.locator("#waterfall .plot .bars .point path").nth(lowest).bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function("location.hash.startsWith('#span-')")
    shown = page.locator(visible)
    assert shown.count() == 1
    assert "web_search" in shown.inner_text() and "timeout" in shown.inner_text()
    assert page.locator(f"{visible} details.payload-block[open]").count() == 0  # collapsed

    page.reload()  # the address names the span: it stays picked
    page.wait_for_selector(f"#waterfall {RENDERED}")
    assert "web_search" in page.locator(visible).inner_text()
    assert_stayed_local(page, live_server)


def test_it_searches_sorts_and_keeps_each_request_on_one_line(
    staff_page: Any, live_server: Any
) -> None:
    long_request = "Compare the quarterly revenue of every subsidiary " * 6
    record(
        *agent_trace("math-tutor", "calculator", long_request, 0),
        make_span(tool_name="web_search", status="error", error_kind="timeout",
                  error_message="upstream mirror-7 timed out", result=None, started_at=at(20),
                  cost_usd=3.5),
    )  # fmt: skip
    page = staff_page
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/traces/")
    cell = page.locator("#traces td.request").last
    row_height = cell.bounding_box()["height"]
    line = page.evaluate("parseFloat(getComputedStyle(document.body).lineHeight)")
    assert row_height < 2.5 * line  # no cell of the row wraps to 3 lines
    # The request's text takes one line box; the whole text is in the title.
    lines = cell.evaluate(
        "td => { const r = document.createRange(); r.selectNodeContents(td.firstChild);"
        " return new Set(Array.from(r.getClientRects(), b => Math.round(b.top))).size; }"
    )
    assert lines == 1
    assert cell.get_attribute("title").startswith("Compare the quarterly")
    assert page.locator("#total-traces").inner_text() == "2"

    page.fill("#trace-filters input[name=q]", "mirror-7")  # in an error message only
    page.click("#trace-filters button[type=submit]")
    page.wait_for_url("**q=mirror-7**")
    assert page.locator("#traces tbody tr").count() == 1
    assert "web_search" in page.locator("#traces td.tools-used").inner_text()

    page.click("#trace-filters a:has-text('Clear filters')")
    page.click("#traces th a.sort:has-text('Cost')")
    page.wait_for_url("**sort=-cost**")
    assert page.locator("#traces td.cost").first.inner_text() == "3.50"
    assert page.locator("#traces th[aria-sort=descending]").inner_text().startswith("Cost")
    assert_stayed_local(page, live_server)


def test_the_range_follows_the_operator_across_pages(staff_page: Any, live_server: Any) -> None:
    trace_id = spiral_trace()
    page = staff_page
    page.goto(f"{live_server.url}/?range=7d")
    page.click("header nav a:has-text('Traces')")
    page.wait_for_url("**/traces/?range=7d")
    assert page.locator(".range-picker button.current").inner_text() == "7d"

    page.goto(f"{live_server.url}/traces/{trace_id}/")  # a page without a range of its own
    assert urlparse(
        page.locator("header nav a:has-text('Spirals')").get_attribute("href")
    ).query == ("range=7d")
    page.click("a:has-text('← Traces')")
    page.wait_for_url("**/traces/?range=7d")

    page.click(".range-picker button:has-text('6h')")  # a new choice replaces the old one
    page.wait_for_url("**/traces/?range=6h")
    page.click(".custom-range summary")  # a custom range applies
    page.fill(".custom-range input[name=since]", "2026-11-01T08:00")
    page.fill(".custom-range input[name=until]", "2026-11-02T09:30")
    page.click(".custom-range button:has-text('Apply')")
    page.wait_for_url("**since=2026-11-01T08%3A00**")
    shown = page.locator(".range-picker .range").inner_text()
    assert "2026-11-01 08:00 to 2026-11-02 09:30" in shown
    assert page.locator(".custom-range input[name=since]").input_value() == "2026-11-01T08:00"
    page.click(".range-picker button:has-text('6h')")
    page.wait_for_url("**/traces/?range=6h")
    page.click("header nav a:has-text('Overview')")
    page.wait_for_url("**/?range=6h")
    assert "last 6 hours" in page.locator(".range-picker .range").inner_text()
    assert "range=" not in (page.locator("header nav a:has-text('Sandbox')").get_attribute("href"))
    assert_stayed_local(page, live_server)


LONG_TOOLS = [
    "mcp.github-enterprise.search_pull_requests_by_label_and_milestone",
    "mcp.atlassian-confluence-cloud.get_page_children_with_attachments",
    "mcp.internal-data-warehouse.run_saved_query_against_quarterly_snapshot",
]
NO_PAGE_SCROLL = "document.documentElement.scrollWidth <= document.documentElement.clientWidth"


def busy_traces() -> None:
    """Store traces as a busy site has them: long agent and tool names, big numbers."""
    for index in range(3):
        trace_id = secrets.token_hex(16)
        record(
            make_span(trace_id=trace_id, agent="customer-support-escalation-agent-eu-west-1",
                      kind="llm", tool_name="", chosen_by=None, ran_on=None, model="gpt-4o",
                      request_text="Summarise every open incident for the enterprise tier " * 4,
                      input_tokens=98_765_432, output_tokens=1_234_567, cost_usd=12_345.678901,
                      started_at=at(index * 10), latency_ms=3_456_789.5),
            *(make_span(trace_id=trace_id, agent="customer-support-escalation-agent-eu-west-1",
                        tool_name=tool, status="error", error_kind="timeout", result=None,
                        started_at=at(index * 10 + 1 + n), latency_ms=1_234_567.8)
              for n, tool in enumerate(LONG_TOOLS)),
        )  # fmt: skip


@pytest.mark.parametrize("width", [1440, 390])
def test_the_traces_list_never_scrolls_the_page_sideways(
    staff_page: Any, live_server: Any, width: int, screenshot: Callable[[Any, str], Path]
) -> None:
    busy_traces()
    page = staff_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}/traces/")
    assert page.locator("#traces tbody tr").count() == 3
    screenshot(page, f"traces-{width}")
    assert page.evaluate(NO_PAGE_SCROLL), page.evaluate("document.documentElement.scrollWidth")
    assert page.locator("#traces td.tokens").first.inner_text() == "99,999,999"
    assert page.locator("#traces td.cost").first.inner_text() == "12,345.68"
    if width == 1440:  # every column in sight, Cost and Latency included, with no scrolling
        shown = page.locator("#traces-scroll").bounding_box()
        assert page.locator("#traces-scroll").evaluate("box => box.scrollWidth <= box.clientWidth")
        for header in ("Cost", "Latency"):
            box = page.locator(f"#traces th:has-text('{header}')").bounding_box()
            right = box["x"] + box["width"]
            assert box["x"] >= 0 and right <= min(width, shown["x"] + shown["width"]), header
    else:  # a phone: the table scrolls inside its own box, the page does not
        scrolls = page.locator("#traces").evaluate(
            "t => [t, t.parentElement].filter(box => box.scrollWidth > box.clientWidth)"
            ".map(box => getComputedStyle(box).overflowX)"
        )
        assert scrolls and set(scrolls) == {"auto"}
