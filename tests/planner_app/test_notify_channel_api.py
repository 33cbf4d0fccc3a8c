"""The channels API over real HTTP: create, read, edit, delete, test, deliveries; bad bodies."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from planner_app.monitors.notify import delivery as queue
from planner_app.monitors.notify.signing import signature_matches
from planner_app.monitors.records import NotificationChannel
from tests.planner_app import notify_records as make
from tests.planner_app.receivers import HttpReceiver, SmtpReceiver


@pytest.fixture(autouse=True)
def private_allowed(settings: Any) -> None:
    settings.ARES_NOTIFY_ALLOW_PRIVATE = True


@pytest.fixture
def channels(live_server: Any, make_key: Callable[..., str]) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {make_key('monitor')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=30) as client:
        yield client


def test_it_creates_a_webhook_and_answers_its_secret_once(
    channels: httpx.Client, receiver: HttpReceiver
) -> None:
    answer = channels.post(
        "/channels", json={"name": "ops", "kind": "webhook", "url": receiver.url}
    )
    assert answer.status_code == 200, answer.text
    created = answer.json()
    secret = created["signing_secret"]
    assert len(secret) == 64 and created["url"] == receiver.url and created["monitors"] == []
    assert secret not in json.dumps(
        NotificationChannel.objects.values().get(), default=str
    )  # never stored
    read = channels.get(f"/channels/{created['id']}").json()
    assert "signing_secret" not in read and read["name"] == "ops"

    tested = channels.post(f"/channels/{created['id']}/test").json()
    assert tested["ok"] is True and tested["status_code"] == 200
    [request] = receiver.requests
    assert signature_matches(secret, request.body, request.headers["x-ares-signature"])
    assert json.loads(request.body)["type"] == "ares.test"


def test_it_tests_an_email_channel_through_a_real_smtp_server(
    channels: httpx.Client, settings: Any
) -> None:
    smtp = SmtpReceiver().start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.port
    try:
        body = {"name": "mail", "kind": "email", "emails": ["oncall@example.org"]}
        created = channels.post("/channels", json=body).json()
        assert created["signing_secret"] is None
        assert channels.post(f"/channels/{created['id']}/test").json()["ok"] is True
        [message] = smtp.wait_for(1)
    finally:
        smtp.stop()
    assert message["Subject"] == "[ARES] TEST: mail" and message["To"] == "oncall@example.org"


def test_a_test_to_a_receiver_that_fails_answers_what_it_said(channels: httpx.Client) -> None:
    failing = HttpReceiver(fail_first=1, fail_status=502).start()
    try:
        body = {"name": "slack", "kind": "slack", "url": failing.url}
        created = channels.post("/channels", json=body).json()
        tested = channels.post(f"/channels/{created['id']}/test").json()
    finally:
        failing.stop()
    assert tested["ok"] is False and tested["status_code"] == 502
    assert tested["error"] == "the receiver answered 502: receiver down for the test"


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"name": "x", "kind": "webhook"}, "url", "required for webhook and Slack channels"),
        ({"name": "x", "kind": "webhook", "url": "ftp://h/x"}, "url", "is not an http:// or"),
        ({"name": "x", "kind": "slack", "url": "http://h.invalid/x"}, "url", "cannot resolve"),
        ({"name": "x", "kind": "email"}, "emails", "at least one address"),
        ({"name": "x", "kind": "email", "emails": ["not-mail"]}, "emails", "'not-mail' is not"),
        (
            {"name": "x", "kind": "email", "emails": ["a@b.org"], "url": "http://h/"},
            "url",
            "no URL",
        ),
        ({"name": "x", "kind": "pager"}, "kind", "Input should be"),
        ({"name": "", "kind": "email", "emails": ["a@b.org"]}, "name", "at least 1"),
        ({"name": "x", "kind": "email", "emails": ["a@b.org"], "secret": "s"}, "secret", "Extra"),
        ({"name": "x\u0000", "kind": "email", "emails": ["a@b.org"]}, "name", "match pattern"),
        ({"name": "x", "kind": "email", "emails": ["a\u0000@b.org"]}, "emails", "is not"),
    ],
)
def test_a_bad_channel_answers_422_naming_the_field(
    channels: httpx.Client, body: dict[str, Any], field: str, reason: str
) -> None:
    answer = channels.post("/channels", json=body)
    assert answer.status_code == 422, answer.text
    [error] = [e for e in answer.json()["errors"] if e["field"] == f"payload.{field}"]
    assert reason in error["reason"]
    assert not NotificationChannel.objects.exists()


def test_a_webhook_to_loopback_is_refused_on_save_unless_allowed(
    channels: httpx.Client, settings: Any, receiver: HttpReceiver
) -> None:
    settings.ARES_NOTIFY_ALLOW_PRIVATE = False
    answer = channels.post("/channels", json={"name": "x", "kind": "webhook", "url": receiver.url})
    assert answer.status_code == 422
    assert "127.0.0.1 is not a public address (loopback)" in answer.json()["detail"]
    assert "ARES_NOTIFY_ALLOW_PRIVATE=1" in answer.json()["detail"]


def test_it_edits_and_deletes_a_channel(channels: httpx.Client, receiver: HttpReceiver) -> None:
    first = channels.post("/channels", json={"name": "a", "kind": "slack", "url": receiver.url})
    channels.post("/channels", json={"name": "b", "kind": "slack", "url": receiver.url})
    pk = first.json()["id"]
    edited = channels.patch(f"/channels/{pk}", json={"enabled": False, "name": "a2"})
    assert edited.status_code == 200 and edited.json()["enabled"] is False
    taken = channels.patch(f"/channels/{pk}", json={"name": "b"})
    assert taken.status_code == 422 and "a channel named 'b' exists already" in taken.text
    assert channels.patch(f"/channels/{pk}", json={"url": None}).status_code == 422
    assert channels.patch(f"/channels/{pk}", json={"url": "nope"}).status_code == 422
    assert [c["name"] for c in channels.get("/channels").json()] == ["a2", "b"]
    deleted = channels.delete(f"/channels/{pk}")
    assert deleted.status_code == 200 and deleted.json() == {"deleted": pk, "name": "a2"}
    assert channels.get(f"/channels/{pk}").status_code == 404
    assert channels.post(f"/channels/{pk}/test").json()["detail"] == f"no channel #{pk}"


def test_it_lists_a_channels_deliveries_with_their_tries(
    channels: httpx.Client,
) -> None:
    failing = HttpReceiver(fail_first=1).start()
    try:
        hook = make.webhook(failing.url)
        monitor = make.monitor(hook)
        queue.enqueue(make.event(monitor))  # tried at once: committed (transactional test)
        queue.deliver_due(timezone.now() + timedelta(minutes=1))
    finally:
        failing.stop()
    [row] = channels.get(f"/channels/{hook.pk}/deliveries").json()
    assert row["status"] == "delivered" and row["monitor_id"] == monitor.pk
    assert [(t["number"], t["ok"], t["status_code"]) for t in row["tries"]] == [
        (1, False, 503), (2, True, 200),
    ]  # fmt: skip
    assert channels.get(f"/channels/{hook.pk}/deliveries?status=failed").json() == []
    assert channels.get(f"/channels/{hook.pk}/deliveries?status=lost").status_code == 422


def test_it_needs_the_monitor_scope(live_server: Any, make_key: Callable[..., str]) -> None:
    headers = {"Authorization": f"Bearer {make_key('read')}"}
    answer = httpx.get(f"{live_server.url}/api/v1/channels", headers=headers)
    assert answer.status_code == 403
