"""The rollup tables (per tool by hour and by day, per kind of span), marks and purge horizon."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

from traces_app.models.trace_records import ChosenBy, Invocation, SpanKind, SpanStatus
from traces_app.partitions.layout import DAY, day_of, day_start
from traces_app.rollups.histogram import (
    empty_histogram,
    merge,
    merge_counts,
    percentile_from_histogram,
)

ROLLUP_TOTAL_FIELDS = [
    "calls", "successes", "failures", "stopped", "failures_by_kind", "latency_histogram",
    "latency_sum_ms", "input_tokens", "output_tokens", "result_tokens", "cost_usd",
    "updated_at",
]  # fmt: skip
# The totals a tool's rollup rows add up (all but updated_at).
ROLLUP_SUMMED_FIELDS = [name for name in ROLLUP_TOTAL_FIELDS if name != "updated_at"]


def add_tool_totals(into: Any, rollup: Any) -> None:
    """Add a tool rollup's totals (an hour's or a day's, a row or a named tuple) to `into`."""
    into.calls += rollup.calls
    into.successes += rollup.successes
    into.failures += rollup.failures
    into.stopped += rollup.stopped
    if rollup.failures_by_kind:
        into.failures_by_kind = merge_counts(into.failures_by_kind, rollup.failures_by_kind)
    histogram = rollup.latency_histogram
    if len(histogram) == len(into.latency_histogram):  # a tenth of merge's time
        into.latency_histogram = list(map(operator.add, into.latency_histogram, histogram))
    else:
        into.latency_histogram = merge(into.latency_histogram, histogram)
    into.latency_sum_ms += rollup.latency_sum_ms
    into.input_tokens += rollup.input_tokens
    into.output_tokens += rollup.output_tokens
    into.result_tokens += rollup.result_tokens
    into.cost_usd += rollup.cost_usd


SPAN_ROLLUP_KEY = ["bucket_start", "kind", "chosen_by", "ran_on", "agent"]
SPAN_ROLLUP_TOTALS = [
    "calls", "failures", "stopped", "caller_faults", "latency_sum_ms", "input_tokens",
    "output_tokens", "result_tokens", "cost_usd", "updated_at",
]  # fmt: skip


class PurgeHorizonManager(models.Manager):
    def horizon(self) -> datetime | None:
        """Return the instant before which raw spans were purged, or None if none ever were."""
        return self.values_list("raw_spans_from", flat=True).first()

    def recountable(self, hours: Iterable[datetime]) -> set[datetime]:
        """Return the hours whose raw spans are complete (not purged): the only ones recounted."""
        horizon = self.horizon()
        return {hour for hour in hours if horizon is None or hour >= horizon}


class PurgeHorizon(models.Model):
    """The instant from which the raw spans are complete: spans started before it were purged.

    One row, moved forward by each purge before it deletes anything, and never back (not
    even when ARES_RETENTION_DAYS grows). The rollups of hours before it are frozen: a
    recount or a check would count what is left of their spans (none, or a late one) and
    overwrite the only full record.
    """

    raw_spans_from = models.DateTimeField(help_text="Spans started before this were purged")

    objects = PurgeHorizonManager()

    def __str__(self) -> str:
        return f"raw spans from {self.raw_spans_from:%Y-%m-%d %H:00} UTC"


def _upsert_tool_totals(manager: models.Manager, rows: Iterable[models.Model]) -> None:
    """Insert tool rollup rows (hours or days), or replace the totals of those already stored."""
    manager.bulk_create(
        list(rows),
        batch_size=500,
        update_conflicts=True,
        unique_fields=["tool_name", "bucket_start"],
        update_fields=ROLLUP_TOTAL_FIELDS,
    )


