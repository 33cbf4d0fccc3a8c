"""Operators tune the planner in the admin: bad edits refused, versions credited, rollback."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from planner_app.models import (
    Capability,
    CapabilityMapping,
    IntentRule,
    RuleSetVersion,
    ScoreRule,
    ScoringWeights,
    ToolProfile,
)
from tests.planner_app.admin_forms import form_fields

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


# --- Two operators at once: an edit from a page opened before another save is refused ------


@pytest.fixture
def bob(default_rules: None) -> Client:
    """A second operator's session."""
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("bob", "", "pw-for-tests-only"))
    return client


def opened(client: Client, url: str, form_id: str) -> dict[str, list[str]]:
    """Open an admin page; return what its form would post."""
    return form_fields(client.get(url).content.decode(), form_id)


def prefix_of(form: dict[str, list[str]], pk: int) -> str:
    """Return the prefix of a formset row's fields ("form-3") from the row's id."""
    return next(
        k.removesuffix("-id") for k, v in form.items() if k.endswith("-id") and v == [str(pk)]
    )


def newest() -> RuleSetVersion:
    return RuleSetVersion.objects.order_by("-number").first()


def test_it_refuses_an_edit_from_a_form_opened_before_another_save(
    client: Client, bob: Client
) -> None:
    rule = IntentRule.objects.get(name="sum-en")
    url = f"/admin/planner_app/intentrule/{rule.pk}/change/"
    mine, theirs = opened(client, url, "intentrule_form"), opened(bob, url, "intentrule_form")
    assert bob.post(url, {**theirs, "keywords": "sum, add, total"}).status_code == 302
    response = client.post(url, {**mine, "keywords": "sum, add, plus, total, tally"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "Rule sum-en changed since you opened this form: v" in page
    assert (
        f"v{newest().number} by bob at " in page and "(keywords −plus). Your edit was not" in page
    )
    assert IntentRule.objects.get(pk=rule.pk).keywords == ["sum", "add", "total"]
    again = form_fields(page, "intentrule_form")
    assert again["keywords"] == ["sum, add, plus, total, tally"]  # what was typed, kept
    assert again["ruleset_version"] == [str(newest().number)]
    assert client.post(url, again).status_code == 302  # told, the operator saves again
    assert IntentRule.objects.get(pk=rule.pk).keywords == ["sum", "add", "plus", "total", "tally"]
    assert (newest().created_by.username, newest().change) == ("tuner", "changed IntentRule sum-en")


def test_it_saves_a_rule_when_only_another_rule_changed(client: Client, bob: Client) -> None:
    rule, other = IntentRule.objects.get(name="sum-en"), IntentRule.objects.get(name="hashing")
    url = f"/admin/planner_app/intentrule/{rule.pk}/change/"
    mine = opened(client, url, "intentrule_form")
    other_url = f"/admin/planner_app/intentrule/{other.pk}/change/"
    bob.post(other_url, {**opened(bob, other_url, "intentrule_form"), "priority": "5"})
    assert client.post(url, {**mine, "priority": "7"}).status_code == 302
    assert IntentRule.objects.get(pk=rule.pk).priority == 7


def test_it_refuses_a_list_edit_over_a_newer_change(client: Client, bob: Client) -> None:
    rule = IntentRule.objects.get(name="hashing")
    mine = opened(client, "/admin/planner_app/intentrule/", "changelist-form")
    url = f"/admin/planner_app/intentrule/{rule.pk}/change/"
    bob.post(url, {**opened(bob, url, "intentrule_form"), "priority": "5"})
    row = next(
        k[: -len("-id")] for k, v in mine.items() if k.endswith("-id") and v == [str(rule.pk)]
    )
    response = client.post(
        "/admin/planner_app/intentrule/", {**mine, f"{row}-priority": "7", "_save": "Save"}
    )
    assert response.status_code == 200
    assert "Rule hashing changed since you opened this form" in response.content.decode()
    assert IntentRule.objects.get(pk=rule.pk).priority == 5


def versioned_rows() -> dict[str, Any]:
    """Return one row of each versioned kind besides rules, making those that don't ship."""
    return {
        "capability": Capability.objects.get(name="Summation"),
        "capabilitymapping": CapabilityMapping.objects.get(tool="calculator",
                                                           capability__name="Summation"),
        "toolprofile": ToolProfile.objects.create(tool="calculator", cost=1.0),
        "scoringweights": ScoringWeights.objects.first() or ScoringWeights.objects.create(),
        "scorerule": ScoreRule.objects.create(score_name="helpful", threshold="false"),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "field", "theirs", "mine"),
    [
        ("capability", "description", "Add numbers up", "Sum numbers"),
        ("capabilitymapping", "weight", "1.5", "2.5"),
        ("toolprofile", "cost", "2.0", "3.0"),
        ("scoringweights", "cost", "11.0", "12.0"),
        ("scorerule", "note", "theirs", "mine"),
    ],
)
def test_it_refuses_a_stale_edit_of_every_versioned_kind(
    client: Client, bob: Client, kind: str, field: str, theirs: str, mine: str
) -> None:
    row = versioned_rows()[kind]
    url = f"/admin/planner_app/{kind}/{row.pk}/change/"
    mine_form, theirs_form = opened(client, url, f"{kind}_form"), opened(bob, url, f"{kind}_form")
    assert bob.post(url, {**theirs_form, field: theirs}).status_code == 302
    response = client.post(url, {**mine_form, field: mine})
    assert response.status_code == 200
    assert "changed since you opened this form" in response.content.decode()
    assert "by bob at " in response.content.decode()
    assert str(getattr(type(row).objects.get(pk=row.pk), field)) == theirs
    assert newest().created_by.username == "bob"


def test_it_refuses_a_stale_mapping_in_the_capability_page(client: Client, bob: Client) -> None:
    capability = Capability.objects.get(name="Summation")
    mapping = capability.mappings.get(tool="calculator")
    mine = opened(
        client, f"/admin/planner_app/capability/{capability.pk}/change/", "capability_form"
    )
    url = f"/admin/planner_app/capabilitymapping/{mapping.pk}/change/"
    bob.post(url, {**opened(bob, url, "capabilitymapping_form"), "weight": "1.5"})
    row = next(
        k[: -len("-id")] for k, v in mine.items() if k.endswith("-id") and v == [str(mapping.pk)]
    )
    response = client.post(
        f"/admin/planner_app/capability/{capability.pk}/change/", {**mine, f"{row}-weight": "4"}
    )
    assert "Mapping Summation -&gt; calculator changed since you opened this form" in (
        response.content.decode()
    )
    assert CapabilityMapping.objects.get(pk=mapping.pk).weight == 1.5


def test_an_edit_form_opened_before_a_rollback_still_saves(client: Client, bob: Client) -> None:
    before = newest()
    IntentRule.objects.get(name="regex").delete()
    rule = IntentRule.objects.get(name="hashing")
    url = f"/admin/planner_app/intentrule/{rule.pk}/change/"
    mine = opened(client, url, "intentrule_form")
    confirm = {"action": "roll_back", "_selected_action": [before.pk], "confirmed": "yes"}
    bob.post("/admin/planner_app/rulesetversion/", confirm)
    assert newest().change == f"rolled back to v{before.number}"
    assert client.post(url, {**mine, "priority": "4"}).status_code == 302  # same id, unchanged
    assert IntentRule.objects.get(pk=rule.pk).priority == 4


def test_it_refuses_an_edit_a_rollback_overtook(client: Client, bob: Client) -> None:
    before = newest()
    rule = IntentRule.objects.get(name="hashing")
    url = f"/admin/planner_app/intentrule/{rule.pk}/change/"
    client.post(url, {**opened(client, url, "intentrule_form"), "priority": "3"})
    mine = opened(client, url, "intentrule_form")
    confirm = {"action": "roll_back", "_selected_action": [before.pk], "confirmed": "yes"}
    bob.post("/admin/planner_app/rulesetversion/", confirm)
    page = client.post(url, {**mine, "priority": "4"}).content.decode()
    assert f"v{newest().number} by bob at " in page and "(priority 3 → 80)" in page
    assert IntentRule.objects.get(pk=rule.pk).priority == 80


def test_it_refuses_a_rollback_confirmed_after_the_rules_changed(
    client: Client, bob: Client
) -> None:
    first = RuleSetVersion.objects.order_by("number").first()
    IntentRule.objects.get(name="regex").delete()
    page = client.post(
        "/admin/planner_app/rulesetversion/",
        {"action": "roll_back", "_selected_action": [first.pk]},
    ).content.decode()
    confirm = form_fields(page, "confirm-rollback")
    rule = IntentRule.objects.get(name="hashing")
    url = f"/admin/planner_app/intentrule/{rule.pk}/change/"
    bob.post(url, {**opened(bob, url, "intentrule_form"), "priority": "5"})
    page = client.post("/admin/planner_app/rulesetversion/", confirm, follow=True)
    html = page.content.decode()
    assert f"The rules changed since you opened this page: now v{newest().number} by bob" in html
    assert "<code>~ rule hashing: priority 5 → 80</code>" in html  # the rollback's diff, now
    assert not IntentRule.objects.filter(name="regex").exists()  # nothing rolled back


def test_it_refuses_a_delete_confirmed_before_another_save(client: Client, bob: Client) -> None:
    rule = IntentRule.objects.get(name="hashing")
    delete = f"/admin/planner_app/intentrule/{rule.pk}/delete/"
    mine = opened(client, delete, "delete-confirmation")
    url = f"/admin/planner_app/intentrule/{rule.pk}/change/"
    bob.post(url, {**opened(bob, url, "intentrule_form"), "priority": "5"})
    page = client.post(delete, mine, follow=True).content.decode()
    assert "Rule hashing changed since you opened this form: v" in page
    assert "(priority 80 → 5). Nothing was deleted." in page
    assert IntentRule.objects.filter(pk=rule.pk).exists()
    again = form_fields(page, "delete-confirmation")  # the confirmation, as it is now
    assert client.post(delete, again).status_code == 302
    assert not IntentRule.objects.filter(pk=rule.pk).exists()


@pytest.mark.parametrize("marker", ["abc", "999999", "-1"])
def test_it_refuses_an_edit_whose_page_names_no_recorded_version(
    client: Client, marker: str
) -> None:
    rule = IntentRule.objects.get(name="hashing")
    url = f"/admin/planner_app/intentrule/{rule.pk}/change/"
    form = {**opened(client, url, "intentrule_form"), "priority": "5", "ruleset_version": marker}
    response = client.post(url, form)
    assert response.status_code == 200
    assert "which is not a recorded version: reload the page" in response.content.decode()
    assert IntentRule.objects.get(pk=rule.pk).priority == 80
