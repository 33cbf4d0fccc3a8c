"""axe-core in a real Chromium: no serious or critical violation on any page, light or dark.

axe-playwright-python ships axe-core in its wheel, so this runs offline. Set
ARES_AXE_REPORT=path to append each page's violation counts (by impact) to that file.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from planner_app.models import IntentRule, Proposal, RuleSetVersion
from tests.ares_site.browser import assert_stayed_local
from tests.planner_app import conftest as planner_fixtures
from tests.planner_app.proposal_rows import make_proposal
from traces_app.demo_spans import demo_trace_stream
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral, Invocation
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.browser

default_rules = planner_fixtures.default_rules
BLOCKING = ("serious", "critical")
# Violations whose fix lives in a file another change owns, pending there: (rule, the part of
# the page they are in), each with its fix named; remove the entry when the fix is in.
PENDING_ELSEWHERE: list[tuple[str, str]] = []
IN_PART = "([target, part]) => !!document.querySelector(target)?.closest(part)"


@pytest.fixture(scope="module")
def axe() -> Any:
    from axe_playwright_python.sync_playwright import Axe

    return Axe()


@pytest.fixture
def demo_data(transactional_db: None, default_rules: None, rollups_and_rules_afresh: None) -> None:
    """Record 600 demo spans of the last day, rollups and spirals included."""
    for trace in demo_trace_stream(600, seed=3):
        record_invocations([InvocationIn.model_validate(span) for span in trace])
    recount_all_marked_rollups()


def pages() -> list[str]:
    """Return every page an operator reaches: lists, one of each detail page, the admin's."""
    trace = Invocation.objects.filter(status="error").values_list("trace_id", flat=True).first()
    spiral = FailureSpiral.objects.values_list("pk", flat=True).first()
    rule = IntentRule.objects.values_list("pk", flat=True).first()
    version = RuleSetVersion.objects.values_list("pk", flat=True).first()
    proposal = (Proposal.objects.first() or make_proposal()).pk
    return [
        "/",
        "/traces/",
        f"/traces/{trace}/",
        "/tools/",
        "/tools/calculator/",
        "/spirals/",
        f"/spirals/{spiral}/",
        "/evidence/",
        "/evidence/WebSearch/",
        "/planner/try",
        "/planner/try?request=what+is+2%2B3",
        "/planner/backtest",
        "/planner/versions/1/",
        "/proposals/",
        f"/proposals/{proposal}/",
        "/monitors/",
        "/sandbox/",
        "/admin/",
        "/admin/planner_app/intentrule/",
        f"/admin/planner_app/intentrule/{rule}/change/",
        "/admin/planner_app/capability/1/change/",
        "/admin/planner_app/rulesetversion/",
        f"/admin/planner_app/rulesetversion/{version}/change/",
        "/admin/planner_app/proposal/",
        "/admin/traces_app/trace/",
        f"/admin/traces_app/trace/{trace}/change/",
        "/admin/traces_app/invocation/",
        "/admin/traces_app/failurespiral/",
        "/admin/traces_app/apikey/",
        "/admin/auth/user/",
    ]


def violations(axe: Any, page: Any) -> list[dict]:
    return axe.run(page).response["violations"]


def blocking(page: Any, found: list[dict]) -> list[str]:
    """Return the serious and critical violations, but for those pending elsewhere."""
    problems = []
    for violation in found:
        if violation["impact"] not in BLOCKING:
            continue
        parts = [part for rule, part in PENDING_ELSEWHERE if rule == violation["id"]]
        nodes = [
            node
            for node in violation["nodes"]
            if not any(page.evaluate(IN_PART, [node["target"][0], part]) for part in parts)
        ]
        if nodes:
            problems.append(f"{violation['id']} ({len(nodes)}): {nodes[0]['target']} "
                            f"{nodes[0]['html'][:160]}")  # fmt: skip
    return problems


def counts(found: list[dict]) -> dict[str, int]:
    tally: dict[str, int] = {}
    for violation in found:
        tally[violation["impact"]] = tally.get(violation["impact"], 0) + len(violation["nodes"])
    return tally


def report(path: str, scheme: str, found: list[dict]) -> None:
    destination = os.environ.get("ARES_AXE_REPORT")
    if destination:
        ids = sorted(
            {f"{v['id']}: {n['target']} {n['html'][:150]}" for v in found if v["impact"] in BLOCKING
             for n in v["nodes"][:3]}
        )  # fmt: skip
        line = {"page": path, "scheme": scheme, "counts": counts(found), "blocking": ids}
        with open(destination, "a") as out:
            out.write(json.dumps(line) + "\n")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_page_has_a_serious_or_critical_violation(
    staff_page: Any, live_server: Any, demo_data: None, axe: Any, scheme: str
) -> None:
    staff_page.emulate_media(color_scheme=scheme)
    failures = {}
    for path in pages():
        staff_page.goto(f"{live_server.url}{path}")
        staff_page.wait_for_load_state("load")
        if staff_page.locator(".plot").count():
            staff_page.wait_for_selector(".plot[data-rendered=true]")
        found = violations(axe, staff_page)
        report(path, scheme, found)
        problems = blocking(staff_page, found)
        if problems:
            failures[path] = problems
    assert failures == {}
    assert_stayed_local(staff_page, live_server)


