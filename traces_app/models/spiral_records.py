"""Failure spirals as stored: runs of calls in a trace that got nowhere, kept per trace."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

from traces_app.models.trace_records import Trace


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
    def replace_for_traces(
        self, found: Mapping[str, tuple[Sequence[Any], datetime | None]]
    ) -> None:
        """Store traces' spirals as just detected: per trace id, (SpiralViews, window start).

        Update, add, drop stale, for all the traces in three queries. Keyed by (trace,
        tool, first span): a spiral that grows keeps its record and its detected_at; one
        whose first span changed (a late earlier span) replaces the old. Only a trace's
        spirals starting at or after its window start (when given) can be stale.
        """
        records = [
            self.model(
                trace_id=trace_id,
                **{name: getattr(spiral, name) for name in SPIRAL_VIEW_FIELDS},
            )
            for trace_id in sorted(found)  # one order of row locks for every writer
            for spiral in found[trace_id][0]
        ]
        if records:
            self.bulk_create(
                records,
                update_conflicts=True,
                unique_fields=["trace", "tool_name", "first_span_id"],
                update_fields=[*SPIRAL_VIEW_FIELDS, "updated_at"],
            )
        kept = {
            (trace_id, spiral.tool_name, spiral.first_span_id)
            for trace_id, (spirals, _) in found.items()
            for spiral in spirals
        }
        stored = self.filter(trace_id__in=list(found)).values_list(
            "pk", "trace_id", "tool_name", "first_span_id", "started_at"
        )
        stale = [
            pk
            for pk, trace_id, tool_name, first_span_id, started_at in stored
            if (trace_id, tool_name, first_span_id) not in kept
            and (found[trace_id][1] is None or started_at >= found[trace_id][1])
        ]
        if stale:
            self.filter(pk__in=stale).delete()


SPIRAL_VIEW_FIELDS = (
    "tool_name", "kind", "error_kind", "attempts", "first_span_id", "last_span_id",
    "started_at", "ended_at", "resolution", "wasted_tokens", "wasted_ms", "wasted_cost_usd",
    "argument_changes",
)  # fmt: skip


class FailureSpiral(models.Model):
    """A run of calls in one trace to one tool that got nowhere (traces_app.spirals.detection)."""

    # The unique (trace, tool_name, first_span_id) index serves look-ups by trace. No
    # constraint in the database, as for spans: its check of every deleted trace, deferred
    # to the commit, was 2.3 of retention's 2.6 s for a day of 126,000 traces. Retention
    # deletes a trace's spirals with it, and Django's delete cascades.
    trace = models.ForeignKey(
        Trace,
        on_delete=models.CASCADE,
        related_name="spirals",
        db_column="trace_id",
        db_index=False,
        db_constraint=False,
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

    @property
    def changed_arguments(self) -> list[str]:
        """Return the argument keys changed between any two attempts ("*": all of them)."""
        keys = {key for step in self.argument_changes or [] for key in step}
        return sorted(keys)
