"""Operators tune the planner in the admin: bad edits refused, versions credited, rollback."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from planner_app.models import Capability, IntentRule, RuleSetVersion

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator(default_rules: None) -> Any:
    return get_user_model().objects.create_superuser("tuner", "", "pw-for-tests-only")


@pytest.fixture
def client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def rule_form(rule: IntentRule, **changes: Any) -> dict[str, Any]:
    data = {
        "name": rule.name, "keywords": '["hash"]', "patterns": "[]", "language": rule.language,
        "capabilities": [c.pk for c in rule.capabilities.all()], "goal": rule.goal,
        "priority": rule.priority, "enabled": "on",
    }  # fmt: skip
    data.update(changes)
    return data


def test_it_refuses_an_invalid_regex_and_says_why(client: Client) -> None:
    rule = IntentRule.objects.get(name="regex")
    response = client.post(
        f"/admin/planner_app/intentrule/{rule.pk}/change/", rule_form(rule, patterns='["(a"]')
    )
    assert response.status_code == 200
    assert "invalid regular expression" in response.content.decode()
    assert IntentRule.objects.get(pk=rule.pk).patterns == []


def test_it_refuses_a_subsumption_cycle(client: Client) -> None:
    arithmetic = Capability.objects.get(name="Arithmetic")
    summation = Capability.objects.get(name="Summation")
    response = client.post(
        f"/admin/planner_app/capability/{arithmetic.pk}/change/",
        {"name": "Arithmetic", "subsumes": [summation.pk],
         "mappings-TOTAL_FORMS": "0", "mappings-INITIAL_FORMS": "0"},
    )  # fmt: skip
    assert "this would make a cycle: Arithmetic -&gt; Summation -&gt; Arithmetic" in (
        response.content.decode()
    )
    assert not arithmetic.subsumes.exists()


def test_it_credits_the_operator_with_a_saved_change(client: Client, operator: Any) -> None:
    rule = IntentRule.objects.get(name="hashing")
    response = client.post(
        f"/admin/planner_app/intentrule/{rule.pk}/change/", rule_form(rule, priority=3)
    )
    assert response.status_code == 302
    latest = RuleSetVersion.objects.order_by("-number").first()
    assert (latest.created_by, latest.change) == (operator, "changed IntentRule hashing")


def test_it_compares_two_versions(client: Client) -> None:
    rule = IntentRule.objects.get(name="regex")
    client.post(f"/admin/planner_app/intentrule/{rule.pk}/delete/", {"post": "yes"})
    versions = list(RuleSetVersion.objects.values_list("pk", flat=True))
    response = client.post(
        "/admin/planner_app/rulesetversion/",
        {"action": "compare", "_selected_action": versions[:2]},
    )
    assert "<code>- rule regex</code>" in response.content.decode()


def test_it_rolls_back_from_the_admin(client: Client) -> None:
    first = RuleSetVersion.objects.order_by("number").first()
    IntentRule.objects.get(name="regex").delete()
    response = client.post(
        "/admin/planner_app/rulesetversion/",
        {"action": "roll_back", "_selected_action": [first.pk], "confirmed": "yes"},
        follow=True,
    )
    assert f"rolled back to v{first.number}" in response.content.decode()
    assert IntentRule.objects.filter(name="regex").exists()


def test_it_refuses_a_mapping_to_an_unknown_tool(default_rules: None) -> None:
    from django.core.exceptions import ValidationError

    from planner_app.models import CapabilityMapping

    mapping = CapabilityMapping(capability=Capability.objects.get(name="Hashing"), tool="hsah")
    with pytest.raises(ValidationError, match="no tool named 'hsah'"):
        mapping.full_clean()


@pytest.mark.parametrize(
    ("typed", "saved"),
    [
        ("sum, add, plus", ["sum", "add", "plus"]),
        ("sum\nadd\r\n\nplus\n", ["sum", "add", "plus"]),
        ("累加，求和、sum", ["累加", "求和", "sum"]),
        ('["sum", "look up"]', ["sum", "look up"]),
        ("sum, sum ,add", ["sum", "add"]),
    ],
)
def test_it_reads_keywords_one_per_line_or_comma(client: Client, typed: str, saved: list) -> None:
    rule = IntentRule.objects.get(name="sum-en")
    response = client.post(
        f"/admin/planner_app/intentrule/{rule.pk}/change/", rule_form(rule, keywords=typed)
    )
    assert response.status_code == 302
    assert IntentRule.objects.get(pk=rule.pk).keywords == saved


def test_it_reads_patterns_one_per_line_keeping_their_commas(client: Client) -> None:
    rule = IntentRule.objects.get(name="regex")
    response = client.post(
        f"/admin/planner_app/intentrule/{rule.pk}/change/",
        rule_form(rule, patterns="\\d{1,3}\n^(a|b),c$"),
    )
    assert response.status_code == 302
    assert IntentRule.objects.get(pk=rule.pk).patterns == [r"\d{1,3}", "^(a|b),c$"]


def test_it_names_the_line_of_an_invalid_pattern(client: Client) -> None:
    rule = IntentRule.objects.get(name="regex")
    response = client.post(
        f"/admin/planner_app/intentrule/{rule.pk}/change/", rule_form(rule, patterns="ok\n(a")
    )
    assert response.status_code == 200
    assert "line 2: invalid regular expression" in response.content.decode()


def test_it_refuses_a_rule_with_no_keyword_or_pattern(client: Client) -> None:
    rule = IntentRule.objects.get(name="regex")
    response = client.post(
        f"/admin/planner_app/intentrule/{rule.pk}/change/", rule_form(rule, keywords=" \n, ")
    )
    assert "a rule needs at least one keyword or pattern" in response.content.decode()


def test_it_shows_keywords_one_per_line_with_a_link_to_try_the_rule(client: Client) -> None:
    rule = IntentRule.objects.get(name="sum-en")
    page = client.get(f"/admin/planner_app/intentrule/{rule.pk}/change/").content.decode()
    assert ">\nsum\nadd\nplus\ntotal</textarea>" in page
    assert 'href="/planner/try?request=sum+&amp;rule=sum-en"' in page


def test_the_try_page_links_back_to_the_rule(client: Client) -> None:
    rule = IntentRule.objects.get(name="sum-en")
    page = client.get("/planner/try", {"request": "sum 1 to 10", "rule": "sum-en"})
    html = page.content.decode()
    change_url = f"/admin/planner_app/intentrule/{rule.pk}/change/"
    assert f'href="{change_url}" id="back-to-rule"' in html
    assert f'<a href="{change_url}">sum-en</a>' in html  # the matched rule, linked


def test_it_labels_the_inputs_of_the_rules_list(client: Client) -> None:
    page = client.get("/admin/planner_app/intentrule/").content.decode()
    assert 'aria-label="Priority of sum-en"' in page
    assert 'aria-label="Enabled of sum-en"' in page


def test_it_asks_before_rolling_back_and_shows_what_would_change(client: Client) -> None:
    first = RuleSetVersion.objects.order_by("number").first()
    IntentRule.objects.get(name="regex").delete()
    latest = RuleSetVersion.objects.order_by("-number").first()
    response = client.post(
        "/admin/planner_app/rulesetversion/",
        {"action": "roll_back", "_selected_action": [first.pk]},
    )
    html = response.content.decode()
    assert "Yes, roll back to v1" in html
    assert "<code>+ rule regex</code>" in html
    assert RuleSetVersion.objects.order_by("-number").first() == latest  # nothing done yet
    assert not IntentRule.objects.filter(name="regex").exists()


def test_the_version_page_shows_old_and_new_values(client: Client) -> None:
    rule = IntentRule.objects.get(name="hashing")
    client.post(
        f"/admin/planner_app/intentrule/{rule.pk}/change/",
        rule_form(rule, keywords="hash\ndigest", priority=3),
    )
    latest = RuleSetVersion.objects.order_by("-number").first()
    html = client.get(f"/admin/planner_app/rulesetversion/{latest.pk}/change/").content.decode()
    assert "~ rule hashing: keywords +digest −md5 −sha1 −sha256 −sha512 −哈希; priority 80 → 3" in (
        html
    )


def test_a_rule_with_only_patterns_links_to_an_empty_try_page(client: Client) -> None:
    rule = IntentRule.objects.get(name="regex")
    client.post(
        f"/admin/planner_app/intentrule/{rule.pk}/change/",
        rule_form(rule, keywords="", patterns=r"\bre\b"),
    )
    page = client.get(f"/admin/planner_app/intentrule/{rule.pk}/change/").content.decode()
    assert 'href="/planner/try?rule=regex"' in page
    response = client.get("/planner/try", {"rule": "regex"})
    assert response.status_code == 200
    assert 'id="back-to-rule"' in response.content.decode()
