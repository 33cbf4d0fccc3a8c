"""What the router offers, explained, in a real Chromium: Try the planner and the sandbox."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from planner_app.models import Agent
from tests.ares_site import conftest as browser_fixtures
from tests.ares_site.browser import assert_stayed_local
from tests.planner_app import test_routing_explained as explained
from tests.planner_app.fake_llm import FakeLlm, say

pytestmark = pytest.mark.browser

browser = browser_fixtures.browser
page = browser_fixtures.page
staff_page = browser_fixtures.staff_page
screenshot = browser_fixtures.screenshot
hostile_tool = explained.hostile_tool
rain_served = explained.rain_served
HOSTILE, MARKUP, RAIN_AGAIN = explained.HOSTILE, explained.MARKUP, explained.RAIN_AGAIN

ASK_ABOUT_RAIN = f"<tool_request>\nserver: weather\ntool: {RAIN_AGAIN}\n</tool_request>"


def test_try_the_planner_shows_the_routed_tools_and_why_as_text(
    staff_page: Any, live_server: Any, default_rules: None, rain_served: None, screenshot: Any
) -> None:
    page = staff_page
    page.goto(f"{live_server.url}/planner/try?request={quote(RAIN_AGAIN)}")
    screenshot(page, "try-routed-tools")
    first = page.locator("#routed-tools tbody tr").first
    assert first.locator("td.routed-tool").inner_text() == HOSTILE
    assert first.locator("td").nth(1).inner_text() == "builtin:other"
    why = first.locator("td.why").inner_text()
    assert "3 past requests like this one succeeded" in why and MARKUP in why
    assert page.locator("#routed-tools img, #routed-tools script").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert_stayed_local(page, live_server)


def test_the_sandboxs_discovery_step_shows_each_routed_tool_and_why_as_text(
    staff_page: Any,
    live_server: Any,
    settings: Any,
    fake_llm: FakeLlm,
    rain_served: None,
    screenshot: Any,
) -> None:
    settings.ARES_LLM_BASE_URL, settings.ARES_LLM_MODEL = fake_llm.base_url, "fake-model"
    Agent.objects.create(name="finder", tools=["calculator", HOSTILE], discovery="active")
    fake_llm.script(say(ASK_ABOUT_RAIN), say("No forecast today."))
    page = staff_page
    page.goto(f"{live_server.url}/sandbox/")
    page.select_option("#id_agent", "finder")
    page.select_option("#id_mode", "llm")
    page.fill("#id_message", "will it rain in Oslo?")
    page.click("#send-button")
    page.wait_for_selector("li.turn:last-child section.answer:not([hidden])", timeout=30_000)
    step = page.locator("li.step-tools_discovered")
    routing = step.locator("pre.payload").last.inner_text()
    assert routing.startswith("flat\n") and f"\n{HOSTILE} " in routing
    why = next(line for line in routing.split("\n") if line.startswith("  why: "))
    assert "past requests like this one succeeded" in why and MARKUP in why
    screenshot(page, "sandbox-tools-discovered")
    assert step.locator("img, script").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert_stayed_local(page, live_server)
