"""Celery tasks: inline without a broker, and on a real worker over a real Redis broker."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from ares_site.celery import app as celery_app
from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import Trace
from traces_app.schemas import InvocationIn
from traces_app.tasks import recompute_trace_totals_task

ROOT = Path(__file__).resolve().parents[2]


def _recorded_trace(spans: int = 3, failures: int = 1) -> Trace:
    trace_id = uuid.uuid4().hex
    items = [
        make_span(trace_id=trace_id, status="error", error_kind="timeout")
        if index < failures
        else make_span(trace_id=trace_id)
        for index in range(spans)
    ]
    record_invocations([InvocationIn.model_validate(item) for item in items])
    return Trace.objects.get(pk=trace_id)


def _corrupt(trace: Trace) -> None:
    Trace.objects.filter(pk=trace.pk).update(
        span_count=0, tool_calls=0, failed_calls=0, status="ok"
    )


@pytest.mark.django_db(transaction=True)
def test_it_recounts_totals_inline_from_the_admin_action() -> None:
    trace = _recorded_trace(spans=3, failures=1)
    _corrupt(trace)
    user = get_user_model().objects.create_superuser("boss", "", "pw-for-tests-only")
    client = Client()
    client.force_login(user)
    response = client.post(
        "/admin/traces_app/trace/",
        {"action": "recompute_totals", "_selected_action": [trace.pk]},
        follow=True,
    )
    assert b"Queued a recount of 1 trace" in response.content
    trace.refresh_from_db()
    assert (trace.span_count, trace.tool_calls, trace.failed_calls) == (3, 3, 1)
    assert trace.status == "error"


@pytest.mark.redis
def test_it_recounts_totals_on_a_real_worker(redis_worker: tuple[str, str]) -> None:
    broker, queue = redis_worker
    trace = _recorded_trace(spans=4, failures=2)
    _corrupt(trace)
    with celery_app.connection_for_write(broker) as connection:
        recompute_trace_totals_task.apply_async(args=[trace.pk], queue=queue, connection=connection)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        trace.refresh_from_db()
        if trace.span_count:
            break
        time.sleep(0.2)
    assert (trace.span_count, trace.tool_calls, trace.failed_calls) == (4, 4, 2)
    assert trace.status == "error"
