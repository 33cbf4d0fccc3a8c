"""Two evaluations of one monitor at once record one event and send one notification:
threads on PostgreSQL, two processes on either database."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from planner_app.monitors.evaluation import evaluate
from planner_app.monitors.records import Delivery, Monitor, MonitorEvent
from tests.conftest import ROOT, subprocess_env
from tests.planner_app import notify_records
from tests.planner_app.monitor_spans import calls, monitor, reporter, send
from tests.planner_app.receivers import HttpReceiver

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def receiver(settings: Any, receiver: HttpReceiver) -> HttpReceiver:
    """The receiver, with webhooks to loopback allowed."""
    settings.ARES_NOTIFY_ALLOW_PRIVATE = True
    return receiver


def _failing_monitor(receiver: HttpReceiver, at: datetime) -> Monitor:
    send(reporter(), calls(4, status="error", at=at))
    return monitor(channels=[notify_records.webhook(receiver.url)])


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_threads_evaluating_at_once_record_one_event(receiver: HttpReceiver) -> None:
    now = datetime.now(UTC)
    watched = _failing_monitor(receiver, now)
    start = threading.Barrier(4)
    events: list[Any] = []

    def race() -> None:
        copy = Monitor.objects.get(pk=watched.pk)  # each read at transitions 0
        start.wait()
        events.append(evaluate(copy, now))
        connection.close()

    threads = [threading.Thread(target=race) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(event is not None for event in events) == 1
    assert MonitorEvent.objects.filter(monitor=watched).count() == 1
    assert Delivery.objects.count() == 1
    assert len(receiver.wait_for(1)) == 1
    time.sleep(1)  # a second sender would have posted by now
    assert len(receiver.requests) == 1


RACER = """
import json, sys, time
from datetime import datetime
from planner_app.monitors.evaluation import evaluate_monitors
now, start = datetime.fromisoformat(sys.argv[1]), float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
print(json.dumps(evaluate_monitors(now).__dict__))
"""


def test_two_processes_evaluating_at_once_record_one_event(receiver: HttpReceiver) -> None:
    now = datetime.now(UTC)
    watched = _failing_monitor(receiver, now)
    start = time.time() + 8  # both have imported Django by then
    env = subprocess_env(DJANGO_SETTINGS_MODULE="ares_site.settings", ARES_NOTIFY_ALLOW_PRIVATE="1")
    racers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import django; django.setup()\n" + RACER,
                now.isoformat(),
                str(start),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]

    assert [s["evaluated"] for s in summaries] == [1, 1], outputs
    assert sum(s["fired"] for s in summaries) == 1, outputs
    assert list(watched.events.values_list("number", "kind")) == [(1, "fired")]
    assert len(receiver.wait_for(1)) == 1
    time.sleep(1)
    assert len(receiver.requests) == 1
    assert Delivery.objects.get().status == "delivered"


def test_a_later_evaluation_sees_the_transition_and_adds_none(receiver: HttpReceiver) -> None:
    now = datetime.now(UTC)
    watched = _failing_monitor(receiver, now)
    assert evaluate(Monitor.objects.get(pk=watched.pk), now) is not None
    assert evaluate(Monitor.objects.get(pk=watched.pk), now + timedelta(seconds=1)) is None
    assert len(receiver.wait_for(1)) == 1
