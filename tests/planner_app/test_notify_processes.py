"""Exactly one notification per delivery with several senders at once: two processes
running deliver_due, and two Celery workers on a real Redis running the periodic task.

Run on SQLite, and on PostgreSQL with DATABASE_URL set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings

from planner_app.monitors.records import Delivery, DeliveryAttempt, NotificationChannel
from tests.conftest import ROOT, subprocess_env
from tests.planner_app import notify_records as make
from tests.planner_app.receivers import HttpReceiver
from tests.traces_app.test_periodic_tasks import stop, worker_process

pytestmark = pytest.mark.django_db(transaction=True)
EVENTS = 25

SENDER = """
import sys
import django
django.setup()
from planner_app.monitors.notify.delivery import deliver_due
sys.stdin.readline()  # wait for the go, so both senders start together
tried = 0
while (batch := deliver_due()):
    tried += batch
print(tried)
"""


def pending_deliveries(url: str) -> set[str]:
    """Record EVENTS transitions of one monitor with two webhook channels: their ids."""
    hooks = [make.webhook(url, name=f"hook {n}") for n in (1, 2)]
    monitor = make.monitor(*hooks)
    for number in range(EVENTS):
        event = make.event(monitor, kind="fired" if number % 2 == 0 else "resolved")
        Delivery.objects.bulk_create([Delivery(event=event, channel=hook) for hook in hooks])
    return {str(pk) for pk in Delivery.objects.values_list("pk", flat=True)}


def assert_each_sent_once(receiver: HttpReceiver, expected: set[str]) -> None:
    sent = Counter(request.headers["x-ares-delivery"] for request in receiver.requests)
    assert set(sent) == expected
    assert [pk for pk, times in sent.items() if times > 1] == []
    assert set(Delivery.objects.values_list("status", flat=True)) == {"delivered"}
    assert DeliveryAttempt.objects.count() == len(expected)


def test_two_processes_sending_at_once_send_each_delivery_once(receiver: HttpReceiver) -> None:
    expected = pending_deliveries(receiver.url)
    env = subprocess_env(DJANGO_SETTINGS_MODULE="ares_site.settings", ARES_NOTIFY_ALLOW_PRIVATE="1")
    senders = [
        subprocess.Popen(
            [sys.executable, "-c", SENDER],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    time.sleep(3)  # both have set Django up and wait on stdin
    for sender in senders:  # the go to both before reading either
        sender.stdin.write("go\n")
        sender.stdin.flush()
    outputs = [sender.communicate(timeout=120) for sender in senders]
    for sender, (_, err) in zip(senders, outputs, strict=True):
        assert sender.returncode == 0, err
    tried = [int(out) for out, _ in outputs]
    print(f"tries per process: {tried}")
    assert sum(tried) == len(expected)
    assert_each_sent_once(receiver, expected)


@pytest.mark.redis
def test_two_celery_workers_send_each_delivery_once(receiver: HttpReceiver, tmp_path: Path) -> None:
    broker = os.environ.get("CELERY_TEST_BROKER_URL")
    if not broker:
        pytest.skip("set CELERY_TEST_BROKER_URL=redis://... to run against a real broker")
    from ares_site.celery import app as celery_app
    from planner_app.tasks import deliver_notifications_task

    expected = pending_deliveries(receiver.url)
    env = subprocess_env(CELERY_BROKER_URL=broker, ARES_NOTIFY_ALLOW_PRIVATE="1")
    queue = f"test-notify-{os.getpid()}"
    logs = [tmp_path / f"worker-{n}.log" for n in (1, 2)]
    workers = [
        worker_process(log, env, "-Q", queue, "-n", f"notify{n}@%h")
        for n, log in enumerate(logs, 1)
    ]
    celery_app.conf.task_always_eager = False
    try:
        with celery_app.connection_for_write(broker) as connection:
            for _ in range(6):  # more tasks than workers: every worker takes some at once
                deliver_notifications_task.apply_async(queue=queue, connection=connection)
        deadline = time.monotonic() + 120
        while Delivery.objects.exclude(status="delivered").exists():
            if time.monotonic() > deadline:
                pytest.fail("not delivered in 120 s:\n" + logs[0].read_text()[-3000:])
            time.sleep(0.2)
        time.sleep(1)  # any duplicate send would arrive now
    finally:
        celery_app.conf.task_always_eager = settings.CELERY_TASK_ALWAYS_EAGER
        for worker in workers:
            stop(worker)
    ran = [log.read_text().count("deliver_notifications_task") for log in logs]
    print(f"task lines per worker log: {ran}")
    assert_each_sent_once(receiver, expected)
    assert NotificationChannel.objects.count() == 2
