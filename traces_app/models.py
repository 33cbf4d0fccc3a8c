"""Traced records: traces, their spans (tool and LLM invocations), and API keys."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.models.functions import Trunc
from django.utils import timezone

from traces_app.rollups.histogram import (
    LATENCY_EDGES_MS,
    empty_histogram,
    percentile_from_histogram,
)


class SpanKind(models.TextChoices):
    TOOL = "tool", "Tool call"
    LLM = "llm", "LLM call"
    AGENT = "agent", "Agent step"
    OTHER = "other", "Other"


class ChosenBy(models.TextChoices):
    LLM = "llm", "LLM"
    PLANNER = "planner", "Planner"
    WORKFLOW = "workflow", "Workflow"
    EXTERNAL = "external", "Outside agent"


class SpanStatus(models.TextChoices):
    OK = "ok", "OK"
    ERROR = "error", "Error"
    # Ended by its caller's stop (the sandbox's Stop, a closed stream): no failure of the
    # tool, model or agent, and no success either, so it counts as neither anywhere.
    STOPPED = "stopped", "Stopped"


# Error kinds that are the caller's fault, not the tool's: arguments that break the
# contract (the engine refuses them before the tool runs; a tool that finds them wrong
# says so too), a tool the caller may not call, a tool an operator turned off, a call
# cancelled on the caller's side (the spiral breaker, a turn stopped early). They count
# against the model and agent that made the call (SpanRollup.caller_faults), never in a
# tool's success rate as evidence (planner_app.pipeline.scoring says why). not_found is
# not one: an unknown tool name is stored under that name, so it already falls on no
# registered tool, while a tool that answers "not found" itself has run and answered.
CALLER_FAULTS = frozenset({"invalid_arguments", "permission_denied", "disabled", "cancelled"})


class TraceStatus(models.TextChoices):
    OK = "ok", "OK"
    ERROR = "error", "Has failures"
    STOPPED = "stopped", "Stopped"  # stopped by its caller, and nothing failed


def trace_status(failed_calls: int, stopped_calls: int) -> str:
    """Return a trace's status: a failure outweighs a stop, which outweighs ok."""
    if failed_calls:
        return TraceStatus.ERROR
    return TraceStatus.STOPPED if stopped_calls else TraceStatus.OK


class Dialect(models.TextChoices):
    """Which OpenTelemetry attribute convention reported a trace's spans (traces_app.otlp)."""

    GENAI = "genai", "OpenTelemetry GenAI"
    OPENINFERENCE = "openinference", "OpenInference"
    OPENLLMETRY = "openllmetry", "OpenLLMetry"
    OTEL = "otel", "OpenTelemetry, no known dialect"


# Short names for the trace list's Source badges.
DIALECT_BADGES = {
    Dialect.GENAI: "GenAI",
    Dialect.OPENINFERENCE: "OpenInference",
    Dialect.OPENLLMETRY: "OpenLLMetry",
    Dialect.OTEL: "OTel",
}


class TraceManager(models.Manager):
    def note_dialect(self, trace_ids: Iterable[str], dialect: str) -> int:
        """Record that OTLP spans in `dialect` reported these traces; return how many changed.

        A named dialect replaces a blank one or "otel" (a trace's generic spans may come
        first); a trace keeps the first named dialect it was reported in.
        """
        weaker = [""] if dialect == Dialect.OTEL else ["", Dialect.OTEL]
        return self.filter(trace_id__in=list(trace_ids), dialect__in=weaker).update(dialect=dialect)


class Trace(models.Model):
    """One agent task: the spans that share a trace id, with running totals."""

    trace_id = models.CharField(max_length=32, primary_key=True)
    agent = models.CharField(max_length=200, blank=True)
    session_id = models.CharField(max_length=200, blank=True)
    request_text = models.TextField(blank=True)
    # When the span the request text is from started: a span that started earlier brings
    # its own, in whatever order they arrive (see add_to_trace_totals).
    request_started_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=TraceStatus.choices, default=TraceStatus.OK)
    span_count = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    llm_calls = models.PositiveIntegerField(default=0)
    failed_calls = models.PositiveIntegerField(default=0)
    stopped_calls = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Spans ended by their caller's stop: not failures"
    )
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    tool_latency_ms = models.FloatField(default=0.0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # A database default too: ingest inserts traces with SQL that does not name it.
    dialect = models.CharField(
        max_length=16,
        choices=Dialect.choices,
        blank=True,
        default="",
        db_default="",
        help_text="The OpenTelemetry dialect that reported it; blank for the REST API",
    )

    objects = TraceManager()

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["started_at"], name="trace_started"),
            models.Index(fields=["agent", "started_at"], name="trace_agent_started"),
            models.Index(fields=["status", "started_at"], name="trace_status_started"),
        ]

    def __str__(self) -> str:
        return self.trace_id

    @property
    def duration_ms(self) -> float:
        return (self.ended_at - self.started_at).total_seconds() * 1000

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def dialect_badge(self) -> str:
        """Return a short name of the OTLP dialect that reported it; "" for the REST API."""
        return DIALECT_BADGES.get(self.dialect, self.dialect)

    def recompute_totals(self) -> None:
        """Recount the totals from the stored spans, repairing any drift."""
        spans = self.invocations.all()
        totals = spans.aggregate(
            span_count=models.Count("pk"),
            tool_calls=models.Count("pk", filter=models.Q(kind=SpanKind.TOOL)),
            llm_calls=models.Count("pk", filter=models.Q(kind=SpanKind.LLM)),
            failed_calls=models.Count("pk", filter=models.Q(status=SpanStatus.ERROR)),
            stopped_calls=models.Count("pk", filter=models.Q(status=SpanStatus.STOPPED)),
            input_tokens=models.Sum("input_tokens", default=0),
            output_tokens=models.Sum("output_tokens", default=0),
            cost_usd=models.Sum("cost_usd", default=0.0),
            tool_latency_ms=models.Sum(
                "latency_ms", filter=models.Q(kind=SpanKind.TOOL), default=0.0
            ),
            started_at=models.Min("started_at"),
        )
        for name, value in totals.items():
            if value is not None:
                setattr(self, name, value)
        ends = [span.ended_at for span in spans.only("started_at", "latency_ms")]
        if ends:
            self.ended_at = max(ends)
        self.status = trace_status(self.failed_calls, self.stopped_calls)
        self.updated_at = timezone.now()
        self.save()


