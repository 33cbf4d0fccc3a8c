"""A real headless Chromium (Debian's package), driven by Playwright."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Playwright's sync API runs an event loop in this thread; Django's ORM calls made by the
# test itself are still plain synchronous code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    return os.environ.get("ARES_CHROMIUM") or shutil.which("chromium")


class RelaunchingChromium:
    """A launched Chromium that is launched again when it has exited.

    Under a loaded CI machine Chromium has been seen to exit between two tests, which
    left every later test of the module failing with "Target page, context or browser
    has been closed". The exit is reported (a line on stderr and a warning in the
    summary) and the next use gets a new browser; a test that was using it still fails.
    """

    def __init__(self, playwright: Any, executable: str) -> None:
        self._launch = lambda: playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_FLAGS
        )
        self._browser = self._launch()

    def __getattr__(self, name: str) -> Any:
        if not self._browser.is_connected():
            message = "Chromium had exited since the last test: launched again"
            print(message, file=sys.stderr)
            warnings.warn(message, stacklevel=2)
            self._browser = self._launch()
        return getattr(self._browser, name)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Yield a headless Chromium; skipped on a machine without it, required in CI.

    Module-scoped: Playwright's sync API keeps an event loop running in this thread while
    it is open, and tests elsewhere that call asyncio.run() must not meet it.
    """
    executable = chromium_path()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium for the browser tests")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = RelaunchingChromium(playwright, executable)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """Yield a fresh page that records every URL it requested."""
    context = browser.new_context()
    page = context.new_page()
    page.requested_urls = []
    page.on("request", lambda request: page.requested_urls.append(request.url))
    yield page
    context.close()


@pytest.fixture
def staff_page(page: Any, live_server: Any, django_user_model: Any) -> Any:
    """Return a page logged in to the admin as a superuser."""
    django_user_model.objects.create_superuser("operator", "", "operator-pass-123")
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "operator-pass-123")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")
    return page


# Screenshots of the main pages, kept as test artifacts (var/ is git-ignored).
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"


@pytest.fixture
def screenshot() -> Callable[[Any, str], Path]:
    """Return a function that saves a full-page screenshot as var/screenshots/<name>.png."""

    def save(page: Any, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save


@pytest.fixture
def rollups_and_rules_afresh(settings: Any) -> Iterator[None]:
    """Read evidence afresh, and forget rules cached from another test's database."""
    from planner_app import ruleset_versions

    settings.ARES_PLANNER_EVIDENCE_TTL_S = 0
    ruleset_versions._cache.update(ruleset=None, stamp=None, checked_at=0.0)
    yield
    ruleset_versions._cache.update(ruleset=None, stamp=None, checked_at=0.0)
