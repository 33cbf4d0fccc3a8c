"""Scores as stored: what each score means (definitions) and the judgements sent."""

from __future__ import annotations

import math
import re
from typing import Any

from django.db import models
from django.utils import timezone


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