class InvocationQuerySet(models.QuerySet):
    def for_tool(self, name: str) -> InvocationQuerySet:
        return self.filter(tool_name=name)

    def tools(self) -> InvocationQuerySet:
        return self.filter(kind=SpanKind.TOOL)

    def since(self, moment: datetime) -> InvocationQuerySet:
        return self.filter(started_at__gte=moment)

    def until(self, moment: datetime) -> InvocationQuerySet:
        return self.filter(started_at__lt=moment)

    def failed(self) -> InvocationQuerySet:
        return self.filter(status=SpanStatus.ERROR)


class Invocation(models.Model):
    """One span of a trace: a tool call attempt, an LLM call, or another step."""

    # No index of its own: the unique (trace, span_id) index serves look-ups by trace, and
    # a third index on every span insert costs ingest speed for nothing.
    trace = models.ForeignKey(
        Trace,
        on_delete=models.CASCADE,
        related_name="invocations",
        db_column="trace_id",
        db_index=False,
    )
    span_id = models.CharField(max_length=16)
    parent_span_id = models.CharField(max_length=16, blank=True)
    kind = models.CharField(max_length=16, choices=SpanKind.choices, default=SpanKind.TOOL)
    tool_name = models.CharField(max_length=200, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    # What the producer says of the tool (OTLP gen_ai.tool.type / .description, or REST):
    # database defaults, so the bulk insert need not name them.
    tool_type = models.CharField(
        max_length=40,
        blank=True,
        default="",
        db_default="",
        help_text="function, extension or datastore (OpenTelemetry GenAI gen_ai.tool.type)",
    )
    tool_description = models.TextField(
        blank=True, default="", db_default="", help_text="The tool's description, as sent"
    )
    chosen_by = models.CharField(max_length=16, choices=ChosenBy.choices, blank=True)
    ran_on = models.CharField(
        max_length=120, blank=True, help_text="builtin, remote or mcp:<server>"
    )
    agent = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    arguments = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=SpanStatus.choices)
    # A slug: invalid_arguments, not_found, timeout, tool_error, ... (tools_app.specs.ErrorKind
    # lists ours); outside reporters may send others.
    error_kind = models.CharField(max_length=40, blank=True)
    error_message = models.TextField(blank=True)
    started_at = models.DateTimeField()
    latency_ms = models.FloatField()
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    result_tokens = models.PositiveIntegerField(
        default=0, help_text="Tokens of the tool output fed back to the model"
    )
    cost_usd = models.FloatField(default=0.0)
    attempt = models.PositiveIntegerField(default=1)
    coercions = models.JSONField(
        default=list, blank=True, help_text="Lossless fixes made to the arguments before the call"
    )
    received_at = models.DateTimeField(default=timezone.now)
    # OTLP agent attribution (traces_app.otlp). Set after the insert, and only on the few
    # spans that need it, so ingest writes no more for the rest: database defaults.
    names_agent = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="An agent span's agent, handed down to the spans below it that have none",
    )
    # NULL, not "", for the spans not waiting: the partial index below leaves them out,
    # and both databases see that `agent_awaits IN (...)` can only match indexed rows.
    agent_awaits = models.CharField(  # noqa: DJ001
        max_length=16,
        null=True,
        blank=True,
        help_text="The missing ancestor span whose arrival settles this span's agent",
    )

    objects = InvocationQuerySet.as_manager()

    class Meta:
        ordering = ["started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["trace", "span_id"], name="invocation_trace_span_unique"
            )
        ]
        indexes = [
            models.Index(fields=["tool_name", "started_at"], name="inv_tool_started"),
            models.Index(fields=["status", "started_at"], name="inv_status_started"),
            models.Index(fields=["agent", "started_at"], name="inv_agent_started"),
            models.Index(fields=["started_at"], name="inv_started"),
            # Finds what a batch or the last minutes touched, for rollup refreshes.
            models.Index(fields=["received_at"], name="inv_received"),
            # Partial: only spans still waiting for an ancestor, so it stays tiny.
            models.Index(
                fields=["trace", "agent_awaits"],
                name="inv_agent_awaits",
                condition=models.Q(agent_awaits__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.tool_name or self.model or self.span_id}"

    @property
    def ended_at(self) -> datetime:
        return self.started_at + timedelta(milliseconds=self.latency_ms)


class SpiralKind(models.TextChoices):
    FAILING = "failing", "Same failure repeated"
    LOOP = "loop", "Identical calls repeated"


class SpiralResolution(models.TextChoices):
    GAVE_UP = "gave_up", "Gave up"
    RECOVERED = "recovered", "Recovered"
    REPEATED = "repeated", "Repeated calls"
    PLANNER_FALLBACK = "planner_fallback", "Planner fallback"
    ONGOING = "ongoing", "Ongoing"


class FailureSpiralManager(models.Manager):
    def replace_for_trace(
        self, trace_id: str, spirals: Sequence[Any], window_start: datetime | None = None
    ) -> None:
        """Store a trace's spirals as just detected (SpiralViews): update, add, drop stale.

        Keyed by (trace, tool, first span): a spiral that grows keeps its record and its
        detected_at; one whose first span changed (a late earlier span) replaces the old.
        Only spirals starting at or after `window_start` (when given) can be stale.
        """
        records = [
            self.model(
                trace_id=trace_id,
                **{name: getattr(spiral, name) for name in SPIRAL_VIEW_FIELDS},
            )
            for spiral in spirals
        ]
        if records:
            self.bulk_create(
                records,
                update_conflicts=True,
                unique_fields=["trace", "tool_name", "first_span_id"],
                update_fields=[*SPIRAL_VIEW_FIELDS, "updated_at"],
            )
        found = {(spiral.tool_name, spiral.first_span_id) for spiral in spirals}
        stored = self.filter(trace_id=trace_id)
        if window_start is not None:
            stored = stored.filter(started_at__gte=window_start)
        stored = stored.values_list("pk", "tool_name", "first_span_id")
        stale = [pk for pk, tool_name, first in stored if (tool_name, first) not in found]
        if stale:
            self.filter(pk__in=stale).delete()


SPIRAL_VIEW_FIELDS = (
    "tool_name", "kind", "error_kind", "attempts", "first_span_id", "last_span_id",
    "started_at", "ended_at", "resolution", "wasted_tokens", "wasted_ms", "wasted_cost_usd",
    "argument_changes",
)  # fmt: skip


class FailureSpiral(models.Model):
    """A run of calls in one trace to one tool that got nowhere (traces_app.spirals.detection)."""

    # The unique (trace, tool_name, first_span_id) index serves look-ups by trace.
    trace = models.ForeignKey(
        Trace,
        on_delete=models.CASCADE,
        related_name="spirals",
        db_column="trace_id",
        db_index=False,
    )
    tool_name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=SpiralKind.choices)
    error_kind = models.CharField(max_length=40, blank=True)
    attempts = models.PositiveIntegerField()
    first_span_id = models.CharField(max_length=16)
    last_span_id = models.CharField(max_length=16)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    resolution = models.CharField(max_length=20, choices=SpiralResolution.choices)
    wasted_tokens = models.PositiveBigIntegerField(default=0)
    wasted_ms = models.FloatField(default=0.0)
    wasted_cost_usd = models.FloatField(default=0.0)
    argument_changes = models.JSONField(
        default=list, blank=True, help_text="Per step between attempts, the argument keys changed"
    )
    detected_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    objects = FailureSpiralManager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["trace", "tool_name", "first_span_id"],
                name="spiral_trace_tool_first_unique",
            )
        ]
        indexes = [
            models.Index(fields=["started_at"], name="spiral_started"),
            models.Index(fields=["tool_name", "started_at"], name="spiral_tool_started"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} x{self.attempts} ({self.kind})"


class ToolRollupManager(models.Manager):
    def refresh_buckets(self, buckets: set[tuple[str, datetime]]) -> int:
        """Recompute (tool, hour) rollups from the raw spans in one query and upsert them.

        Whole buckets are recounted, never added to, so a rerun or an overlapping window
        cannot count a span twice. Buckets before the purge horizon are skipped: their raw
        spans are purged, and their rollup is the only full record left.
        """
        rollups = self.count_buckets(buckets)
        self.bulk_create(
            list(rollups.values()),
            batch_size=500,
            update_conflicts=True,
            unique_fields=["tool_name", "bucket_start"],
            update_fields=ROLLUP_TOTAL_FIELDS,
        )
        return len(rollups)

    def count_buckets(
        self, buckets: set[tuple[str, datetime]]
    ) -> dict[tuple[str, datetime], ToolRollup]:
        """Return (tool, hour) rollups counted from the raw spans, unsaved; none of purged hours."""
        hours = recountable({start for _, start in buckets})
        buckets = {(tool, start) for tool, start in buckets if start in hours}
        if not buckets:
            return {}
        now = timezone.now()
        rollups = {
            bucket: self.model(tool_name=bucket[0], bucket_start=bucket[1], updated_at=now)
            for bucket in buckets
        }
        tools = sorted({tool for tool, _ in buckets})
        for row in _tool_groups(_hours_window({start for _, start in buckets}), tools):
            rollup = rollups.get((row["tool_name"], row["hour"]))
            if rollup is not None:  # a tool not touched in this hour: left as it is
                rollup.add_group(row)
        return rollups


def _hours_window(hours: Iterable[datetime]) -> models.Q:
    """Return the condition "started in one of these UTC hours"."""
    window = models.Q()
    for start in sorted(hours):
        window |= models.Q(started_at__gte=start, started_at__lt=start + ROLLUP_BUCKET)
    return window


def _tool_groups(window: models.Q, tools: Sequence[str] | None = None) -> models.QuerySet:
    """Return tool spans grouped by tool, hour, status, error kind and latency bin."""
    spans = Invocation.objects.tools().filter(window)
    if tools is not None:
        spans = spans.filter(tool_name__in=tools)
    return (
        spans.annotate(hour=Trunc("started_at", "hour", tzinfo=UTC), bin=latency_bin_sql())
        .values("tool_name", "hour", "status", "error_kind", "bin")
        .annotate(calls=models.Count("pk"), **_summed_totals())
        .order_by()
    )


def _summed_totals() -> dict[str, models.Sum]:
    """Return the sums every rollup keeps of its spans: latency, tokens and cost."""
    return {
        name: models.Sum(column)
        for name, column in [
            ("latency_sum_ms", "latency_ms"),
            ("input_tokens", "input_tokens"),
            ("output_tokens", "output_tokens"),
            ("result_tokens", "result_tokens"),
            ("cost_usd", "cost_usd"),
        ]
    }


ROLLUP_BUCKET = timedelta(hours=1)
ROLLUP_TOTAL_FIELDS = [
    "calls", "successes", "failures", "stopped", "failures_by_kind", "latency_histogram",
    "latency_sum_ms", "input_tokens", "output_tokens", "result_tokens", "cost_usd",
    "updated_at",
]  # fmt: skip


def latency_bin_sql() -> models.Case:
    """Return the SQL expression of rollups.bucket_of(latency_ms), for grouping in the database."""
    return models.Case(
        *(
            models.When(latency_ms__lt=edge, then=models.Value(index))
            for index, edge in enumerate(LATENCY_EDGES_MS)
        ),
        default=models.Value(len(LATENCY_EDGES_MS)),
        output_field=models.IntegerField(),
    )


def retention_cutoff() -> datetime:
    """Return the hour before which raw spans are purged (ARES_RETENTION_DAYS)."""
    return hour_start(timezone.now() - timedelta(days=settings.ARES_RETENTION_DAYS))


class PurgeHorizon(models.Model):
    """The instant from which the raw spans are complete: spans started before it were purged.

    One row, moved forward by each purge before it deletes anything, and never back (not
    even when ARES_RETENTION_DAYS grows). The rollups of hours before it are frozen: a
    recount or a check would count what is left of their spans (none, or a late one) and
    overwrite the only full record.
    """

    raw_spans_from = models.DateTimeField(help_text="Spans started before this were purged")

    def __str__(self) -> str:
        return f"raw spans from {self.raw_spans_from:%Y-%m-%d %H:00} UTC"


def purge_horizon() -> datetime | None:
    """Return the instant before which raw spans were purged, or None if none ever were."""
    return PurgeHorizon.objects.values_list("raw_spans_from", flat=True).first()


def recountable(hours: Iterable[datetime]) -> set[datetime]:
    """Return the hours whose raw spans are complete (not purged): the only ones recounted."""
    horizon = purge_horizon()
    return {hour for hour in hours if horizon is None or hour >= horizon}


def oldest_storable() -> datetime:
    """Return the earliest start a new span may have: it is counted and not purged at once."""
    horizon = purge_horizon()
    cutoff = retention_cutoff()
    return cutoff if horizon is None else max(cutoff, horizon)


class ToolRollup(models.Model):
    """One tool's calls in one UTC hour, summed up, so pages never scan raw spans for ranges."""

    tool_name = models.CharField(max_length=200)
    bucket_start = models.DateTimeField(help_text="Start of the UTC hour")
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


class SpanRollupManager(models.Manager):
    def refresh_hours(self, hours: set[datetime]) -> int:
        """Recount whole UTC hours of spans of every kind, by kind, chooser, place and agent.

        The hours' rows are replaced, not upserted: a span whose agent was filled in later
        (OTLP attribution) leaves its old group, which must not stay behind.
        """
        hours = recountable(hours)
        rollups = self.count_hours(hours)
        self.filter(bucket_start__in=hours).delete()
        self.bulk_create(rollups, batch_size=500)
        return len(rollups)

    def count_hours(self, hours: set[datetime]) -> list[SpanRollup]:
        """Return the span rollups of whole UTC hours counted from the raw spans, unsaved."""
        hours = recountable(hours)
        if not hours:
            return []
        now = timezone.now()
        return [self.model(**row, updated_at=now) for row in _span_groups(_hours_window(hours))]


def _span_groups(window: models.Q) -> models.QuerySet:
    """Return spans grouped by hour, kind, chooser, place and agent."""
    return (
        Invocation.objects.filter(window)
        .annotate(bucket_start=Trunc("started_at", "hour", tzinfo=UTC))
        .values("bucket_start", "kind", "chosen_by", "ran_on", "agent")
        .annotate(
            calls=models.Count("pk"),
            failures=models.Count("pk", filter=models.Q(status=SpanStatus.ERROR)),
            stopped=models.Count("pk", filter=models.Q(status=SpanStatus.STOPPED)),
            caller_faults=models.Count("pk", filter=caller_fault_q()),
            **_summed_totals(),
        )
        .order_by()
    )


def caller_fault_q() -> models.Q:
    """Return the condition "a tool call that failed by the caller's fault" (CALLER_FAULTS)."""
    return models.Q(
        kind=SpanKind.TOOL, status=SpanStatus.ERROR, error_kind__in=sorted(CALLER_FAULTS)
    )


SPAN_ROLLUP_KEY = ["bucket_start", "kind", "chosen_by", "ran_on", "agent"]
SPAN_ROLLUP_TOTALS = [
    "calls", "failures", "stopped", "caller_faults", "latency_sum_ms", "input_tokens",
    "output_tokens", "result_tokens", "cost_usd", "updated_at",
]  # fmt: skip


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


# Above this many matching spans in a range, traces holding one are dense enough that
# walking the newest traces and probing each one's spans finds a page at once; below it,
# listing the matching spans first is cheaper than probing traces that hold none.
DENSE_SPANS = 20_000


def traces_holding(since: datetime | None = None, **span_fields: str) -> models.Q:
    """Return a condition on traces: holding a span with these fields (tool_name or chosen_by).

    The hourly rollups tell how many such spans the range holds, which picks the query
    that stays fast at a million spans: a correlated EXISTS per trace (newest first, stops
    at a page) when they are many, a trace id list (from the tool index) when they are
    few. Rollups lag a little behind ingest, which can only pick the slower of two
    queries that give the same answer.
    """
    spans = Invocation.objects.filter(**span_fields)
    if _span_count_estimate(since, span_fields) >= DENSE_SPANS:
        return models.Q(models.Exists(spans.filter(trace_id=models.OuterRef("pk"))))
    if since is not None:
        spans = spans.filter(started_at__gte=since)
    return models.Q(pk__in=spans.values("trace_id"))


def _span_count_estimate(since: datetime | None, span_fields: dict[str, str]) -> int:
    """Return the spans with these fields in the rollups' hours since `since` (or in all)."""
    if set(span_fields) == {"tool_name"}:
        rollups = ToolRollup.objects.filter(tool_name=span_fields["tool_name"])
    else:
        rollups = SpanRollup.objects.filter(**span_fields)
    if since is not None:
        rollups = rollups.filter(bucket_start__gte=since.replace(minute=0, second=0, microsecond=0))
    return rollups.aggregate(calls=models.Sum("calls", default=0))["calls"]


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


@dataclass(frozen=True)
class Recount:
    """What one recount did: marks consumed, buckets recounted, marks still waiting."""

    marks: int
    tool_buckets: int
    hours: int
    pending: int


RECOUNT_BATCH = 5000
# Any constant: the key of PostgreSQL's advisory lock that makes recounts take turns.
_RECOUNT_LOCK_KEY = 7_210_311


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
        _take_recount_turn()
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


@dataclass
class RollupCheck:
    """What check_rollups found: buckets compared, and one line per bucket that differed.

    Buckets before `kept_before` (the purge horizon) were not compared but kept as they
    are: their raw spans are purged.
    """

    since: datetime
    until: datetime
    tool_buckets: int = 0
    span_groups: int = 0
    differences: list[str] = dataclasses.field(default_factory=list)
    kept_before: datetime | None = None
    kept_tool_buckets: int = 0
    kept_span_groups: int = 0


_CHECKED_TOOL_FIELDS = [name for name in ROLLUP_TOTAL_FIELDS if name != "updated_at"]
_CHECKED_SPAN_FIELDS = [name for name in SPAN_ROLLUP_TOTALS if name != "updated_at"]


def check_rollups(since: datetime, until: datetime, *, repair: bool = True) -> RollupCheck:
    """Compare the rollups of whole UTC hours in [since, until) with the raw spans; repair them.

    Hours before the purge horizon are counted as kept, never compared: their raw spans
    are purged and the rollup is the only record. Works a day at a time, so memory stays
    flat over long ranges.
    """
    since = hour_start(since)
    horizon = purge_horizon()
    check = RollupCheck(since, until)
    if horizon is not None and since < horizon:
        kept = {"bucket_start__gte": since, "bucket_start__lt": min(horizon, until)}
        check.kept_before = horizon
        check.kept_tool_buckets = ToolRollup.objects.filter(**kept).count()
        check.kept_span_groups = SpanRollup.objects.filter(**kept).count()
        check.since = since = min(horizon, until)
    day = since
    while day < until:
        window = models.Q(started_at__gte=day, started_at__lt=min(day + timedelta(days=1), until))
        hours = {"bucket_start__gte": day, "bucket_start__lt": min(day + timedelta(days=1), until)}
        _check_tool_rollups(window, hours, check, repair)
        _check_span_rollups(window, hours, check, repair)
        day += timedelta(days=1)
    return check


def _check_tool_rollups(
    window: models.Q, hours: dict[str, datetime], check: RollupCheck, repair: bool
) -> None:
    counted: dict[tuple[str, datetime], ToolRollup] = {}
    for row in _tool_groups(window):
        key = (row["tool_name"], row["hour"])
        counted.setdefault(key, ToolRollup(tool_name=key[0], bucket_start=key[1])).add_group(row)
    stored = {(row.tool_name, row.bucket_start): row for row in ToolRollup.objects.filter(**hours)}
    wrong = []
    for key in sorted(counted.keys() | stored.keys()):
        empty = ToolRollup(tool_name=key[0], bucket_start=key[1])
        diff = _differences(stored.get(key), counted.get(key, empty), _CHECKED_TOOL_FIELDS)
        if diff:
            wrong.append(key)
            check.differences.append(f"tool {key[0]} @ {key[1]:%Y-%m-%d %H:00}: {diff}")
    check.tool_buckets += len(counted.keys() | stored.keys())
    if repair and wrong:
        with transaction.atomic():
            _take_recount_turn()  # after a purge that began meanwhile has moved the horizon
            ToolRollup.objects.refresh_buckets(set(wrong))


def _check_span_rollups(
    window: models.Q, hours: dict[str, datetime], check: RollupCheck, repair: bool
) -> None:
    def key_of(row: Any) -> tuple:
        return tuple(getattr(row, name) for name in SPAN_ROLLUP_KEY)

    counted = {key_of(row): row for row in (SpanRollup(**group) for group in _span_groups(window))}
    stored = {key_of(row): row for row in SpanRollup.objects.filter(**hours)}
    wrong_hours = set()
    for key in sorted(counted.keys() | stored.keys(), key=repr):
        diff = _differences(stored.get(key), counted.get(key, SpanRollup()), _CHECKED_SPAN_FIELDS)
        if diff:
            wrong_hours.add(key[0])
            what = " ".join(str(part) for part in key[1:] if part)
            check.differences.append(f"spans {what} @ {key[0]:%Y-%m-%d %H:00}: {diff}")
    check.span_groups += len(counted.keys() | stored.keys())
    if repair and wrong_hours:
        with transaction.atomic():
            _take_recount_turn()
            SpanRollup.objects.refresh_hours(wrong_hours)


def _differences(stored: models.Model | None, counted: models.Model, fields: list[str]) -> str:
    """Return "field stored -> counted" for each field that differs ("" if none)."""
    if stored is None:
        return (
            "" if not getattr(counted, "calls", 0) else f"missing (counted {counted.calls} calls)"
        )
    changes = []
    for name in fields:
        old, new = getattr(stored, name), getattr(counted, name)
        same = (
            math.isclose(old, new, rel_tol=1e-9, abs_tol=1e-9)
            if isinstance(old, float)
            else old == new
        )
        if not same:
            changes.append(f"{name} {old} -> {new}")
    return ", ".join(changes)


def _take_recount_turn() -> None:
    """Wait for any other recount to commit (SQLite's IMMEDIATE transactions already do)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_RECOUNT_LOCK_KEY])


@dataclass(frozen=True)
class Purged:
    """What one retention purge deleted."""

    spans: int
    traces: int
    scores: int


def purge_past_retention(batch_size: int = 5000) -> Purged:
    """Delete the spans and traces older than ARES_RETENTION_DAYS, in batches; say how many.

    The purge horizon moves first, so no recount or check rebuilds an hour from the
    spans this leaves (see PurgeHorizon). A trace goes once it ended before the horizon,
    with its spirals and scores; one still running at it keeps its totals, only its old
    spans go. Rollups are kept. Short transactions keep ingest running while this works.
    """
    horizon = _move_purge_horizon(retention_cutoff())
    spans = 0
    old_spans = Invocation.objects.filter(started_at__lt=horizon).order_by()
    while pks := list(old_spans.values_list("pk", flat=True)[:batch_size]):
        spans += Invocation.objects.filter(pk__in=pks).delete()[0]
    traces = scores = 0
    old_traces = Trace.objects.filter(ended_at__lt=horizon).order_by()
    while trace_ids := list(old_traces.values_list("pk", flat=True)[:batch_size]):
        with transaction.atomic():
            scores += Score.objects.filter(trace_id__in=trace_ids).delete()[0]
            traces += len(trace_ids)
            Trace.objects.filter(pk__in=trace_ids).delete()  # their spirals (and spans) too
    RollupMark.objects.filter(bucket_start__lt=horizon).delete()  # hours never recounted
    return Purged(spans, traces, scores)


def _move_purge_horizon(cutoff: datetime) -> datetime:
    """Move the purge horizon forward to `cutoff` (never back); return where it stands.

    In a recount's turn: a recount that began before waits for this, one that begins
    after reads the new horizon before it counts.
    """
    with transaction.atomic():
        _take_recount_turn()
        row, _ = PurgeHorizon.objects.get_or_create(pk=1, defaults={"raw_spans_from": cutoff})
        if row.raw_spans_from < cutoff:
            row.raw_spans_from = cutoff
            row.save(update_fields=["raw_spans_from"])
    return row.raw_spans_from


def insert_ignoring_conflicts(
    model: type[models.Model],
    rows: Sequence[dict[str, Any]],
    conflict_fields: Sequence[str],
    returning: Sequence[str],
) -> list[tuple]:
    """Insert rows, skip those that clash on `conflict_fields`, return `returning` of new rows.

    Django's bulk_create(ignore_conflicts=True) cannot say which rows it inserted, and
    the ingest API must report accepted vs duplicate exactly, even when two clients send
    the same span at once. `ON CONFLICT DO NOTHING RETURNING` (SQLite 3.35+, PostgreSQL)
    lets the database decide. Values must be JSON-ready, except datetimes.
    """
    if not rows:
        return []
    meta = model._meta
    fields = {key: meta.get_field(key) for key in rows[0]}
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields.values())
    conflict = ", ".join(quote(meta.get_field(name).column) for name in conflict_fields)
    returned = ", ".join(quote(meta.get_field(name).column) for name in returning)
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) {rows_from_json(fields.values())} "
        f"ORDER BY {conflict} ON CONFLICT ({conflict}) DO NOTHING RETURNING {returned}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [rows_as_json(rows, fields)])
        return cursor.fetchall()


def rows_from_json(fields: Iterable[models.Field]) -> str:
    """Return a SELECT of `fields` from rows sent as one JSON array parameter (see rows_as_json).

    One parameter instead of one per value keeps the SQL short and constant: with a
    placeholder per value, parsing a 1000-span batch's SQL (23,000 of them) in psycopg
    and the database cost more than storing the spans. Constant SQL is also built once.
    """
    return _rows_from_json(tuple(fields), connection.vendor)


@lru_cache(maxsize=64)
def _rows_from_json(fields: tuple[models.Field, ...], vendor: str) -> str:
    quote = connection.ops.quote_name
    if vendor == "postgresql":
        types = ", ".join(f"{quote(field.column)} {field.db_type(connection)}" for field in fields)
        # json, not jsonb: the rows are read once, so building jsonb first only costs.
        return f"SELECT * FROM json_to_recordset(%s::json) AS x({types}) WHERE true"
    values = []
    for field in fields:
        if isinstance(field, models.JSONField):
            # -> keeps JSON as JSON text; Django stores None as SQL NULL, not 'null'.
            value = f"NULLIF(value -> '$.{field.column}', 'null')"
        else:
            value = f"value ->> '$.{field.column}'"
        values.append(f"{value} AS {quote(field.column)}")
    # WHERE true: SQLite cannot otherwise tell ON CONFLICT from a join's ON.
    return f"SELECT {', '.join(values)} FROM json_each(%s) WHERE true"


def rows_as_json(rows: Sequence[dict[str, Any]], fields: dict[str, models.Field]) -> str:
    """Return rows, dicts keyed as `fields` is, as the JSON array rows_from_json reads.

    Datetimes go through their field, as Django saves them; every other value must
    already be what JSON and the column hold (str, int, float, None, JSON payloads).
    """
    # Looked up once: `connection` is a thread-local proxy, slow enough to matter per value.
    db = connections[DEFAULT_DB_ALIAS]
    on_postgresql = db.vendor == "postgresql"
    datetimes = [
        (key, field) for key, field in fields.items() if isinstance(field, models.DateTimeField)
    ]
    renamed = [(key, field.column) for key, field in fields.items() if key != field.column]
    ready = []
    for row in rows:
        row = dict(row)
        for key, field in datetimes:
            value = row[key]
            if on_postgresql and isinstance(value, datetime) and value.utcoffset() is not None:
                # What the field sends for an aware datetime, without its per-value checks.
                row[key] = value.isoformat()
            else:
                value = field.get_db_prep_save(value, db)
                row[key] = value.isoformat() if isinstance(value, datetime) else value
        for key, column in renamed:
            row[column] = row.pop(key)
        ready.append(row)
    return json.dumps(ready, separators=(",", ":"))


def add_to_trace_totals(deltas: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Create traces or add span totals to them, in one statement; return their failed calls.

    The returned count (per trace id, after the update) comes free with the statement and
    tells the caller which traces have failed often enough to hold a failure spiral.

    Each delta holds a trace's new spans summed up (counts, tokens, cost, time range)
    and the agent and session, which fill in only what is still blank, and the request
    text with the start of its span, which replaces a request text from a later span.
    Rows are sorted by trace id so concurrent batches lock traces in the same order.
    """
    rows = sorted(deltas, key=lambda delta: delta["trace_id"])
    if not rows:
        return {}
    now = timezone.now()
    table = connection.ops.quote_name(Trace._meta.db_table)
    columns = [
        "trace_id", "agent", "session_id", "request_text", "started_at", "ended_at",
        "status", "span_count", "tool_calls", "llm_calls", "failed_calls", "stopped_calls",
        "input_tokens", "output_tokens", "cost_usd", "tool_latency_ms", "created_at",
        "updated_at",
        "request_started_at",
    ]  # fmt: skip
    fields = {name: Trace._meta.get_field(name) for name in columns}
    rows = [
        {
            **row,
            "status": trace_status(row["failed_calls"], row["stopped_calls"]),
            "created_at": now,
            "updated_at": now,
        }
        for row in rows
    ]
    fill_blank = [
        f"{name} = CASE WHEN {table}.{name} = '' THEN excluded.{name} ELSE {table}.{name} END"
        for name in ("agent", "session_id")
    ]
    # The request text of the earliest span that has one, whichever arrives first. SET
    # reads the row as it was, so both columns test the same old values.
    earlier = (
        f"excluded.request_text <> '' AND ({table}.request_text = '' "
        f"OR excluded.request_started_at < {table}.request_started_at)"
    )
    fill_blank += [
        f"{name} = CASE WHEN {earlier} THEN excluded.{name} ELSE {table}.{name} END"
        for name in ("request_text", "request_started_at")
    ]
    add = [
        f"{name} = {table}.{name} + excluded.{name}"
        for name in (
            "span_count", "tool_calls", "llm_calls", "failed_calls", "stopped_calls",
            "input_tokens", "output_tokens", "cost_usd", "tool_latency_ms",
        )
    ]  # fmt: skip
    widen = [
        f"started_at = CASE WHEN excluded.started_at < {table}.started_at "
        f"THEN excluded.started_at ELSE {table}.started_at END",
        f"ended_at = CASE WHEN excluded.ended_at > {table}.ended_at "
        f"THEN excluded.ended_at ELSE {table}.ended_at END",
        f"status = CASE WHEN {table}.failed_calls + excluded.failed_calls > 0 THEN 'error' "
        f"WHEN {table}.stopped_calls + excluded.stopped_calls > 0 THEN 'stopped' ELSE 'ok' END",
        "updated_at = excluded.updated_at",
    ]
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) {rows_from_json(fields.values())} "
        f"ORDER BY trace_id ON CONFLICT (trace_id) DO UPDATE SET "
        f"{', '.join(fill_blank + add + widen)} RETURNING trace_id, failed_calls"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [rows_as_json(rows, fields)])
        return dict(cursor.fetchall())


