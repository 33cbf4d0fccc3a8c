"""The span table's daily partitions on PostgreSQL: made ahead and on demand, exact, dropped.

What the partitioned layout must keep from one table: a span sent again (even with
another start time, so it would fall in another day's partition) is stored once, also
when two clients send it at once; retention drops whole days with their traces, keeping
rollups; reads and counts agree with what was sent.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, connections

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral, Invocation, ToolRollup, Trace
from traces_app.partitions.layout import (
    DAYS_AHEAD,
    SPAN_TABLE,
    day_of,
    ensure_days_ahead,
    known_days,
    partition_name,
    partitions,
    relkind,
)
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.rollups.retention import purge_past_retention
from traces_app.schemas import InvocationIn
from traces_app.tasks import maintain_span_partitions_task

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's layout"),
]

NOW = datetime.now(UTC)


def store(*spans: dict[str, Any]) -> list[Any]:
    return record_invocations([InvocationIn.model_validate(span) for span in spans])


def rollup_calls(hour: datetime) -> int:
    return sum(ToolRollup.objects.filter(bucket_start=hour).values_list("calls", flat=True))


def days_with_partitions() -> set:
    return {partition.day for partition in partitions()}


def test_the_migrated_table_is_partitioned_with_the_coming_days_made():
    assert relkind(SPAN_TABLE) == "p"
    today = day_of(NOW)
    ensure_days_ahead(today)
    assert {today + timedelta(days=n) for n in range(DAYS_AHEAD + 1)} <= days_with_partitions()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = %s::regclass AND contype IN ('p', 'u') ORDER BY conname",
            [SPAN_TABLE],
        )
        keys = [row[0] for row in cursor.fetchall()]
    assert keys == ["UNIQUE (trace_id, span_id, started_at)", "PRIMARY KEY (id, started_at)"]


def test_a_span_of_a_day_without_a_partition_makes_it():
    day = NOW - timedelta(days=6)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {partition_name(day_of(day))}")
    known_days.forget()
    assert store(make_span(started_at=day.isoformat())) == [True]
    assert day_of(day) in days_with_partitions()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {partition_name(day_of(day))}")
        assert cursor.fetchone()[0] >= 1


def test_a_span_sent_again_with_another_start_time_is_stored_once():
    first = make_span(started_at=(NOW - timedelta(days=2)).isoformat())
    again = {**first, "started_at": (NOW - timedelta(hours=1)).isoformat(), "latency_ms": 9.0}
    assert store(first) == [True]
    assert store(again) == [False]
    assert store(first, again) == [False, False]
    stored = Invocation.objects.filter(trace_id=first["trace_id"])
    assert stored.count() == 1
    assert stored.get().latency_ms == first["latency_ms"]  # the first one stays
    assert Trace.objects.get(pk=first["trace_id"]).span_count == 1


def test_two_clients_sending_a_span_at_once_with_different_start_times_store_it_once():
    """Eight rounds of two threads, each its own connection, racing on one key."""
    for _ in range(8):
        span = make_span(started_at=(NOW - timedelta(days=1, minutes=3)).isoformat())
        other = {**span, "started_at": (NOW - timedelta(minutes=3)).isoformat()}
        assert sorted(race(span, other)) == [False, True]
        assert Invocation.objects.filter(trace_id=span["trace_id"]).count() == 1
        assert Trace.objects.get(pk=span["trace_id"]).span_count == 1


def race(*items: dict[str, Any]) -> list[Any]:
    """Store each item from its own thread and connection, all let go at once."""
    barrier = threading.Barrier(len(items))
    outcomes: list[Any] = []

    def send(item: dict[str, Any]) -> None:
        try:
            barrier.wait()
            outcomes.extend(store(item))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_retention_drops_whole_days_with_their_traces_and_keeps_rollups(settings: Any):
    old = NOW - timedelta(days=5)
    recent = NOW - timedelta(hours=2)
    old_spans = [make_span(started_at=(old + timedelta(seconds=n)).isoformat()) for n in range(5)]
    old_spans.append({**make_span(started_at=old.isoformat()), "status": "error"})
    recent_span = make_span(started_at=recent.isoformat())
    store(*old_spans, recent_span)
    FailureSpiral.objects.create(
        trace_id=old_spans[0]["trace_id"], tool_name="calculator", kind="failing",
        attempts=3, first_span_id="a", last_span_id="b", started_at=old, ended_at=old,
    )  # fmt: skip
    recount_all_marked_rollups()
    old_hour = old.replace(minute=0, second=0, microsecond=0)
    assert rollup_calls(old_hour) == 6

    settings.ARES_RETENTION_DAYS = 3
    purged = purge_past_retention()

    assert purged.spans == 6 and purged.traces == 6
    assert not relkind(partition_name(day_of(old)))  # the day's table is gone, disk and all
    assert day_of(recent) in days_with_partitions()
    assert not Trace.objects.filter(pk__in=[span["trace_id"] for span in old_spans]).exists()
    assert not FailureSpiral.objects.filter(trace_id=old_spans[0]["trace_id"]).exists()
    assert Invocation.objects.filter(trace_id=recent_span["trace_id"]).count() == 1
    assert rollup_calls(old_hour) == 6  # rollups stay
    # A span of a dropped day is refused, not stored in a partition made again.
    outcome = store(make_span(started_at=(old + timedelta(minutes=1)).isoformat()))[0]
    assert outcome.field == "started_at" and "retention" in outcome.reason
    assert not relkind(partition_name(day_of(old)))


def test_a_drop_killed_half_way_is_finished_next_time(settings: Any):
    """A day detached but not dropped (the process died between) is dropped by the next run."""
    old = NOW - timedelta(days=6)
    store(make_span(started_at=old.isoformat()))
    settings.ARES_RETENTION_DAYS = 3
    name = partition_name(day_of(old))
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {SPAN_TABLE} DETACH PARTITION {name}")
    assert relkind(name) == "r"
    purge_past_retention()
    assert not relkind(name)


def test_the_command_reports_the_layout():
    ensure_days_ahead(day_of(NOW))
    out = StringIO()
    call_command("partition_spans", "--status", stdout=out)
    assert "spans are partitioned by day" in out.getvalue()


def test_the_periodic_job_makes_the_coming_days_again():
    tomorrow = day_of(NOW) + timedelta(days=1)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {partition_name(tomorrow)}")
    assert tomorrow not in days_with_partitions()
    result = maintain_span_partitions_task()
    assert partition_name(tomorrow) in result["made"]
    assert result["conversion"] == "done"
    assert tomorrow in days_with_partitions()
