"""Dashboard time ranges: presets, custom ranges, and bad input falling back to the default."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl

import pytest

from traces_app.rollups.ranges import DAY, HOUR, parse_range

NOW = datetime(2026, 11, 29, 15, 40, tzinfo=UTC)


def test_it_defaults_to_the_last_24_hours() -> None:
    time_range, error = parse_range({}, NOW)
    assert (time_range.since, time_range.until, time_range.preset, error) == (
        NOW - timedelta(hours=24),
        NOW,
        "24h",
        "",
    )
    assert time_range.bucket == HOUR and len(time_range.bucket_starts()) == 25


def test_it_reads_a_preset_and_uses_day_buckets_past_a_week() -> None:
    time_range, error = parse_range({"range": "30d"}, NOW)
    assert error == "" and time_range.since == NOW - timedelta(days=30)
    assert time_range.bucket == DAY
    assert time_range.bucket_of(NOW) == datetime(2026, 11, 29, tzinfo=UTC)
    assert time_range.query() == "range=30d"


def test_it_reads_a_custom_range_in_utc_and_swaps_reversed_ends() -> None:
    time_range, error = parse_range(
        {"since": "2026-11-28T10:00", "until": "2026-11-27T12:30+01:00"}, NOW
    )
    assert error == ""
    assert time_range.since == datetime(2026, 11, 27, 11, 30, tzinfo=UTC)
    assert time_range.until == datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    assert parse_range(dict(parse_qsl(time_range.query())), NOW)[1] == ""


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"range": "2w"}, "unknown range '2w'"),
        ({"since": "2026-11-28"}, "until: missing"),
        ({"since": "yesterday", "until": "2026-11-28"}, "'yesterday' is not an ISO 8601"),
        ({"since": "2020-01-01", "until": "2026-01-01"}, "at most 400 days"),
        ({"since": "2026-11-28", "until": "2026-11-28T00:00Z"}, "the same moment"),
    ],
)
def test_it_explains_a_bad_range_and_shows_the_default(params: dict, problem: str) -> None:
    time_range, error = parse_range(params, NOW)
    assert problem in error
    assert time_range.preset == "24h"


def test_a_preset_wins_over_the_prefilled_custom_fields() -> None:
    params = {"range": "7d", "since": "2026-11-01T00:00", "until": "2026-11-02T00:00"}

    time_range, error = parse_range(params, NOW)

    assert (time_range.preset, error) == ("7d", "")


@pytest.mark.parametrize(
    ("params", "since", "label"),
    [
        pytest.param({"range": "24h"}, NOW - timedelta(hours=48), "the previous day", id="24h"),
        pytest.param({"range": "7d"}, NOW - timedelta(days=14), "the previous 7 days", id="7d"),
        pytest.param(
            {"since": "2026-11-28T10:00", "until": "2026-11-28T11:30"},
            datetime(2026, 11, 28, 8, 30, tzinfo=UTC),
            "the previous 90 minutes",
            id="custom",
        ),
    ],
)
def test_the_previous_period_has_the_same_length_and_ends_where_the_range_starts(
    params: dict, since: datetime, label: str
) -> None:
    time_range, _ = parse_range(params, NOW)

    previous = time_range.previous()

    assert (previous.since, previous.until, previous.label) == (since, time_range.since, label)
    assert previous.until - previous.since == time_range.until - time_range.since
