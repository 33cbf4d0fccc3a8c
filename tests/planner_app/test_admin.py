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
        {"action": "roll_back", "_selected_action": [first.pk]},
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
