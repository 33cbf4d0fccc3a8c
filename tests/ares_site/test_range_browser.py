"""The range in a real Chromium on the pages without a picker of their own.

`templates/base.html` links `range.js` and `console.css` on every page, so the menu of
the sandbox, Try the planner and Backtest carries the range chosen last in the tab too.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest

from tests.ares_site.browser import assert_stayed_local

pytestmark = pytest.mark.browser

PAGES_WITHOUT_A_PICKER = ["Sandbox", "Try the planner", "Backtest"]
RANGE_PAGES = ["Overview", "Traces", "Tools", "Spirals", "Evidence"]
OTHER_LINKS = ["Sandbox", "Try the planner", "Backtest", "Admin", "API docs"]


def menu_query(page: Any, name: str) -> str:
    """Return the query string of the menu link named `name`."""
    href = page.locator(f"header nav a:text-is('{name}')").get_attribute("href")
    return urlparse(href).query


def watch_errors(page: Any) -> list[str]:
    """Return a list that fills with the page's uncaught script errors."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


@pytest.mark.parametrize("name", PAGES_WITHOUT_A_PICKER)
def test_the_menu_carries_the_range_from_a_page_without_a_picker(
    staff_page: Any, live_server: Any, name: str
) -> None:
    page = staff_page
    errors = watch_errors(page)
    page.goto(f"{live_server.url}/?range=7d")
    page.click(f"header nav a:text-is('{name}')")
    page.wait_for_load_state()
    assert page.locator(".range-picker").count() == 0
    assert {link: menu_query(page, link) for link in RANGE_PAGES} == dict.fromkeys(
        RANGE_PAGES, "range=7d"
    )
    assert {link: menu_query(page, link) for link in OTHER_LINKS} == dict.fromkeys(OTHER_LINKS, "")
    page.click("header nav a:text-is('Tools')")
    page.wait_for_url("**/tools/?range=7d")
    assert page.locator(".range-picker button.current").inner_text() == "7d"
    assert errors == []
    assert_stayed_local(page, live_server)


@pytest.mark.parametrize("name", PAGES_WITHOUT_A_PICKER)
def test_a_page_without_a_picker_leaves_the_menu_alone_in_a_fresh_tab(
    staff_page: Any, live_server: Any, name: str
) -> None:
    page = staff_page
    errors = watch_errors(page)
    page.goto(f"{live_server.url}/admin/")  # logged in, no console page seen yet
    page.evaluate("sessionStorage.clear()")
    page.goto(f"{live_server.url}/sandbox/")
    page.click(f"header nav a:text-is('{name}')")
    page.wait_for_load_state()
    assert all(menu_query(page, link) == "" for link in RANGE_PAGES + OTHER_LINKS)
    assert errors == []


@pytest.mark.parametrize("path", ["/", "/tools/", "/traces/", "/sandbox/", "/planner/backtest"])
def test_every_page_links_the_console_styles_and_the_range_script_once(
    staff_page: Any, live_server: Any, path: str
) -> None:
    page = staff_page
    page.goto(f"{live_server.url}{path}")
    assert page.locator("link[rel=stylesheet][href$='/console.css']").count() == 1
    assert page.locator("script[src$='/range.js']").count() == 1
    # console.css applies: the helper class that hides text from sight but not from readers.
    width = page.evaluate(
        "() => { const s = document.createElement('span'); s.className = 'visually-hidden';"
        " s.textContent = 'hidden text'; document.body.append(s);"
        " return s.getBoundingClientRect().width; }"
    )
    assert width <= 1
