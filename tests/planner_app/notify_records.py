"""Test data for notifications: a monitor with channels and events recorded as H1 would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from planner_app.monitors.records import (
    Metric,
    Monitor,
    MonitorEvent,
    NotificationChannel,
    Scope,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def webhook(url: str, name: str = "ops hook", **fields: object) -> NotificationChannel:
    return NotificationChannel.objects.create(name=name, kind="webhook", url=url, **fields)


def slack(url: str, name: str = "ops slack") -> NotificationChannel:
    return NotificationChannel.objects.create(name=name, kind="slack", url=url)


def mailbox(*emails: str, name: str = "ops mail") -> NotificationChannel:
    return NotificationChannel.objects.create(name=name, kind="email", emails=list(emails))


def monitor(*channels: NotificationChannel, name: str = "calculator errors") -> Monitor:
    made = Monitor.objects.create(
        name=name, metric=Metric.ERROR_RATE, scope=Scope.TOOL, target="calculator",
        threshold=0.2, window_minutes=15,
    )  # fmt: skip
    made.channels.set(channels)
    return made


def event(
    of: Monitor, kind: str = "fired", at: datetime = T0, silenced: bool = False
) -> MonitorEvent:
    """Record the monitor's next event, numbered as evaluation.py numbers them."""
    number = of.transitions + 1
    Monitor.objects.filter(pk=of.pk).update(transitions=number)
    of.transitions = number
    return MonitorEvent.objects.create(
        monitor=of, number=number, kind=kind, at=at, value=0.5, threshold=of.threshold,
        window_start=at - timedelta(minutes=of.window_minutes), window_end=at,
        message=f"error rate of tool calculator is 0.5, above 0.2 over 15 min ({kind})",
        trace_ids=["a" * 32, "b" * 32], silenced=silenced,
    )  # fmt: skip
