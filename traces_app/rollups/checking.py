"""Checking the rollups of whole hours against the raw spans, and repairing those that differ."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import models, transaction

from traces_app.models import Invocation, PurgeHorizon, SpanRollup, ToolDayRollup, ToolRollup
from traces_app.models.rollup_tables import (
    ROLLUP_SUMMED_FIELDS,
    SPAN_ROLLUP_KEY,
    SPAN_ROLLUP_TOTALS,
    add_tool_totals,
)
from traces_app.partitions.layout import day_of, day_start
from traces_app.rollups.marks import hour_start
from traces_app.rollups.recount import take_recount_turn


@dataclass
class RollupCheck:
    """What check_rollups found: buckets compared, and one line per bucket that differed.

    Buckets before `kept_before` (the purge horizon) were not compared but kept as they
    are: their raw spans are purged.
    """

    since: datetime
    until: datetime
    tool_buckets: int = 0
    span_groups: int = 0
    tool_days: int = 0  # (tool, day) rows compared with the sum of their hours
    differences: list[str] = dataclasses.field(default_factory=list)
    kept_before: datetime | None = None
    kept_tool_buckets: int = 0
    kept_span_groups: int = 0


_CHECKED_SPAN_FIELDS = [name for name in SPAN_ROLLUP_TOTALS if name != "updated_at"]


def check_rollups(since: datetime, until: datetime, *, repair: bool = True) -> RollupCheck:
    """Compare the rollups of whole UTC hours in [since, until) with the raw spans; repair them.

    Hours before the purge horizon are counted as kept, never compared: their raw spans
    are purged and the rollup is the only record. Works a day at a time, so memory stays
    flat over long ranges.
    """
    since = hour_start(since)
    horizon = PurgeHorizon.objects.horizon()
    check = RollupCheck(since, until)
    if horizon is not None and since < horizon:
        kept = {"bucket_start__gte": since, "bucket_start__lt": min(horizon, until)}
        check.kept_before = horizon
        check.kept_tool_buckets = ToolRollup.objects.filter(**kept).count()
        check.kept_span_groups = SpanRollup.objects.filter(**kept).count()
        check.since = since = min(horizon, until)
    day = since
    while day < until:
        window = models.Q(started_at__gte=day, started_at__lt=min(day + timedelta(days=1), until))
        hours = {"bucket_start__gte": day, "bucket_start__lt": min(day + timedelta(days=1), until)}
        _check_tool_rollups(window, hours, check, repair)
        _check_span_rollups(window, hours, check, repair)
        day += timedelta(days=1)
    _check_tool_days(since, until, check, repair)
    return check


def _check_tool_days(since: datetime, until: datetime, check: RollupCheck, repair: bool) -> None:
    """Compare each tool's day rows of whole days in [since, until) with their hours' sum.

    After the hours were checked (and repaired), so the days are judged against them.
    """
    first_day = day_start(day_of(since))
    if first_day < since:
        first_day += timedelta(days=1)
    days = {"bucket_start__gte": first_day, "bucket_start__lt": until}
    summed: dict[tuple[str, datetime], ToolDayRollup] = {}
    for row in ToolRollup.objects.filter(**days).order_by():
        key = (row.tool_name, day_start(day_of(row.bucket_start)))
        if key[1] + timedelta(days=1) <= until:
            add_tool_totals(summed.setdefault(key, ToolDayRollup(tool_name=key[0])), row)
    stored = {
        (row.tool_name, row.bucket_start): row
        for row in ToolDayRollup.objects.filter(**days)
        if row.bucket_start + timedelta(days=1) <= until
    }
    wrong = _tool_differences(stored, summed, "on %Y-%m-%d (day row)", check)
    check.tool_days += len(summed.keys() | stored.keys())
    if repair and wrong:
        with transaction.atomic():
            take_recount_turn()
            ToolDayRollup.objects.refresh_days(set(wrong))


def _check_tool_rollups(
    window: models.Q, hours: dict[str, datetime], check: RollupCheck, repair: bool
) -> None:
    counted: dict[tuple[str, datetime], ToolRollup] = {}
    for row in Invocation.objects.filter(window).tool_groups():
        key = (row["tool_name"], row["hour"])
        counted.setdefault(key, ToolRollup(tool_name=key[0], bucket_start=key[1])).add_group(row)
    stored = {(row.tool_name, row.bucket_start): row for row in ToolRollup.objects.filter(**hours)}
    wrong = _tool_differences(stored, counted, "@ %Y-%m-%d %H:00", check)
    check.tool_buckets += len(counted.keys() | stored.keys())
    if repair and wrong:
        with transaction.atomic():
            take_recount_turn()  # after a purge that began meanwhile has moved the horizon
            ToolRollup.objects.refresh_buckets(set(wrong))


def _tool_differences(
    stored: dict[tuple[str, datetime], Any],
    expected: dict[tuple[str, datetime], Any],
    when: str,
    check: RollupCheck,
) -> list[tuple[str, datetime]]:
    """Note each (tool, bucket) whose stored totals differ from the expected; return them.

    `when` is the strftime format that names the bucket in the note (an hour or a day).
    """
    wrong = []
    for key in sorted(expected.keys() | stored.keys()):
        diff = _differences(stored.get(key), expected.get(key, ToolRollup()), ROLLUP_SUMMED_FIELDS)
        if diff:
            wrong.append(key)
            check.differences.append(f"tool {key[0]} {key[1].strftime(when)}: {diff}")
    return wrong


def _check_span_rollups(
    window: models.Q, hours: dict[str, datetime], check: RollupCheck, repair: bool
) -> None:
    def key_of(row: Any) -> tuple:
        return tuple(getattr(row, name) for name in SPAN_ROLLUP_KEY)

    groups = Invocation.objects.filter(window).span_groups()
    counted = {key_of(row): row for row in (SpanRollup(**group) for group in groups)}
    stored = {key_of(row): row for row in SpanRollup.objects.filter(**hours)}
    wrong_hours = set()
    for key in sorted(counted.keys() | stored.keys(), key=repr):
        diff = _differences(stored.get(key), counted.get(key, SpanRollup()), _CHECKED_SPAN_FIELDS)
        if diff:
            wrong_hours.add(key[0])
            what = " ".join(str(part) for part in key[1:] if part)
            check.differences.append(f"spans {what} @ {key[0]:%Y-%m-%d %H:00}: {diff}")
    check.span_groups += len(counted.keys() | stored.keys())
    if repair and wrong_hours:
        with transaction.atomic():
            take_recount_turn()
            SpanRollup.objects.refresh_hours(wrong_hours)


def _differences(stored: models.Model | None, counted: models.Model, fields: list[str]) -> str:
    """Return "field stored -> counted" for each field that differs ("" if none)."""
    if stored is None:
        return (
            "" if not getattr(counted, "calls", 0) else f"missing (counted {counted.calls} calls)"
        )
    changes = []
    for name in fields:
        old, new = getattr(stored, name), getattr(counted, name)
        same = (
            math.isclose(old, new, rel_tol=1e-9, abs_tol=1e-9)
            if isinstance(old, float)
            else old == new
        )
        if not same:
            changes.append(f"{name} {old} -> {new}")
    return ", ".join(changes)
