"""The channel and delivery admin: kind checks, the secret shown, deliveries, test, retry."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from planner_app.monitors.notify import delivery as queue
from planner_app.monitors.notify.signing import signing_secret
from planner_app.monitors.records import Delivery, DeliveryAttempt, NotificationChannel
from tests.planner_app import notify_records as make
from tests.planner_app.notify_records import T0
from tests.planner_app.receivers import HttpReceiver

pytestmark = pytest.mark.django_db
ADD = "/admin/planner_app/notificationchannel/add/"
CHANNELS = "/admin/planner_app/notificationchannel/"


@pytest.fixture(autouse=True)
def private_allowed(settings: Any) -> None:
    settings.ARES_NOTIFY_ALLOW_PRIVATE = True


def add(client: Client, **fields: str) -> Any:
    return client.post(ADD, {"name": "ops", "url": "", "email_lines": "", "enabled": "on",
                             **fields})  # fmt: skip


def test_it_adds_a_webhook_channel_with_a_salt(
    admin_client: Client, receiver: HttpReceiver
) -> None:
    assert add(admin_client, kind="webhook", url=receiver.url).status_code == 302
    channel = NotificationChannel.objects.get()
    assert len(channel.secret_salt) == 32 and channel.emails == []


def test_it_adds_an_email_channel_from_one_address_a_line(admin_client: Client) -> None:
    lines = "oncall@example.org\n\n  lead@example.org \n"
    assert add(admin_client, kind="email", email_lines=lines).status_code == 302
    assert NotificationChannel.objects.get().emails == ["oncall@example.org", "lead@example.org"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "email", "email_lines": "not an address"}, "&#x27;not an address&#x27; is not"),
        ({"kind": "email"}, "email channels need at least one address"),
        ({"kind": "slack"}, "required for webhook and Slack channels"),
        ({"kind": "webhook", "url": "http://127.0.0.1:9/x", "private": "no"}, "(loopback)"),
    ],
)
def test_a_bad_channel_is_refused_with_a_form_error(
    admin_client: Client, settings: Any, fields: dict[str, str], message: str
) -> None:
    if fields.pop("private", None):
        settings.ARES_NOTIFY_ALLOW_PRIVATE = False
    page = add(admin_client, **fields)
    assert page.status_code == 200
    assert message in page.content.decode()
    assert not NotificationChannel.objects.exists()


def test_the_change_page_shows_the_secret_and_the_deliveries_escaped(
    admin_client: Client, receiver: HttpReceiver
) -> None:
    channel = make.webhook(receiver.url)
    [delivery] = queue.enqueue(make.event(make.monitor(channel)))
    queue.deliver_due(T0)
    Delivery.objects.filter(pk=delivery.pk).update(last_error="<script>alert(1)</script>")
    DeliveryAttempt.objects.filter(delivery=delivery).update(error="<b>bold</b>")

    page = admin_client.get(f"{CHANNELS}{channel.pk}/change/").content.decode()
    assert f"<code>{signing_secret(channel)}</code>" in page
    assert f'data-delivery="{delivery.pk}"' in page and "HTTP 200" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page


def test_the_test_action_says_whether_the_receiver_took_it(admin_client: Client) -> None:
    failing = HttpReceiver(fail_first=1, fail_status=500).start()
    try:
        channel = make.slack(failing.url)
        action = {"action": "send_test_notification", "_selected_action": [channel.pk]}
        first = admin_client.post(CHANNELS, action, follow=True).content.decode()
        second = admin_client.post(CHANNELS, action, follow=True).content.decode()
    finally:
        failing.stop()
    assert "The test to &#x27;ops slack&#x27; failed: the receiver answered 500" in first
    assert "The test to &#x27;ops slack&#x27; was delivered." in second
    assert len(failing.requests) == 2


def test_retry_now_makes_a_failed_delivery_due_again(settings: Any) -> None:
    settings.ARES_NOTIFY_MAX_ATTEMPTS = 1
    failing = HttpReceiver(fail_first=1).start()
    client = Client()
    try:
        [delivery] = queue.enqueue(make.event(make.monitor(make.webhook(failing.url))))
        queue.deliver_due(T0)
        assert Delivery.objects.get(pk=delivery.pk).status == "failed"
        from django.contrib.auth import get_user_model

        admin = get_user_model().objects.create_superuser("root", "r@example.org", "pw-long-1")
        client.force_login(admin)
        action = {"action": "retry_now", "_selected_action": [delivery.pk]}
        answer = client.post("/admin/planner_app/delivery/", action, follow=True)
        assert "1 will be tried by the next delivery run." in answer.content.decode()
        assert queue.deliver_due() == 1
    finally:
        failing.stop()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("delivered", 2)
    page = client.get(f"/admin/planner_app/delivery/{delivery.pk}/change/").content.decode()
    assert "receiver down for the test" in page  # the first try's error, in the tries inline
