"""Two operators saving the same rule at the same moment, on gunicorn with two sync workers.

Each save is served by its own worker process, so only the database can order them: the
rule-set lock, the version written in the edit's transaction, and the stale-form check.
Run on SQLite, and on PostgreSQL with DATABASE_URL set.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model

from planner_app import ruleset_versions
from planner_app.models import IntentRule, RuleSetVersion
from tests.conftest import subprocess_env
from tests.planner_app.admin_forms import csrf_of, form_fields
from tests.traces_app.test_unavailable_db import gunicorn_client

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "a-long-enough-password"
EDITORS = ("alice", "bob")
ROUNDS = 6
ROLLBACK_ROUNDS = 3
STALE = "changed since you opened this form: "
STALE_ROLLBACK = "The rules changed since you opened this page"


def log_in(client: httpx.Client, username: str) -> httpx.Client:
    token = csrf_of(client.get("/admin/login/").text)
    data = {"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token}
    assert client.post("/admin/login/", data=data).status_code == 302
    return client


def at_once(*calls: Callable[[], httpx.Response]) -> list[httpx.Response]:
    """Send the requests from threads released together; return the responses in order."""
    barrier = threading.Barrier(len(calls))
    responses: list[Any] = [None] * len(calls)

    def send(index: int) -> None:
        barrier.wait()
        responses[index] = calls[index]()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return responses


def sum_en() -> tuple[str, list[str]]:
    rule = IntentRule.objects.get(name="sum-en")
    return f"/admin/planner_app/intentrule/{rule.pk}/change/", rule.keywords


def assert_planner_runs_the_rows(planner: httpx.Client) -> None:
    """The newest version's snapshot is the rows, and a worker's planner plans from it."""
    newest = RuleSetVersion.objects.order_by("-number").first()
    assert newest.snapshot == ruleset_versions.take_snapshot()
    plan = planner.post("/api/v1/plan", json={"request": f"{sum_en()[1][-1]} 3 and 4"}).json()
    assert plan["ruleset_version"] == newest.number
    assert "sum-en" in [match["rule"] for match in plan["explanation"]["rules_matched"]]


def edit_round(number: int, editors: dict[str, httpx.Client]) -> tuple[str, list[str]]:
    """Both editors open the rule and save it at once; return who saved, and what."""
    url, keywords = sum_en()
    forms = {name: form_fields(client.get(url).text, "intentrule_form") for name, client in
             editors.items()}  # fmt: skip
    typed = {name: [*keywords[:4], f"r{number}{name}"] for name in editors}
    responses = at_once(*[
        (lambda n=name: editors[n].post(url, data={**forms[n], "keywords": ", ".join(typed[n])}))
        for name in editors
    ])  # fmt: skip
    assert [r.status_code for r in responses].count(500) == 0
    saved = [name for name, r in zip(editors, responses, strict=True) if r.status_code == 302]
    refused = [r for r in responses if r.status_code == 200]
    assert len(saved) == 1 and len(refused) == 1, [r.status_code for r in responses]
    winner = saved[0]
    assert STALE in refused[0].text and f" by {winner} at " in refused[0].text
    # Nothing typed is lost: the refused form holds the loser's keywords.
    loser = next(name for name in editors if name != winner)
    assert form_fields(refused[0].text, "intentrule_form")["keywords"] == [", ".join(typed[loser])]
    assert sum_en()[1] == typed[winner]
    return winner, typed[winner]


def rollback_round(number: int, editors: dict[str, httpx.Client]) -> None:
    """alice confirms a rollback while bob saves the rule: one of them goes through."""
    alice, bob = editors["alice"], editors["bob"]
    target = RuleSetVersion.objects.order_by("-number")[1]
    url, keywords = sum_en()
    edit = form_fields(bob.get(url).text, "intentrule_form")
    typed = ", ".join([*keywords[:4], f"late{number}"])  # new each round: a save that changes
    asked = {
        "action": "roll_back",
        "_selected_action": target.pk,
        "csrfmiddlewaretoken": csrf_of(alice.get("/admin/planner_app/rulesetversion/").text),
    }
    confirm = form_fields(alice.post("/admin/planner_app/rulesetversion/", data=asked).text,
                          "confirm-rollback")  # fmt: skip
    rolled, edited = at_once(
        lambda: alice.post("/admin/planner_app/rulesetversion/", data=confirm),
        lambda: bob.post(url, data={**edit, "keywords": typed}),
    )
    assert (rolled.status_code, edited.status_code).count(500) == 0
    went_through = [rolled.status_code == 302, edited.status_code == 302]
    assert went_through.count(True) == 1, (rolled.status_code, edited.status_code)
    if went_through[0]:
        assert STALE in edited.text and " by alice at " in edited.text
    else:
        assert STALE_ROLLBACK in rolled.text and "by bob" in rolled.text


def test_two_operators_saving_one_rule_at_once(
    tmp_path: Path, default_rules: None, make_key: Callable[..., str]
) -> None:
    for name in EDITORS:
        get_user_model().objects.create_superuser(name, "", PASSWORD)
    key = make_key("plan")
    first = ruleset_versions.latest_number()
    env = subprocess_env(DATABASE_CONN_MAX_AGE="0")
    saves = []
    with gunicorn_client(env, tmp_path / "gunicorn.log", workers=2) as client:
        base = client.base_url
        editors = {name: log_in(httpx.Client(base_url=base, timeout=60), name) for name in EDITORS}
        planner = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"})
        for number in range(ROUNDS):
            saves.append(edit_round(number, editors))
            assert_planner_runs_the_rows(planner)
        last_edit = ruleset_versions.latest_number()
        for number in range(ROLLBACK_ROUNDS):
            rollback_round(number, editors)
            assert_planner_runs_the_rows(planner)
    log = (tmp_path / "gunicorn.log").read_text()
    assert len(set(re.findall(r"Booting worker with pid: (\d+)", log))) == 2
    versions = list(RuleSetVersion.objects.filter(number__gt=first).order_by("number"))
    assert [v.number for v in versions] == list(range(first + 1, first + 1 + len(versions)))
    edits = [v for v in versions if v.number <= last_edit]
    assert len(edits) == ROUNDS  # one version per successful save, none for a refused one
    for (winner, keywords), version in zip(saves, edits, strict=True):
        rule = next(r for r in version.snapshot["rules"] if r["name"] == "sum-en")
        assert (rule["keywords"], version.created_by.username) == (keywords, winner)
        assert version.change == "changed IntentRule sum-en"
