"""Moving monitors between OK, firing and resolved, each transition recorded exactly once.

A monitor whose value crosses its threshold fires; while it stays across, it reminds every
renotify_minutes; when it comes back, it resolves. Each transition is one MonitorEvent,
numbered per monitor. Two processes evaluating the same monitor at once both read the
same `transitions`; the conditional UPDATE on it lets only one of them move the monitor,
and only that one records the event and hands it to the notifier (notify.delivery), in
the same transaction. A silenced monitor still records its events (silenced=True) and
sends nothing; when the silence has ended and it is still firing, the next evaluation
sends a reminder.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from planner_app.monitors.metrics import Measurement, breaches, measure, target_text, value_text
from planner_app.monitors.records import Metric, Monitor, MonitorEvent, MonitorState

logger = logging.getLogger(__name__)
Kind = MonitorEvent.Kind


@dataclass
class EvaluationSummary:
    """What one pass over the enabled monitors did."""

    evaluated: int = 0
    fired: int = 0
    reminders: int = 0
    resolved: int = 0
    not_judged: int = 0
    failed: int = 0

    def __str__(self) -> str:
        return (
            f"{self.evaluated} monitors evaluated: {self.fired} fired, {self.reminders} "
            f"reminders, {self.resolved} resolved, {self.not_judged} not judged (too few "
            f"calls), {self.failed} failed"
        )

    def count(self, event: MonitorEvent | None) -> None:
        if event is not None:
            name = {Kind.FIRED: "fired", Kind.REMINDER: "reminders", Kind.RESOLVED: "resolved"}
            setattr(self, name[event.kind], getattr(self, name[event.kind]) + 1)


def evaluate_monitors(now: datetime | None = None) -> EvaluationSummary:
    """Evaluate every enabled monitor at `now` (default: the current time).

    A monitor whose metric cannot be read (a database error, a broken definition) is
    logged with its traceback and counted as failed; the others are still evaluated.
    """
    now = now or timezone.now()
    summary = EvaluationSummary()
    for monitor in Monitor.objects.filter(enabled=True).order_by("pk"):
        summary.evaluated += 1
        try:
            event = evaluate(monitor, now)
        except Exception:
            logger.exception("monitor %s (#%s) could not be evaluated", monitor, monitor.pk)
            summary.failed += 1
            continue
        summary.count(event)
        if monitor.last_value is None and event is None:
            summary.not_judged += 1
    return summary


def evaluate(monitor: Monitor, now: datetime) -> MonitorEvent | None:
    """Measure the monitor at `now`; record and notify a transition if there is one.

    Returns the event recorded, or None when the state stays (or another process recorded
    this transition first). `monitor` is updated in memory to what was saved.
    """
    measurement = measure(monitor, now)
    kind = next_transition(monitor, measurement, now)
    if kind is None:
        Monitor.objects.filter(pk=monitor.pk).update(
            last_value=measurement.value, last_evaluated_at=now
        )
        monitor.last_value, monitor.last_evaluated_at = measurement.value, now
        return None
    return _record(monitor, kind, measurement, now)


def is_silenced(monitor: Monitor, now: datetime) -> bool:
    return monitor.silenced_until is not None and monitor.silenced_until > now


def next_transition(monitor: Monitor, measurement: Measurement, now: datetime) -> str | None:
    """Return the event kind the measurement calls for, or None when the state stays."""
    if measurement.value is None:
        return None  # too few calls to judge: neither firing nor resolving
    crossed = breaches(monitor, measurement.value)
    if monitor.state != MonitorState.FIRING:
        return Kind.FIRED if crossed else None
    if not crossed:
        return Kind.RESOLVED
    return Kind.REMINDER if reminder_due(monitor, now) else None


def reminder_due(monitor: Monitor, now: datetime) -> bool:
    """Return whether a firing monitor should notify again now.

    Not while silenced. After a silence: at once if nothing was sent since it fired or
    since the silence began; otherwise every renotify_minutes (0: never).
    """
    if is_silenced(monitor, now):
        return False
    last = monitor.last_notified_at
    if last is None or last < monitor.state_since:
        return True  # it fired during a silence that has ended: nothing was sent yet
    if monitor.silenced_until is not None and last < monitor.silenced_until <= now:
        return True  # a silence ended since the last notification
    every = monitor.renotify_minutes
    return every > 0 and now - last >= timedelta(minutes=every)


def _record(
    monitor: Monitor, kind: str, measurement: Measurement, now: datetime
) -> MonitorEvent | None:
    """Move the monitor and record the event, unless another process moved it first."""
    silenced = is_silenced(monitor, now)
    number = monitor.transitions + 1
    moved = {
        "transitions": number,
        "last_value": measurement.value,
        "last_evaluated_at": now,
        "state": MonitorState.RESOLVED if kind == Kind.RESOLVED else MonitorState.FIRING,
    }
    if kind != Kind.REMINDER:
        moved["state_since"] = now
    if not silenced:
        moved["last_notified_at"] = now
    with transaction.atomic():
        claimed = Monitor.objects.filter(
            pk=monitor.pk, transitions=monitor.transitions, enabled=True
        ).update(**moved)
        if claimed != 1:
            return None
        event = MonitorEvent.objects.create(
            monitor=monitor,
            number=number,
            kind=kind,
            at=now,
            value=measurement.value,
            threshold=monitor.threshold,
            window_start=measurement.window_start,
            window_end=measurement.window_end,
            message=event_message(monitor, kind, measurement),
            trace_ids=measurement.trace_ids,
            silenced=silenced,
        )
        if not silenced:
            _notify(event)
    for name, value in moved.items():
        setattr(monitor, name, value)
    return event


def _notify(event: MonitorEvent) -> None:
    """Hand the event to the notifier: one delivery per enabled channel, sent on commit."""
    from planner_app.monitors.notify.delivery import enqueue

    enqueue(event)


def event_message(monitor: Monitor, kind: str, measurement: Measurement) -> str:
    """Return the event in one sentence: metric, value, threshold, window and target."""
    metric = Metric(monitor.metric).label.split(" (")[0]
    if monitor.metric == Metric.CALLS and monitor.comparison == "below":
        metric = "Calls"
    value = value_text(monitor.metric, measurement.value)
    threshold = value_text(monitor.metric, monitor.threshold)
    side = monitor.comparison if kind != Kind.RESOLVED else f"no longer {monitor.comparison}"
    verb = {Kind.FIRED: "fired", Kind.REMINDER: "still firing", Kind.RESOLVED: "resolved"}[kind]
    return (
        f"{monitor.name} {verb}: {metric.lower()} of {target_text(monitor)} was {value} "
        f"over the {monitor.window_minutes} minutes to {measurement.window_end:%Y-%m-%d %H:%M} "
        f"UTC, {side} the threshold {threshold} ({measurement.detail})."
    )