SCOPES = {
    "report": "Report invocations (POST /api/v1/invocations)",
    "read": "Read traces, invocations and statistics",
    "plan": "Ask the planner for a plan",
    "execute": "Execute tools",
    "chat": "Chat with agents",
    "score": "Send scores of calls and traces (POST /api/v1/scores)",
}

KEY_PREFIX = "ares_"


def hash_api_key(raw_key: str) -> str:
    """Return the SHA-256 hex digest under which a key is stored.

    Keys are 256 random bits, so a fast unsalted hash is safe and lets a request
    find its key with one indexed lookup.
    """
    return hashlib.sha256(raw_key.encode()).hexdigest()


class ApiKeyManager(models.Manager):
    def issue(self, name: str, scopes: Sequence[str], created_by: Any = None) -> tuple[ApiKey, str]:
        """Create a key and return it with its raw value, which is never stored."""
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown:
            raise ValueError(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}")
        key = self.model(name=name, scopes=sorted(set(scopes)), created_by=created_by)
        raw_key = key.set_new_key()
        key.save()
        return key, raw_key

    def find_active(self, raw_key: str) -> ApiKey | None:
        """Return the unrevoked, unexpired key with this raw value, or None."""
        key = self.filter(key_hash=hash_api_key(raw_key)).first()
        if key is None or not key.is_active:
            return None
        return key


