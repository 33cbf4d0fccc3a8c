"""Bringing a populated span table into daily partitions on PostgreSQL while ingest goes on.

The steps (each safe to run again; a killed run resumes where its last batch committed):

1. start: make the partitioned copy (SHADOW_TABLE) with the span table's columns,
   checks and indexes, and statement triggers on the span table that repeat every
   insert, update, delete and truncate on the copy. From then on the copy misses only
   rows older than the triggers; `copy_until` (the largest id then) says which.
2. copy: in batches, in id order, copy those rows (locked while copied, so an update
   running at the same time lands after the copy, through its trigger). The batch's
   end is saved in the batch's own transaction, so a killed copier loses nothing.
3. switch: in one short transaction holding the span table's lock, drop the old table
   (its triggers with it) and give the copy its name, its indexes' and sequence's names.

Every batch and the switch take turns on one advisory lock (CONVERSION_LOCK_KEY), taken
before any table's lock, so two copiers (the periodic job and an operator's command)
never hold locks in opposite orders. Ingest, pages and the periodic work run
throughout; the switch waits at most
SWITCH_LOCK_TIMEOUT for its lock and is tried again later if it cannot get it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import OperationalError, connection, transaction
from django.utils import timezone

from traces_app.partitions.layout import (
    DAY,
    DAYS_AHEAD,
    SHADOW_TABLE,
    SPAN_TABLE,
    day_of,
    known_days,
    make_partitions,
    relkind,
)

STATE_TABLE = "traces_app_span_conversion"
SEQUENCE = f"{SHADOW_TABLE}_id_seq"
FINAL_SEQUENCE = f"{SPAN_TABLE}_id_seq"
SWITCH_LOCK_TIMEOUT = "3s"
# pg_advisory_xact_lock's key for "a batch is being copied or the copy switched in".
CONVERSION_LOCK_KEY = 0x4152_4553_434F_5059  # "ARESCOPY"
MIRRORED = ("insert", "update", "delete", "truncate")
_INDEX_DEF = re.compile(r"^CREATE (UNIQUE )?INDEX (\S+) ON (\S+) USING (.*)$")


@dataclass(frozen=True)
class ConversionStatus:
    """Where the conversion of the span table stands."""

    state: str  # "not needed" (SQLite), "not started", "copying" or "done"
    copied: int = 0  # ids copied so far, of...
    to_copy: int = 0  # ...the ids the triggers did not see

    @property
    def percent(self) -> float:
        return 100.0 if not self.to_copy else round(100.0 * self.copied / self.to_copy, 1)


def status() -> ConversionStatus:
    """Return where the conversion stands."""
    if connection.vendor != "postgresql":
        return ConversionStatus("not needed")
    if relkind(SPAN_TABLE) == "p":
        return ConversionStatus("done")
    if not relkind(STATE_TABLE):
        return ConversionStatus("not started")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT first_id, copied_up_to, copy_until FROM {STATE_TABLE}")
        first_id, copied_up_to, copy_until = cursor.fetchone()
    total = max(copy_until - first_id + 1, 0)
    return ConversionStatus("copying", min(max(copied_up_to - first_id + 1, 0), total), total)


def convert(
    batch: int = 20_000,
    budget_s: float | None = None,
    progress: Callable[[ConversionStatus], None] | None = None,
) -> ConversionStatus:
    """Run the conversion, or as much of it as fits in `budget_s` seconds; return its status."""
    if connection.vendor != "postgresql" or relkind(SPAN_TABLE) == "p":
        return status()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    start()
    while copy_batch(batch):
        if progress:
            progress(status())
        if deadline is not None and time.monotonic() > deadline:
            return status()
    switch()
    return status()


def start() -> None:
    """Make the partitioned copy and the triggers that keep it in step (once)."""
    if relkind(STATE_TABLE) or relkind(SPAN_TABLE) == "p":
        return
    with transaction.atomic(), connection.cursor() as cursor:
        # Writers finish first and wait after: the largest id below is then exact.
        cursor.execute(f"LOCK TABLE {SPAN_TABLE} IN SHARE ROW EXCLUSIVE MODE")
        if relkind(STATE_TABLE) or relkind(SPAN_TABLE) == "p":  # another process was first
            return
        cursor.execute(f"DROP TABLE IF EXISTS {SHADOW_TABLE} CASCADE")
        cursor.execute(
            f"CREATE TABLE {SHADOW_TABLE} (LIKE {SPAN_TABLE} INCLUDING DEFAULTS "
            "INCLUDING CONSTRAINTS INCLUDING STORAGE) PARTITION BY RANGE (started_at)"
        )
        cursor.execute(f"CREATE SEQUENCE IF NOT EXISTS {SEQUENCE} OWNED BY {SHADOW_TABLE}.id")
        cursor.execute(
            f"ALTER TABLE {SHADOW_TABLE} ALTER COLUMN id SET DEFAULT nextval('{SEQUENCE}')"
        )
        cursor.execute(
            f"ALTER TABLE {SHADOW_TABLE} ADD CONSTRAINT {SHADOW_TABLE}_pkey "
            "PRIMARY KEY (id, started_at)"
        )
        cursor.execute(
            f"ALTER TABLE {SHADOW_TABLE} ADD CONSTRAINT invocation_trace_span_unique_p "
            "UNIQUE (trace_id, span_id, started_at)"
        )
        copied = []
        for name, definition in _plain_indexes(cursor):
            cursor.execute(_on_shadow(definition, name))
            copied.append(name)
        for event in MIRRORED:
            cursor.execute(_mirror_function(event))
            cursor.execute(_mirror_trigger(event))
        cursor.execute(f"SELECT coalesce(min(id), 1), coalesce(max(id), 0) FROM {SPAN_TABLE}")
        first_id, copy_until = cursor.fetchone()
        cursor.execute(
            f"CREATE TABLE {STATE_TABLE} (first_id bigint, copied_up_to bigint, "
            "copy_until bigint, indexes text[], started_at timestamptz)"
        )
        cursor.execute(
            f"INSERT INTO {STATE_TABLE} VALUES (%s, %s, %s, %s, now())",
            [first_id, first_id - 1, copy_until, copied],
        )
        today = day_of(timezone.now())
        make_partitions(SHADOW_TABLE, [today + DAY * ahead for ahead in range(DAYS_AHEAD + 1)])


def _plain_indexes(cursor: object) -> list[tuple[str, str]]:
    """Return (name, definition) of the span table's indexes that back no constraint."""
    cursor.execute(
        "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x "
        "JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = to_regclass(%s) "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid) "
        "ORDER BY i.relname",
        [SPAN_TABLE],
    )
    return cursor.fetchall()


