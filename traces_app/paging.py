"""Keyset pagination on (started_at, pk), newest first: one scheme for the REST API and pages.

Stable while rows arrive, and exact when many rows share a timestamp (batch ingest does
that), which an offset-based cursor is not. A cursor is the (started_at, pk) of the row
a page ends at (`after`, for the next page) or starts at (`before`, for the previous one).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Model, Q, QuerySet
from django.utils import timezone

# The moments a read filter may name, in UTC: a day inside datetime's years 1 to 9999, so
# that a filter end, a default window (until - 24h) or an hour bucket around it never
# overflows. Both databases hold every moment between them.
EARLIEST_FILTER = datetime(1, 1, 2, tzinfo=UTC)
LATEST_FILTER = datetime(9999, 12, 30, tzinfo=UTC)


class BadCursor(ValueError):
    """A cursor that this site did not hand out (or that was edited)."""


@dataclass(frozen=True)
class KeysetPage:
    rows: list[Any]
    next_cursor: str | None  # pass as `after` for the older rows
    prev_cursor: str | None  # pass as `before` for the newer rows


def encode_cursor(row: Model) -> str:
    """Return the cursor that points at a row."""
    token = f"{row.started_at.isoformat()}|{row.pk}".encode()
    return base64.urlsafe_b64encode(token).decode()


def decode_cursor(cursor: str, model: type[Model]) -> tuple[datetime, Any]:
    """Return the (started_at, pk) a cursor points at, or raise BadCursor."""
    try:
        started_at, pk = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        moment = filter_moment(datetime.fromisoformat(started_at))
        return moment, model._meta.pk.to_python(pk)
    except (ValueError, binascii.Error, UnicodeError, ValidationError):
        raise BadCursor("cursor is not one this site handed out") from None


def aware(moment: datetime) -> datetime:
    """Return the datetime, read as UTC when it came without a time zone."""
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, UTC)


def filter_moment(moment: datetime) -> datetime:
    """Return a filter's moment in UTC (UTC when it has no zone), or raise ValueError.

    PostgreSQL refuses a UTC offset beyond +/-15:59 (Python allows +/-23:59), and a
    moment near year 1 or 9999 can leave datetime's range once moved to UTC; both would
    fail the query with a 500, so they are normalized or refused here.
    """
    try:
        moment = aware(moment).astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{moment.isoformat()} is out of range once converted to UTC") from None
    if not EARLIEST_FILTER <= moment <= LATEST_FILTER:
        raise ValueError(
            f"{moment.isoformat()} is out of range: use a moment between "
            f"{EARLIEST_FILTER:%Y-%m-%d} and {LATEST_FILTER:%Y-%m-%d} UTC"
        )
    return moment


def keyset_page(
    queryset: QuerySet, limit: int, after: str | None = None, before: str | None = None
) -> KeysetPage:
    """Return one page, newest first: the first, the one after `after`, or the one before `before`.

    Raises BadCursor for a cursor this site did not hand out.
    """
    model = queryset.model
    if before:
        started_at, pk = decode_cursor(before, model)
        newer = Q(started_at__gt=started_at) | Q(started_at=started_at, pk__gt=pk)
        rows = list(queryset.filter(newer).order_by("started_at", "pk")[: limit + 1])
        has_newer = len(rows) > limit
        rows = rows[:limit][::-1]
        return KeysetPage(
            rows,
            next_cursor=encode_cursor(rows[-1]) if rows else before,
            prev_cursor=encode_cursor(rows[0]) if rows and has_newer else None,
        )
    queryset = queryset.order_by("-started_at", "-pk")
    if after:
        started_at, pk = decode_cursor(after, model)
        queryset = queryset.filter(
            Q(started_at__lt=started_at) | Q(started_at=started_at, pk__lt=pk)
        )
    rows = list(queryset[: limit + 1])
    has_older = len(rows) > limit
    rows = rows[:limit]
    return KeysetPage(
        rows,
        next_cursor=encode_cursor(rows[-1]) if has_older else None,
        prev_cursor=encode_cursor(rows[0]) if after and rows else None,
    )
