"""OTLP producers as stored: who sends spans, in which dialect, and what their spans lack."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from traces_app.models.trace_records import Dialect


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
