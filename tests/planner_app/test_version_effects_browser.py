"""Rule-set versions in a real Chromium: the markers on the charts, their link, the page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from planner_app.models import RuleSetVersion
from tests.ares_site import conftest as browser_fixtures
from tests.ares_site.browser import assert_stayed_local
from tests.planner_app.version_traffic import make_version, record_request

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("rollups_and_rules_afresh")]

browser = browser_fixtures.browser
page = browser_fixtures.page
staff_page = browser_fixtures.staff_page
screenshot = browser_fixtures.screenshot
rollups_and_rules_afresh = browser_fixtures.rollups_and_rules_afresh

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture(autouse=True)
def first_version_long_ago(default_rules: None) -> None:
    """The shipped rules' v1 was made by the fixture just now: date it out of the range."""
    RuleSetVersion.objects.filter(number=1).update(created_at=NOW - timedelta(days=30))


# The drawn markers: each annotation's text and link, and the dashed lines.
DRAWN = """(id) => {
  const plot = document.querySelector('#' + id + ' .plot');
  const links = [...plot.querySelectorAll('.annotation a')].filter((a) => a.textContent);
  return {
    labels: links.map((a) => a.textContent),
    hrefs: links.map((a) => a.getAttribute('href') || a.getAttribute('xlink:href')),
    lines: plot.querySelectorAll('.shapelayer path').length,
  };
}"""


def test_the_overview_draws_a_marker_per_version_that_opens_its_page(
    staff_page: Any, live_server: Any, default_rules: None, screenshot: Any
) -> None:
    version = make_version("add tally", NOW - timedelta(hours=3), add_sum_word="tally")
    RuleSetVersion.objects.filter(pk=version.pk).update(change='add "tally" <img src=x>')
    for hours, shape in [(5, "llm only"), (4, "planner failed"), (2, "planner ok")]:
        record_request(NOW - timedelta(hours=hours), "tally 3 and 4", shape)
    page = staff_page
    page.goto(f"{live_server.url}/?range=24h")
    page.wait_for_selector("#calls-over-time .plot[data-rendered=true]")

    drawn = page.evaluate(DRAWN, "calls-over-time")
    assert drawn["labels"] == [f"v{version.number}"]
    assert drawn["hrefs"] == [f"/planner/versions/{version.number}/"]
    assert drawn["lines"] == 1
    assert page.locator("img[src=x]").count() == 0  # the note stays text

    screenshot(page, "overview-version-marker")
    page.locator("#calls-over-time .annotation", has_text=f"v{version.number}").click()
    page.wait_for_url(f"**/planner/versions/{version.number}/")
    assert page.locator("#version-title").inner_text() == f"Rule-set v{version.number}"
    assert page.locator("#version-diff").inner_text().count("keywords +tally") == 1
    after = page.locator("#effect-totals tr[data-figure=requests] td.after").inner_text()
    before = page.locator("#effect-totals tr[data-figure=requests] td.before").inner_text()
    assert (before, after) == ("2", "1")
    summation = page.locator("#effect-capabilities tr[data-capability=Summation]")
    assert summation.locator(".success-after").inner_text().startswith("100.0%")
    assert summation.locator(".success-before").inner_text().startswith("0.0%")
    screenshot(page, "version-page")
    assert_stayed_local(page, live_server)


def test_a_tool_page_marks_the_version_on_its_charts(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    version = make_version("v2", NOW - timedelta(hours=3))
    for hours in (5, 2):
        record_request(NOW - timedelta(hours=hours), "add 3 and 4", "planner ok")
    page = staff_page
    page.goto(f"{live_server.url}/tools/calculator/?range=24h")
    page.wait_for_selector("#success-rate .plot[data-rendered=true]")
    drawn = page.evaluate(DRAWN, "success-rate")
    assert drawn["labels"] == [f"v{version.number}"]
    assert page.locator("#success-rate .chart-marker").inner_text() == f"v{version.number}"
    assert_stayed_local(page, live_server)
