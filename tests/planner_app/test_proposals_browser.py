"""The Proposals page in a real Chromium, and the issue's worked example end to end.

A site whose sum rules lack "tally" records traffic in which an LLM (the loopback fake
server, driving a real agent over POST /api/v1/chat) serves "tally 3 and 4"-like requests
with the calculator; Refresh now proposes the word for Summation, its backtest shows the
requests it newly plans, Apply makes the planner plan them, and rolling back undoes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from planner_app import ruleset_versions
from planner_app.models import Agent, IntentRule, Proposal, RuleSetVersion, Workflow
from tests.ares_site import conftest as browser_fixtures
from tests.ares_site.browser import assert_stayed_local
from tests.planner_app.fake_llm import FakeLlm
from tests.planner_app.proposal_rows import HOSTILE, backtest, evidence, make_proposal
from tests.planner_app.proposals_worked import (
    TALLY,
    record_agent_traffic,
    record_llm_traffic,
    record_planned_traffic,
    site_lacks_the_words,
)
from tests.planner_app.test_proposal_chains import record_date_chain

pytestmark = pytest.mark.browser

browser = browser_fixtures.browser
page = browser_fixtures.page
staff_page = browser_fixtures.staff_page
screenshot = browser_fixtures.screenshot


def plan_in_try_the_planner(page: Any, live_server: Any, request: str) -> str:
    """Plan `request` on Try the planner; return the chosen tool, or '' when it needs the LLM."""
    page.goto(f"{live_server.url}/planner/try?request={quote(request)}")
    if page.locator("#needs-llm").count():
        return ""
    return page.locator("#steps .chosen-tool").first.inner_text()


def test_the_worked_example_proposes_tally_applies_it_and_rolls_back(
    staff_page: Any,
    live_server: Any,
    make_key: Callable[..., str],
    fake_llm: FakeLlm,
    llm_settings: None,
    default_rules: None,
    screenshot: Any,
) -> None:
    site_lacks_the_words()
    page = staff_page
    assert plan_in_try_the_planner(page, live_server, "tally 3 and 4") == ""
    assert page.locator("#proposals-link a").get_attribute("href") == "/proposals/?kind=rule"
    record_llm_traffic(live_server, make_key, fake_llm, TALLY)
    record_planned_traffic(live_server, make_key)

    page.click("nav >> text=Proposals")
    page.click("#refresh-button")
    assert "Proposals refreshed" in page.locator("#message").inner_text()
    row = page.locator("#proposals tbody tr", has_text='Add "tally" to sum-en (Summation)')
    assert row.locator("td").nth(2).inner_text() == "Summation"
    assert row.locator(".evidence-count").inner_text() == "3"
    assert row.locator(".newly-planned").inner_text() == "3"
    assert row.locator(".newly-needs-llm").inner_text() == "0"
    row.locator("a.proposal-title").click()

    newly = page.locator("#backtest-newly_planned tbody td.request").all_inner_texts()
    assert sorted(newly) == sorted(TALLY)
    after = page.locator("#backtest-newly_planned tbody td.after").all_inner_texts()
    assert any(text.startswith("calculator") and "sum(3,4)" in text for text in after)
    assert page.locator("#backtest-newly_needs_llm tbody td.empty").count() == 1
    assert sorted(page.locator("#evidence td.request").all_inner_texts()) == sorted(TALLY)
    assert set(page.locator("#evidence td.served-by").all_inner_texts()) == {"calculator"}
    screenshot(page, "proposal-detail")
    before = ruleset_versions.latest_number()
    page.click("#apply-button")
    assert f"the rules are now v{before + 1}" in page.locator("#message").inner_text()
    assert "Applied by operator" in page.locator("#decided").inner_text()
    assert "tally" in IntentRule.objects.get(name="sum-en").keywords
    page.click("#applied-version")  # what the version did, since against before
    assert page.locator("#version-title").inner_text() == f"Rule-set v{before + 1}"
    assert "add 'tally' to rule sum-en" in page.locator("#version-change").inner_text()

    for request in TALLY:
        assert plan_in_try_the_planner(page, live_server, request) == "calculator"
    assert "sum(3,4)" in page.goto(f"{live_server.url}/planner/try?request=tally+3+and+4").text()

    page.goto(f"{live_server.url}/admin/planner_app/rulesetversion/")
    target = RuleSetVersion.objects.get(number=before)
    page.check(f"input[name=_selected_action][value='{target.pk}']")
    page.select_option("select[name=action]", "roll_back")
    page.click("button[name=index]")
    assert "tally" in page.locator("#diff").inner_text()
    page.click(f"input[value='Yes, roll back to v{before}']")
    assert f"rolled back to v{before}" in page.locator("ul.messagelist").inner_text()
    assert plan_in_try_the_planner(page, live_server, "tally 3 and 4") == ""

    page.goto(f"{live_server.url}/proposals/")
    page.click("#refresh-button")  # rolled back and proposed again: it is open again
    reopened = page.locator("#proposals tbody tr", has_text='Add "tally" to sum-en')
    assert reopened.locator("td.status").inner_text() == "Open"
    assert_stayed_local(page, live_server)


def test_a_stale_page_applies_nothing_and_says_so(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    proposal = make_proposal()
    page = staff_page
    page.goto(f"{live_server.url}/proposals/{proposal.pk}/")
    with ruleset_versions.editing():  # someone edits the rules meanwhile
        rule = IntentRule.objects.get(name="sum-en")
        rule.keywords = [*rule.keywords, "summed"]
        rule.save()
    page.click("#apply-button")
    error = page.locator("#error").inner_text()
    assert (
        "The rules changed since you opened this page" in error and "Nothing was changed" in error
    )
    assert "tally" not in IntentRule.objects.get(name="sum-en").keywords
    assert Proposal.objects.get().status == "open"
    page.click("#apply-button")  # the page now shows the rules as they are: this applies
    assert "the rules are now v" in page.locator("#message").inner_text()
    assert "tally" in IntentRule.objects.get(name="sum-en").keywords


def test_dismissing_and_the_filters_in_the_browser(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    proposal = make_proposal()
    page = staff_page
    page.goto(f"{live_server.url}/proposals/{proposal.pk}/")
    page.click("#dismiss-button")
    assert "comes back only if more than 2 requests" in page.locator("#decided").inner_text()
    page.click("#all-proposals")
    page.wait_for_url("**/proposals/")
    assert page.locator("#proposals td.empty").count() == 1
    page.select_option("#id_status", "dismissed")
    page.click("#proposal-filters button")
    page.wait_for_url("**status=dismissed**")
    assert page.locator("#proposals a.proposal-title").all_inner_texts() == [proposal.title]


def test_request_texts_stay_text_in_the_browser(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    proposal = make_proposal(
        title=f"Add {HOSTILE}", why=HOSTILE, evidence=[evidence(HOSTILE)],
        backtest=backtest([HOSTILE]),
    )  # fmt: skip
    page = staff_page
    for url in ("/proposals/", f"/proposals/{proposal.pk}/"):
        page.goto(f"{live_server.url}{url}")
        assert page.evaluate("window.__pwned") is None
    assert page.locator("#evidence td.request").inner_text() == HOSTILE
    assert page.locator("#backtest-newly_planned td.request").inner_text() == HOSTILE
    assert page.locator("main script, main img").count() == 0
    assert_stayed_local(page, live_server)


def test_an_mcp_tool_serving_a_capability_unmapped_is_mapped_from_the_page(
    staff_page: Any,
    live_server: Any,
    make_key: Callable[..., str],
    fake_llm: FakeLlm,
    llm_settings: None,
    default_rules: None,
    time_server: None,
) -> None:
    tool = "mcp.time.get_current_time"
    Agent.objects.create(name="clock", tools=[tool])
    requests = ["what time is it in Tokyo?", "current time in Paris", "what time is it in Lima?"]
    record_agent_traffic(live_server, make_key, fake_llm, "clock", tool, {"timezone": "UTC"},
                         requests)  # fmt: skip
    page = staff_page
    page.goto(f"{live_server.url}/proposals/?kind=mapping")
    page.click("#refresh-button")
    page.click(f"a.proposal-title:text-is('Map {tool} to DateTime')")
    assert f"map {tool} to DateTime (weight 0)" in page.locator("#change").inner_text()
    assert sorted(page.locator("#evidence td.request").all_inner_texts()) == sorted(requests)
    assert set(page.locator("#evidence td.served-by").all_inner_texts()) == {tool}
    page.click("#apply-button")
    assert "the rules are now v" in page.locator("#message").inner_text()
    planner = {"Authorization": f"Bearer {make_key('plan')}"}
    plan = httpx.post(f"{live_server.url}/api/v1/plan", headers=planner,
                      json={"request": "what time is it?"}).json()  # fmt: skip
    assert tool in {c["tool"] for c in plan["explanation"]["candidates"]["DateTime"]}


def test_a_recurring_chain_is_saved_from_the_page_opened_in_the_editor_and_runs(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    for date in ("2024-03-10", "2025-01-28", "2023-07-04"):
        record_date_chain(date)
    page = staff_page
    page.goto(f"{live_server.url}/proposals/?kind=workflow")
    page.click("#refresh-button")
    row = page.locator("#proposals tbody tr", has_text="datetime")
    assert row.locator(".evidence-count").inner_text() == "3"
    row.locator("a.proposal-title").click()
    definition = json.loads(page.locator("#workflow-definition").inner_text())
    assert [step["tool"] for step in definition["steps"]] == [
        "datetime", "string_utils", "hash_tool",
    ]  # fmt: skip
    assert "{$s1." in json.dumps(definition["steps"][1]["arguments"])
    page.click("#apply-button")
    assert "Applied: saved workflow" in page.locator("#message").inner_text()
    page.click("#open-in-editor")
    assert page.locator("#id_name").input_value() == "datetime-string_utils-hash_tool"
    page.goto(f"{live_server.url}/admin/planner_app/workflow/")
    workflow = Workflow.objects.get()
    page.check(f"input[name=_selected_action][value='{workflow.pk}']")
    page.select_option("select[name=action]", "run_now")
    page.click("button[name=index]")
    assert ": success (run " in page.locator("ul.messagelist").inner_text()
    assert workflow.runs.get().status == "success"
