"""The delivery queue: one Delivery per event and channel, claimed, tried, retried.

Exactly once: a process sends a delivery only after claiming it with a conditional UPDATE
(pending, due, and not claimed by anyone else, or the claim has lapsed), which one process
wins. The claim lasts CLAIM_SECONDS, far longer than a send may take (the webhook and email
timeouts), so a live claimant never sees its delivery taken. Only a process that dies
between sending and recording leaves a delivery to be sent again once its claim lapses;
the X-Ares-Delivery header lets a receiver drop that duplicate.

Failed tries are retried with backoff (10 s, 30 s, 2 min, 10 min, 30 min, then 30 min)
until ARES_NOTIFY_MAX_ATTEMPTS; every try is a DeliveryAttempt.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from planner_app.monitors.notify.senders import SendResult, send
from planner_app.monitors.records import Delivery, DeliveryAttempt, MonitorEvent

log = logging.getLogger(__name__)

BACKOFF_SECONDS = (10, 30, 120, 600, 1800)
CLAIM_SECONDS = 300
DUE_BATCH = 200


def enqueue(event: MonitorEvent) -> list[Delivery]:
    """Create one pending delivery per enabled channel of the event's monitor.

    Call it in the transaction that records the event: the rows commit with it, and after
    the commit each is tried at once (a failure there is logged; deliver_due retries).
    A silenced event gets none.
    """
    if event.silenced:
        return []
    channels = list(event.monitor.channels.filter(enabled=True))
    if not channels:
        return []
    Delivery.objects.bulk_create(
        [Delivery(event=event, channel=channel, next_attempt_at=event.at) for channel in channels],
        ignore_conflicts=True,
    )
    deliveries = list(Delivery.objects.filter(event=event, channel__in=channels))
    ids = [delivery.pk for delivery in deliveries]
    transaction.on_commit(lambda: _deliver_now(ids, event.at), robust=True)
    return deliveries


def deliver_due(now: datetime | None = None) -> int:
    """Try every pending delivery that is due and unclaimed; return how many were tried."""
    now = now or timezone.now()
    due = (
        Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=now)
        .filter(_unclaimed(now))
        .order_by("next_attempt_at", "pk")
        .values_list("pk", flat=True)
    )
    return sum(deliver(pk, now) for pk in list(due[:DUE_BATCH]))


def deliver(delivery_id: int, now: datetime | None = None) -> bool:
    """Claim the delivery and try it once; return False if it was not ours to try."""
    now = now or timezone.now()
    claimant = _claimant()
    if not _claim(delivery_id, now, claimant):
        return False
    delivery = Delivery.objects.select_related("event__monitor", "channel").get(pk=delivery_id)
    started = time.perf_counter()
    result = _try(delivery, now)
    _record(delivery_id, result, now, claimant, (time.perf_counter() - started) * 1000)
    return True


def backoff(tries: int) -> timedelta:
    """Return the wait after the given number of failed tries."""
    return timedelta(seconds=BACKOFF_SECONDS[min(tries, len(BACKOFF_SECONDS)) - 1])


def _deliver_now(ids: list[int], event_at: datetime) -> None:
    now = max(timezone.now(), event_at)
    for pk in ids:
        deliver(pk, now)


def _unclaimed(now: datetime) -> Q:
    return Q(claimed_until__isnull=True) | Q(claimed_until__lte=now)


def _claimant() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _claim(delivery_id: int, now: datetime, claimant: str) -> bool:
    """Take the delivery for CLAIM_SECONDS if it is pending, due and unclaimed: one wins."""
    claimed = (
        Delivery.objects.filter(
            pk=delivery_id, status=Delivery.Status.PENDING, next_attempt_at__lte=now
        )
        .filter(_unclaimed(now))
        .update(claimed_until=now + timedelta(seconds=CLAIM_SECONDS), claimed_by=claimant)
    )
    return claimed == 1


def _try(delivery: Delivery, now: datetime) -> SendResult:
    """Send once; an unexpected error becomes the try's error (logged with its traceback)."""
    if not delivery.channel.enabled:
        return SendResult(False, error="the channel is disabled", permanent=True)
    try:
        return send(delivery, now)
    except Exception as error:  # Recorded on the try, so the delivery is not stuck claimed.
        log.exception("delivery %s: sending failed", delivery.pk)
        return SendResult(False, error=f"{type(error).__name__}: {error}")


@transaction.atomic
def _record(
    delivery_id: int, result: SendResult, now: datetime, claimant: str, latency_ms: float
) -> None:
    """Record the try and move the delivery on: delivered, retried later, or failed."""
    delivery = Delivery.objects.select_for_update().get(pk=delivery_id)
    if delivery.claimed_by != claimant:
        log.warning("delivery %s: the claim lapsed before the try was recorded", delivery_id)
    number = delivery.attempts + 1
    DeliveryAttempt.objects.create(
        delivery=delivery,
        number=number,
        at=now,
        ok=result.ok,
        status_code=result.status_code,
        error=result.error[:2000],
        latency_ms=round(latency_ms, 1),
    )
    delivery.attempts = number
    delivery.claimed_until, delivery.claimed_by = None, ""
    delivery.last_error = result.error[:2000]
    if result.ok:
        delivery.status, delivery.delivered_at = Delivery.Status.DELIVERED, now
    elif result.permanent or number >= settings.ARES_NOTIFY_MAX_ATTEMPTS:
        delivery.status = Delivery.Status.FAILED
    else:
        delivery.next_attempt_at = now + backoff(number)
    delivery.save()