class ToolRollupManager(models.Manager):
    def refresh_buckets(self, buckets: set[tuple[str, datetime]]) -> int:
        """Recompute (tool, hour) rollups from the raw spans in one query and upsert them.

        Whole buckets are recounted, never added to, so a rerun or an overlapping window
        cannot count a span twice. Buckets before the purge horizon are skipped: their raw
        spans are purged, and their rollup is the only full record left.
        """
        rollups = self.count_buckets(buckets)
        _upsert_tool_totals(self, rollups.values())
        ToolDayRollup.objects.refresh_days(rollups.keys())
        return len(rollups)

    def count_buckets(
        self, buckets: set[tuple[str, datetime]]
    ) -> dict[tuple[str, datetime], ToolRollup]:
        """Return (tool, hour) rollups counted from the raw spans, unsaved; none of purged hours."""
        hours = PurgeHorizon.objects.recountable({start for _, start in buckets})
        buckets = {(tool, start) for tool, start in buckets if start in hours}
        if not buckets:
            return {}
        now = timezone.now()
        rollups = {
            bucket: self.model(tool_name=bucket[0], bucket_start=bucket[1], updated_at=now)
            for bucket in buckets
        }
        tools = sorted({tool for tool, _ in buckets})
        spans = Invocation.objects.in_hours({start for _, start in buckets})
        for row in spans.tool_groups(tools):
            rollup = rollups.get((row["tool_name"], row["hour"]))
            if rollup is not None:  # a tool not touched in this hour: left as it is
                rollup.add_group(row)
        return rollups


class ToolTotalsColumns(models.Model):
    """The totals of a tool's calls over some time, as its rollup rows store them."""

    calls = models.PositiveIntegerField(default=0)
    successes = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    stopped = models.PositiveIntegerField(
        default=0, help_text="Calls stopped by their caller: neither successes nor failures"
    )
    failures_by_kind = models.JSONField(default=dict, blank=True)
    latency_histogram = models.JSONField(
        default=empty_histogram, help_text="Calls per bin of traces_app.rollups.LATENCY_EDGES_MS"
    )
    latency_sum_ms = models.FloatField(default=0.0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    result_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True


class ToolRollup(ToolTotalsColumns):
    """One tool's calls in one UTC hour, summed up, so pages never scan raw spans for ranges."""

    tool_name = models.CharField(max_length=200)
    bucket_start = models.DateTimeField(help_text="Start of the UTC hour")

    objects = ToolRollupManager()

    class Meta:
        ordering = ["bucket_start", "tool_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tool_name", "bucket_start"], name="rollup_tool_bucket_unique"
            )
        ]
        indexes = [
            models.Index(fields=["tool_name", "bucket_start"], name="rollup_tool_bucket"),
            models.Index(fields=["bucket_start"], name="rollup_bucket"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} @ {self.bucket_start:%Y-%m-%d %H:00}"

    def add_group(self, group: dict[str, Any]) -> None:
        """Add one aggregate row (spans of one status, error kind and latency bin)."""
        calls = group["calls"]
        self.calls += calls
        if group["status"] == SpanStatus.ERROR:
            self.failures += calls
            kind = group["error_kind"] or "unknown"
            self.failures_by_kind[kind] = self.failures_by_kind.get(kind, 0) + calls
        elif group["status"] == SpanStatus.STOPPED:
            self.stopped += calls
        else:
            self.successes += calls
        self.latency_histogram[group["bin"]] += calls
        self.latency_sum_ms += group["latency_sum_ms"] or 0.0
        self.input_tokens += group["input_tokens"] or 0
        self.output_tokens += group["output_tokens"] or 0
        self.result_tokens += group["result_tokens"] or 0
        self.cost_usd += group["cost_usd"] or 0.0

    def percentile_ms(self, fraction: float) -> float:
        """Estimate a latency percentile (fraction 0..1) from the histogram."""
        return percentile_from_histogram(self.latency_histogram, fraction)


class ToolDayRollupManager(models.Manager):
    def refresh_days(self, hours: Iterable[tuple[str, datetime]]) -> int:
        """Sum the hourly rollups of the (tool, UTC day)s holding these (tool, hour)s; upsert.

        Called by ToolRollup.objects.refresh_buckets, in the transaction (and the recount's
        turn) that rewrote the hours, so a day row is always the sum of its stored hours.
        """
        days = {(tool, day_start(day_of(hour))) for tool, hour in hours}
        if not days:
            return 0
        now = timezone.now()
        sums = {
            key: self.model(tool_name=key[0], bucket_start=key[1], updated_at=now) for key in days
        }
        starts = sorted({start for _, start in days})
        in_days = models.Q()
        for start in starts:
            in_days |= models.Q(bucket_start__gte=start, bucket_start__lt=start + DAY)
        rows = (
            ToolRollup.objects.filter(in_days, tool_name__in=sorted({tool for tool, _ in days}))
            .order_by()
            .values_list("tool_name", "bucket_start", *ROLLUP_SUMMED_FIELDS, named=True)
        )
        for row in rows:
            day_sum = sums.get((row.tool_name, day_start(day_of(row.bucket_start))))
            if day_sum is not None:
                add_tool_totals(day_sum, row)
        _upsert_tool_totals(self, sums.values())
        return len(sums)


class ToolDayRollup(ToolTotalsColumns):
    """One tool's calls in one UTC day: the sum of its day's hourly rollups (ToolRollup).

    A range's totals read one row per whole day inside it and hourly rows only at its
    ends (traces_app.rollups.range_totals), so a 7-day range reads about 31 rows per tool
    where it read 168.
    """

    tool_name = models.CharField(max_length=200)
    bucket_start = models.DateTimeField(help_text="Start of the UTC day")

    objects = ToolDayRollupManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tool_name", "bucket_start"], name="tool_day_rollup_unique"
            )
        ]
        indexes = [models.Index(fields=["bucket_start"], name="tool_day_rollup_bucket")]

    def __str__(self) -> str:
        return f"{self.tool_name} @ {self.bucket_start:%Y-%m-%d}"


