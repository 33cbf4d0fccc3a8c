"""The monitor API over real HTTP: define, edit (409 on a stale version), silence, read alerts;
and a monitor firing and resolving on spans sent through the API, notifying a real webhook."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from planner_app.monitors.evaluation import evaluate_monitors
from planner_app.monitors.records import Monitor
from tests.conftest import make_span
from tests.planner_app import notify_records
from tests.planner_app.receivers import HttpReceiver

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def monitors_api(live_server: Any, make_key: Callable[..., str]) -> Iterator[httpx.Client]:
    """A client holding a key that may report spans and edit monitors."""
    headers = {"Authorization": f"Bearer {make_key('report', 'read', 'monitor')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=30) as client:
        yield client


@pytest.fixture
def receiver(settings: Any, receiver: HttpReceiver) -> HttpReceiver:
    """The receiver, with webhooks to loopback allowed."""
    settings.ARES_NOTIFY_ALLOW_PRIVATE = True
    return receiver


ERRORS = {"name": "calculator errors", "metric": "error_rate", "scope": "tool",
          "target": "calculator", "threshold": 0.2, "window_minutes": 15}  # fmt: skip


def _spans(count: int, status: str, at: datetime) -> list[dict[str, Any]]:
    extra = {"error_kind": "tool_error", "error_message": "boom"} if status == "error" else {}
    return [
        make_span(status=status, started_at=(at - timedelta(seconds=i + 1)).isoformat(), **extra)
        for i in range(count)
    ]


def test_a_monitor_fires_and_resolves_on_spans_sent_through_the_api(
    monitors_api: httpx.Client, receiver: HttpReceiver
) -> None:
    channel = notify_records.webhook(receiver.url)
    created = monitors_api.post("/monitors", json={**ERRORS, "channels": [channel.pk]})
    assert created.status_code == 200, created.text
    now = datetime.now(UTC)
    sent = monitors_api.post("/invocations", json={"invocations": _spans(3, "error", now)})
    assert sent.json()["accepted"] == 3

    assert evaluate_monitors().fired == 1
    [fired] = receiver.wait_for(1)
    assert json.loads(fired.body)["event"]["kind"] == "fired"
    assert evaluate_monitors().fired == 0  # still firing: nothing more
    shown = monitors_api.get(f"/monitors/{created.json()['id']}").json()
    assert (shown["state"], shown["transitions"], shown["last_value"]) == ("firing", 1, 1.0)

    healthy = _spans(30, "ok", datetime.now(UTC))
    assert monitors_api.post("/invocations", json={"invocations": healthy}).json()["accepted"] == 30
    assert evaluate_monitors().resolved == 1
    requests = receiver.wait_for(2)
    assert [json.loads(r.body)["event"]["kind"] for r in requests] == ["fired", "resolved"]

    alerts = monitors_api.get("/alerts").json()
    assert [(a["number"], a["kind"]) for a in alerts] == [(2, "resolved"), (1, "fired")]
    assert alerts[1]["deliveries"][0]["status"] == "delivered"
    assert sorted(alerts[1]["trace_ids"]) == sorted(
        s["trace_id"] for s in json.loads(sent.request.content)["invocations"]
    )
    assert (
        "status=error" in alerts[1]["traces_url"] and "tool=calculator" in alerts[1]["traces_url"]
    )


def test_an_edit_at_a_stale_version_is_refused_and_nothing_is_lost(
    monitors_api: httpx.Client,
) -> None:
    created = monitors_api.post("/monitors", json=ERRORS).json()
    first = monitors_api.patch(f"/monitors/{created['id']}", json={"version": 1, "threshold": 0.3})
    assert (first.status_code, first.json()["version"]) == (200, 2)
    second = monitors_api.patch(
        f"/monitors/{created['id']}", json={"version": 1, "window_minutes": 60}
    )
    assert second.status_code == 409
    assert "at version 2, not 1" in second.json()["detail"]
    kept = Monitor.objects.get(pk=created["id"])
    assert (kept.threshold, kept.window_minutes, kept.version) == (0.3, 15, 2)


def test_an_edit_does_not_touch_the_state(monitors_api: httpx.Client) -> None:
    created = monitors_api.post("/monitors", json=ERRORS).json()
    Monitor.objects.filter(pk=created["id"]).update(state="firing", transitions=4)
    edited = monitors_api.patch(f"/monitors/{created['id']}", json={"version": 1, "name": "x"})
    assert (edited.json()["state"], edited.json()["transitions"]) == ("firing", 4)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**ERRORS, "metric": "uptime"}, "metric"),
        ({**ERRORS, "threshold": "high"}, "threshold"),
        ({**ERRORS, "threshold": 2.0}, "threshold"),
        ({**ERRORS, "window_minutes": 0}, "window_minutes"),
        ({**ERRORS, "target": "no_such_tool"}, "target"),
        ({**ERRORS, "scope": "planet"}, "scope"),
        ({**ERRORS, "colour": "red"}, "colour"),
        ({**ERRORS, "channels": [999999]}, "channels"),
        ({k: v for k, v in ERRORS.items() if k != "metric"}, "metric"),
        ({**ERRORS, "name": "errors\u0000"}, "name"),  # PostgreSQL refuses NUL in text
        ({**ERRORS, "description": "a\nb\u0000"}, "description"),
        ({**ERRORS, "name": "two\nlines"}, "name"),
    ],
)
def test_a_bad_monitor_is_refused_naming_the_field(
    monitors_api: httpx.Client, body: dict[str, Any], field: str
) -> None:
    response = monitors_api.post("/monitors", json=body)
    assert response.status_code == 422, response.text
    fields = [error["field"].rsplit(".", 1)[-1] for error in response.json()["errors"]]
    assert field in fields, response.json()
    assert not Monitor.objects.exists()


def test_a_second_monitor_of_the_same_name_is_refused(monitors_api: httpx.Client) -> None:
    assert monitors_api.post("/monitors", json=ERRORS).status_code == 200
    again = monitors_api.post("/monitors", json=ERRORS)
    assert again.status_code == 422 and "exists already" in again.text


@pytest.mark.parametrize(
    "body",
    [{"threshold": 0.5}, {"version": "1", "threshold": 0.5}, {"version": 1, "metric": None}],
)
def test_a_bad_edit_is_refused_with_422(monitors_api: httpx.Client, body: dict) -> None:
    created = monitors_api.post("/monitors", json=ERRORS).json()
    assert monitors_api.patch(f"/monitors/{created['id']}", json=body).status_code == 422
    assert Monitor.objects.get(pk=created["id"]).version == 1


def test_it_silences_and_unsilences(monitors_api: httpx.Client) -> None:
    created = monitors_api.post("/monitors", json=ERRORS).json()
    until = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    silenced = monitors_api.post(
        f"/monitors/{created['id']}/silence", json={"until": until, "reason": "deploy"}
    ).json()
    assert (silenced["silenced"], silenced["silence_reason"]) == (True, "deploy")
    past = monitors_api.post(
        f"/monitors/{created['id']}/silence", json={"until": "2020-01-01T00:00:00Z"}
    )
    assert past.status_code == 422 and "future" in past.text
    lifted = monitors_api.delete(f"/monitors/{created['id']}/silence").json()
    assert lifted["silenced"] is False


def test_it_deletes_and_answers_404_after(monitors_api: httpx.Client) -> None:
    created = monitors_api.post("/monitors", json=ERRORS).json()
    deleted = monitors_api.delete(f"/monitors/{created['id']}")
    assert deleted.status_code == 200
    assert deleted.json() == {"deleted": created["id"], "name": created["name"]}
    assert monitors_api.get(f"/monitors/{created['id']}").status_code == 404
    assert monitors_api.get(f"/monitors/{created['id']}/events").status_code == 404


def test_it_needs_the_monitor_scope(api: httpx.Client) -> None:
    assert api.get("/monitors").status_code == 403
    assert api.get("/alerts").status_code == 403


def test_alerts_filter_by_monitor_kind_and_state(monitors_api: httpx.Client) -> None:
    one, two = notify_records.monitor(name="one"), notify_records.monitor(name="two")
    notify_records.event(one, "fired")
    notify_records.event(two, "fired")
    notify_records.event(two, "resolved")
    Monitor.objects.filter(pk=two.pk).update(state="resolved")
    Monitor.objects.filter(pk=one.pk).update(state="firing")
    assert [a["monitor"] for a in monitors_api.get("/alerts?state=firing").json()] == ["one"]
    assert len(monitors_api.get(f"/alerts?monitor={two.pk}").json()) == 2
    assert [a["kind"] for a in monitors_api.get("/alerts?kind=resolved").json()] == ["resolved"]
    assert monitors_api.get("/alerts?state=asleep").status_code == 422
    events = monitors_api.get(f"/monitors/{two.pk}/events?limit=1").json()
    assert [e["number"] for e in events] == [2]
