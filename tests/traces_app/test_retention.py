"""Retention keeps what it keeps: purged hours' rollups frozen, late spans refused at ingest."""

from __future__ import annotations

import importlib
import secrets
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import httpx
import pytest
from django.apps import apps as django_apps
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.conftest import make_span
from tests.traces_app.test_otlp_bad_input import export_request, tool_span
from traces_app.ingest import recording
from traces_app.ingest.recording import record_invocations
from traces_app.models import (
    FailureSpiral,
    Invocation,
    PurgeHorizon,
    RollupMark,
    Score,
    SpanRollup,
    ToolRollup,
    Trace,
)
from traces_app.rollups import retention
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.rollups.retention import purge_past_retention
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime.now(UTC)
PURGED_HOUR = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(days=3)


@pytest.fixture
def purged_hour_of_100_calls(settings: Any) -> datetime:
    """Store 100 calls in an hour three days ago, then purge with a two-day retention."""
    spans = [
        make_span(started_at=(PURGED_HOUR + timedelta(seconds=30 * n)).isoformat())
        for n in range(100)
    ]
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    recount_all_marked_rollups()
    assert _calls(PURGED_HOUR) == 100
    settings.ARES_RETENTION_DAYS = 2
    assert purge_past_retention().spans == 100
    return PURGED_HOUR


def _calls(hour: datetime) -> int:
    return ToolRollup.objects.get(tool_name="calculator", bucket_start=hour).calls


def _span_rollup_calls(hour: datetime) -> int:
    return sum(SpanRollup.objects.filter(bucket_start=hour).values_list("calls", flat=True))


def test_a_late_span_into_a_purged_hour_is_refused_over_rest_and_the_hour_keeps_100(
    purged_hour_of_100_calls: datetime, api: httpx.Client, settings: Any
) -> None:
    settings.ARES_RETENTION_DAYS = 30  # retention raised after the purge: the hour is in it
    late = make_span(started_at=(purged_hour_of_100_calls + timedelta(minutes=5)).isoformat())

    response = api.post("/invocations", json={"invocations": [late, make_span()]})

    body = response.json()
    assert (response.status_code, body["accepted"], body["rejected"]) == (200, 1, 1)
    [error] = body["items"][0]["errors"]
    assert error["field"] == "started_at"
    assert "retention" in error["reason"] and "ARES_RETENTION_DAYS=30" in error["reason"]
    recount_all_marked_rollups()
    assert _calls(purged_hour_of_100_calls) == 100
    assert _span_rollup_calls(purged_hour_of_100_calls) == 100


def test_a_span_older_than_the_cutoff_is_refused_before_any_purge(
    api: httpx.Client, settings: Any
) -> None:
    settings.ARES_RETENTION_DAYS = 2
    old = make_span(started_at=(NOW - timedelta(days=2, hours=2)).isoformat())

    response = api.post("/invocations", json={"invocations": [old]})

    assert response.status_code == 422
    [error] = response.json()["items"][0]["errors"]
    assert "ARES_RETENTION_DAYS=2" in error["reason"]
    assert not Invocation.objects.exists()


def test_a_late_otlp_span_into_a_purged_hour_is_counted_as_rejected(
    purged_hour_of_100_calls: datetime, otlp_url: str, make_key: Callable[..., str]
) -> None:
    start = int((purged_hour_of_100_calls + timedelta(minutes=5)).timestamp() * 10**9)
    late = tool_span(start_time_unix_nano=start, end_time_unix_nano=start + 3_000_000)
    body = export_request(late, tool_span()).SerializeToString()

    response = httpx.post(
        otlp_url,
        content=body,
        headers={"Authorization": f"Bearer {make_key('report')}",
                 "Content-Type": "application/x-protobuf"},
        timeout=30,
    )  # fmt: skip

    assert response.status_code == 200
    outcome = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert outcome.rejected_spans == 1
    assert "retention (ARES_RETENTION_DAYS=2)" in outcome.error_message
    assert Invocation.objects.count() == 1
    recount_all_marked_rollups()
    assert _calls(purged_hour_of_100_calls) == 100


