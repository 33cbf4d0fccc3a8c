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
    """Delete the spans and traces older than ARES_RETENTION_DAYS; say how many.

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
    # Their spans went before them (they all started before the trace ended).
    if connection.vendor == "postgresql":
        traces, scores = _delete_ended_traces_at_once(spans_before)
    else:
        traces, scores = _delete_ended_traces_in_batches(spans_before, batch_size)
    RollupMark.objects.filter(bucket_start__lt=horizon).delete()  # hours never recounted
    return Purged(spans, traces, scores)


# One statement deletes the traces and their scores: the scores that go are those of the
# traces it deleted. A trace ingest changes meanwhile is read again by PostgreSQL before
# it goes: a new span moved its end past the moment, and it stays, with its scores.
DELETE_ENDED_TRACES = """
    WITH gone AS (
        DELETE FROM traces_app_trace WHERE started_at < %(before)s AND ended_at < %(before)s
        RETURNING trace_id
    ), scores AS (
        DELETE FROM traces_app_score USING gone WHERE traces_app_score.trace_id = gone.trace_id
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM scores)
"""
# Then, in the same transaction, the spirals whose trace is gone: a spiral lies within its
# trace's time range, so those of the traces deleted started before the moment. OFFSET 0
# keeps the look-up a probe of the trace key per spiral: as a join PostgreSQL would read
# every trace to hash them.
DELETE_ORPHAN_SPIRALS = """
    DELETE FROM traces_app_failurespiral AS spiral WHERE spiral.started_at < %(before)s
    AND NOT EXISTS (
        SELECT FROM traces_app_trace AS trace WHERE trace.trace_id = spiral.trace_id OFFSET 0
    )
"""


def _delete_ended_traces_at_once(before: datetime) -> tuple[int, int]:
    """Delete the traces ended before a moment, their scores and spirals (PostgreSQL).

    Set-based, in one transaction, where batches of ids took 27 s for a day's 194,000
    traces (docs/scale.md has the figures). The deleted traces' rows stay locked until
    the commit, so a batch of ingest bringing a span to one of them waits, then stores it
    with a new trace row: no span is left without its trace.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(DELETE_ENDED_TRACES, {"before": before})
        traces, scores = cursor.fetchone()
        cursor.execute(DELETE_ORPHAN_SPIRALS, {"before": before})
    return traces, scores


def _delete_ended_traces_in_batches(before: datetime, batch_size: int) -> tuple[int, int]:
    """Delete the traces ended before a moment, with their scores and spirals, in batches.

    SQLite: each batch is a short transaction holding the one write lock (IMMEDIATE), so
    ingest waits a batch at most, and the traces are picked inside it.
    """
    traces = scores = 0
    old_traces = Trace.objects.filter(started_at__lt=before, ended_at__lt=before).order_by()
    while True:
        with transaction.atomic():
            trace_ids = list(old_traces.values_list("pk", flat=True)[:batch_size])
            if not trace_ids:
                return traces, scores
            scores += Score.objects.filter(trace_id__in=trace_ids)._raw_delete(connection.alias)
            FailureSpiral.objects.filter(trace_id__in=trace_ids)._raw_delete(connection.alias)
            # A raw delete, without Django's cascade looking for the spans again.
            traces += Trace.objects.filter(pk__in=trace_ids)._raw_delete(connection.alias)


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
