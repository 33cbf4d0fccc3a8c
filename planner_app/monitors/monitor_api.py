"""REST endpoints of monitors: define, edit, silence and delete them, read their alerts.

Every operation needs the `monitor` scope (or a staff session, with CSRF for the writes).
An edit (PATCH) names the `version` it was read at: a monitor changed since answers 409,
so two operators never overwrite each other. Every bad body answers 422 naming the field.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Literal

from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from pydantic import ConfigDict, StrictInt, field_validator

from planner_app.monitors import monitor_edits
from planner_app.monitors.metrics import monitor_problems
from planner_app.monitors.monitor_views import event_traces_url, traces_url
from planner_app.monitors.records import (
    Comparison,
    Metric,
    Monitor,
    MonitorEvent,
    MonitorState,
    Scope,
)
from traces_app.http.auth import key_or_staff, sender_of
from traces_app.http.errors import (
    WITH_BODY,
    ErrorOut,
    patched_fields,
    refuse_fields,
    responses,
)
from traces_app.schemas import NAME_PATTERN, TEXT_PATTERN, DeletedOut, FilterMoment

router = Router(tags=["monitors"])
MetricName = Literal[tuple(Metric.values)]  # type: ignore[valid-type]
ScopeName = Literal[tuple(Scope.values)]  # type: ignore[valid-type]
ComparisonName = Literal[tuple(Comparison.values)]  # type: ignore[valid-type]
WEEK_MINUTES = 7 * 24 * 60


class MonitorFields(Schema):
    """The definition fields, all optional (a PATCH); MonitorIn requires the essential ones."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str | None = Field(None, min_length=1, max_length=200, pattern=NAME_PATTERN)
    description: str | None = Field(None, max_length=5000, pattern=TEXT_PATTERN)
    metric: MetricName | None = None
    scope: ScopeName | None = None
    target: str | None = Field(
        None, max_length=200, pattern=NAME_PATTERN, description="Blank for the site scope"
    )
    comparison: ComparisonName | None = None
    threshold: float | None = None
    window_minutes: StrictInt | None = Field(None, ge=1, le=WEEK_MINUTES)
    min_calls: StrictInt | None = Field(None, ge=0, le=1_000_000)
    renotify_minutes: StrictInt | None = Field(None, ge=0, le=WEEK_MINUTES)
    enabled: bool | None = None
    channels: list[StrictInt] | None = Field(None, max_length=50, description="Channel ids")

    @field_validator("threshold")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("threshold must be a finite number")
        return value


class MonitorIn(MonitorFields):
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    metric: MetricName
    threshold: float
    scope: ScopeName = Scope.SITE
    target: str = Field(
        "", max_length=200, pattern=NAME_PATTERN, description="Blank for the site scope"
    )


class MonitorPatch(MonitorFields):
    version: StrictInt = Field(ge=1, description="The version you read: a newer one answers 409")


class SilenceIn(Schema):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    until: FilterMoment = Field(description="ISO 8601; UTC when it names no zone")
    reason: str = Field("", max_length=300, pattern=NAME_PATTERN)


class MonitorOut(Schema):
    id: int
    name: str
    description: str
    metric: str
    scope: str
    target: str
    comparison: str
    threshold: float
    window_minutes: int
    min_calls: int
    renotify_minutes: int
    enabled: bool
    channels: list[int]
    state: str = Field(description="ok, firing or resolved")
    state_since: datetime
    transitions: int = Field(description="Events recorded so far")
    last_value: float | None
    last_evaluated_at: datetime | None
    last_notified_at: datetime | None
    silenced: bool
    silenced_until: datetime | None
    silence_reason: str
    version: int = Field(description="Send it back with a PATCH")
    created_by: str
    created_at: datetime
    updated_at: datetime
    url: str = Field(description="Its page on the console")
    traces_url: str = Field(description="The traces page filtered to its window and target")

    @staticmethod
    def resolve_channels(monitor: Monitor) -> list[int]:
        return sorted(channel.pk for channel in monitor.channels.all())

    @staticmethod
    def resolve_silenced(monitor: Monitor) -> bool:
        return monitor.silenced_until is not None and monitor.silenced_until > timezone.now()

    @staticmethod
    def resolve_url(monitor: Monitor) -> str:
        return f"/monitors/{monitor.pk}/"

    @staticmethod
    def resolve_traces_url(monitor: Monitor) -> str:
        end = monitor.last_evaluated_at or timezone.now()
        return traces_url(monitor, end - timedelta(minutes=monitor.window_minutes), end)


class AlertDeliveryOut(Schema):
    id: int
    channel: str
    status: str
    attempts: int
    last_error: str

    @staticmethod
    def resolve_channel(delivery: Any) -> str:
        return delivery.channel.name


class EventOut(Schema):
    id: int
    monitor_id: int
    monitor: str
    number: int
    kind: str = Field(description="fired, reminder or resolved")
    at: datetime
    value: float | None
    threshold: float
    window_start: datetime
    window_end: datetime
    message: str
    trace_ids: list[str]
    silenced: bool = Field(description="Recorded during a silence: nothing was sent")
    traces_url: str
    deliveries: list[AlertDeliveryOut]

    @staticmethod
    def resolve_monitor(event: MonitorEvent) -> str:
        return event.monitor.name

    @staticmethod
    def resolve_traces_url(event: MonitorEvent) -> str:
        return event_traces_url(event)

    @staticmethod
    def resolve_deliveries(event: MonitorEvent) -> list[Any]:
        return list(event.deliveries.all())