class ApiKey(models.Model):
    """A hashed, scoped, revocable key for agents calling the REST API."""

    name = models.CharField(max_length=200)
    prefix = models.CharField(
        max_length=12, help_text="The key's first characters, to tell keys apart"
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=list)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyManager()

    class Meta:
        verbose_name = "API key"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    def set_new_key(self) -> str:
        """Give this key a new random value; return it raw, since only its hash is kept."""
        raw_key = KEY_PREFIX + secrets.token_urlsafe(32)
        self.prefix = raw_key[:12]
        self.key_hash = hash_api_key(raw_key)
        return raw_key

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    def revoke(self) -> None:
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])

    def touch(self) -> None:
        """Record use, at most once a minute, so busy keys don't write on every request."""
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at > timedelta(minutes=1):
            ApiKey.objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now


class PercentileCont(models.Aggregate):
    """PostgreSQL's percentile_cont(p) WITHIN GROUP (ORDER BY expression)."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(percentile)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = models.FloatField()

    def __init__(self, expression: Any, percentile: float) -> None:
        super().__init__(expression, percentile=float(percentile))


def percentile_cont(sorted_values: Sequence[float], fraction: float) -> float | None:
    """Return the interpolated percentile of sorted values, as PostgreSQL's percentile_cont."""
    if not sorted_values:
        return None
    position = fraction * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def tool_stats(since: datetime, until: datetime) -> list[dict[str, Any]]:
    """Return per-tool calls, failures, stops, success rate, p50/p95 latency, tokens and cost.

    PostgreSQL computes the percentiles in SQL; SQLite has no percentile function, so
    there the latencies of the window are read and interpolated the same way in Python.
    """
    spans = Invocation.objects.tools().since(since).until(until)
    totals = {
        "calls": models.Count("pk"),
        "failures": models.Count("pk", filter=models.Q(status=SpanStatus.ERROR)),
        "stopped": models.Count("pk", filter=models.Q(status=SpanStatus.STOPPED)),
        "input_tokens": models.Sum("input_tokens"),
        "output_tokens": models.Sum("output_tokens"),
        "result_tokens": models.Sum("result_tokens"),
        "cost_usd": models.Sum("cost_usd"),
    }
    if connection.vendor == "postgresql":
        totals["p50_latency_ms"] = PercentileCont("latency_ms", 0.5)
        totals["p95_latency_ms"] = PercentileCont("latency_ms", 0.95)
    rows = list(spans.values("tool_name").annotate(**totals).order_by("tool_name"))
    if connection.vendor != "postgresql":
        latencies: dict[str, list[float]] = {}
        for name, latency in spans.values_list("tool_name", "latency_ms").order_by("latency_ms"):
            latencies.setdefault(name, []).append(latency)
        for row in rows:
            values = latencies.get(row["tool_name"], [])
            row["p50_latency_ms"] = percentile_cont(values, 0.5)
            row["p95_latency_ms"] = percentile_cont(values, 0.95)
    for row in rows:
        judged = row["calls"] - row["stopped"]  # a stopped call neither failed nor succeeded
        row["success_rate"] = (judged - row["failures"]) / judged if judged else None
    return rows


