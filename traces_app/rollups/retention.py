"""Retention: purging raw spans past ARES_RETENTION_DAYS, behind a horizon recounts respect."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from traces_app.models import FailureSpiral, Invocation, PurgeHorizon, RollupMark, Score, Trace
from traces_app.partitions.layout import day_of, day_start, drop_partitions_before, is_partitioned
from traces_app.rollups.marks import hour_start
from traces_app.rollups.recount import take_recount_turn


def retention_cutoff() -> datetime:
    """Return the hour before which raw spans are purged (ARES_RETENTION_DAYS)."""
    return hour_start(timezone.now() - timedelta(days=settings.ARES_RETENTION_DAYS))


def oldest_storable() -> datetime:
    """Return the earliest start a new span may have: it is counted and not purged at once."""
    horizon = PurgeHorizon.objects.horizon()
    cutoff = retention_cutoff()
    return cutoff if horizon is None else max(cutoff, horizon)


@dataclass(frozen=True)
class Purged:
    """What one retention purge deleted."""

    spans: int
    traces: int
    scores: int


def purge_past_retention(batch_size: int = 5000) -> Purged:
    """Delete the spans and traces older than ARES_RETENTION_DAYS, in batches; say how many.

    The purge horizon moves first, so no recount or check rebuilds an hour from the
    spans this leaves (see PurgeHorizon). On PostgreSQL the days before the horizon's
    day are dropped whole (partitions/layout.py: milliseconds, and the disk given back);
    elsewhere the spans before it are deleted in short transactions. A trace goes once
    it ended before the spans that went, with its spirals and scores; one still running
    then keeps its totals, only its old spans go. Rollups are kept.
    """
    horizon = _move_purge_horizon(retention_cutoff())
    if is_partitioned():
        # Whole days only: the day holding the horizon goes when it is past too.
        spans_before = day_start(day_of(horizon))
        spans = drop_partitions_before(spans_before.date())[0]
    else:
        spans_before, spans = horizon, _delete_spans_before(horizon, batch_size)
    traces = scores = 0
    # Read once, through the start-time index (a trace ends after it starts): a look-up
    # of ended_at per batch would read the whole trace table each time.
    old_traces = Trace.objects.filter(started_at__lt=spans_before, ended_at__lt=spans_before)
    old_ids = list(old_traces.order_by().values_list("pk", flat=True))
    for start in range(0, len(old_ids), batch_size):
        trace_ids = old_ids[start : start + batch_size]
        with transaction.atomic():
            scores += Score.objects.filter(trace_id__in=trace_ids).delete()[0]
            FailureSpiral.objects.filter(trace_id__in=trace_ids).delete()
            # Their spans went before them (they all started before the trace ended):
            # a raw delete, without Django's cascade looking for them in every day.
            traces += Trace.objects.filter(pk__in=trace_ids)._raw_delete(connection.alias)
    RollupMark.objects.filter(bucket_start__lt=horizon).delete()  # hours never recounted
    return Purged(spans, traces, scores)


def _delete_spans_before(moment: datetime, batch_size: int) -> int:
    """Delete the spans started before a moment, in short batches; return how many."""
    spans = 0
    old_spans = Invocation.objects.filter(started_at__lt=moment).order_by()
    while pks := list(old_spans.values_list("pk", flat=True)[:batch_size]):
        spans += Invocation.objects.filter(pk__in=pks).delete()[0]
    return spans


def _move_purge_horizon(cutoff: datetime) -> datetime:
    """Move the purge horizon forward to `cutoff` (never back); return where it stands.

    In a recount's turn: a recount that began before waits for this, one that begins
    after reads the new horizon before it counts.
    """
    with transaction.atomic():
        take_recount_turn()
        row, _ = PurgeHorizon.objects.get_or_create(pk=1, defaults={"raw_spans_from": cutoff})
        if row.raw_spans_from < cutoff:
            row.raw_spans_from = cutoff
            row.save(update_fields=["raw_spans_from"])
    return row.raw_spans_from
