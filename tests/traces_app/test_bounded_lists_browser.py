"""The traces page in a real Chromium says when its totals stop counting, and their source."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.ares_site import conftest as browser_fixtures
from tests.ares_site.browser import assert_stayed_local
from tests.conftest import make_span
from traces_app import api as traces_api
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.browser

browser = browser_fixtures.browser
page = browser_fixtures.page
staff_page = browser_fixtures.staff_page


@pytest.fixture
def five_traces(transactional_db: None) -> None:
    """Store five traces of the last hour, two of them failed, each with 100 tokens."""
    now = datetime.now(UTC)
    record_invocations(
        [
            InvocationIn.model_validate(
                make_span(
                    trace_id=secrets.token_hex(16),
                    agent="alpha",
                    status="error" if n < 2 else "ok",
                    error_kind="timeout" if n < 2 else "",
                    result=None if n < 2 else {},
                    input_tokens=100,
                    started_at=(now - timedelta(minutes=10 * n + 1)).isoformat(),
                )
            )
            for n in range(5)
        ]
    )


def test_an_operator_sees_capped_totals_and_their_source(
    staff_page: Any, live_server: Any, five_traces: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(traces_api, "COUNT_LIMIT", 3)  # the live server runs in-process
    page = staff_page

    page.goto(f"{live_server.url}/traces/?range=24h")
    assert page.locator("#total-traces").inner_text() == "more than 3"
    assert page.locator("#total-failed").inner_text() == "2"
    assert page.locator("#total-tokens").inner_text() == "500"  # every span, from the rollups
    assert "hourly rollups" in page.locator("#totals-basis").inner_text()

    page.fill("#trace-filters input[name=agent]", "alpha")
    page.click("#trace-filters button[type=submit]")
    page.wait_for_url("**agent=alpha**")
    assert page.locator("#total-traces").inner_text() == "more than 3"
    assert page.locator("#total-tokens").inner_text() == "300"  # the newest three
    assert "newest 3" in page.locator("#totals-basis").inner_text()

    monkeypatch.setattr(traces_api, "COUNT_LIMIT", 10)
    page.reload()
    assert page.locator("#total-traces").inner_text() == "5"
    assert page.locator("#totals-basis").count() == 0
    assert_stayed_local(page, live_server)
