"""The span table's daily partitions on PostgreSQL: which exist, making them, dropping them.

On PostgreSQL `traces_app_invocation` is partitioned by range of `started_at`, one
partition per UTC day (`traces_app_invocation_p20261202`), so a read bounded in time
reads only its days and retention drops a day whole. SQLite keeps one table, and every
function here does nothing there. The keys differ from the model's (PostgreSQL requires
the partition key in every unique key): PRIMARY KEY (id, started_at) and UNIQUE
(trace_id, span_id, started_at); ingest keeps (trace id, span id) unique itself
(ingest/recording.py). partitions/conversion.py brings an existing table into this layout.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection, transaction

SPAN_TABLE = "traces_app_invocation"
# While partitions/conversion.py copies a populated table, the partitioned copy.
SHADOW_TABLE = "traces_app_invocation_parted"
DAY = timedelta(days=1)
# Days made ahead of today by the periodic work; ingest makes any other day it meets.
DAYS_AHEAD = 2
# One lock for everyone who makes or drops partitions (pg_advisory_xact_lock's key).
PARTITION_LOCK_KEY = 0x4152_4553_5041_5254  # "ARESPART"


def on_postgresql() -> bool:
    return connection.vendor == "postgresql"


def day_of(moment: datetime) -> date:
    """Return the UTC day holding a moment."""
    return moment.astimezone(UTC).date()


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def partition_name(day: date) -> str:
    """Return the name of a day's partition (the conversion's copy names them so too)."""
    return f"{SPAN_TABLE}_p{day:%Y%m%d}"


def relkind(table: str) -> str:
    """Return a table's pg_class.relkind ('r' plain, 'p' partitioned), or '' if none."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [table])
        row = cursor.fetchone()
    return row[0] if row else ""


def is_partitioned() -> bool:
    """Return whether the span table is partitioned (PostgreSQL, after the conversion)."""
    return on_postgresql() and relkind(SPAN_TABLE) == "p"


def partitioned_table() -> str | None:
    """Return the partitioned table spans go to: the span table, the shadow while converting."""
    if not on_postgresql():
        return None
    if relkind(SPAN_TABLE) == "p":
        return SPAN_TABLE
    return SHADOW_TABLE if relkind(SHADOW_TABLE) == "p" else None


@dataclass(frozen=True)
class Partition:
    """One day's partition of a partitioned table."""

    day: date
    name: str
    bytes: int  # table, indexes and TOAST
    rows_estimate: int  # PostgreSQL's estimate (pg_class.reltuples); -1 before any ANALYZE


def partitions(table: str = SPAN_TABLE) -> list[Partition]:
    """Return the day partitions of a partitioned table, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid), c.reltuples::bigint "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname",
            [table],
        )
        rows = cursor.fetchall()
    prefix = f"{SPAN_TABLE}_p"
    found = []
    for name, size, estimate in rows:
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            day = datetime.strptime(name[len(prefix) :], "%Y%m%d").date()
            found.append(Partition(day, name, size, estimate))
    return found


class _KnownDays:
    """The days this process has seen a partition for, so ingest asks the catalog once a day.

    The conversion's copy names its partitions as the span table's (partition_name), so
    a day known before the switch is still known after it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.days: set[date] = set()

    def missing(self, days: set[date]) -> set[date]:
        with self.lock:
            return days - self.days

    def add(self, days: Iterable[date]) -> None:
        with self.lock:
            self.days.update(days)

    def forget(self) -> None:
        with self.lock:
            self.days.clear()


known_days = _KnownDays()


def ensure_span_partitions(moments: Iterable[datetime]) -> list[str]:
    """Make sure the days of these moments have a partition; return the partitions made.

    A set look-up per day when this process has seen them; the catalog is read only for
    a day it has not. On SQLite, and on a PostgreSQL table not converted yet, there is
    nothing to make (a day noted then is looked up again if an insert finds it missing:
    ingest/recording.py).
    """
    if not on_postgresql():
        return []
    missing = known_days.missing({day_of(moment) for moment in moments})
    if not missing:
        return []
    table = partitioned_table()
    made = make_partitions(table, missing) if table else []
    known_days.add(missing)
    return made


