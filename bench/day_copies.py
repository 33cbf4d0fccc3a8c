"""Fill a large PostgreSQL bench database fast: one day of demo traffic, copied to earlier days.

`manage.py ares_demo` records about 1,000 to 5,000 spans a second on this machine (all of
ingest's work: validation, idempotency, spirals), so 10,000,000 spans take hours. Here the
first day is recorded by ares_demo (`unit` spans over the last 24 hours) and then copied
in SQL, day k (1, 2, ...) shifted k days back: every trace gets a new id (md5 of its id and
k), its session a new id (`s-143` becomes `s-143-d3`), every timestamp moves k days; spans
keep their span ids (unique per trace), spirals are copied with their traces. The result
is `size / unit` days of the same realistic traffic, a day per UTC day as a deployment
that keeps ARES_RETENTION_DAYS of it would hold. The rollups are not copied: the copied
hours are marked (as ingest marks them) and recounted from the raw spans, so
`manage.py check_rollups` agrees.

Each day is one transaction, and a day already there is skipped, so an interrupted fill
resumes where it stopped. On the partitioned span table (PostgreSQL after migration 0018)
each copied day's partitions are made first, as ingest makes them.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction

COPIED_TABLES = ("traces_app_trace", "traces_app_invocation", "traces_app_failurespiral")


def copy_days(size: int, unit: int) -> None:
    """Make the database hold `size` spans: the first `unit` spans' day copied to earlier days."""
    if size % unit:
        raise ValueError(f"size {size:,} is not a multiple of the copied day's {unit:,} spans")
    base_max_id = _base_max_id(unit)
    first_trace = _first_base_trace(base_max_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS bench_base_traces AS SELECT DISTINCT trace_id "
            "FROM traces_app_invocation WHERE id <= %s",
            [base_max_id],
        )
    for day in range(1, size // unit):
        if _day_done(first_trace, day):
            continue
        started = time.perf_counter()
        _ensure_partitions(day, base_max_id)
        with transaction.atomic():
            _copy_day(day, base_max_id)
        seconds = time.perf_counter() - started
        print(f"  copied day -{day} ({unit:,} spans) in {seconds:.0f} s", file=sys.stderr)
    started = time.perf_counter()
    from traces_app.rollups.recount import recount_all_marked_rollups

    marks = recount_all_marked_rollups(max_rounds=None)
    seconds = time.perf_counter() - started
    print(f"  recounted {marks:,} marked rollup buckets in {seconds:.0f} s", file=sys.stderr)


def _base_max_id(unit: int) -> int:
    """Return the id of the `unit`-th span: the recorded day is every span up to it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM traces_app_invocation ORDER BY id OFFSET %s LIMIT 1", [unit - 1]
        )
        row = cursor.fetchone()
    if row is None:
        raise ValueError(f"the database holds fewer than {unit:,} spans to copy")
    return row[0]


def _first_base_trace(base_max_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT min(trace_id) FROM traces_app_invocation WHERE id <= %s", [base_max_id]
        )
        return cursor.fetchone()[0]


def _ensure_partitions(day: int, base_max_id: int) -> None:
    """Make the daily span partitions the copy shifted `day` days back needs (if partitioned)."""
    from traces_app.partitions.layout import ensure_span_partitions

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT min(started_at), max(started_at) FROM traces_app_invocation WHERE id <= %s",
            [base_max_id],
        )
        first, last = cursor.fetchone()
    shift = timedelta(days=day)
    moments = [first - shift + timedelta(days=n) for n in range((last - first).days + 1)]
    ensure_span_partitions([*moments, last - shift])


def _day_done(first_trace: str, day: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM traces_app_trace WHERE trace_id = md5(%s || ':' || %s)",
            [first_trace, day],
        )
        return cursor.fetchone() is not None


def _copy_day(day: int, base_max_id: int) -> None:
    """Insert the recorded day's traces, spans and spirals `day` days earlier, and mark them."""
    shift = f"interval '{int(day)} days'"
    with connection.cursor() as cursor:
        for table in COPIED_TABLES:
            columns = _columns(cursor, table)
            names = ", ".join(name for name, _ in columns)
            values = ", ".join(_copied(name, kind, day, shift) for name, kind in columns)
            if table == "traces_app_invocation":
                where = f"WHERE id <= {int(base_max_id)} ORDER BY id"
            else:
                where = "WHERE trace_id IN (SELECT trace_id FROM bench_base_traces)"
            cursor.execute(f"INSERT INTO {table} ({names}) SELECT {values} FROM {table} {where}")
        cursor.execute(
            "INSERT INTO traces_app_rollupmark (bucket_start, tool_name, marked_at) "
            "SELECT DISTINCT date_trunc('hour', started_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
            f" - {shift}, CASE WHEN kind = 'tool' THEN tool_name ELSE '' END, %s "
            f"FROM traces_app_invocation WHERE id <= {int(base_max_id)}",
            [datetime.now(UTC)],
        )


def _columns(cursor, table: str) -> list[tuple[str, str]]:
    """Return (name, type) of a table's columns but its generated id."""
    cursor.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = %s AND table_schema = current_schema() AND column_name <> 'id' "
        "ORDER BY ordinal_position",
        [table],
    )
    return list(cursor.fetchall())


def _copied(name: str, kind: str, day: int, shift: str) -> str:
    """Return the SQL of a column's value in day `day`'s copy."""
    if name == "trace_id":
        return f"md5(trace_id || ':{int(day)}')"
    if name == "session_id":
        return f"CASE WHEN session_id = '' THEN '' ELSE session_id || '-d{int(day)}' END"
    if kind == "timestamp with time zone":
        return f"{name} - {shift}"
    return name
