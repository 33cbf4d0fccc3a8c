"""REST endpoints of notification channels: create, read, edit, delete, send a test, and
read a channel's deliveries with their tries. Scope `monitor` (or a staff session).

A webhook channel's signing secret is answered once, when it is created (and shown to
staff in the admin): it is derived from SECRET_KEY and the channel's salt, never stored.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Literal

from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from pydantic import ConfigDict

from planner_app.monitors.notify.channel_checks import MAX_EMAILS, channel_problems
from planner_app.monitors.notify.senders import send_test
from planner_app.monitors.notify.signing import signing_secret
from planner_app.monitors.records import Delivery, NotificationChannel
from traces_app.http.auth import key_or_staff
from traces_app.http.errors import WITH_BODY, patched_fields, refuse_fields, responses
from traces_app.schemas import NAME_PATTERN, DeletedOut

router = Router(tags=["notification channels"])
KindName = Literal[tuple(NotificationChannel.Kind.values)]  # type: ignore[valid-type]
AUTH = key_or_staff("monitor")


class ChannelFields(Schema):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str | None = Field(None, min_length=1, max_length=200, pattern=NAME_PATTERN)
    url: str | None = Field(
        None, max_length=1000, pattern=NAME_PATTERN, description="Webhook and Slack channels"
    )
    emails: list[str] | None = Field(None, max_length=MAX_EMAILS, description="Email channels")
    enabled: bool | None = None


class ChannelIn(ChannelFields):
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    kind: KindName = Field(description="webhook (signed JSON), slack or email")
    url: str = Field(
        "", max_length=1000, pattern=NAME_PATTERN, description="Webhook and Slack channels"
    )
    emails: list[str] = Field([], max_length=MAX_EMAILS, description="Email channels")
    enabled: bool = True


class ChannelOut(Schema):
    id: int
    name: str
    kind: str
    url: str
    emails: list[str]
    enabled: bool
    created_at: datetime
    monitors: list[int] = Field(description="The monitors that notify this channel")

    @staticmethod
    def resolve_monitors(channel: NotificationChannel) -> list[int]:
        return sorted(monitor.pk for monitor in channel.monitors.all())


class CreatedChannelOut(ChannelOut):
    signing_secret: str | None = Field(
        description="Webhooks: the HMAC key of X-Ares-Signature. Shown now; keep it"
    )

    @staticmethod
    def resolve_signing_secret(channel: NotificationChannel) -> str | None:
        webhook = channel.kind == NotificationChannel.Kind.WEBHOOK
        return signing_secret(channel) if webhook else None


class TestOut(Schema):
    ok: bool
    status_code: int | None = Field(description="The receiver's HTTP status (webhook, Slack)")
    error: str
    latency_ms: float


class TryOut(Schema):
    number: int
    at: datetime
    ok: bool
    status_code: int | None
    error: str
    latency_ms: float


class DeliveryOut(Schema):
    id: int
    event_id: int
    monitor_id: int
    event_kind: str
    status: str = Field(description="pending, delivered or failed (out of tries)")
    attempts: int
    next_attempt_at: datetime
    delivered_at: datetime | None
    last_error: str
    tries: list[TryOut]

    @staticmethod
    def resolve_monitor_id(delivery: Delivery) -> int:
        return delivery.event.monitor_id

    @staticmethod
    def resolve_event_kind(delivery: Delivery) -> str:
        return delivery.event.kind

    @staticmethod
    def resolve_tries(delivery: Delivery) -> list[Any]:
        return list(delivery.tries.all())


class DeliveryFilter(Schema):
    status: Literal["pending", "delivered", "failed"] | None = None
    before_id: int | None = Field(None, ge=1, description="Deliveries older than this id")
    limit: int = Field(100, ge=1, le=1000)


@router.get("/channels", auth=AUTH, response=responses(list[ChannelOut]), summary="List channels")
def list_channels(request: HttpRequest) -> list[NotificationChannel]:
    return list(NotificationChannel.objects.prefetch_related("monitors").order_by("name"))


@router.post(
    "/channels",
    auth=AUTH,
    response=responses(CreatedChannelOut, *WITH_BODY),
    summary="Create a channel (a webhook's signing secret is in the answer, once)",
)
def create_channel(request: HttpRequest, payload: ChannelIn) -> NotificationChannel:
    _refuse_problems(payload.kind, payload.url, payload.emails)
    channel = NotificationChannel(**payload.model_dump())
    _save(channel)
    return channel


@router.get("/channels/{channel_id}", auth=AUTH, response=responses(ChannelOut, 404))
def get_channel(request: HttpRequest, channel_id: int) -> NotificationChannel:
    return _found(channel_id)


@router.patch(
    "/channels/{channel_id}",
    auth=AUTH,
    response=responses(ChannelOut, *WITH_BODY, 404),
    summary="Edit a channel (its kind stays; the secret stays)",
)
def edit_channel(request: HttpRequest, channel_id: int, payload: ChannelFields) -> Any:
    channel = _found(channel_id)
    changes = patched_fields(payload)
    for name, value in changes.items():
        setattr(channel, name, value)
    _refuse_problems(channel.kind, channel.url, channel.emails)
    _save(channel)
    return channel


@router.delete("/channels/{channel_id}", auth=AUTH, response=responses(DeletedOut, 404))
def delete_channel(request: HttpRequest, channel_id: int) -> dict[str, Any]:
    channel = _found(channel_id)
    channel.delete()
    return {"deleted": channel_id, "name": channel.name}


@router.post(
    "/channels/{channel_id}/test",
    auth=AUTH,
    response=responses(TestOut, 404),
    summary="Send a test notification now and answer what the receiver said",
)
def test_channel(request: HttpRequest, channel_id: int) -> dict[str, Any]:
    channel = _found(channel_id)
    started = time.perf_counter()
    result = send_test(channel, timezone.now())
    latency_ms = round((time.perf_counter() - started) * 1000, 1)
    return {**_result_fields(result), "latency_ms": latency_ms}


@router.get(
    "/channels/{channel_id}/deliveries",
    auth=AUTH,
    response=responses(list[DeliveryOut], 404),
    summary="The channel's deliveries with every try, newest first",
)
def list_channel_deliveries(
    request: HttpRequest, channel_id: int, filters: Query[DeliveryFilter]
) -> list[Delivery]:
    _found(channel_id)
    deliveries = Delivery.objects.filter(channel_id=channel_id)
    if filters.status is not None:
        deliveries = deliveries.filter(status=filters.status)
    if filters.before_id is not None:
        deliveries = deliveries.filter(pk__lt=filters.before_id)
    deliveries = deliveries.select_related("event").prefetch_related("tries")
    return list(deliveries.order_by("-pk")[: filters.limit])


def _result_fields(result: Any) -> dict[str, Any]:
    return {"ok": result.ok, "status_code": result.status_code, "error": result.error}


def _found(channel_id: int) -> NotificationChannel:
    channel = NotificationChannel.objects.prefetch_related("monitors").filter(pk=channel_id).first()
    if channel is None:
        raise HttpError(404, f"no channel #{channel_id}")
    return channel


def _save(channel: NotificationChannel) -> None:
    try:
        with transaction.atomic():
            channel.save()
    except IntegrityError:
        refuse_fields({"name": f"a channel named {channel.name!r} exists already"})


def _refuse_problems(kind: str, url: str, emails: list[Any]) -> None:
    problems = channel_problems(kind, url, emails)
    if problems:
        refuse_fields(problems)