class EventFilter(Schema):
    kind: Literal["fired", "reminder", "resolved"] | None = None
    before_id: int | None = Field(None, ge=1, description="Events older than this id (paging)")
    limit: int = Field(100, ge=1, le=1000)


class AlertFilter(EventFilter):
    monitor: int | None = Field(None, ge=1, description="Only this monitor's events")
    state: Literal["ok", "firing", "resolved"] | None = Field(
        None, description="Only events of monitors in this state now"
    )


READ = key_or_staff("monitor")


@router.get("/monitors", auth=READ, response=responses(list[MonitorOut]), summary="List monitors")
def list_monitors(request: HttpRequest) -> list[Monitor]:
    return list(Monitor.objects.prefetch_related("channels").order_by("name"))


@router.post(
    "/monitors",
    auth=READ,
    response=responses(MonitorOut, *WITH_BODY),
    summary="Define a monitor: a metric of a target, a window and a threshold",
)
def create_monitor(request: HttpRequest, payload: MonitorIn) -> Monitor:
    fields = payload.model_dump(exclude={"channels"}, exclude_none=True)
    _refuse_problems(fields)
    try:
        return monitor_edits.create_monitor(fields, payload.channels or [], sender_of(request))
    except monitor_edits.EditRefused as exc:
        refuse_fields({exc.field: exc.reason})


@router.get("/monitors/{monitor_id}", auth=READ, response=responses(MonitorOut, 404))
def get_monitor(request: HttpRequest, monitor_id: int) -> Monitor:
    return _found(monitor_id)


@router.patch(
    "/monitors/{monitor_id}",
    auth=READ,
    response=responses(MonitorOut, *WITH_BODY, 404, others={409: ErrorOut}),
    summary="Edit a monitor at the version you read (409 if it changed since)",
)
def edit_monitor(request: HttpRequest, monitor_id: int, payload: MonitorPatch) -> Monitor:
    monitor = _found(monitor_id)
    changes = patched_fields(payload, exclude=frozenset({"channels", "version"}))
    merged = {name: getattr(monitor, name) for name in ("metric", "scope", "target", "threshold")}
    _refuse_problems({**merged, **changes})
    try:
        return monitor_edits.save_edit(monitor_id, payload.version, changes, payload.channels)
    except monitor_edits.StaleEdit:
        current = Monitor.objects.filter(pk=monitor_id).values_list("version", flat=True).first()
        raise HttpError(
            409,
            f"monitor #{monitor_id} is at version {current}, not {payload.version}: "
            "read it again and send your change with its version",
        ) from None
    except monitor_edits.EditRefused as exc:
        refuse_fields({exc.field: exc.reason})


@router.delete("/monitors/{monitor_id}", auth=READ, response=responses(DeletedOut, 404))
def delete_monitor(request: HttpRequest, monitor_id: int) -> dict[str, Any]:
    monitor = _found(monitor_id)
    monitor.delete()
    return {"deleted": monitor_id, "name": monitor.name}


@router.post(
    "/monitors/{monitor_id}/silence",
    auth=READ,
    response=responses(MonitorOut, *WITH_BODY, 404),
    summary="Silence a monitor until a moment: events are recorded, nothing is sent",
)
def silence_monitor(request: HttpRequest, monitor_id: int, payload: SilenceIn) -> Monitor:
    _found(monitor_id)
    if payload.until <= timezone.now():
        refuse_fields({"until": "must be in the future"})
    monitor_edits.silence(monitor_id, payload.until, payload.reason)
    return _found(monitor_id)


@router.delete(
    "/monitors/{monitor_id}/silence", auth=READ, response=responses(MonitorOut, 404),
    summary="End a monitor's silence now",
)  # fmt: skip
def unsilence_monitor(request: HttpRequest, monitor_id: int) -> Monitor:
    _found(monitor_id)
    monitor_edits.unsilence(monitor_id)
    return _found(monitor_id)


@router.get(
    "/monitors/{monitor_id}/events",
    auth=READ,
    response=responses(list[EventOut], 404),
    summary="A monitor's events (its alerts), newest first",
)
def list_monitor_events(
    request: HttpRequest, monitor_id: int, filters: Query[EventFilter]
) -> list[MonitorEvent]:
    _found(monitor_id)
    return _events(MonitorEvent.objects.filter(monitor_id=monitor_id), filters)


@router.get(
    "/alerts",
    auth=READ,
    response=responses(list[EventOut]),
    summary="Every monitor's events, newest first (filter by monitor, kind, state)",
)
def list_alerts(request: HttpRequest, filters: Query[AlertFilter]) -> list[MonitorEvent]:
    events = MonitorEvent.objects.all()
    if filters.monitor is not None:
        events = events.filter(monitor_id=filters.monitor)
    if filters.state is not None:
        events = events.filter(monitor__state=MonitorState(filters.state))
    return _events(events, filters)


def _events(events: Any, filters: EventFilter) -> list[MonitorEvent]:
    if filters.kind is not None:
        events = events.filter(kind=filters.kind)
    if filters.before_id is not None:
        events = events.filter(pk__lt=filters.before_id)
    events = events.select_related("monitor").prefetch_related("deliveries__channel")
    return list(events.order_by("-pk")[: filters.limit])


def _found(monitor_id: int) -> Monitor:
    monitor = Monitor.objects.prefetch_related("channels").filter(pk=monitor_id).first()
    if monitor is None:
        raise HttpError(404, f"no monitor #{monitor_id}")
    return monitor


def _refuse_problems(fields: dict[str, Any]) -> None:
    problems = monitor_problems(fields)
    if problems:
        refuse_fields(problems)