def test_a_recount_of_a_marked_purged_hour_leaves_its_rollups(
    purged_hour_of_100_calls: datetime,
) -> None:
    RollupMark.objects.create(bucket_start=purged_hour_of_100_calls, tool_name="calculator")
    RollupMark.objects.create(bucket_start=purged_hour_of_100_calls, tool_name="")

    recount_all_marked_rollups()

    assert _calls(purged_hour_of_100_calls) == 100
    assert _span_rollup_calls(purged_hour_of_100_calls) == 100
    assert not RollupMark.objects.exists()


def test_check_rollups_since_before_the_purge_keeps_the_purged_hours(
    purged_hour_of_100_calls: datetime, settings: Any
) -> None:
    settings.ARES_RETENTION_DAYS = 30
    out = StringIO()

    since = (purged_hour_of_100_calls - timedelta(days=1)).isoformat()
    call_command("check_rollups", "--since", since, stdout=out)

    assert _calls(purged_hour_of_100_calls) == 100
    assert _span_rollup_calls(purged_hour_of_100_calls) == 100
    horizon = PurgeHorizon.objects.get().raw_spans_from
    assert (
        f"Kept 1 tool buckets and 1 span groups before {horizon:%Y-%m-%d %H:00}" in out.getvalue()
    )
    assert "0 differed" in out.getvalue()


def test_the_purge_horizon_never_moves_back(purged_hour_of_100_calls: datetime, settings: Any):
    horizon = PurgeHorizon.objects.get().raw_spans_from
    settings.ARES_RETENTION_DAYS = 30

    purge_past_retention()

    assert PurgeHorizon.objects.get().raw_spans_from == horizon


def test_the_purge_deletes_ended_traces_with_their_scores_and_spirals(settings: Any) -> None:
    old_trace, running_trace = secrets.token_hex(16), secrets.token_hex(16)
    # Both before the day of the horizon (two days back): PostgreSQL drops whole days.
    old_start, long_start = NOW - timedelta(days=3), NOW - timedelta(days=3, hours=2)
    spans = [
        *(make_span(trace_id=old_trace, started_at=(old_start + timedelta(seconds=n)).isoformat(),
                    status="error", error_kind="timeout") for n in range(3)),
        make_span(trace_id=running_trace, started_at=long_start.isoformat()),
        make_span(trace_id=running_trace, started_at=NOW.isoformat()),
    ]  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    assert FailureSpiral.objects.filter(trace_id=old_trace).exists()
    for trace_id in (old_trace, running_trace):
        Score.objects.create(name="feedback", data_type="boolean", value=1, label="true",
                             source="human", trace_id=trace_id, reported_by="t")  # fmt: skip
    settings.ARES_RETENTION_DAYS = 2

    purged = purge_past_retention()

    assert (purged.spans, purged.traces, purged.scores) == (4, 1, 1)
    assert not Trace.objects.filter(pk=old_trace).exists()
    assert not FailureSpiral.objects.filter(trace_id=old_trace).exists()
    assert list(Score.objects.values_list("trace_id", flat=True)) == [running_trace]
    kept = Trace.objects.get(pk=running_trace)
    assert (kept.span_count, kept.invocations.count()) == (2, 1)  # totals kept, old span gone


def _store(*spans: dict[str, Any]) -> None:
    record_invocations([InvocationIn.model_validate(span) for span in spans])


def _score(trace_id: str) -> None:
    Score.objects.create(name="feedback", data_type="boolean", value=1, label="true",
                         source="human", trace_id=trace_id, reported_by="t")  # fmt: skip


def _spiral(trace_id: str, started_at: datetime) -> None:
    FailureSpiral.objects.create(
        trace_id=trace_id, tool_name="calculator", kind="failing", attempts=3,
        first_span_id="a" * 16, last_span_id="b" * 16, started_at=started_at,
        ended_at=started_at + timedelta(seconds=2), resolution="gave_up",
    )  # fmt: skip


