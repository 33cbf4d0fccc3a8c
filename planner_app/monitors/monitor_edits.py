"""Saving operators' changes to monitors: the definition only, and only at the version read.

The admin and the API both save through here. An edit names the version it was read at;
the conditional UPDATE on it refuses a save over someone else's (StaleEdit), and it never
writes the state fields, which only evaluation.py moves. Silencing is no edit of the
definition: it changes the silence fields alone, whatever the version.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from planner_app.monitors.records import Monitor, NotificationChannel

# The fields an edit may change; the rest belong to evaluation (state, transitions, ...).
DEFINITION_FIELDS = (
    "name", "description", "metric", "scope", "target", "comparison", "threshold",
    "window_minutes", "min_calls", "renotify_minutes", "enabled",
)  # fmt: skip


class StaleEdit(Exception):
    """The monitor changed since the version the edit was read at."""


class EditRefused(ValueError):
    """An edit the database would not take, with the field at fault."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


def check_channels(ids: list[int]) -> None:
    """Raise EditRefused naming the channel ids that do not exist."""
    known = set(NotificationChannel.objects.filter(pk__in=ids).values_list("pk", flat=True))
    missing = sorted(set(ids) - known)
    if missing:
        raise EditRefused("channels", f"no notification channel with id {missing}")


def check_name(name: str, pk: int | None = None) -> None:
    """Raise EditRefused if another monitor has this name."""
    if Monitor.objects.filter(name=name).exclude(pk=pk).exists():
        raise EditRefused("name", f"a monitor named {name!r} exists already")


def create_monitor(fields: dict[str, Any], channels: list[int], created_by: str) -> Monitor:
    """Create a monitor from a checked definition."""
    check_name(fields["name"])
    check_channels(channels)
    try:
        with transaction.atomic():
            monitor = Monitor.objects.create(**fields, created_by=created_by)
            monitor.channels.set(channels)
    except IntegrityError:  # the same name saved by someone else since the check
        raise EditRefused("name", f"a monitor named {fields['name']!r} exists already") from None
    return monitor


def save_edit(
    pk: int, version: int, fields: dict[str, Any], channels: list[int] | None = None
) -> Monitor:
    """Save a definition edited at `version`; raise StaleEdit if it changed since."""
    unknown = set(fields) - set(DEFINITION_FIELDS)
    if unknown:
        raise ValueError(f"not definition fields: {sorted(unknown)}")
    if "name" in fields:
        check_name(fields["name"], pk)
    if channels is not None:
        check_channels(channels)
    try:
        with transaction.atomic():
            saved = Monitor.objects.filter(pk=pk, version=version).update(
                **fields, version=version + 1, updated_at=timezone.now()
            )
            if saved != 1:
                raise StaleEdit(f"monitor #{pk} is no longer at version {version}")
            monitor = Monitor.objects.get(pk=pk)
            if channels is not None:
                monitor.channels.set(channels)
    except IntegrityError:
        raise EditRefused(
            "name", f"a monitor named {fields.get('name')!r} exists already"
        ) from None
    return monitor


def silence(pk: int, until: datetime, reason: str = "") -> int:
    """Silence a monitor until a moment; return the rows changed (0: no such monitor)."""
    return Monitor.objects.filter(pk=pk).update(silenced_until=until, silence_reason=reason)


def unsilence(pk: int) -> int:
    """End a monitor's silence now; return the rows changed.

    The end is kept as now, not cleared: a monitor still firing then reminds at its next
    evaluation (evaluation.reminder_due), as when a silence runs out.
    """
    now = timezone.now()
    monitors = Monitor.objects.filter(pk=pk)
    monitors.filter(silenced_until__gt=now).update(silenced_until=now)
    return monitors.update(silence_reason="")
