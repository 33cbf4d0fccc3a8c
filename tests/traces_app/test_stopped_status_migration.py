"""Migration 0015: the spans earlier Stops recorded as errors become stopped, and are recounted."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import Invocation, ToolRollup, Trace
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.django_db(transaction=True)

module = importlib.import_module("traces_app.migrations.0015_stopped_status")
TRACE = "ab" * 16
ENGINE_STOP = "slow failed (cancelled): stopped while running: the task was stopped"


def old_span(span_id: str, **fields: str) -> InvocationIn:
    span = make_span(trace_id=TRACE, span_id=span_id, status="error", error_kind="cancelled")
    return InvocationIn.model_validate({**span, **fields})


def test_it_turns_old_stops_into_stopped_spans_and_recounts_them() -> None:
    record_invocations([
        old_span("a" * 16, kind="agent", tool_name="", error_message="stopped by its caller"),
        old_span("b" * 16, tool_name="slow", error_message=ENGINE_STOP),
        # The spiral breaker's refusal is the caller's fault, not a Stop: it stays an error.
        old_span("c" * 16, kind="other", tool_name="calc",
                 error_message="not run: calc is in a failure spiral"),
    ])  # fmt: skip
    recount_all_marked_rollups()
    assert ToolRollup.objects.get(tool_name="slow").failures == 1  # as recorded then
    module.mark_old_stops_stopped(apps, None)
    statuses = dict(Invocation.objects.values_list("span_id", "status"))
    assert statuses == {"a" * 16: "stopped", "b" * 16: "stopped", "c" * 16: "error"}
    trace = Trace.objects.get(pk=TRACE)
    assert (trace.status, trace.failed_calls, trace.stopped_calls) == ("error", 1, 2)
    recount_all_marked_rollups()  # the hours it marked
    slow = ToolRollup.objects.get(tool_name="slow")
    assert (slow.calls, slow.failures, slow.stopped, slow.failures_by_kind) == (1, 0, 1, {})