class OtlpProducerManager(models.Manager):
    def record(
        self, name: str, dialect: str, tool_spans: int, incomplete: Sequence[dict[str, Any]]
    ) -> None:
        """Count a producer's new tool spans and those missing attributes (dicts with `missing`)."""
        now = timezone.now()
        with transaction.atomic():
            producer, _ = self.select_for_update().get_or_create(
                name=name, defaults={"first_seen_at": now}
            )
            producer.add(dialect, tool_spans, incomplete, now)
            producer.save()


class OtlpProducer(models.Model):
    """A service (OTLP service.name) that sends spans, and its tool spans missing attributes.

    Tool spans without a tool name or arguments are stored all the same (named after their
    span, no arguments); this tells their producer's developers what to fix. An unset status
    is ok, as the OpenTelemetry spec says, so `missing_status` only keeps older counts.
    """

    RECENT_KEPT = 50

    name = models.CharField(max_length=200, unique=True, help_text="Resource service.name")
    dialect = models.CharField(max_length=16, choices=Dialect.choices, blank=True)
    tool_spans = models.PositiveBigIntegerField(default=0)
    missing_tool_name = models.PositiveBigIntegerField(default=0)
    missing_status = models.PositiveBigIntegerField(default=0)
    missing_arguments = models.PositiveBigIntegerField(default=0)
    recent_incomplete = models.JSONField(
        default=list, blank=True, help_text="The newest tool spans missing attributes"
    )
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)

    objects = OtlpProducerManager()

    class Meta:
        verbose_name = "OTLP producer"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def add(
        self, dialect: str, tool_spans: int, incomplete: Sequence[dict[str, Any]], now: datetime
    ) -> None:
        """Add newly stored tool spans, `incomplete` being those that lacked attributes."""
        if dialect != Dialect.OTEL or not self.dialect:
            self.dialect = dialect
        self.tool_spans += tool_spans
        for span in incomplete:
            for attribute in span["missing"]:
                name = f"missing_{attribute}"
                setattr(self, name, getattr(self, name) + 1)
        newest = [*reversed(incomplete), *self.recent_incomplete]
        self.recent_incomplete = newest[: self.RECENT_KEPT]
        self.last_seen_at = now