def _orphans() -> tuple[int, int, int]:
    """Return the spirals, scores (joined, not pending) and spans whose trace is gone."""
    traces = Trace.objects.values("pk")
    return (
        FailureSpiral.objects.exclude(trace_id__in=traces).count(),
        Score.objects.filter(pending=False).exclude(trace_id__in=traces).count(),
        Invocation.objects.exclude(trace_id__in=traces).count(),
    )


def _old_and_running_traces() -> tuple[str, str]:
    """Store a trace ended three days ago and one running since then, each scored with a spiral."""
    old_trace, running_trace = secrets.token_hex(16), secrets.token_hex(16)
    old_start = NOW - timedelta(days=3)
    _store(
        *(make_span(trace_id=old_trace, started_at=(old_start + timedelta(seconds=n)).isoformat())
          for n in range(3)),
        make_span(trace_id=running_trace, started_at=(old_start - timedelta(hours=2)).isoformat()),
        make_span(trace_id=running_trace, started_at=NOW.isoformat()),
    )  # fmt: skip
    for trace_id in (old_trace, running_trace):
        _score(trace_id)
        _spiral(trace_id, old_start)  # both spirals started before the cutoff
    return old_trace, running_trace


def test_no_spiral_score_or_span_is_left_without_its_trace_and_a_running_trace_keeps_its_own(
    settings: Any,
) -> None:
    old_trace, running_trace = _old_and_running_traces()
    settings.ARES_RETENTION_DAYS = 2

    purged = purge_past_retention(batch_size=1)

    assert (purged.traces, purged.scores) == (1, 1)
    assert _orphans() == (0, 0, 0)
    assert list(Trace.objects.values_list("pk", flat=True)) == [running_trace]
    assert list(FailureSpiral.objects.values_list("trace_id", flat=True)) == [running_trace]
    assert list(Score.objects.values_list("trace_id", flat=True)) == [running_trace]


def test_deleting_a_trace_in_the_admin_deletes_its_spans_and_spirals(admin_client: Client):
    old_trace, running_trace = _old_and_running_traces()

    response = admin_client.post(f"/admin/traces_app/trace/{old_trace}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Trace.objects.filter(pk=old_trace).exists()
    assert (_orphans()[0], _orphans()[2]) == (0, 0)
    assert FailureSpiral.objects.get().trace_id == running_trace


postgresql_only = pytest.mark.skipif(
    "connection.vendor != 'postgresql'", reason="PostgreSQL's row locks; SQLite has one writer"
)


@pytest.fixture
def in_a_thread() -> Iterator[Callable[[Callable[[], Any]], threading.Thread]]:
    """Start callables in threads, each on its own connection; join them all at the end."""
    threads: list[threading.Thread] = []

    def start(work: Callable[[], Any]) -> threading.Thread:
        def run() -> None:
            try:
                work()
            finally:
                connection.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)
        return thread

    yield start
    for thread in threads:
        thread.join(timeout=60)


@postgresql_only
def test_a_span_sent_to_a_trace_the_purge_is_deleting_waits_and_gets_a_new_trace_row(
    settings: Any, monkeypatch: pytest.MonkeyPatch, in_a_thread: Callable[..., threading.Thread]
) -> None:
    old_trace, _ = _old_and_running_traces()
    settings.ARES_RETENTION_DAYS = 2
    deleted = threading.Event()
    delete_traces = retention._delete_ended_traces_at_once

    def delete_and_hold(before: datetime) -> tuple[int, int]:
        with transaction.atomic():  # the traces deleted, not yet committed
            result = delete_traces(before)
            deleted.set()
            ingest.join(timeout=2)
            assert ingest.is_alive()  # waiting for the purge's row lock
        return result

    monkeypatch.setattr(retention, "_delete_ended_traces_at_once", delete_and_hold)
    late = make_span(trace_id=old_trace, started_at=NOW.isoformat())
    ingest = in_a_thread(lambda: deleted.wait(30) and _store(late))

    purged = purge_past_retention()
    ingest.join(timeout=30)

    assert purged.traces == 1
    trace = Trace.objects.get(pk=old_trace)  # a new row, with the one span stored
    assert (trace.span_count, trace.invocations.get().span_id) == (1, late["span_id"])
    assert trace.started_at == datetime.fromisoformat(late["started_at"])
    assert not Score.objects.filter(trace_id=old_trace).exists()  # judged the purged trace
    assert _orphans() == (0, 0, 0)


