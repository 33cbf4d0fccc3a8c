"""The datetime built-in: now, zone conversion, calendar and elapsed-time arithmetic, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.tools_app.tool_calls import call
from tools_app.builtins.datetime_tool import SPEC
from tools_app.specs import ErrorKind, ToolFailure
from tools_app.validation import ArgumentsError


@pytest.mark.parametrize("timezone", ["UTC", "Asia/Tokyo", "America/St_Johns"])
def test_it_tells_the_time_now_in_a_zone(timezone: str) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    result = call(SPEC, operation="now", timezone=timezone)
    after = datetime.now(UTC)
    now = datetime.fromisoformat(result["datetime"])
    assert before <= now <= after
    assert now.utcoffset() == now.astimezone(ZoneInfo(timezone)).utcoffset()
    assert result["timezone"] == timezone


def test_it_tells_the_time_in_utc_by_default() -> None:
    result = call(SPEC, operation="now")
    assert (result["timezone"], result["utc_offset"]) == ("UTC", "+00:00")


@pytest.mark.parametrize(
    ("arguments", "expected", "abbreviation"),
    [
        (
            {"datetime": "2024-03-10T14:30", "timezone": "Europe/Paris"},
            "2024-03-10T09:30:00-04:00",  # New York is already on summer time, Paris not yet.
            "EDT",
        ),
        ({"datetime": "2024-01-15T12:00:00Z"}, "2024-01-15T07:00:00-05:00", "EST"),
        ({"datetime": "2024-07-01T00:00:00+05:30"}, "2024-06-30T14:30:00-04:00", "EDT"),
        ({"datetime": "2024-07-01T00:00:00+05:30", "timezone": "Asia/Tokyo"}, None, "EDT"),
    ],
)
def test_it_converts_between_zones(
    arguments: dict[str, Any], expected: str | None, abbreviation: str
) -> None:
    result = call(SPEC, operation="convert", to_timezone="America/New_York", **arguments)
    assert result["datetime"] == (expected or "2024-06-30T14:30:00-04:00")
    assert result["abbreviation"] == abbreviation
    assert result["timezone"] == "America/New_York"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"datetime": "2024-01-15", "days": 30}, "2024-02-14T00:00:00"),
        ({"datetime": "2024-03-01", "days": -1}, "2024-02-29T00:00:00"),
        ({"datetime": "2024-01-31", "duration": "P1M"}, "2024-02-29T00:00:00"),
        ({"datetime": "2023-01-31", "duration": "P1M"}, "2023-02-28T00:00:00"),
        ({"datetime": "2024-02-29", "duration": "P1Y"}, "2025-02-28T00:00:00"),
        ({"datetime": "2024-01-01T10:00", "duration": "P2W"}, "2024-01-15T10:00:00"),
        ({"datetime": "2024-01-01T10:00", "duration": "-PT90M"}, "2024-01-01T08:30:00"),
        ({"datetime": "2024-01-01T10:00", "duration": "PT0,5H"}, "2024-01-01T10:30:00"),
        ({"datetime": "2024-01-01", "duration": "P1DT2H", "hours": 1}, "2024-01-02T03:00:00"),
        ({"datetime": "2024-01-01T00:00:00+02:00", "minutes": 1.5}, "2024-01-01T00:01:30+02:00"),
        (
            {"datetime": "2024-03-09T12:00", "timezone": "America/New_York", "days": 1},
            "2024-03-10T12:00:00-04:00",  # A calendar day across the DST change: 23 hours.
        ),
        (
            {"datetime": "2024-03-09T12:00", "timezone": "America/New_York", "hours": 24},
            "2024-03-10T13:00:00-04:00",  # 24 elapsed hours.
        ),
        (
            {"datetime": "2024-03-09T02:30", "timezone": "America/New_York", "days": 1},
            "2024-03-10T03:30:00-04:00",  # 02:30 does not exist that day.
        ),
        (
            {"datetime": "2024-03-09T17:00:00Z", "timezone": "Europe/Paris", "days": 1},
            "2024-03-10T18:00:00+01:00",
        ),
    ],
)
def test_it_adds_durations(arguments: dict[str, Any], expected: str) -> None:
    assert call(SPEC, operation="add", **arguments)["datetime"] == expected


def test_it_adds_to_now_without_a_datetime() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    result = call(SPEC, operation="add", hours=3)
    later = datetime.fromisoformat(result["datetime"])
    assert before + timedelta(hours=3) <= later <= datetime.now(UTC) + timedelta(hours=3)


def test_it_describes_the_result() -> None:
    result = call(SPEC, operation="add", datetime="2024-12-31T23:00:00Z", hours=2)
    assert result == {
        "operation": "add",
        "datetime": "2025-01-01T01:00:00+00:00",
        "date": "2025-01-01",
        "time": "01:00:00",
        "weekday": "Wednesday",
        "timezone": "UTC",
        "abbreviation": None,
        "utc_offset": "+00:00",
        "timestamp": 1735693200.0,
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"operation": "now", "timezone": "Mars/Olympus"},
            "unknown time zone 'Mars/Olympus' in `timezone`",
        ),
        (
            {"operation": "now", "timezone": "europe/paris"},
            "did you mean 'Europe/Paris'?",
        ),
        (
            {
                "operation": "convert",
                "datetime": "2024-01-01T00:00Z",
                "to_timezone": "America/NewYork",
            },
            "unknown time zone 'America/NewYork' in `to_timezone`: use an IANA name such as "
            "'Europe/Paris', 'America/New_York' or 'UTC'; did you mean 'America/New_York'",
        ),
        ({"operation": "now", "timezone": "../../etc/passwd"}, "unknown time zone"),
        ({"operation": "convert", "datetime": "2024-01-01"}, "convert needs `datetime` and"),
        (
            {"operation": "convert", "datetime": "2024-01-01T10:00", "to_timezone": "UTC"},
            "datetime '2024-01-01T10:00' has no UTC offset: give `timezone`",
        ),
        ({"operation": "add", "datetime": "next tuesday", "days": 1}, "is not ISO 8601"),
        ({"operation": "add", "datetime": "2024-01-01"}, "add needs a non-zero duration"),
        ({"operation": "add", "datetime": "2024-01-01", "duration": "P1H"}, "is not ISO 8601"),
        ({"operation": "add", "datetime": "2024-01-01", "duration": "PT"}, "is not ISO 8601"),
        ({"operation": "add", "datetime": "9999-12-31", "days": 1}, "outside the years 1 to 9999"),
        ({"operation": "add", "datetime": "2024-01-01", "hours": 1e300}, "outside the years"),
    ],
)
def test_it_refuses_bad_input_saying_why(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolFailure) as failure:
        call(SPEC, **arguments)
    assert failure.value.kind == ErrorKind.INVALID_ARGUMENTS
    assert message in str(failure.value)


@pytest.mark.parametrize(
    "arguments",
    [
        {"operation": "yesterday"},
        {"operation": "add", "days": 1.5},
        {"operation": "now", "tz": "UTC"},
    ],
)
def test_its_schema_rejects_malformed_arguments(arguments: dict[str, Any]) -> None:
    with pytest.raises(ArgumentsError):
        call(SPEC, **arguments)


def test_it_is_marked_non_deterministic() -> None:
    assert SPEC.name == "datetime"
    assert SPEC.deterministic is False
