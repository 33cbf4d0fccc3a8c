"""Log out and back in from the console in a real Chromium."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest

from tests.ares_site.browser import assert_stayed_local

pytestmark = pytest.mark.browser


def test_log_out_returns_to_the_console_and_logging_in_goes_on(
    staff_page: Any, live_server: Any
) -> None:
    page = staff_page
    page.goto(f"{live_server.url}/traces/")
    page.click("header button:has-text('Log out operator')")
    page.wait_for_url(f"{live_server.url}/login/")

    assert page.locator("#login-message").inner_text() == "operator is logged out."
    assert page.locator("header .brand").inner_text() == "ARES Console"  # the console's page
    assert page.locator("header button:has-text('Log out')").count() == 0
    page.goto(f"{live_server.url}/traces/")
    assert urlparse(page.url).path != "/traces/"  # logged out: sent to log in

    page.goto(f"{live_server.url}/login/?next=/traces/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "operator-pass-123")
    page.click("#login-form button[type=submit]")
    page.wait_for_url(f"{live_server.url}/traces/")
    assert page.locator("header button:has-text('Log out operator')").count() == 1
    assert_stayed_local(page, live_server)
