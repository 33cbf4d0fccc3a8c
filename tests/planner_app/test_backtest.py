"""The backtest: recorded requests planned under two rule sets, and the ones that change."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from planner_app import backtest
from planner_app.models import IntentRule, RuleSetVersion
from planner_app.ruleset_versions import current_ruleset
from tests.conftest import make_span
from tools_app.site_engine import get_engine
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.django_db

REQUESTS = ["base64 encode hello", "md5 of hello", "what is 2+3*4", "tell me a joke"]


def record_requests(*texts: str) -> None:
    """Record one trace per text, the last one newest."""
    start = datetime.now(UTC) - timedelta(hours=1)
    spans = [
        make_span(request_text=text, started_at=(start + timedelta(seconds=i)).isoformat())
        for i, text in enumerate(texts)
    ]
    record_invocations([InvocationIn.model_validate(span) for span in spans])


def disable_base64_rule(django_capture_on_commit_callbacks: Any) -> int:
    """Disable the 'base64' rule the way the admin does; return the version it was before."""
    before = current_ruleset().version
    with django_capture_on_commit_callbacks(execute=True):
        rule = IntentRule.objects.get(name="base64")
        rule.enabled = False
        rule.save()
    return before


def current_rules_with(**changes: Any) -> list[dict[str, Any]]:
    """Return the current snapshot's rules with `changes` applied to the 'base64' rule."""
    snapshot = RuleSetVersion.objects.get(number=current_ruleset().version).snapshot
    return [rule | changes if rule["name"] == "base64" else rule for rule in snapshot["rules"]]


def test_it_returns_distinct_requests_newest_first(default_rules: None) -> None:
    record_requests("first", "second", "", "first", "third")
    assert backtest.recent_requests(10) == ["third", "first", "second"]
    assert backtest.recent_requests(2) == ["third", "first"]


def test_it_lists_exactly_the_requests_whose_choice_changed(
    default_rules: None, django_capture_on_commit_callbacks: Any
) -> None:
    record_requests(*REQUESTS)
    old_version = disable_base64_rule(django_capture_on_commit_callbacks)
    before, after = backtest.in_order(current_ruleset(), backtest.version_ruleset(old_version))
    report = backtest.backtest(backtest.recent_requests(), before, after, get_engine().registry)
    assert (report.before_version, report.after_version) == (old_version, old_version + 1)
    assert report.total == 4
    assert [change.request for change in report.changes] == ["base64 encode hello"]
    change = report.changes[0]
    assert change.kind == "newly needs the LLM"  # the old version planned it, the new does not
    assert change.before.tools == ("hash_tool",) and change.after.needs_llm
    assert current_ruleset().version == old_version + 1
    assert (report.changed, report.newly_planned, report.newly_needs_llm) == (1, 0, 1)


def test_it_backtests_a_draft_against_the_current_rules(default_rules: None) -> None:
    record_requests(*REQUESTS)
    draft = json.dumps({"rules": current_rules_with(enabled=False)})
    report = backtest.backtest(
        backtest.recent_requests(),
        current_ruleset(),
        backtest.draft_ruleset(draft),
        get_engine().registry,
    )
    assert [change.request for change in report.changes] == ["base64 encode hello"]
    assert report.changes[0].kind == "newly needs the LLM"
    assert report.changes[0].before.describe().startswith("hash_tool {")
    assert (report.newly_planned, report.newly_needs_llm) == (0, 1)


def choice(*steps: tuple[str, str]) -> backtest.Choice:
    return backtest.Choice(tuple(steps), needs_llm=not steps, reason="" if steps else "no rule")


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        (choice(), choice(("calculator", "{}")), "newly planned"),
        (choice(("calculator", "{}")), choice(), "newly needs the LLM"),
        (choice(("calculator", "{}")), choice(("hash_tool", "{}")), "tool"),
        (
            choice(("calculator", '{"expression": "1+1"}')),
            choice(("calculator", "{}")),
            "arguments",
        ),
    ],
)
def test_it_names_the_kind_of_change(
    before: backtest.Choice, after: backtest.Choice, kind: str
) -> None:
    assert backtest.Change("request", before, after).kind == kind


def test_it_keeps_the_sections_a_draft_leaves_out(default_rules: None) -> None:
    ruleset = backtest.draft_ruleset('{"weights": {"cost": 1.5}}')
    assert ruleset.weights.cost == 1.5
    assert ruleset.rules == current_ruleset().rules