class ScoreType(models.TextChoices):
    NUMERIC = "numeric", "Numeric"
    BOOLEAN = "boolean", "Boolean"
    CATEGORICAL = "categorical", "Categorical"


class ScoreSource(models.TextChoices):
    HUMAN = "human", "Human"
    AGENT = "agent", "Agent"
    EVALUATOR = "evaluator", "Evaluator"


SCORE_NAME_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"


class ScoreDefinition(models.Model):
    """What a score means and which values it takes; every score sent is checked against it."""

    name = models.CharField(
        max_length=64, unique=True, help_text="Lower case: letters, digits, _ . - (result_correct)"
    )
    data_type = models.CharField(max_length=16, choices=ScoreType.choices)
    min_value = models.FloatField(null=True, blank=True, help_text="Numeric: the lowest value")
    max_value = models.FloatField(null=True, blank=True, help_text="Numeric: the highest value")
    categories = models.JSONField(
        default=list, blank=True, help_text="Categorical: the labels it takes, in order"
    )
    description = models.TextField(blank=True, help_text="What the score means, for who sends it")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        found = self.problems()
        if found:
            raise ValidationError(found)

    def problems(self) -> dict[str, str]:
        """Return what is wrong with the definition, per field (empty when it is sound)."""
        found = {}
        if not re.fullmatch(SCORE_NAME_PATTERN, self.name or ""):
            found["name"] = "use 1-64 lower-case letters, digits, _ . - starting with a letter"
        numeric = self.data_type == ScoreType.NUMERIC
        if not numeric and (self.min_value is not None or self.max_value is not None):
            found["min_value"] = "only numeric scores have a range"
        for bound in ("min_value", "max_value"):
            value = getattr(self, bound)
            if value is not None and not math.isfinite(value):
                found[bound] = "must be a finite number"
        if (
            numeric
            and self.min_value is not None
            and self.max_value is not None
            and self.min_value > self.max_value
        ):
            found["max_value"] = "must not be below min_value"
        labels = self.categories
        if self.data_type == ScoreType.CATEGORICAL:
            if (
                not isinstance(labels, list)
                or not labels
                or not all(isinstance(label, str) and label.strip() for label in labels)
                or len(set(labels)) != len(labels)
                or any(len(label) > 100 for label in labels)
            ):
                found["categories"] = "give one or more distinct labels (text, at most 100 chars)"
        elif labels:
            found["categories"] = "only categorical scores have labels"
        return found

    def read_value(self, value: Any) -> tuple[float | None, str]:
        """Return a sent value as (number, label), or raise ValueError saying why it doesn't fit."""
        if self.data_type == ScoreType.BOOLEAN:
            if isinstance(value, bool):
                return (1.0 if value else 0.0), ("true" if value else "false")
            if value in (0, 1) and not isinstance(value, float):
                return float(value), ("true" if value else "false")
            raise ValueError(f"{self.name} is boolean: send true or false (got {value!r:.80})")
        if self.data_type == ScoreType.CATEGORICAL:
            if isinstance(value, str) and value in self.categories:
                return None, value
            raise ValueError(
                f"{self.name} takes one of {', '.join(self.categories)} (got {value!r:.80})"
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{self.name} is numeric: send a number (got {value!r:.80})")
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"{self.name} must be a finite number")
        if self.min_value is not None and number < self.min_value:
            raise ValueError(f"{self.name} must be at least {self.min_value:g} (got {number:g})")
        if self.max_value is not None and number > self.max_value:
            raise ValueError(f"{self.name} must be at most {self.max_value:g} (got {number:g})")
        return number, ""