PHONE = {"width": 390, "height": 844}
WIDER_THAN_THE_PAGE = """() => {
  const width = document.documentElement.clientWidth;
  return [...document.querySelectorAll('body *')]
    .filter((node) => node.getBoundingClientRect().right > width + 1)
    .filter((node) => !node.closest('table, .table-scroll, .plot, pre'))
    .slice(0, 5)
    .map((node) => node.tagName.toLowerCase() + (node.id ? '#' + node.id : '') +
         (node.className && typeof node.className === 'string' ? '.' + node.className : ''));
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_page_scrolls_sideways_on_a_phone(
    staff_page: Any, live_server: Any, demo_data: None, scheme: str, screenshot: Any
) -> None:
    staff_page.set_viewport_size(PHONE)
    staff_page.emulate_media(color_scheme=scheme)
    wide = {}
    for index, path in enumerate(pages()):
        staff_page.goto(f"{live_server.url}{path}")
        staff_page.wait_for_load_state("load")
        if staff_page.locator(".plot").count():
            staff_page.wait_for_selector(".plot[data-rendered=true]")
        screenshot(staff_page, f"phone-{scheme}-{index:02d}")
        scroll = staff_page.evaluate("document.documentElement.scrollWidth")
        if scroll > PHONE["width"]:
            wide[path] = (scroll, staff_page.evaluate(WIDER_THAN_THE_PAGE))
    assert wide == {}


def test_the_skip_link_takes_the_keyboard_to_the_content(staff_page: Any, live_server: Any) -> None:
    staff_page.goto(f"{live_server.url}/tools/")
    staff_page.keyboard.press("Tab")
    focused = staff_page.evaluate("document.activeElement.textContent")
    assert focused == "Skip to the content"
    assert staff_page.locator(".skip-link").is_visible()  # shown once focused
    staff_page.keyboard.press("Enter")
    assert staff_page.evaluate("document.activeElement.id") == "main"


BACKGROUND = "getComputedStyle(document.body).backgroundColor"


def test_the_dark_theme_follows_the_system_and_matches_the_admin(
    staff_page: Any, live_server: Any
) -> None:
    staff_page.emulate_media(color_scheme="dark")
    staff_page.goto(f"{live_server.url}/admin/")
    admin_dark = staff_page.evaluate(BACKGROUND)
    staff_page.goto(f"{live_server.url}/tools/")
    assert staff_page.evaluate(BACKGROUND) == admin_dark == "rgb(18, 18, 18)"
    staff_page.emulate_media(color_scheme="light")
    staff_page.goto(f"{live_server.url}/tools/")
    assert staff_page.evaluate(BACKGROUND) == "rgb(246, 247, 249)"


def test_the_admins_theme_switch_holds_on_the_console_pages(
    staff_page: Any, live_server: Any
) -> None:
    staff_page.emulate_media(color_scheme="dark")
    staff_page.goto(f"{live_server.url}/admin/")
    staff_page.click("button.theme-toggle")  # auto (dark) -> light
    assert staff_page.evaluate("localStorage.getItem('theme')") == "light"
    staff_page.goto(f"{live_server.url}/tools/")
    assert staff_page.evaluate(BACKGROUND) == "rgb(246, 247, 249)"
    assert_stayed_local(staff_page, live_server)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_sandbox_conversation_has_no_serious_or_critical_violation(
    staff_page: Any, live_server: Any, settings: Any, default_rules: None, axe: Any, scheme: str
) -> None:
    settings.ARES_LLM_BASE_URL = ""  # the planner path: no model needed
    staff_page.emulate_media(color_scheme=scheme)
    staff_page.goto(f"{live_server.url}/sandbox/")
    for number, message in enumerate(["what is 2+3*4", "what is 10/4"], start=1):
        staff_page.fill("#id_message", message)
        staff_page.click("#send-button")
        staff_page.locator(f"li.turn:nth-child({number}) section.answer:not([hidden])").wait_for()
        staff_page.wait_for_selector("#send-button:enabled")
    found = violations(axe, staff_page)
    report("/sandbox/ (a conversation of 2 turns)", scheme, found)
    assert blocking(staff_page, found) == []
