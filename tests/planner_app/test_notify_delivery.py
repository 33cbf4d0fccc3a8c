"""Deliveries to real receivers on loopback: a signed webhook, Slack, email; retries; claims."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from planner_app.monitors.notify import delivery as queue
from planner_app.monitors.notify.signing import signature_matches, signing_secret
from planner_app.monitors.records import Delivery, DeliveryAttempt
from tests.planner_app import notify_records as make
from tests.planner_app.notify_records import T0
from tests.planner_app.receivers import HttpReceiver, SmtpReceiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def private_allowed(settings: Any) -> None:
    settings.ARES_NOTIFY_ALLOW_PRIVATE = True
    settings.ARES_SITE_URL = "https://ares.example.org"


@pytest.fixture
def smtp(settings: Any) -> Iterator[SmtpReceiver]:
    server = SmtpReceiver().start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    settings.DEFAULT_FROM_EMAIL = "alerts@ares.example.org"
    yield server
    server.stop()


def test_it_posts_a_signed_webhook_with_the_documented_body(receiver: HttpReceiver) -> None:
    channel = make.webhook(receiver.url)
    event = make.event(make.monitor(channel))
    [delivery] = queue.enqueue(event)

    assert queue.deliver_due(T0) == 1
    [request] = receiver.requests
    assert signature_matches(
        signing_secret(channel), request.body, request.headers["x-ares-signature"]
    )
    assert request.headers["x-ares-delivery"] == str(delivery.pk)
    assert request.headers["x-ares-timestamp"] == str(int(T0.timestamp()))
    assert request.headers["content-type"] == "application/json"
    body = json.loads(request.body)
    assert body["type"] == "ares.monitor_event" and body["delivery_id"] == delivery.pk
    assert body["event"]["number"] == 1 and body["event"]["kind"] == "fired"
    assert body["event"]["message"] == event.message
    assert body["monitor"]["target"] == "calculator" and body["attempt"] == 1
    assert body["links"]["monitor"] == f"https://ares.example.org/monitors/{event.monitor.pk}/"
    assert "tool=calculator" in body["links"]["traces"] and "since=" in body["links"]["traces"]
    assert body["links"]["trace_pages"][0] == f"https://ares.example.org/traces/{'a' * 32}/"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.delivered_at) == ("delivered", 1, T0)
    [attempt] = delivery.tries.all()
    assert attempt.ok and attempt.status_code == 200 and attempt.number == 1


def test_a_signature_made_with_another_secret_does_not_match(receiver: HttpReceiver) -> None:
    channel = make.webhook(receiver.url)
    other = make.webhook(receiver.url, name="other hook")
    queue.enqueue(make.event(make.monitor(channel)))
    queue.deliver_due(T0)
    [request] = receiver.requests
    header = request.headers["x-ares-signature"]
    assert signing_secret(channel) != signing_secret(other)
    assert not signature_matches(signing_secret(other), request.body, header)
    assert not signature_matches(signing_secret(channel), request.body + b" ", header)


def test_it_posts_a_slack_body_with_its_control_characters_escaped(receiver: HttpReceiver) -> None:
    monitor = make.monitor(make.slack(receiver.url), name="<!channel> & friends")
    queue.enqueue(make.event(monitor))
    queue.deliver_due(T0)
    [request] = receiver.requests
    text = json.loads(request.body)["text"]
    assert text.startswith("*[ARES] FIRING: &lt;!channel&gt; &amp; friends*\n")
    assert "error rate of tool calculator is 0.5" in text
    assert f"<https://ares.example.org/monitors/{monitor.pk}/|Monitor>" in text
    assert "x-ares-signature" not in request.headers


def test_it_sends_an_email_through_a_real_smtp_server(smtp: SmtpReceiver) -> None:
    monitor = make.monitor(make.mailbox("oncall@example.org", "lead@example.org"))
    event = make.event(monitor, kind="resolved")
    [delivery] = queue.enqueue(event)
    assert queue.deliver_due(T0) == 1

    [message] = smtp.wait_for(1)
    assert message["Subject"] == "[ARES] RESOLVED: calculator errors"
    assert message["From"] == "alerts@ares.example.org"
    assert smtp.envelopes[0][1] == ["oncall@example.org", "lead@example.org"]
    text = message.get_content()
    assert event.message in text
    assert f"https://ares.example.org/monitors/{monitor.pk}/" in text
    assert Delivery.objects.get(pk=delivery.pk).status == "delivered"


def test_an_email_to_a_mail_server_that_is_down_is_retried(settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # nothing listens on discard
    [delivery] = queue.enqueue(make.event(make.monitor(make.mailbox("oncall@example.org"))))
    queue.deliver_due(T0)
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.attempts == 1
    assert delivery.next_attempt_at == T0 + timedelta(seconds=10)
    assert delivery.last_error.startswith("email not sent: ConnectionRefusedError")


def test_it_retries_a_failing_receiver_with_backoff_and_records_every_try() -> None:
    receiver = HttpReceiver(fail_first=2).start()
    try:
        [delivery] = queue.enqueue(make.event(make.monitor(make.webhook(receiver.url))))
        assert queue.deliver_due(T0) == 1
        assert queue.deliver_due(T0 + timedelta(seconds=9)) == 0  # not due yet
        assert queue.deliver_due(T0 + timedelta(seconds=10)) == 1
        assert queue.deliver_due(T0 + timedelta(seconds=39)) == 0
        assert queue.deliver_due(T0 + timedelta(seconds=40)) == 1
        assert queue.deliver_due(T0 + timedelta(hours=1)) == 0  # delivered: nothing left
    finally:
        receiver.stop()
    assert [json.loads(r.body)["attempt"] for r in receiver.requests] == [1, 2, 3]
    assert {r.headers["x-ares-delivery"] for r in receiver.requests} == {str(delivery.pk)}
    tries = list(DeliveryAttempt.objects.filter(delivery=delivery).values_list(
        "number", "ok", "status_code", "at"))  # fmt: skip
    assert tries == [
        (1, False, 503, T0), (2, False, 503, T0 + timedelta(seconds=10)),
        (3, True, 200, T0 + timedelta(seconds=40)),
    ]  # fmt: skip
    delivery.refresh_from_db()
    assert delivery.status == "delivered" and delivery.last_error == ""


def test_a_delivery_out_of_tries_is_failed_with_the_last_error(settings: Any) -> None:
    settings.ARES_NOTIFY_MAX_ATTEMPTS = 3
    receiver = HttpReceiver(fail_first=99, fail_status=500).start()
    try:
        [delivery] = queue.enqueue(make.event(make.monitor(make.webhook(receiver.url))))
        moment = T0
        for _ in range(5):
            queue.deliver_due(moment)
            moment += timedelta(hours=1)
    finally:
        receiver.stop()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("failed", 3)
    assert delivery.last_error == "the receiver answered 500: receiver down for the test"
    assert len(receiver.requests) == 3


def test_a_webhook_to_loopback_is_refused_unless_private_addresses_are_allowed(
    settings: Any, receiver: HttpReceiver
) -> None:
    settings.ARES_NOTIFY_ALLOW_PRIVATE = False
    [delivery] = queue.enqueue(make.event(make.monitor(make.webhook(receiver.url))))
    queue.deliver_due(T0)
    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.attempts == 1  # not worth retrying
    assert "127.0.0.1 is not a public address (loopback)" in delivery.last_error
    assert receiver.requests == []


def test_a_silenced_event_and_a_disabled_channel_get_no_delivery(receiver: HttpReceiver) -> None:
    live, off = make.webhook(receiver.url), make.webhook(receiver.url, name="off", enabled=False)
    monitor = make.monitor(live, off)
    assert queue.enqueue(make.event(monitor, silenced=True)) == []
    [delivery] = queue.enqueue(make.event(monitor, kind="resolved"))
    assert delivery.channel == live
    assert Delivery.objects.count() == 1


def test_enqueueing_an_event_twice_makes_one_delivery_per_channel(receiver: HttpReceiver) -> None:
    monitor = make.monitor(make.webhook(receiver.url), make.slack(receiver.url))
    event = make.event(monitor)
    first, again = queue.enqueue(event), queue.enqueue(event)
    assert {d.pk for d in first} == {d.pk for d in again} and len(first) == 2
    assert queue.deliver_due(T0) == 2 and queue.deliver_due(T0) == 0
    assert len(receiver.requests) == 2


def test_the_deliveries_are_tried_once_the_event_commits(
    receiver: HttpReceiver, django_capture_on_commit_callbacks: Any
) -> None:
    monitor = make.monitor(make.webhook(receiver.url))
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        [delivery] = queue.enqueue(make.event(monitor))
        assert receiver.requests == []  # nothing is sent before the commit
    assert len(callbacks) == 1 and len(receiver.requests) == 1
    assert Delivery.objects.get(pk=delivery.pk).status == "delivered"


def test_a_claimed_delivery_is_not_sent_again_until_its_claim_lapses(
    receiver: HttpReceiver,
) -> None:
    [delivery] = queue.enqueue(make.event(make.monitor(make.webhook(receiver.url))))
    assert queue._claim(delivery.pk, T0, "another process")
    assert queue.deliver(delivery.pk, T0) is False
    assert queue.deliver_due(T0 + timedelta(seconds=queue.CLAIM_SECONDS - 1)) == 0
    assert receiver.requests == []
    assert queue.deliver_due(T0 + timedelta(seconds=queue.CLAIM_SECONDS)) == 1  # it died
    assert len(receiver.requests) == 1


def test_a_disabled_channel_fails_its_pending_delivery(receiver: HttpReceiver) -> None:
    channel = make.webhook(receiver.url)
    [delivery] = queue.enqueue(make.event(make.monitor(channel)))
    channel.enabled = False
    channel.save()
    queue.deliver_due(T0)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.last_error) == ("failed", "the channel is disabled")
    assert receiver.requests == []


@pytest.mark.parametrize(
    ("tries", "seconds"), [(1, 10), (2, 30), (3, 120), (4, 600), (5, 1800), (9, 1800)]
)
def test_the_backoff_grows_then_stays_at_half_an_hour(tries: int, seconds: int) -> None:
    assert queue.backoff(tries) == timedelta(seconds=seconds)