class Score(models.Model):
    """A judgement of one span (a call) or a whole trace, by a person, an agent or an evaluator.

    Trace and span are referred to by id, not by key: a score may arrive before its span
    (OTLP exporters batch), and is kept `pending` until the span is stored.
    """

    name = models.CharField(max_length=64)
    data_type = models.CharField(max_length=16, choices=ScoreType.choices)
    value = models.FloatField(null=True, blank=True, help_text="Numeric; booleans as 1 or 0")
    label = models.CharField(
        max_length=100, blank=True, help_text="Categorical: the label; booleans: true or false"
    )
    source = models.CharField(max_length=16, choices=ScoreSource.choices)
    comment = models.TextField(blank=True)
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16, blank=True, help_text="Blank: the whole trace")
    client_id = models.CharField(  # noqa: DJ001 - NULL: not given, so not unique
        max_length=200,
        null=True,
        blank=True,
        unique=True,
        help_text="The sender's id for the score: sending it again stores nothing new",
    )
    reported_by = models.CharField(max_length=200, help_text="The API key's or user's name")
    created_at = models.DateTimeField(default=timezone.now)
    pending = models.BooleanField(
        default=False, help_text="Its span (or trace) had not arrived when it was last checked"
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["trace_id", "span_id"], name="score_trace_span"),
            models.Index(fields=["name", "created_at"], name="score_name_created"),
            models.Index(fields=["pending", "created_at"], name="score_pending_created"),
        ]

    def __str__(self) -> str:
        return f"{self.name}={self.shown_value} on {self.trace_id}/{self.span_id or '-'}"

    @property
    def shown_value(self) -> str:
        if self.data_type == ScoreType.NUMERIC:
            return f"{self.value:g}"
        return self.label


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class JobLeaseManager(models.Manager):
    def take(self, job: str, every_s: float, holder: str) -> datetime | None:
        """Take a periodic job for the current period; return the period's start, or None.

        Periods start on multiples of `every_s` since 1970, so every process agrees on
        them. One UPDATE decides, so of several processes asking at once exactly one
        gets the period. It is refused while an earlier holder is presumed still running
        (before its expiry): a holder killed with kill -9 delays its job one period at
        most.
        """
        now = timezone.now()
        period = datetime.fromtimestamp(now.timestamp() // every_s * every_s, UTC)
        free = self.filter(job=job, period_start__lt=period, expires_at__lte=now)
        fields = {"period_start": period, "holder": holder[:200], "taken_at": now}
        fields["expires_at"] = now + timedelta(seconds=every_s)
        taken = free.update(**fields)
        if not taken and not self.filter(job=job).exists():
            self.bulk_create([self.model(job=job)], ignore_conflicts=True)
            taken = free.update(**fields)
        return period if taken else None

    def release(self, job: str, period: datetime, holder: str) -> None:
        """Say the job's run for this period is over, so the next period may start on time."""
        self.filter(job=job, period_start=period, holder=holder[:200]).update(
            expires_at=timezone.now()
        )


class JobLease(models.Model):
    """Which process runs a periodic job (settings.ARES_PERIODIC_JOBS) in its current period.

    A row per job, taken atomically (JobLeaseManager.take), so two beats, or a beat and
    a worker, never run the same job twice in one period.
    """

    job = models.CharField(max_length=100, primary_key=True)
    period_start = models.DateTimeField(default=EPOCH, help_text="The last period taken")
    holder = models.CharField(max_length=200, blank=True, help_text="host:pid that took it")
    taken_at = models.DateTimeField(default=EPOCH)
    expires_at = models.DateTimeField(
        default=EPOCH, help_text="Until then its holder is presumed running; released when done"
    )

    objects = JobLeaseManager()

    def __str__(self) -> str:
        return f"{self.job}: {self.holder or 'never taken'}"