class SpanRollupManager(models.Manager):
    def refresh_hours(self, hours: set[datetime]) -> int:
        """Recount whole UTC hours of spans of every kind, by kind, chooser, place and agent.

        The hours' rows are replaced, not upserted: a span whose agent was filled in later
        (OTLP attribution) leaves its old group, which must not stay behind.
        """
        hours = PurgeHorizon.objects.recountable(hours)
        rollups = self.count_hours(hours)
        self.filter(bucket_start__in=hours).delete()
        self.bulk_create(rollups, batch_size=500)
        return len(rollups)

    def count_hours(self, hours: set[datetime]) -> list[SpanRollup]:
        """Return the span rollups of whole UTC hours counted from the raw spans, unsaved."""
        hours = PurgeHorizon.objects.recountable(hours)
        if not hours:
            return []
        now = timezone.now()
        groups = Invocation.objects.in_hours(hours).span_groups()
        return [self.model(**row, updated_at=now) for row in groups]


class SpanRollup(models.Model):
    """Spans of every kind in one UTC hour, by kind, who chose, where it ran and agent.

    The overview's totals (LLM and tool tokens, cost, calls by chooser and place) come
    from these rows, so its cost does not grow with the number of raw spans.
    """

    bucket_start = models.DateTimeField(help_text="Start of the UTC hour")
    kind = models.CharField(max_length=16, choices=SpanKind.choices)
    chosen_by = models.CharField(max_length=16, choices=ChosenBy.choices, blank=True)
    ran_on = models.CharField(max_length=120, blank=True)
    agent = models.CharField(max_length=200, blank=True)
    calls = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    stopped = models.PositiveIntegerField(
        default=0, help_text="Spans stopped by their caller: not failures"
    )
    caller_faults = models.PositiveIntegerField(
        default=0, help_text="Failures that were the caller's fault (CALLER_FAULTS)"
    )
    latency_sum_ms = models.FloatField(default=0.0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    result_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = SpanRollupManager()

    class Meta:
        ordering = ["bucket_start"]
        constraints = [
            models.UniqueConstraint(fields=SPAN_ROLLUP_KEY, name="span_rollup_key_unique")
        ]
        indexes = [models.Index(fields=["bucket_start"], name="span_rollup_bucket")]

    def __str__(self) -> str:
        return f"{self.kind} {self.agent or '-'} @ {self.bucket_start:%Y-%m-%d %H:00}"


class RollupMark(models.Model):
    """A tool's UTC hour (or an hour of other spans) whose rollups miss some of its spans.

    Written in the same transaction as the spans, so what needs recounting is never only
    in a process's memory: a worker killed after its commit delays a count, never loses
    it. Ingest only appends marks (no row is updated, so concurrent batches never wait on
    each other); a recount deletes exactly the marks it read, so a mark committed while it
    ran stays for the next one.
    """

    bucket_start = models.DateTimeField(help_text="Start of the UTC hour")
    tool_name = models.CharField(
        max_length=200, blank=True, help_text="Empty for spans that are not tool calls"
    )
    marked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["bucket_start"], name="rollup_mark_bucket")]

    def __str__(self) -> str:
        return f"{self.tool_name or '(spans)'} @ {self.bucket_start:%Y-%m-%d %H:00}"
