"""Monitors evaluated on time by the periodic work: the beat alone (the default setup, no
broker), and the beat sending the job to a Celery worker on a real Redis."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from planner_app.monitors.records import Monitor
from tests.conftest import make_span, subprocess_env
from tests.planner_app import notify_records
from tests.planner_app.receivers import EVERY_SECOND, HttpReceiver
from tests.traces_app.test_periodic_tasks import (
    SHORT_INTERVALS,
    beat_process,
    stop,
    wait_for,
    worker_process,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _failing(api: httpx.Client, receiver: HttpReceiver) -> Monitor:
    """Send failing calls through the API; return a monitor of them notifying the receiver."""
    spans = [make_span(status="error", error_kind="timeout", error_message="slow")
             for _ in range(3)]  # fmt: skip
    assert api.post("/invocations", json={"invocations": spans}).json()["accepted"] == 3
    watched = Monitor.objects.create(
        name="calculator errors", metric="error_rate", scope="tool", target="calculator",
        threshold=0.5, window_minutes=30,
    )  # fmt: skip
    watched.channels.set([notify_records.webhook(receiver.url)])
    return watched


def _fired_once(watched: Monitor, receiver: HttpReceiver, log: Path) -> None:
    wait_for(lambda: len(receiver.requests) >= 1, log)
    [request] = receiver.requests
    assert json.loads(request.body)["event"]["kind"] == "fired"
    watched.refresh_from_db()
    assert (watched.state, watched.transitions) == ("firing", 1)


def test_the_beat_alone_fires_a_monitor_and_notifies(
    api: httpx.Client, receiver: HttpReceiver, tmp_path: Path
) -> None:
    watched = _failing(api, receiver)
    log = tmp_path / "beat.log"
    with beat_process(log, **EVERY_SECOND):
        _fired_once(watched, receiver, log)
        wait_for(lambda: "1 monitors evaluated: 0 fired" in log.read_text(), log)
    assert "1 monitors evaluated: 1 fired" in log.read_text()  # the beat itself evaluated
    assert len(receiver.requests) == 1  # later evaluations found it still firing


@pytest.mark.redis
def test_with_celery_a_worker_fires_a_monitor_and_notifies(
    api: httpx.Client, receiver: HttpReceiver, tmp_path: Path
) -> None:
    broker = os.environ.get("CELERY_TEST_BROKER_URL")
    if not broker:
        pytest.skip("set CELERY_TEST_BROKER_URL=redis://... to run against a real broker")
    watched = _failing(api, receiver)
    beat_log, worker_log = tmp_path / "beat.log", tmp_path / "worker.log"
    env = subprocess_env(CELERY_BROKER_URL=broker, **SHORT_INTERVALS, **EVERY_SECOND)
    worker = worker_process(worker_log, env)
    try:
        with beat_process(beat_log, CELERY_BROKER_URL=broker, **EVERY_SECOND):
            _fired_once(watched, receiver, worker_log)
    finally:
        stop(worker)
    assert "evaluate_monitors_task" in worker_log.read_text()  # the worker ran it
    assert len(receiver.requests) == 1