@pytest.mark.parametrize(
    ("draft", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "not in the snapshot's shape"),
        ('{"rulez": []}', "rulez: Extra inputs are not permitted"),
        ('{"rules": [{"name": "x"}]}', "rules.0.capabilities: Field required"),
        ('{"weights": {"cost": "cheap"}}', "weights.cost"),
        (
            '{"rules": [{"name": "bad", "capabilities": ["Hashing"], "patterns": ["(oops"]}]}',
            "rule 'bad': invalid regex '(oops'",
        ),
        (
            '{"rules": [{"name": "lost", "capabilities": ["Telepathy"]}]}',
            "rule 'lost' names unknown capability 'Telepathy'",
        ),
        (
            '{"mappings": [{"capability": "Telepathy", "tool": "calculator"}]}',
            "unknown capability 'Telepathy'",
        ),
    ],
)
def test_it_names_the_problem_with_a_bad_draft(
    default_rules: None, draft: str, problem: str
) -> None:
    with pytest.raises(backtest.DraftError) as caught:
        backtest.draft_ruleset(draft)
    assert problem in str(caught.value)


def test_it_counts_capability_and_goal_changes_with_the_same_tool(default_rules: None) -> None:
    record_requests(*REQUESTS)
    draft = json.dumps({"rules": current_rules_with(goal="turn text into base64")})
    report = backtest.backtest(
        backtest.recent_requests(),
        current_ruleset(),
        backtest.draft_ruleset(draft),
        get_engine().registry,
    )
    assert [change.request for change in report.changes] == ["base64 encode hello"]
    assert report.changes[0].kind == "goal"
    assert report.by_aspect == {"capability": 0, "goal": 1, "tool": 0, "arguments": 0}


def test_it_counts_a_capability_change(default_rules: None) -> None:
    record_requests(*REQUESTS)
    draft = json.dumps({"rules": current_rules_with(capabilities=["Hashing"])})
    report = backtest.backtest(
        backtest.recent_requests(),
        current_ruleset(),
        backtest.draft_ruleset(draft),
        get_engine().registry,
    )
    change = report.changes[0]
    assert change.request == "base64 encode hello"
    assert "capability" in change.aspects
    assert change.before.capabilities == ("Base64",)
    assert change.after.capabilities == ("Hashing",)


def test_it_compares_with_the_previous_version_by_default(
    default_rules: None, django_capture_on_commit_callbacks: Any, admin_client: Any
) -> None:
    before = disable_base64_rule(django_capture_on_commit_callbacks)
    page = admin_client.get("/planner/backtest").content.decode()
    assert f'<option value="{before}" selected>' in page
    assert f'<option value="{before + 1}">' in page


def edit_sum_en_keywords(client: Any, keywords: str) -> None:
    """Save the 'sum-en' rule's keywords through the admin, as an operator does."""
    rule = IntentRule.objects.get(name="sum-en")
    form = {
        "name": rule.name, "keywords": keywords, "patterns": "", "language": rule.language,
        "capabilities": [c.pk for c in rule.capabilities.all()], "goal": rule.goal,
        "priority": rule.priority, "enabled": "on",
    }  # fmt: skip
    response = client.post(f"/admin/planner_app/intentrule/{rule.pk}/change/", form)
    assert response.status_code == 302


def run_default_backtest(client: Any) -> str:
    """Open the backtest page and run it with what it proposes; return the result page."""
    page = client.get("/planner/backtest").content.decode()
    selected = re.search(r'<option value="(\d+)" selected>', page).group(1)
    response = client.post("/planner/backtest", {"version": selected, "limit": "200"})
    assert response.status_code == 200
    return response.content.decode()


def card(page: str, name: str) -> str:
    return re.search(rf'id="{name}">([^<]*)<', page).group(1)


@pytest.mark.django_db(transaction=True)
def test_it_shows_a_removed_keyword_as_a_lost_plan(default_rules: None, admin_client: Any) -> None:
    record_requests("what is 1250 plus 370")
    edit_sum_en_keywords(admin_client, "sum, add, total")
    page = run_default_backtest(admin_client)
    current = current_ruleset().version
    assert f"from v{current - 1} (before) to v{current} (after, current)" in page
    assert (card(page, "newly-planned"), card(page, "newly-needs-llm")) == ("0", "1")
    row = re.search(r'<td class="request">what is 1250 plus 370</td><td>([^<]*)</td>', page)
    assert row.group(1) == "newly needs the LLM"
    before, after = re.findall(r'<td class="(?:before|after)">(.*?)</td>', page, re.S)
    assert "calculator" in before and "needs the LLM" in after


@pytest.mark.django_db(transaction=True)
def test_it_shows_an_added_keyword_as_a_gained_plan(default_rules: None, admin_client: Any) -> None:
    record_requests("what is 1250 plus 370")
    edit_sum_en_keywords(admin_client, "sum, add, total")
    edit_sum_en_keywords(admin_client, "sum, add, plus, total")
    page = run_default_backtest(admin_client)
    assert (card(page, "newly-planned"), card(page, "newly-needs-llm")) == ("1", "0")
    row = re.search(r'<td class="request">what is 1250 plus 370</td><td>([^<]*)</td>', page)
    assert row.group(1) == "newly planned"
