"""Keyset pagination on (started_at, pk), newest first: one scheme for the REST API and pages.

Stable while rows arrive, and exact when many rows share a timestamp (batch ingest does
that), which an offset-based cursor is not. A cursor is the (started_at, pk) of the row
a page ends at (`after`, for the next page) or starts at (`before`, for the previous one).
A list sorted by another key (a trace's cost, tokens, duration) pages the same way on
(that key, pk): a SortKey names the key, its direction and how its cursor value reads.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Model, Q, QuerySet

from traces_app.rollups.ranges import filter_moment


class BadCursor(ValueError):
    """A cursor that this site did not hand out (or that was edited)."""


@dataclass(frozen=True)
class KeysetPage:
    rows: list[Any]
    next_cursor: str | None  # pass as `after` for the older rows
    prev_cursor: str | None  # pass as `before` for the newer rows


@dataclass(frozen=True)
class SortKey:
    """A key a list pages on: a field (or an annotation the caller adds), and its direction."""

    field: str = "started_at"
    descending: bool = True
    kind: str = "moment"  # how a cursor value reads: moment, number or duration

    def value_of(self, row: Model) -> Any:
        return getattr(row, self.field)

    def encode(self, value: Any) -> str:
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, timedelta):
            return str(value // timedelta(microseconds=1))
        return repr(value)

    def decode(self, text: str) -> Any:
        readers: dict[str, Callable[[str], Any]] = {
            "moment": lambda raw: filter_moment(datetime.fromisoformat(raw)),
            "number": _number,
            "duration": lambda raw: timedelta(microseconds=int(raw)),
        }
        return readers[self.kind](text)


NEWEST_FIRST = SortKey()


def _number(raw: str) -> float | int:
    value = float(raw)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("not a finite number")
    return int(raw) if raw.lstrip("-").isdigit() else value


def encode_cursor(row: Model, key: SortKey = NEWEST_FIRST) -> str:
    """Return the cursor that points at a row."""
    token = f"{key.encode(key.value_of(row))}|{row.pk}".encode()
    return base64.urlsafe_b64encode(token).decode()


def decode_cursor(cursor: str, model: type[Model], key: SortKey = NEWEST_FIRST) -> tuple[Any, Any]:
    """Return the (key value, pk) a cursor points at, or raise BadCursor."""
    try:
        value, pk = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        return key.decode(value), model._meta.pk.to_python(pk)
    except (ValueError, OverflowError, binascii.Error, UnicodeError, ValidationError):
        raise BadCursor("cursor is not one this site handed out") from None


def keyset_page(
    queryset: QuerySet,
    limit: int,
    after: str | None = None,
    before: str | None = None,
    key: SortKey = NEWEST_FIRST,
) -> KeysetPage:
    """Return one page in the key's order: the first, the one after `after`, or before `before`.

    Raises BadCursor for a cursor this site did not hand out.
    """
    model = queryset.model
    field = key.field

    def beyond(cursor: str, forward: bool) -> Q:
        """Return the rows past a cursor: further down the list, or further up."""
        value, pk = decode_cursor(cursor, model, key)
        lookup = "lt" if key.descending == forward else "gt"
        return Q(**{f"{field}__{lookup}": value}) | Q(**{field: value, f"pk__{lookup}": pk})

    down = (f"-{field}", "-pk") if key.descending else (field, "pk")
    up = (field, "pk") if key.descending else (f"-{field}", "-pk")
    if before:
        rows = list(queryset.filter(beyond(before, False)).order_by(*up)[: limit + 1])
        has_newer = len(rows) > limit
        rows = rows[:limit][::-1]
        return KeysetPage(
            rows,
            next_cursor=encode_cursor(rows[-1], key) if rows else before,
            prev_cursor=encode_cursor(rows[0], key) if rows and has_newer else None,
        )
    queryset = queryset.order_by(*down)
    if after:
        queryset = queryset.filter(beyond(after, True))
    rows = list(queryset[: limit + 1])
    has_older = len(rows) > limit
    rows = rows[:limit]
    return KeysetPage(
        rows,
        next_cursor=encode_cursor(rows[-1], key) if has_older else None,
        prev_cursor=encode_cursor(rows[0], key) if after and rows else None,
    )