def _on_shadow(definition: str, name: str) -> str:
    """Return an index definition of the span table rewritten for the copy (name + "_p")."""
    match = _INDEX_DEF.match(definition)
    if match is None or match.group(1):
        # A unique index without the partition key cannot exist on a partitioned table.
        raise ValueError(f"cannot carry index {name} over to daily partitions: {definition}")
    return f"CREATE INDEX {name}_p ON {SHADOW_TABLE} USING {match.group(4)}"


def _mirror_function(event: str) -> str:
    """Return the trigger function that repeats one kind of change on the copy."""
    same_row = "s.id = o.id AND s.started_at = o.started_at"
    body = {
        "insert": f"INSERT INTO {SHADOW_TABLE} SELECT * FROM new_rows ON CONFLICT DO NOTHING;",
        "update": (
            f"DELETE FROM {SHADOW_TABLE} s USING old_rows o WHERE {same_row}; "
            f"INSERT INTO {SHADOW_TABLE} SELECT * FROM new_rows ON CONFLICT DO NOTHING;"
        ),
        "delete": f"DELETE FROM {SHADOW_TABLE} s USING old_rows o WHERE {same_row};",
        "truncate": f"TRUNCATE {SHADOW_TABLE};",
    }[event]
    return (
        f"CREATE OR REPLACE FUNCTION ares_spans_mirror_{event}() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$ BEGIN {body} RETURN NULL; END $$"
    )


def _mirror_trigger(event: str) -> str:
    referencing = {
        "insert": "REFERENCING NEW TABLE AS new_rows",
        "update": "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
        "delete": "REFERENCING OLD TABLE AS old_rows",
        "truncate": "",
    }[event]
    return (
        f"CREATE TRIGGER ares_spans_mirror_{event} AFTER {event.upper()} ON {SPAN_TABLE} "
        f"{referencing} FOR EACH STATEMENT EXECUTE FUNCTION ares_spans_mirror_{event}()"
    )


