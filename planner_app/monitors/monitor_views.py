"""The Monitors pages: every monitor's state, and one monitor with its alerts and deliveries.

Each alert links to the traces behind it: the traces page filtered to the alert's window
and target (failing calls for an error rate), and the traces the evaluation named.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib.admin.views.decorators import staff_member_required
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from planner_app.monitors.metrics import target_text, value_text
from planner_app.monitors.records import Delivery, Metric, Monitor, MonitorEvent, Scope

EVENTS_SHOWN = 100


def traces_url(monitor: Monitor, since: datetime, until: datetime) -> str:
    """Return the traces page filtered to a window and the monitor's target."""
    query: dict[str, str] = {"since": since.isoformat(), "until": until.isoformat()}
    if monitor.scope == Scope.TOOL:
        query.update(tool=monitor.target, match="exact")
    elif monitor.scope == Scope.AGENT:
        query.update(agent=monitor.target, match="exact")
    if monitor.metric == Metric.ERROR_RATE:
        query["status"] = "error"
    return f"{reverse('traces')}?{urlencode(query)}"


def event_traces_url(event: MonitorEvent) -> str:
    return traces_url(event.monitor, event.window_start, event.window_end)


@staff_member_required
@require_GET
def monitors(request: HttpRequest) -> HttpResponse:
    """List every monitor: state, last value, threshold, since when, silenced."""
    now = timezone.now()
    rows = [_row(monitor, now) for monitor in Monitor.objects.order_by("name")]
    firing = sum(1 for row in rows if row["monitor"].state == "firing")
    return render(request, "planner_app/monitors.html", {"rows": rows, "firing": firing})


@staff_member_required
@require_GET
def monitor_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Show one monitor, its events newest first with their traces and deliveries."""
    monitor = Monitor.objects.filter(pk=pk).prefetch_related("channels").first()
    if monitor is None:
        message = f"No monitor #{pk}: the list of monitors is at {reverse('monitors')}"
        return render(request, "planner_app/not_found.html", {"message": message}, status=404)
    deliveries = Delivery.objects.select_related("channel").prefetch_related("tries")
    events = list(
        monitor.events.order_by("-number").prefetch_related(
            Prefetch("deliveries", queryset=deliveries)
        )[:EVENTS_SHOWN]
    )
    now = timezone.now()
    context: dict[str, Any] = {
        **_row(monitor, now),
        "events": [_event_row(event, monitor) for event in events],
        "more_events": monitor.transitions > len(events),
        "channels": list(monitor.channels.all()),
    }
    return render(request, "planner_app/monitor_detail.html", context)


def _row(monitor: Monitor, now: datetime) -> dict[str, Any]:
    end = monitor.last_evaluated_at or now
    since = end - timedelta(minutes=monitor.window_minutes)
    silenced = monitor.silenced_until is not None and monitor.silenced_until > now
    return {
        "monitor": monitor,
        "target": target_text(monitor),
        "value": value_text(monitor.metric, monitor.last_value),
        "threshold": value_text(monitor.metric, monitor.threshold),
        "silenced": silenced,
        "traces_url": traces_url(monitor, since, end),
    }


def _event_row(event: MonitorEvent, monitor: Monitor) -> dict[str, Any]:
    event.monitor = monitor  # known already: no query per event
    return {
        "event": event,
        "value": value_text(monitor.metric, event.value),
        "traces_url": event_traces_url(event),
        "deliveries": list(event.deliveries.all()),
    }
