"""The session pages in a real Chromium: from the list to a session, its turns, its traces."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.ares_site import conftest as browser_fixtures
from tests.ares_site import test_accessibility
from tests.ares_site.browser import assert_stayed_local
from tests.traces_app.test_sessions_api import conversation_spans
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.browser

browser = browser_fixtures.browser
page = browser_fixtures.page
staff_page = browser_fixtures.staff_page
screenshot = browser_fixtures.screenshot
axe = test_accessibility.axe


@pytest.fixture
def conversation(transactional_db: None) -> dict[str, Any]:
    spans, ids = conversation_spans()
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    return ids


def test_an_operator_reads_a_session_and_follows_it_to_its_traces(
    staff_page: Any,
    live_server: Any,
    conversation: dict[str, Any],
    screenshot: Callable[[Any, str], Path],
) -> None:
    page = staff_page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"{live_server.url}/traces/")
    page.click("nav a[href='/sessions/']")
    page.wait_for_url("**/sessions/")
    rows = page.locator("#sessions tbody tr")
    assert rows.count() == 2
    assert rows.first.locator("td.turns").inner_text() == "3"
    screenshot(page, "sessions")

    page.fill("#session-filters input[name=agent]", "converter")
    page.click("#session-filters button[type=submit]")
    page.wait_for_url("**agent=converter**")
    assert page.locator("#sessions a.session-link").all_inner_texts() == ["s-72"]
    page.go_back()

    page.click("#sessions a.session-link:text-is('s-71')")
    page.wait_for_url("**/sessions/s-71/")
    turns = page.locator("#turns section.turn")
    assert turns.count() == 3
    assert "Try again <b>please</b>" in turns.nth(1).locator(".request").inner_text()
    assert turns.nth(1).locator("pre.answer").inner_text().startswith("It is 12 °C <script>")
    assert page.locator("#tool-sequence a").all_inner_texts() == [
        "weather", "web_search", "web_search", "web_search", "web_search", "calculator",
    ]  # fmt: skip
    assert (
        "web_search × 4 (timeout), turns 1, 2" in page.locator("#cross-turn-spirals").inner_text()
    )
    screenshot(page, "session-detail")

    page.click("#session-traces")
    page.wait_for_url("**/traces/?session=s-71**")
    listed = page.locator("#traces tbody tr td.time a")
    hrefs = {urlparse(listed.nth(i).get_attribute("href")).path for i in range(listed.count())}
    assert hrefs == {f"/traces/{trace_id}/" for trace_id in conversation["turns"]}

    page.click(f"#traces a[href='/traces/{conversation['turns'][0]}/']")
    page.click("#trace-session")
    page.wait_for_url("**/sessions/s-71/")
    assert dialogs == []
    assert_stayed_local(page, live_server)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_session_pages_have_no_serious_accessibility_violation(
    staff_page: Any, live_server: Any, conversation: dict[str, Any], axe: Any, scheme: str
) -> None:
    staff_page.emulate_media(color_scheme=scheme)
    failures = {}
    for path in ("/sessions/", "/sessions/s-71/"):
        staff_page.goto(f"{live_server.url}{path}")
        staff_page.wait_for_load_state("load")
        found = test_accessibility.violations(axe, staff_page)
        problems = test_accessibility.blocking(staff_page, found)
        if problems:
            failures[path] = problems
    assert failures == {}
