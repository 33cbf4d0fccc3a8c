"""Tool totals over days: a day row per whole UTC day, equal to the sum of its hours."""

from __future__ import annotations

import dataclasses
import importlib
import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import ToolDayRollup, ToolRollup
from traces_app.rollups import range_totals
from traces_app.rollups.checking import check_rollups
from traces_app.rollups.range_totals import ToolTotals, tool_totals, whole_days
from traces_app.rollups.ranges import TimeRange
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.schemas import InvocationIn

NOW = datetime.now(UTC)
TODAY = NOW.replace(hour=0, minute=0, second=0, microsecond=0)
TOOLS = ("calculator", "web_search", "sql_query")


def span_range(since: datetime, until: datetime) -> TimeRange:
    return TimeRange(since, until, "custom")


def record(*spans: dict[str, Any]) -> None:
    """Store spans, then recount the rollups they marked, as the beat does."""
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    recount_all_marked_rollups()


def spans_over_days(count: int, days: int, seed: int) -> list[dict[str, Any]]:
    chooser = random.Random(seed)
    spans = []
    for _ in range(count):
        started = NOW - timedelta(seconds=chooser.uniform(60, days * 86400))
        failed = chooser.random() < 0.3
        spans.append(
            make_span(
                tool_name=chooser.choice(TOOLS),
                started_at=started.isoformat(),
                latency_ms=round(chooser.lognormvariate(3, 1.5), 3),
                status="error" if failed else "ok",
                error_kind=chooser.choice(["timeout", "invalid_arguments"]) if failed else "",
                result_tokens=chooser.randint(0, 50),
                cost_usd=chooser.choice([0.0, 0.001, 0.25]),
            )
        )
    return spans


def totals_from_hours(time_range: TimeRange) -> dict[str, ToolTotals]:
    """The tools' totals summed from hourly rows only (what tool_totals read before days)."""
    totals: dict[str, ToolTotals] = {}
    for row in range_totals._tool_rollups(time_range, None):
        totals.setdefault(row.tool_name, ToolTotals(row.tool_name)).add(row)
    return totals


def assert_same_totals(read: list[ToolTotals], expected: dict[str, ToolTotals]) -> None:
    assert [total.tool_name for total in read] == sorted(expected)
    for total in read:
        for name, value in dataclasses.asdict(total).items():
            other = getattr(expected[total.tool_name], name)
            if isinstance(value, float):
                assert math.isclose(value, other, rel_tol=1e-9, abs_tol=1e-9), name
            else:
                assert value == other, name


def test_whole_days_are_those_whose_24_hours_all_overlap_the_range() -> None:
    day = datetime(2026, 11, 10, tzinfo=UTC)
    # 7 days from 07:20: the first day and the last are partial.
    since = day + timedelta(hours=7, minutes=20)
    assert whole_days(span_range(since, since + timedelta(days=7))) == (
        day + timedelta(days=1),
        day + timedelta(days=7),
    )
    # From midnight to midnight: every day whole.
    assert whole_days(span_range(day, day + timedelta(days=3))) == (day, day + timedelta(days=3))
    # Until 23:00:00.000001: hour 23 overlaps, so the day is whole; until 23:00 it is not.
    assert whole_days(span_range(day, day + timedelta(hours=23, microseconds=1))) == (
        day,
        day + timedelta(days=1),
    )
    assert whole_days(span_range(day, day + timedelta(hours=23))) == (day, day)
    # Within one day: none.
    assert whole_days(span_range(day + timedelta(hours=1), day + timedelta(hours=20))) == (
        day + timedelta(days=1),
        day + timedelta(days=1),
    )


