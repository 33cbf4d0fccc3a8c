"""Rollup marks: the (hour, tool) buckets whose rollups miss spans, written with the spans."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from django.utils import timezone

from traces_app.models import RollupMark


def hour_start(moment: datetime) -> datetime:
    """Return the start of the UTC hour holding a moment."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def mark_rollups_dirty(spans: Iterable[tuple[datetime, str]]) -> None:
    """Mark the rollups of new or changed spans for recounting, in the caller's transaction.

    `spans` are (started_at, tool_name) pairs, tool_name "" for spans that are not tool
    calls. One mark per distinct (hour, tool).
    """
    now = timezone.now()
    buckets = {(hour_start(started_at), tool_name) for started_at, tool_name in spans}
    RollupMark.objects.bulk_create(
        [RollupMark(bucket_start=hour, tool_name=tool, marked_at=now) for hour, tool in buckets]
    )
