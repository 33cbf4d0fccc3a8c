"""A monitor's transitions reach a real webhook and a real mailbox exactly once each: spans
sent through the API over real HTTP, the evaluation run, and the periodic work (the beat on
the default setup; a Celery worker on a real Redis) delivering.

The beat tests print the time from the failing spans' POST to the notification; they do
not assert it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from planner_app.monitors.evaluation import evaluate_monitors
from planner_app.monitors.notify import delivery as queue
from planner_app.monitors.records import Delivery, Monitor
from tests.conftest import make_span, subprocess_env
from tests.planner_app import notify_records
from tests.planner_app.monitor_spans import NOW, calls, monitor
from tests.planner_app.receivers import EVERY_SECOND, HttpReceiver, SmtpReceiver
from tests.traces_app.test_periodic_tasks import (
    SHORT_INTERVALS,
    beat_process,
    stop,
    wait_for,
    worker_process,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def receivers(settings: Any) -> Iterator[tuple[HttpReceiver, SmtpReceiver]]:
    hook, smtp = HttpReceiver().start(), SmtpReceiver().start()
    settings.ARES_NOTIFY_ALLOW_PRIVATE = True
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.port
    yield hook, smtp
    hook.stop()
    smtp.stop()


def report(api: httpx.Client, spans: list[dict[str, Any]]) -> None:
    answer = api.post("/invocations", json={"invocations": spans})
    assert answer.json()["accepted"] == len(spans), answer.text


def watched_by_both(hook: HttpReceiver, smtp: SmtpReceiver, **fields: Any) -> Monitor:
    channels = [notify_records.webhook(hook.url), notify_records.mailbox("oncall@example.org")]
    return monitor(channels=channels, **fields)


def test_each_transition_reaches_the_webhook_and_the_mailbox_once(
    api: httpx.Client, receivers: tuple[HttpReceiver, SmtpReceiver]
) -> None:
    hook, smtp = receivers
    watched = watched_by_both(hook, smtp, renotify_minutes=30)
    steps = [(NOW, "error"), (NOW + timedelta(minutes=40), "error"),
             (NOW + timedelta(minutes=80), "ok")]  # fmt: skip
    for at, status in steps:
        report(api, calls(4, status=status, at=at))
        evaluate_monitors(at)  # commits the event; its deliveries are tried at once
        evaluate_monitors(at + timedelta(seconds=30))  # no new transition: nothing sent

    assert [json.loads(r.body)["event"]["kind"] for r in hook.wait_for(3)] == [
        "fired", "reminder", "resolved"]  # fmt: skip
    subjects = [message["Subject"] for message in smtp.wait_for(3)]
    assert subjects == [f"[ARES] {word}: {watched.name}" for word in
                        ("FIRING", "STILL FIRING", "RESOLVED")]  # fmt: skip
    assert queue.deliver_due(NOW + timedelta(days=1)) == 0  # nothing left to send
    assert set(Delivery.objects.values_list("status", flat=True)) == {"delivered"}
    time.sleep(0.5)
    assert (len(hook.requests), len(smtp.messages)) == (3, 3)


def test_a_silenced_monitor_notifies_nobody_then_reminds_after_the_silence(
    api: httpx.Client, receivers: tuple[HttpReceiver, SmtpReceiver]
) -> None:
    hook, smtp = receivers
    watched = watched_by_both(hook, smtp, renotify_minutes=0)
    Monitor.objects.filter(pk=watched.pk).update(silenced_until=NOW + timedelta(minutes=5))
    report(api, calls(4, status="error", at=NOW))
    evaluate_monitors(NOW)
    assert Delivery.objects.count() == 0
    report(api, calls(4, status="error", at=NOW + timedelta(minutes=6)))
    evaluate_monitors(NOW + timedelta(minutes=6))  # silence over, still firing: a reminder
    assert [json.loads(r.body)["event"]["kind"] for r in hook.wait_for(1)] == ["reminder"]
    assert [m["Subject"] for m in smtp.wait_for(1)] == [f"[ARES] STILL FIRING: {watched.name}"]


def _spans_failing_now() -> list[dict[str, Any]]:
    return [make_span(status="error", error_kind="timeout", error_message="slow")
            for _ in range(3)]  # fmt: skip


def _notified_in(
    api: httpx.Client, hook: HttpReceiver, smtp: SmtpReceiver, log: Path
) -> tuple[float, float]:
    """POST failing spans; return the seconds from their answer to the webhook and the email."""
    report(api, _spans_failing_now())
    stored = time.monotonic()
    wait_for(lambda: len(hook.requests) >= 1, log)
    to_hook = time.monotonic() - stored
    wait_for(lambda: len(smtp.messages) >= 1, log)
    return to_hook, time.monotonic() - stored


def test_on_the_default_setup_the_beat_notifies_the_webhook_and_the_mailbox_once(
    api: httpx.Client, receivers: tuple[HttpReceiver, SmtpReceiver], tmp_path: Path
) -> None:
    hook, smtp = receivers
    watched_by_both(hook, smtp, threshold=0.5, window_minutes=30)
    log = tmp_path / "beat.log"
    mail = {"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(smtp.port)}
    with beat_process(log, **EVERY_SECOND, **mail):
        wait_for(lambda: "evaluate-monitors ran" in log.read_text(), log)  # it is up
        to_hook, to_mail = _notified_in(api, hook, smtp, log)
        wait_for(lambda: "1 monitors evaluated: 0 fired" in log.read_text(), log)
    print(f"beat, 1 s periods: span to webhook {to_hook:.2f} s, to email {to_mail:.2f} s")
    assert (len(hook.requests), len(smtp.messages)) == (1, 1)


@pytest.mark.redis
def test_with_celery_the_workers_notify_the_webhook_and_the_mailbox_once(
    api: httpx.Client, receivers: tuple[HttpReceiver, SmtpReceiver], tmp_path: Path
) -> None:
    broker = os.environ.get("CELERY_TEST_BROKER_URL")
    if not broker:
        pytest.skip("set CELERY_TEST_BROKER_URL=redis://... to run against a real broker")
    hook, smtp = receivers
    watched_by_both(hook, smtp, threshold=0.5, window_minutes=30)
    mail = {"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(smtp.port)}
    env = subprocess_env(CELERY_BROKER_URL=broker, **SHORT_INTERVALS, **EVERY_SECOND, **mail)
    beat_log = tmp_path / "beat.log"
    logs = [tmp_path / f"worker-{n}.log" for n in (1, 2)]
    workers = [worker_process(log, env, "-n", f"notify{n}@%h") for n, log in enumerate(logs, 1)]
    try:
        with beat_process(beat_log, CELERY_BROKER_URL=broker, **EVERY_SECOND, **mail):
            up = lambda: any("evaluate-monitors ran" in log.read_text() for log in logs)  # noqa: E731
            wait_for(up, logs[0], 120)
            to_hook, to_mail = _notified_in(api, hook, smtp, logs[0])
            time.sleep(3)  # more periods: a second send would arrive now
    finally:
        for worker in workers:
            stop(worker)
    print(f"celery, 1 s periods: span to webhook {to_hook:.2f} s, to email {to_mail:.2f} s")
    assert (len(hook.requests), len(smtp.messages)) == (1, 1)
    assert any("deliver_notifications_task" in log.read_text() for log in logs)