@pytest.mark.django_db(transaction=True)
def test_day_rows_equal_their_hours_and_ranges_read_the_same_totals_as_from_hours() -> None:
    record(*spans_over_days(600, days=9, seed=5))
    assert ToolDayRollup.objects.exists()
    for day_row in ToolDayRollup.objects.all():
        hours = ToolRollup.objects.filter(
            tool_name=day_row.tool_name,
            bucket_start__gte=day_row.bucket_start,
            bucket_start__lt=day_row.bucket_start + timedelta(days=1),
        )
        summed = ToolTotals(day_row.tool_name)
        for hour in hours:
            summed.add(hour)
        assert (day_row.calls, day_row.failures, day_row.latency_histogram) == (
            summed.calls,
            summed.failures,
            summed.latency_histogram,
        )
        assert day_row.failures_by_kind == summed.failures_by_kind
    chooser = random.Random(11)
    ranges = [
        span_range(NOW - timedelta(days=7), NOW),  # the pages' 7 days
        span_range(NOW - timedelta(days=14), NOW - timedelta(days=7)),  # their previous period
        span_range(TODAY - timedelta(days=5), TODAY - timedelta(days=2)),  # whole days only
        span_range(TODAY - timedelta(hours=30), TODAY - timedelta(hours=1, minutes=59)),
    ]
    for _ in range(12):
        since = NOW - timedelta(minutes=chooser.randint(0, 10 * 1440))
        ranges.append(span_range(since, since + timedelta(minutes=chooser.randint(1, 8 * 1440))))
    for time_range in ranges:
        assert_same_totals(tool_totals(time_range), totals_from_hours(time_range))
        some = ["web_search", "nowhere"]
        expected = {
            name: total for name, total in totals_from_hours(time_range).items() if name in some
        }
        assert_same_totals(tool_totals(time_range, some), expected)


@pytest.mark.django_db(transaction=True)
def test_a_span_in_the_middle_of_a_whole_day_moves_the_7_day_totals_by_exactly_itself() -> None:
    record(*spans_over_days(200, days=8, seed=7))
    week = span_range(NOW - timedelta(days=7), NOW)
    middle = TODAY - timedelta(days=3) + timedelta(hours=12)
    assert whole_days(week)[0] <= middle < whole_days(week)[1]
    before = {total.tool_name: total for total in tool_totals(week)}
    record(
        make_span(
            tool_name="calculator",
            started_at=middle.isoformat(),
            status="error",
            error_kind="timeout",
            latency_ms=5000.0,
            cost_usd=0.5,
        )
    )
    after = {total.tool_name: total for total in tool_totals(week)}
    assert after["calculator"].calls == before["calculator"].calls + 1
    assert after["calculator"].failures == before["calculator"].failures + 1
    assert after["calculator"].failures_by_kind["timeout"] == (
        before["calculator"].failures_by_kind.get("timeout", 0) + 1
    )
    assert (
        sum(after["calculator"].latency_histogram)
        == sum(before["calculator"].latency_histogram) + 1
    )
    assert math.isclose(after["calculator"].cost_usd, before["calculator"].cost_usd + 0.5)
    assert after["web_search"] == before["web_search"]


@pytest.mark.django_db(transaction=True)
def test_check_rollups_finds_a_wrong_day_row_and_repairs_it_from_the_hours() -> None:
    record(*spans_over_days(150, days=4, seed=3))
    day = TODAY - timedelta(days=2)
    row = ToolDayRollup.objects.filter(bucket_start=day).order_by("tool_name").first()
    assert row is not None
    right = (row.calls, row.latency_histogram)
    ToolDayRollup.objects.filter(pk=row.pk).update(calls=row.calls + 5)
    check = check_rollups(NOW - timedelta(days=5), NOW)
    assert [line for line in check.differences if "(day row)" in line] == [
        f"tool {row.tool_name} on {day:%Y-%m-%d} (day row): calls {right[0] + 5} -> {right[0]}"
    ]
    assert check.tool_days >= 3
    row.refresh_from_db()
    assert (row.calls, row.latency_histogram) == right
    assert check_rollups(NOW - timedelta(days=5), NOW).differences == []


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_an_existing_sites_hours_their_day_rows(capsys: Any) -> None:
    record(*spans_over_days(300, days=6, seed=9))
    made = {
        (row.tool_name, row.bucket_start): (row.calls, row.latency_histogram, row.cost_usd)
        for row in ToolDayRollup.objects.all()
    }
    ToolDayRollup.objects.all().delete()
    migration = importlib.import_module("traces_app.migrations.0019_tool_day_rollups")
    migration.sum_existing_hours(apps, None)
    rebuilt = {
        (row.tool_name, row.bucket_start): (row.calls, row.latency_histogram, row.cost_usd)
        for row in ToolDayRollup.objects.all()
    }
    assert rebuilt.keys() == made.keys() and len(made) >= 6
    for key, (calls, histogram, cost) in made.items():
        assert rebuilt[key][:2] == (calls, histogram)
        assert math.isclose(rebuilt[key][2], cost, rel_tol=1e-9, abs_tol=1e-12)
    call_command("check_rollups")
    assert "0 differed" in capsys.readouterr().out
