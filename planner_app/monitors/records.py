"""The records of monitors: a monitor, its history of transitions, channels and deliveries.

A monitor reads one metric of one target (a tool, a capability, an agent or the whole
site) over a trailing window and compares it with a threshold. Each change of its state
(fired, a reminder while it stays firing, resolved) is a MonitorEvent, numbered per
monitor: the unique (monitor, number) pair is what keeps two processes from recording, and
so from notifying, the same transition twice. Each event gets one Delivery per channel,
and every try of a delivery is a DeliveryAttempt.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone


class Metric(models.TextChoices):
    ERROR_RATE = "error_rate", "Error rate (share of calls that failed)"
    P95_LATENCY = "p95_latency_ms", "p95 latency (ms)"
    CALLS = "calls", "Calls (below a threshold: calls stopping)"
    COST_PER_HOUR = "cost_per_hour", "Cost per hour (USD)"
    SCORE_DROP = "score_drop", "Evidence-score drop (points against the window before)"
    SPIRALS = "spirals_started", "Failure spirals started"
    BREAKER_TRIPS = "breaker_trips", "Spiral-breaker trips"
    NEEDS_LLM_RATE = "needs_llm_rate", "The planner's needs-the-LLM rate"


class Scope(models.TextChoices):
    SITE = "site", "The whole site"
    TOOL = "tool", "A tool"
    CAPABILITY = "capability", "A capability (its mapped tools)"
    AGENT = "agent", "An agent"


class Comparison(models.TextChoices):
    ABOVE = "above", "above"
    BELOW = "below", "below"


class MonitorState(models.TextChoices):
    OK = "ok", "OK"
    FIRING = "firing", "Firing"
    RESOLVED = "resolved", "Resolved"


class Monitor(models.Model):
    """A condition on a metric of a target over a window: OK, firing or resolved."""

    name = models.CharField(max_length=200, unique=True)
    description = models.TextField(blank=True)
    metric = models.CharField(max_length=32, choices=Metric.choices)
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.SITE)
    target = models.CharField(
        max_length=200, blank=True, help_text="The tool, capability or agent; blank for the site"
    )
    comparison = models.CharField(
        max_length=8, choices=Comparison.choices, default=Comparison.ABOVE
    )
    threshold = models.FloatField()
    window_minutes = models.PositiveIntegerField(
        default=15, validators=[MinValueValidator(1), MaxValueValidator(7 * 24 * 60)]
    )
    min_calls = models.PositiveIntegerField(
        default=1, help_text="Rates and percentiles of fewer calls than this are not judged"
    )
    renotify_minutes = models.PositiveIntegerField(
        default=60, help_text="Notify again this often while it stays firing; 0: never"
    )
    enabled = models.BooleanField(default=True)
    channels = models.ManyToManyField("NotificationChannel", blank=True, related_name="monitors")
    silenced_until = models.DateTimeField(null=True, blank=True)
    silence_reason = models.CharField(max_length=300, blank=True)
    # The state, moved only by evaluation.py with a conditional update on `transitions`.
    state = models.CharField(max_length=16, choices=MonitorState.choices, default=MonitorState.OK)
    state_since = models.DateTimeField(default=timezone.now)
    transitions = models.PositiveIntegerField(
        default=0, help_text="Events recorded so far (the number of the newest)"
    )
    last_value = models.FloatField(null=True, blank=True)
    last_evaluated_at = models.DateTimeField(null=True, blank=True)
    last_notified_at = models.DateTimeField(null=True, blank=True)
    # Edits: a save names the version it was read at (two staff editing at once).
    version = models.PositiveIntegerField(default=1)
    created_by = models.CharField(max_length=250, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["enabled", "state"], name="monitor_enabled_state")]

    def __str__(self) -> str:
        return self.name


class MonitorEvent(models.Model):
    """One transition of a monitor: fired, a reminder while firing, or resolved."""

    class Kind(models.TextChoices):
        FIRED = "fired", "Fired"
        REMINDER = "reminder", "Still firing"
        RESOLVED = "resolved", "Resolved"

    monitor = models.ForeignKey(Monitor, on_delete=models.CASCADE, related_name="events")
    number = models.PositiveIntegerField(help_text="1 for a monitor's first event, then 2...")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    at = models.DateTimeField(default=timezone.now)
    value = models.FloatField(null=True, blank=True)
    threshold = models.FloatField()
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    message = models.TextField()
    trace_ids = models.JSONField(
        default=list, blank=True, help_text="Some traces behind the value, newest first"
    )
    silenced = models.BooleanField(
        default=False, help_text="Recorded during a silence: no notification was sent"
    )

    class Meta:
        ordering = ["-at", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["monitor", "number"], name="monitor_event_number")
        ]

    def __str__(self) -> str:
        return f"{self.monitor} #{self.number} {self.kind}"


class NotificationChannel(models.Model):
    """Where alerts go: a webhook (signed JSON), a Slack-compatible webhook, or email."""

    class Kind(models.TextChoices):
        WEBHOOK = "webhook", "Webhook (JSON, signed)"
        SLACK = "slack", "Slack-compatible incoming webhook"
        EMAIL = "email", "Email"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    url = models.URLField(max_length=1000, blank=True, help_text="Webhook and Slack channels")
    emails = models.JSONField(default=list, blank=True, help_text="Email channels: addresses")
    # The webhook's signing secret is derived from SECRET_KEY and this salt, never stored.
    secret_salt = models.CharField(max_length=64, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, giving the channel a salt first if it has none (however it was created)."""
        if not self.secret_salt:
            self.secret_salt = secrets.token_hex(16)
        super().save(*args, **kwargs)


class Delivery(models.Model):
    """One event sent to one channel: pending until delivered or out of tries."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (out of tries)"

    event = models.ForeignKey(MonitorEvent, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(
        NotificationChannel, on_delete=models.CASCADE, related_name="deliveries"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    # A sender claims a delivery until this instant; another may take it after.
    claimed_until = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=250, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["event", "channel"], name="delivery_event_channel")
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="delivery_due")]

    def __str__(self) -> str:
        return f"{self.event} to {self.channel}"


class DeliveryAttempt(models.Model):
    """One try of a delivery: when, what the receiver answered, how long it took."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now)
    ok = models.BooleanField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    latency_ms = models.FloatField(default=0.0)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="delivery_attempt_number")
        ]

    def __str__(self) -> str:
        return f"{self.delivery} try {self.number}"


__all__ = [
    "Comparison", "Delivery", "DeliveryAttempt", "Metric", "Monitor", "MonitorEvent",
    "MonitorState", "NotificationChannel", "Scope",
]  # fmt: skip