def copy_batch(batch: int) -> int:
    """Copy the next `batch` rows the triggers did not see; return how many were read (0: done)."""
    with transaction.atomic(), connection.cursor() as cursor:
        _take_turn(cursor)
        if not relkind(STATE_TABLE):  # another process finished and switched
            return 0
        cursor.execute(f"SELECT copied_up_to, copy_until FROM {STATE_TABLE} FOR UPDATE")
        copied_up_to, copy_until = cursor.fetchone()
        cursor.execute(
            f"SELECT count(*), max(id) FROM (SELECT id FROM {SPAN_TABLE} WHERE id > %s "
            "AND id <= %s ORDER BY id LIMIT %s) AS batch",
            [copied_up_to, copy_until, batch],
        )
        read, last_id = cursor.fetchone()
        if not read:
            cursor.execute(f"UPDATE {STATE_TABLE} SET copied_up_to = copy_until")
            return 0
        cursor.execute(
            f"SELECT DISTINCT date_trunc('day', started_at, 'UTC') FROM {SPAN_TABLE} "
            "WHERE id > %s AND id <= %s",
            [copied_up_to, last_id],
        )
        make_partitions(SHADOW_TABLE, [day_of(day) for (day,) in cursor.fetchall()])
        cursor.execute(
            f"INSERT INTO {SHADOW_TABLE} SELECT * FROM (SELECT * FROM {SPAN_TABLE} "
            "WHERE id > %s AND id <= %s FOR UPDATE) AS batch ON CONFLICT DO NOTHING",
            [copied_up_to, last_id],
        )
        cursor.execute(f"UPDATE {STATE_TABLE} SET copied_up_to = %s", [last_id])
    return read


def _take_turn(cursor: object) -> None:
    """Wait for another copier's batch or switch to commit (held to the end of the transaction)."""
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CONVERSION_LOCK_KEY])


def switch() -> bool:
    """Give the copy the span table's place; return False if the lock was not had in time."""
    if relkind(SPAN_TABLE) == "p":
        return True
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            _take_turn(cursor)
            if relkind(SPAN_TABLE) == "p":  # another process switched while this one waited
                return True
            cursor.execute(f"SET LOCAL lock_timeout = '{SWITCH_LOCK_TIMEOUT}'")
            cursor.execute(f"LOCK TABLE {SPAN_TABLE} IN ACCESS EXCLUSIVE MODE")
            cursor.execute(f"SELECT copied_up_to, copy_until, indexes FROM {STATE_TABLE}")
            copied_up_to, copy_until, indexes = cursor.fetchone()
            if copied_up_to < copy_until:
                raise RuntimeError("the copy is not finished: run copy_batch to the end first")
            cursor.execute(
                f"SELECT greatest(coalesce(max(id), 0), "
                f"(SELECT last_value FROM {FINAL_SEQUENCE})) FROM {SPAN_TABLE}"
            )
            (last_id,) = cursor.fetchone()
            cursor.execute(f"DROP TABLE {SPAN_TABLE}")
            cursor.execute(f"ALTER TABLE {SHADOW_TABLE} RENAME TO {SPAN_TABLE}")
            cursor.execute(
                f"ALTER TABLE {SPAN_TABLE} RENAME CONSTRAINT {SHADOW_TABLE}_pkey "
                f"TO {SPAN_TABLE}_pkey"
            )
            cursor.execute(
                f"ALTER TABLE {SPAN_TABLE} RENAME CONSTRAINT invocation_trace_span_unique_p "
                "TO invocation_trace_span_unique"
            )
            for name in indexes:
                cursor.execute(f"ALTER INDEX {name}_p RENAME TO {name}")
            cursor.execute(f"ALTER SEQUENCE {SEQUENCE} RENAME TO {FINAL_SEQUENCE}")
            cursor.execute(f"SELECT setval('{FINAL_SEQUENCE}', %s)", [max(last_id, 1)])
            for event in MIRRORED:
                cursor.execute(f"DROP FUNCTION ares_spans_mirror_{event}()")
            cursor.execute(f"DROP TABLE {STATE_TABLE}")
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "55P03":  # lock_not_available
            return False
        raise
    known_days.forget()
    return True