def make_partitions(table: str, days: Iterable[date]) -> list[str]:
    """Create the day partitions of `table` that do not exist yet; return their names.

    Each is made as a plain table, then attached: ATTACH takes a lock that lets reads
    and writes of the other partitions go on (CREATE TABLE ... PARTITION OF would lock
    the whole table against them), and checks an empty table at once. Makers take turns
    on one advisory lock (held to the end of the transaction), so two processes making
    the same day do not clash.
    """
    quote = connection.ops.quote_name
    made = []
    for day in sorted(set(days)):
        name = partition_name(day)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PARTITION_LOCK_KEY])
            if relkind(name):
                _attach_if_detached(cursor, table, name, day)
                continue
            cursor.execute(
                f"CREATE TABLE {quote(name)} (LIKE {quote(table)} "
                "INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)"
            )
            cursor.execute(
                f"ALTER TABLE {quote(table)} ATTACH PARTITION {quote(name)} "
                "FOR VALUES FROM (%s) TO (%s)",
                [day_start(day), day_start(day + DAY)],
            )
            made.append(name)
    return made


def _attach_if_detached(cursor: object, table: str, name: str, day: date) -> None:
    """Attach a day's table left detached (a drop killed half-way), or do nothing."""
    cursor.execute("SELECT relispartition FROM pg_class WHERE oid = to_regclass(%s)", [name])
    if not cursor.fetchone()[0]:
        quote = connection.ops.quote_name
        cursor.execute(
            f"ALTER TABLE {quote(table)} ATTACH PARTITION {quote(name)} "
            "FOR VALUES FROM (%s) TO (%s)",
            [day_start(day), day_start(day + DAY)],
        )


def ensure_days_ahead(today: date, ahead: int = DAYS_AHEAD) -> list[str]:
    """Make today's partition and the next `ahead` days' (the periodic work calls this)."""
    table = partitioned_table()
    if table is None:
        return []
    days = [today + DAY * offset for offset in range(ahead + 1)]
    made = make_partitions(table, days)
    known_days.add(days)
    return made


def drop_partitions_before(day: date) -> tuple[int, list[str]]:
    """Drop the span table's partitions of the days before `day`; return (spans, names).

    The spans of an analyzed partition are PostgreSQL's estimate (counting a day of
    millions would take longer than dropping it); a table never analyzed is counted.

    Detached CONCURRENTLY first, so reads and ingest on the other days never wait for
    it (inside a transaction, as in tests, it cannot be: a plain detach then). A detach
    or drop interrupted half-way (a killed process) is finished the next time.
    """
    if not is_partitioned():
        return 0, []
    quote = connection.ops.quote_name
    concurrently = "" if connection.in_atomic_block else " CONCURRENTLY"
    spans, dropped = 0, []
    _finish_interrupted_drops(day)
    for partition in partitions():
        if partition.day >= day:
            break
        with connection.cursor() as cursor:
            rows = partition.rows_estimate
            if rows < 0:  # never analyzed (a small or new table): counted
                cursor.execute(f"SELECT count(*) FROM {quote(partition.name)}")
                rows = cursor.fetchone()[0]
            cursor.execute(
                f"ALTER TABLE {quote(SPAN_TABLE)} DETACH PARTITION "
                f"{quote(partition.name)}{concurrently}"
            )
            cursor.execute(f"DROP TABLE {quote(partition.name)}")
        spans += rows
        dropped.append(partition.name)
    known_days.forget()
    return spans, dropped


def _finish_interrupted_drops(before: date) -> None:
    """Finish the detaches and drops a killed process left half-done, before `before`."""
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s) AND i.inhdetachpending",
            [SPAN_TABLE],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(
                f"ALTER TABLE {quote(SPAN_TABLE)} DETACH PARTITION {quote(name)} FINALIZE"
            )
        # Detached, not dropped yet: a plain table named as a partition, in no parent.
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND NOT relispartition "
            "AND relname LIKE %s AND relnamespace = current_schema()::regnamespace",
            [f"{SPAN_TABLE}_p%"],
        )
        for (name,) in cursor.fetchall():
            suffix = name.removeprefix(f"{SPAN_TABLE}_p")
            if suffix.isdigit() and datetime.strptime(suffix, "%Y%m%d").date() < before:
                cursor.execute(f"DROP TABLE {quote(name)}")