@postgresql_only
def test_a_trace_a_span_is_being_added_to_while_the_purge_runs_stays_with_its_scores(
    settings: Any, monkeypatch: pytest.MonkeyPatch, in_a_thread: Callable[..., threading.Thread]
) -> None:
    old_trace, _ = _old_and_running_traces()
    settings.ARES_RETENTION_DAYS = 2
    spans_dropped, trace_updated, go_on = threading.Event(), threading.Event(), threading.Event()
    delete_traces, mark_rollups_dirty = (
        retention._delete_ended_traces_at_once,
        recording.mark_rollups_dirty,
    )

    def after_the_drops(before: datetime) -> tuple[int, int]:
        spans_dropped.set()
        assert trace_updated.wait(30)  # ingest holds the trace's row, not committed
        return delete_traces(before)

    def hold_after_the_trace_update(*args: Any) -> None:
        mark_rollups_dirty(*args)
        trace_updated.set()
        assert go_on.wait(30)

    monkeypatch.setattr(retention, "_delete_ended_traces_at_once", after_the_drops)
    monkeypatch.setattr(recording, "mark_rollups_dirty", hold_after_the_trace_update)
    spirals = FailureSpiral.objects.filter(trace_id=old_trace).count()
    # Other arguments: not a repeat, so ingest does not look for spirals in the trace again.
    late = make_span(trace_id=old_trace, started_at=NOW.isoformat(), arguments={"x": "2+2"})
    ingest = in_a_thread(lambda: spans_dropped.wait(30) and _store(late))
    outcome: dict[str, Any] = {}
    purge = in_a_thread(lambda: outcome.update(purged=purge_past_retention()))

    purge.join(timeout=2)
    assert purge.is_alive() and ingest.is_alive()  # the purge waits for the trace's row
    go_on.set()
    purge.join(timeout=30)
    ingest.join(timeout=30)

    assert outcome["purged"].traces == 0  # read again after ingest: it ends now
    trace = Trace.objects.get(pk=old_trace)
    assert trace.span_count == 4  # its totals kept, the new span added
    assert trace.invocations.get().span_id == late["span_id"]  # its old spans' day dropped
    assert Score.objects.filter(trace_id=old_trace).count() == 1
    assert FailureSpiral.objects.filter(trace_id=old_trace).count() == spirals
    assert _orphans() == (0, 0, 0)


migration = importlib.import_module("traces_app.migrations.0013_purge_horizon_and_job_leases")


def test_the_migration_freezes_the_hours_an_earlier_purge_emptied() -> None:
    oldest_span = NOW - timedelta(days=2, minutes=30)
    record_invocations([InvocationIn.model_validate(make_span(started_at=oldest_span.isoformat()))])
    ToolRollup.objects.create(tool_name="calculator", bucket_start=PURGED_HOUR, calls=100)

    migration.horizon_of_earlier_purges(django_apps, None)

    horizon = PurgeHorizon.objects.get().raw_spans_from
    assert horizon == oldest_span.replace(minute=0, second=0, microsecond=0)
    RollupMark.objects.create(bucket_start=PURGED_HOUR, tool_name="calculator")
    recount_all_marked_rollups()
    assert _calls(PURGED_HOUR) == 100


def test_the_migration_freezes_nothing_on_a_database_never_purged() -> None:
    record_invocations([InvocationIn.model_validate(make_span())])
    recount_all_marked_rollups()

    migration.horizon_of_earlier_purges(django_apps, None)

    assert not PurgeHorizon.objects.exists()
