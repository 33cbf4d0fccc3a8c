"""The site's pages in a real Chromium: login, overview, escaping, API docs, API keys."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from tests.ares_site.browser import assert_stayed_local
from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import ApiKey, Invocation
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.browser


def _record(*spans: dict) -> None:
    record_invocations([InvocationIn.model_validate(span) for span in spans])


def test_it_sends_anonymous_visitors_to_the_login_page(page: Any, live_server: Any) -> None:
    page.goto(f"{live_server.url}/")
    assert urlparse(page.url).path == "/admin/login/"
    assert page.locator("#id_username").is_visible()


def test_it_shows_recorded_tools_on_the_overview(staff_page: Any, live_server: Any) -> None:
    _record(
        make_span(tool_name="web_search"),
        make_span(tool_name="web_search", status="error", error_kind="timeout"),
        make_span(tool_name="calculator", status="error", error_kind="tool_error"),
        make_span(tool_name="calculator"),
        make_span(tool_name="calculator"),
    )
    recount_all_marked_rollups()  # the overview reads rollups
    staff_page.goto(f"{live_server.url}/")
    rows = staff_page.locator("#failing-tools tbody tr")
    assert rows.count() == 2
    first = rows.nth(0).locator("td")  # most failures first, then the higher failure rate
    assert first.nth(0).locator("a").first.inner_text() == "web_search"
    assert [first.nth(i).inner_text() for i in (1, 2)] == ["2", "1"]
    assert staff_page.locator("#calls").inner_text() == "5"


def test_it_shows_tool_output_as_text_never_as_markup(staff_page: Any, live_server: Any) -> None:
    hostile = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned=2'>"
    _record(make_span(tool_name="<b>bold</b>", result={"html": hostile}, request_text=hostile))
    invocation = Invocation.objects.get()
    pages = {
        "/": "#traces",
        f"/admin/traces_app/invocation/{invocation.pk}/change/": "#content",
        f"/admin/traces_app/trace/{invocation.trace_id}/change/": "#content",
        "/admin/traces_app/trace/": "#result_list",
    }
    for path, container in pages.items():
        staff_page.goto(f"{live_server.url}{path}")
        text = staff_page.locator(container).inner_text()
        assert "<b>bold</b>" in text or hostile[:30] in text, path
        assert staff_page.evaluate("window.__pwned") is None, path


def test_it_serves_the_api_docs_from_our_own_static_files(page: Any, live_server: Any) -> None:
    page.goto(f"{live_server.url}/api/v1/docs")
    page.wait_for_selector("text=ARES Console API")
    assert page.get_by_text("/api/v1/invocations").first.is_visible()
    assert_stayed_local(page, live_server)


def test_it_issues_an_api_key_in_the_admin_that_works_once_copied(
    staff_page: Any, live_server: Any
) -> None:
    staff_page.goto(f"{live_server.url}/admin/traces_app/apikey/add/")
    staff_page.fill("#id_name", "browser agent")
    staff_page.check("input[value=report]")
    staff_page.click("input[name=_save]")
    raw_key = staff_page.locator("#new-api-key").inner_text()
    assert raw_key.startswith("ares_")
    assert ApiKey.objects.get().scopes == ["report"]
    response = httpx.post(
        f"{live_server.url}/api/v1/invocations",
        json={"invocations": [make_span()]},
        headers={"Authorization": f"Bearer {raw_key}"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == 1
    staff_page.reload()
    assert staff_page.locator("#new-api-key").count() == 0
