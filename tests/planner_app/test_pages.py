"""The planner's pages in a real Chromium: try a request, run it, and backtest a rule change."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from planner_app.models import IntentRule, RuleSetVersion
from tests.ares_site import conftest as browser_fixtures
from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import Invocation
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.browser

# The site's Chromium fixtures, reused here without moving them.
browser = browser_fixtures.browser
page = browser_fixtures.page
staff_page = browser_fixtures.staff_page

HOSTILE = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned=2'>"


def test_it_plans_a_typed_request_and_explains_the_scores(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    staff_page.goto(f"{live_server.url}/")
    staff_page.click("text=Try the planner")
    staff_page.fill("#id_request", "what is 2+3*4")
    staff_page.click("#plan-button")
    assert staff_page.locator("#steps .chosen-tool").inner_text() == "calculator"
    assert "arithmetic" in staff_page.locator("#rules-matched").inner_text()
    scores = staff_page.locator("table.scores[data-capability=Arithmetic]")
    headers = scores.locator("thead th").all_inner_texts()
    assert headers[:8] == [
        "Tool", "Base", "Evidence", "Scores", "Penalty", "Mapping weight", "Final",
        "Success rate",
    ]  # fmt: skip
    first = scores.locator("tbody tr").first.locator("td").all_inner_texts()
    assert first[0] == "calculator" and "chosen" in first[-1]
    assert "2+3*4" in staff_page.locator("#steps").inner_text()


def test_it_shows_each_candidates_success_rate_as_a_percentage(
    staff_page: Any, live_server: Any, default_rules: None, settings: Any
) -> None:
    settings.ARES_PLANNER_EVIDENCE_TTL_S = 0  # the calls below, not a cached record
    spans = [make_span(tool_name="calculator") for _ in range(3)]
    spans.append(make_span(tool_name="calculator", status="error", error_kind="timeout"))
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    staff_page.goto(f"{live_server.url}/planner/try?request={quote('what is 2+3*4')}")
    scores = staff_page.locator("table.scores[data-capability=Arithmetic]")
    first = scores.locator("tbody tr").first.locator("td").all_inner_texts()
    assert (first[0], first[7]) == ("calculator", "75.0%")  # as the traces pages show rates


def test_it_runs_the_plan_and_shows_the_result(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    staff_page.goto(f"{live_server.url}/planner/try?request={quote('what is 2+3*4')}")
    staff_page.click("#run-button")
    staff_page.wait_for_selector("#results tbody tr")
    cells = staff_page.locator("#results tbody tr").first.locator("td").all_inner_texts()
    assert cells[1:3] == ["calculator", "yes"]
    assert "14" in cells[3]
    call = Invocation.objects.get(tool_name="calculator")
    assert (call.chosen_by, call.trace.agent) == ("planner", "try-the-planner")


def test_it_says_when_a_request_needs_the_llm(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    staff_page.goto(f"{live_server.url}/planner/try?request=tell+me+a+joke")
    assert "no rule matched" in staff_page.locator("#needs-llm").inner_text()
    assert staff_page.locator("#steps .chosen-tool").count() == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [("   ", "Type a request to plan."), ("x" * 4001, "the limit is 4,000")],
)
def test_it_explains_bad_input_instead_of_failing(
    staff_page: Any, live_server: Any, default_rules: None, text: str, message: str
) -> None:
    response = staff_page.goto(f"{live_server.url}/planner/try?request={quote(text)}")
    assert response.status == 400
    assert message in staff_page.locator("#error").inner_text()


def test_it_shows_a_hostile_request_as_text(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    staff_page.goto(f"{live_server.url}/planner/try?request={quote('reverse ' + HOSTILE)}")
    assert staff_page.locator("#plan-request").inner_text() == "reverse " + HOSTILE
    staff_page.click("#run-button")
    staff_page.wait_for_selector("#results")
    assert staff_page.locator("#plan-request").inner_text() == "reverse " + HOSTILE
    assert staff_page.evaluate("window.__pwned") is None


def test_it_shows_tool_output_as_text_never_as_markup(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    # The base64 of a script: decoding it makes the tool's own output the markup.
    encoded = "PHNjcmlwdD53aW5kb3cuX19wd25lZCA9IDE8L3NjcmlwdD4="
    staff_page.goto(f"{live_server.url}/planner/try?request={quote('base64 decode ' + encoded)}")
    staff_page.click("#run-button")
    results = staff_page.locator("#results").inner_text()
    assert "<script>window.__pwned = 1</script>" in results
    assert staff_page.evaluate("window.__pwned") is None


NO_RULE = "no rule matched the request; needs the LLM"


def test_it_lists_a_request_changed_by_a_rule_change(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    texts = ["base64 encode hello", "what is 2+3*4", HOSTILE]
    record_invocations([InvocationIn.model_validate(make_span(request_text=t)) for t in texts])
    old = RuleSetVersion.objects.order_by("-number").first().number
    rule = IntentRule.objects.get(name="base64")
    rule.enabled = False
    rule.save()
    staff_page.goto(f"{live_server.url}/")
    staff_page.click("text=Backtest")
    assert staff_page.locator("#id_version").input_value() == str(old)  # the previous, by default
    staff_page.fill("#id_limit", "50")
    staff_page.click("#backtest-button")
    assert staff_page.locator("#total").inner_text() == "3"
    assert staff_page.locator("#changed").inner_text() == "1"
    # Read old -> new: disabling the rule lost the plan.
    assert staff_page.locator("#newly-planned").inner_text() == "0"
    assert staff_page.locator("#newly-needs-llm").inner_text() == "1"
    assert f"from v{old} (before) to v{old + 1} (after, current)" in (
        staff_page.locator("#direction").inner_text()
    )
    row = staff_page.locator("#changes tbody tr").first.locator("td").all_inner_texts()
    assert row[:2] == ["base64 encode hello", "newly needs the LLM"]
    assert row[2].splitlines()[0] == "Base64; goal: encode or decode"
    assert row[2].splitlines()[1].startswith("hash_tool {")
    assert row[3].splitlines() == ["no capability; goal: —", "needs the LLM: " + NO_RULE]
    assert (
        "1 capability, 1 goal, 1 tool, 0 arguments" in staff_page.locator("#by-aspect").inner_text()
    )
    assert staff_page.evaluate("window.__pwned") is None


def test_it_names_the_problem_with_a_pasted_draft(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    staff_page.goto(f"{live_server.url}/planner/backtest")
    draft = '{"rules": [{"name": "bad", "capabilities": ["Hashing"], "patterns": ["(oops"]}]}'
    staff_page.fill("#id_draft", draft)
    staff_page.click("#backtest-button")
    error = staff_page.locator("#error").inner_text()
    assert "rule 'bad': invalid regex '(oops'" in error
    assert staff_page.locator("#id_draft").input_value() == draft


def test_an_operator_edits_a_rule_and_sees_the_planners_new_choice(
    staff_page: Any, live_server: Any, default_rules: None, fresh_ruleset_cache: None
) -> None:
    page = staff_page
    page.goto(f"{live_server.url}/")
    page.click("nav >> text=Try the planner")
    page.fill("#id_request", "the date in Tokyo")
    page.click("#plan-button")
    page.click("#rules-matched >> text=datetime")  # to the rule in the admin
    assert "/admin/planner_app/intentrule/" in page.url
    keywords = page.locator("#id_keywords").input_value().splitlines()
    page.fill("#id_keywords", ", ".join([*keywords, "clock"]))
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/planner_app/intentrule/")
    assert IntentRule.objects.get(name="datetime").keywords == [*keywords, "clock"]
    page.click("tr:has(a:text-is('datetime')) a.try-rule")  # and back to the planner
    assert page.locator("#from-rule").inner_text().startswith("Trying rule datetime")
    page.fill("#id_request", "clock in Tokyo")  # no rule read "clock" before
    page.click("#plan-button")
    assert page.locator("#steps .chosen-tool").inner_text() == "datetime"
    assert '"timezone": "Asia/Tokyo"' in page.locator("#steps").inner_text()
    assert "clock" in page.locator("#rules-matched tr.from-rule").inner_text()
    page.click("#back-to-rule")
    assert page.locator("#id_keywords").input_value().splitlines()[-1] == "clock"


def test_rolling_back_asks_first_and_can_be_called_off(
    staff_page: Any, live_server: Any, default_rules: None
) -> None:
    first = RuleSetVersion.objects.order_by("number").first()
    IntentRule.objects.get(name="regex").delete()
    page = staff_page
    page.goto(f"{live_server.url}/admin/planner_app/rulesetversion/")
    page.check(f"input[name=_selected_action][value='{first.pk}']")
    page.select_option("select[name=action]", "roll_back")
    page.click("button[name=index]")
    assert "+ rule regex" in page.locator("#diff").inner_text()
    page.click("text=No, take me back")
    assert not IntentRule.objects.filter(name="regex").exists()
    page.check(f"input[name=_selected_action][value='{first.pk}']")
    page.select_option("select[name=action]", "roll_back")
    page.click("button[name=index]")
    page.click(f"input[value='Yes, roll back to v{first.number}']")
    assert f"rolled back to v{first.number}" in page.locator("ul.messagelist").inner_text()
    assert IntentRule.objects.filter(name="regex").exists()
