"""Charts in a real Chromium: log-scale switch, no select tools, "no data", theme colours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.ares_site.browser import assert_stayed_local
from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn

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


# The chart's colours as drawn: its paper, a tick label's text and a gridline.
DRAWN = """(id) => {
  const plot = document.querySelector('#' + id + ' .plot');
  return {
    paper: plot.querySelector('.main-svg').style.background,
    text: plot.querySelector('.xtick text').style.fill,
    grid: plot.querySelector('.ygrid, .xgrid').style.stroke,
  };
}"""
HOVER_BOX = """(id) => {
  const legend = document.querySelector('#' + id + ' .hoverlayer .legend');
  const fill = (selector) => legend.querySelector(selector).style.fill;
  return {box: fill('rect.bg'), text: fill('text')};
}"""
DARK = {"paper": "rgba(0, 0, 0, 0)", "text": "rgb(238, 238, 238)", "grid": "rgb(53, 53, 53)"}
LIGHT = {"paper": "rgba(0, 0, 0, 0)", "text": "rgb(29, 35, 48)", "grid": "rgb(221, 225, 232)"}


def drawn_in(page: Any, fg: str) -> None:
    """Wait until the latency chart is drawn (or redrawn) in the text colour `fg`."""
    page.wait_for_selector(f"#latency .plot[data-rendered=true][data-fg='{fg}']")


def test_charts_take_the_themes_colours_and_follow_its_changes(
    staff_page: Any, live_server: Any
) -> None:
    spans = [
        make_span(tool_name="web_search", latency_ms=latency,
                  started_at=(datetime.now(UTC) - timedelta(hours=hours)).isoformat())
        for hours, latency in [(1, 300.0), (2, 12.0), (3, 15.0)]
    ]  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    page = staff_page
    page.emulate_media(color_scheme="dark")
    page.goto(f"{live_server.url}/tools/web_search/")
    drawn_in(page, "#eeeeee")  # the page's --fg
    assert page.evaluate(DRAWN, "latency") == DARK
    page.locator("#latency").scroll_into_view_if_needed()  # hover a point: its unified box
    point = page.locator("#latency .plot .points path.point").first.bounding_box()
    page.mouse.move(point["x"] - 30, point["y"])
    page.mouse.move(point["x"] + point["width"] / 2, point["y"] + point["height"] / 2, steps=5)
    page.wait_for_selector("#latency .hoverlayer .legend rect.bg")
    assert page.evaluate(HOVER_BOX, "latency") == {"box": "rgb(27, 27, 27)", "text": DARK["text"]}

    page.emulate_media(color_scheme="light")  # the system's setting changes
    drawn_in(page, "#1d2330")
    assert page.evaluate(DRAWN, "latency") == LIGHT

    page.evaluate("document.documentElement.dataset.theme = 'dark'")  # the admin's switch
    drawn_in(page, "#eeeeee")
    assert page.evaluate(DRAWN, "latency") == DARK
    assert_stayed_local(page, live_server)
