"""Score definitions, scores and score rules in the admin."""

from __future__ import annotations

import secrets

import pytest
from django.test import Client

from planner_app.models import RuleSetVersion, ScoreRule
from traces_app.models import Score, ScoreDefinition

pytestmark = pytest.mark.django_db(transaction=True)  # rule changes are versions on commit


def test_the_admin_lists_definitions_scores_and_rules(admin_client: Client) -> None:
    ScoreDefinition.objects.create(name="verdict", data_type="categorical",
                                   categories=["right", "wrong"])  # fmt: skip
    trace_id = secrets.token_hex(16)
    Score.objects.create(name="verdict", data_type="categorical", label="wrong",
                         source="human", trace_id=trace_id, reported_by="user ops")  # fmt: skip

    definitions = admin_client.get("/admin/traces_app/scoredefinition/").content.decode()
    scores = admin_client.get("/admin/traces_app/score/").content.decode()
    rules = admin_client.get("/admin/planner_app/scorerule/")

    assert "right, wrong" in definitions
    assert "the whole trace" in scores and f"/traces/{trace_id}/" in scores
    assert rules.status_code == 200


def test_a_definition_that_cannot_work_is_refused_with_the_field_named(
    admin_client: Client,
) -> None:
    response = admin_client.post(
        "/admin/traces_app/scoredefinition/add/",
        {"name": "helpfulness", "data_type": "numeric", "min_value": "1", "max_value": "0",
         "categories": "[]", "description": "", "created_at_0": "2026-11-30",
         "created_at_1": "12:00:00"},
    )  # fmt: skip

    assert response.status_code == 200
    assert "must not be below min_value" in response.content.decode()
    assert not ScoreDefinition.objects.filter(name="helpfulness").exists()


def test_a_score_rule_added_in_the_admin_is_a_new_rule_set_version(
    admin_client: Client, default_rules: None
) -> None:
    before = RuleSetVersion.objects.count()

    response = admin_client.post(
        "/admin/planner_app/scorerule/add/",
        {"score_name": "result_correct", "operator": "=", "threshold": "false", "weight": "1",
         "enabled": "on", "note": ""},
    )  # fmt: skip

    assert response.status_code == 302, response.content.decode()[:2000]
    assert ScoreRule.objects.count() == 1
    newest = RuleSetVersion.objects.order_by("-number").first()
    assert RuleSetVersion.objects.count() == before + 1
    assert newest.snapshot["score_rules"][0]["threshold"] == "false"


def test_a_score_rule_that_cannot_match_is_refused(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/planner_app/scorerule/add/",
        {"score_name": "helpfulness", "operator": "<", "threshold": "low", "weight": "0.5",
         "enabled": "on", "note": ""},
    )  # fmt: skip

    assert "the threshold must be a number" in response.content.decode()
    assert not ScoreRule.objects.exists()
