"""The monitors' admin: validation of the definition, two staff editing at once, the actions."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from planner_app.monitors.records import Monitor, MonitorEvent
from tests.planner_app.admin_forms import form_fields
from tests.planner_app.monitor_spans import calls, monitor, reporter, send

pytestmark = pytest.mark.django_db
ADD = "/admin/planner_app/monitor/add/"
LIST = "/admin/planner_app/monitor/"


def staff(name: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser(name, "", "pw-for-tests-only"))
    return client


@pytest.fixture
def alice() -> Client:
    return staff("alice")


def new_monitor(**changes: Any) -> dict[str, Any]:
    data = {"name": "calculator errors", "metric": "error_rate", "scope": "tool",
            "target": "calculator", "comparison": "above", "threshold": "0.2",
            "window_minutes": "15", "min_calls": "1", "renotify_minutes": "60",
            "enabled": "on", "description": ""}  # fmt: skip
    data.update(changes)
    return data


def test_it_creates_a_monitor(alice: Client) -> None:
    assert alice.post(ADD, new_monitor()).status_code == 302
    made = Monitor.objects.get()
    assert (made.target, made.state, made.version, made.created_by) == (
        "calculator",
        "ok",
        1,
        "user alice",
    )


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"target": "no_such_tool"}, "no tool named &#x27;no_such_tool&#x27;"),
        ({"threshold": "1.5"}, "error_rate thresholds are between 0 and 1"),
        ({"scope": "capability", "target": "nothing_like_it"}, "no capability named"),
        ({"scope": "site", "metric": "score_drop", "target": ""}, "on a tool or a capability"),
        ({"window_minutes": "0"}, "greater than or equal to 1"),
    ],
)
def test_it_refuses_a_monitor_that_cannot_be_measured(
    alice: Client, changes: dict, says: str
) -> None:
    response = alice.post(ADD, new_monitor(**changes))
    assert response.status_code == 200
    assert says in response.content.decode()
    assert not Monitor.objects.exists()


def test_the_second_of_two_staff_saving_is_told_and_nothing_is_lost(alice: Client) -> None:
    bob = staff("bob")
    watched = monitor()
    url = f"/admin/planner_app/monitor/{watched.pk}/change/"
    mine = form_fields(alice.get(url).content.decode(), "monitor_form")
    theirs = form_fields(bob.get(url).content.decode(), "monitor_form")
    assert bob.post(url, {**theirs, "threshold": "0.4"}).status_code == 302

    response = alice.post(url, {**mine, "window_minutes": "60"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "Someone saved this monitor since you opened it (it is at version 2" in page
    kept = Monitor.objects.get(pk=watched.pk)
    assert (kept.threshold, kept.window_minutes, kept.version) == (0.4, 15, 2)  # bob's kept
    again = form_fields(page, "monitor_form")
    assert (again["window_minutes"], again["seen_version"]) == (["60"], ["2"])  # alice's kept
    assert alice.post(url, again).status_code == 302
    saved = Monitor.objects.get(pk=watched.pk)
    assert (saved.window_minutes, saved.version) == (60, 3)


def test_a_save_keeps_the_state_evaluation_moved(alice: Client) -> None:
    watched = monitor()
    url = f"/admin/planner_app/monitor/{watched.pk}/change/"
    form = form_fields(alice.get(url).content.decode(), "monitor_form")
    Monitor.objects.filter(pk=watched.pk).update(state="firing", transitions=3)
    assert alice.post(url, {**form, "threshold": "0.3"}).status_code == 302
    saved = Monitor.objects.get(pk=watched.pk)
    assert (saved.state, saved.transitions, saved.threshold) == ("firing", 3, 0.3)


def _act(client: Client, action: str, *monitors: Monitor) -> str:
    data = {"action": action, "_selected_action": [m.pk for m in monitors]}
    return client.post(LIST, data, follow=True).content.decode()


def test_it_silences_for_an_hour_and_unsilences(alice: Client) -> None:
    watched = monitor()
    assert "1 silenced until" in _act(alice, "silence_for_an_hour", watched)
    watched.refresh_from_db()
    assert watched.silenced_until > timezone.now() + timezone.timedelta(minutes=59)
    assert watched.silence_reason == "silenced in the admin by alice"
    _act(alice, "unsilence", watched)
    watched.refresh_from_db()
    assert watched.silenced_until <= timezone.now() and watched.silence_reason == ""


def test_it_evaluates_now(alice: Client) -> None:
    send(reporter(), calls(3, status="error", at=timezone.now()))
    watched = monitor(name="Calc errors")
    page = _act(alice, "evaluate_now", watched)
    assert "Calc errors fired: error rate of tool calculator was 100.0%" in page
    assert MonitorEvent.objects.filter(monitor=watched, kind="fired").count() == 1
    assert "no change" in _act(alice, "evaluate_now", watched)


def test_alerts_are_read_only(alice: Client) -> None:
    send(reporter(), calls(3, status="error", at=timezone.now()))
    watched = monitor()
    _act(alice, "evaluate_now", watched)
    event = MonitorEvent.objects.get()
    assert alice.get("/admin/planner_app/monitorevent/").status_code == 200
    assert alice.get("/admin/planner_app/monitorevent/add/").status_code == 403
    page = alice.get(f"/admin/planner_app/monitorevent/{event.pk}/change/").content.decode()
    assert 'name="message"' not in page and "error rate of tool calculator" in page
