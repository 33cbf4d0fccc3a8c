"""Recounting marked rollups from the raw spans, a batch at a time, one recount at a time."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from traces_app.models import RollupMark, SpanRollup, ToolRollup
from traces_app.rollups.marks import hour_start


@dataclass(frozen=True)
class Recount:
    """What one recount did: marks consumed, buckets recounted, marks still waiting."""

    marks: int
    tool_buckets: int
    hours: int
    pending: int


RECOUNT_BATCH = 5000
# Any constant: the key of PostgreSQL's advisory lock that makes recounts take turns.
RECOUNT_LOCK_KEY = 7_210_311


def recount_marked_rollups(
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    marked_before: datetime | None = None,
    limit: int = RECOUNT_BATCH,
) -> Recount:
    """Recount the rollups of marked buckets, oldest marks first, at most `limit` marks.

    Optionally only buckets in [since, until) and marks made before `marked_before`.
    Recounts take turns (one transaction each, under a lock), so a count read from an
    older snapshot can never overwrite a newer one; each recounts whole buckets from the
    raw spans, so running one twice, or in several processes, changes nothing.
    """
    marks = RollupMark.objects.order_by("pk")
    if since is not None:
        marks = marks.filter(bucket_start__gte=hour_start(since))
    if until is not None:
        marks = marks.filter(bucket_start__lt=until)
    if marked_before is not None:
        marks = marks.filter(marked_at__lt=marked_before)
    if not marks.exists():
        return Recount(0, 0, 0, 0)
    with transaction.atomic():
        take_recount_turn()
        taken = list(marks.values_list("pk", "bucket_start", "tool_name")[:limit])
        tool_buckets = {(tool, hour) for _, hour, tool in taken if tool}
        hours = {hour for _, hour, _ in taken}
        ToolRollup.objects.refresh_buckets(tool_buckets)
        SpanRollup.objects.refresh_hours(hours)
        RollupMark.objects.filter(pk__in=[pk for pk, _, _ in taken]).delete()
    pending = marks.count() if len(taken) == limit else 0
    return Recount(len(taken), len(tool_buckets), len(hours), pending)


def recount_all_marked_rollups(max_rounds: int | None = 100) -> int:
    """Recount marked rollups until no mark is left (or max_rounds); return the marks consumed."""
    consumed = 0
    rounds = itertools.count() if max_rounds is None else range(max_rounds)
    for _ in rounds:
        done = recount_marked_rollups()
        consumed += done.marks
        if done.marks < RECOUNT_BATCH:
            break
    return consumed


def take_recount_turn() -> None:
    """Wait for any other recount to commit (SQLite's IMMEDIATE transactions already do)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [RECOUNT_LOCK_KEY])
