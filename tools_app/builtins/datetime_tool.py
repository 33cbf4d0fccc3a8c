"""The datetime built-in tool: the time now, time-zone conversion, adding durations. No Django.

Time zones are IANA names from the standard library's zoneinfo (the system database, or
the `tzdata` package where the system has none). Arithmetic follows the calendar for
years, months, weeks and days (one day after 12:00 the day before a DST change is 12:00
again) and elapsed time for hours, minutes and seconds (24 hours may then show 13:00).
A month added to 31 January gives the last day of February. A wall-clock time that falls
in a DST gap moves forward by the gap; an ambiguous one (the repeated hour) is the
earlier of the two.
"""

from __future__ import annotations

import calendar
import difflib
import re
from datetime import UTC, datetime, timedelta, tzinfo
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from tools_app.specs import ErrorKind, ToolFailure, ToolSpec

OPERATIONS = ("now", "convert", "add")

_DURATION = re.compile(
    r"^(?P<sign>[-+])?P(?!$)(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?"
    r"(?:(?P<days>\d+)D)?(?:T(?=\d)(?:(?P<hours>\d+(?:[.,]\d+)?)H)?"
    r"(?:(?P<minutes>\d+(?:[.,]\d+)?)M)?(?:(?P<seconds>\d+(?:[.,]\d+)?)S)?)?$"
)

DESCRIPTION = (
    "Get the current date and time, convert a date-time between IANA time zones, or add a "
    "duration to a date-time. now: optional `timezone` (default UTC). convert: `datetime` "
    "(ISO 8601) and `to_timezone`. add: optional `datetime` (default now) and any of "
    "`days`, `hours`, `minutes`, `seconds` (negative to subtract) and an ISO 8601 "
    "`duration` such as 'P1M2DT3H'; days, weeks, months and years follow the calendar, "
    "hours and smaller are elapsed time. A `datetime` without a UTC offset is read in "
    "`timezone`. Results include the weekday and UTC offset."
)

_ZONE_EXAMPLES = "an IANA name such as 'Europe/Paris', 'America/New_York' or 'UTC'"

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {"type": "string", "enum": list(OPERATIONS), "description": "What to do."},
        "datetime": {
            "type": "string",
            "maxLength": 64,
            "description": "ISO 8601 date or date-time, e.g. '2024-03-10', '2024-03-10T14:30', "
            "'2024-03-10T14:30:00+01:00' or '2024-03-10T13:30:00Z'.",
        },
        "timezone": {
            "type": "string",
            "maxLength": 64,
            "description": "now: the zone to report in (default UTC). convert and add: the zone "
            "of a `datetime` that has no UTC offset; for add, a `datetime` with an offset is "
            f"moved into this zone first. Use {_ZONE_EXAMPLES}.",
        },
        "to_timezone": {
            "type": "string",
            "maxLength": 64,
            "description": f"convert: the zone to convert into, {_ZONE_EXAMPLES}.",
        },
        "days": {"type": "integer", "description": "add: calendar days (may be negative)."},
        "hours": {"type": "number", "description": "add: hours of elapsed time."},
        "minutes": {"type": "number", "description": "add: minutes of elapsed time."},
        "seconds": {"type": "number", "description": "add: seconds of elapsed time."},
        "duration": {
            "type": "string",
            "maxLength": 64,
            "description": "add: an ISO 8601 duration, e.g. 'P2W', 'P1Y2M10DT2H30M', '-PT90M'; "
            "added on top of days/hours/minutes/seconds.",
        },
    },
    "required": ["operation"],
    "additionalProperties": False,
}

RETURNS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {"type": "string"},
        "datetime": {"type": "string", "description": "ISO 8601, with the UTC offset if known."},
        "date": {"type": "string"},
        "time": {"type": "string"},
        "weekday": {"type": "string"},
        "timezone": {"type": ["string", "null"], "description": "IANA name or fixed offset."},
        "abbreviation": {"type": ["string", "null"], "description": "e.g. CET, CEST, EDT."},
        "utc_offset": {"type": ["string", "null"], "description": "e.g. +01:00."},
        "timestamp": {"type": ["number", "null"], "description": "Unix time in seconds."},
    },
    "required": ["operation", "datetime", "date", "time", "weekday", "timezone", "utc_offset"],
}


def run_datetime(
    operation: str,
    datetime: str | None = None,  # Shadows the class in here: it is the name the model sees.
    timezone: str | None = None,
    to_timezone: str | None = None,
    days: int = 0,
    hours: float = 0,
    minutes: float = 0,
    seconds: float = 0,
    duration: str | None = None,
) -> dict[str, Any]:
    """Return the time now, a converted date-time, or a date-time plus a duration."""
    zone = find_zone(timezone, "timezone") if timezone else None
    if operation == "convert":
        if datetime is None or to_timezone is None:
            raise ToolFailure(
                "convert needs `datetime` and `to_timezone`", ErrorKind.INVALID_ARGUMENTS
            )
        target = find_zone(to_timezone, "to_timezone")
        moment = _aware(parse_datetime(datetime), zone, datetime).astimezone(target)
    elif datetime is None:
        moment = _now(zone or find_zone("UTC", "timezone"))
    else:
        moment = _in_zone(parse_datetime(datetime), zone)
    if operation == "add":
        moment = add_duration(moment, days, hours, minutes, seconds, duration)
    return {"operation": operation, **describe(moment)}


@cache
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


def find_zone(name: str, field: str) -> ZoneInfo:
    """Return the IANA time zone of this name, or fail naming it with close matches."""
    zones = _known_zones()
    if not zones:
        raise ToolFailure(
            "no time zone database on this server: install the tzdata package",
            ErrorKind.UNAVAILABLE,
        )
    if name in zones:
        return ZoneInfo(name)
    by_case = {zone.lower(): zone for zone in zones}
    if name.lower() in by_case:
        matches = [by_case[name.lower()]]
    else:
        matches = difflib.get_close_matches(name, zones, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(map(repr, matches))}?" if matches else ""
    raise ToolFailure(
        f"unknown time zone {name!r} in `{field}`: use {_ZONE_EXAMPLES}{hint}",
        ErrorKind.INVALID_ARGUMENTS,
    )


def parse_datetime(text: str) -> datetime:
    """Return the date-time an ISO 8601 text names, or fail with examples of the format."""
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise ToolFailure(
            f"datetime {text!r} is not ISO 8601: write e.g. '2024-03-10', '2024-03-10T14:30:00' "
            "or '2024-03-10T14:30:00+01:00'",
            ErrorKind.INVALID_ARGUMENTS,
        ) from None


def add_duration(
    moment: datetime,
    days: int = 0,
    hours: float = 0,
    minutes: float = 0,
    seconds: float = 0,
    duration: str | None = None,
) -> datetime:
    """Return the moment plus calendar months and days, then plus elapsed time."""
    try:
        months, extra_days, elapsed = parse_duration(duration) if duration else (0, 0, timedelta())
        days += extra_days
        elapsed += timedelta(hours=hours, minutes=minutes, seconds=seconds)
        if not (months or days or elapsed):
            raise ToolFailure(
                "add needs a non-zero duration: `days`, `hours`, `minutes`, `seconds` or "
                "`duration`",
                ErrorKind.INVALID_ARGUMENTS,
            )
        moment = _add_months(moment, months) + timedelta(days=days)
        if moment.tzinfo is None:
            return moment + elapsed
        # Through UTC: resolves a wall-clock time in a DST gap, and makes hours elapsed time.
        return (moment.astimezone(UTC) + elapsed).astimezone(moment.tzinfo)
    except OverflowError:
        raise ToolFailure(
            "the result is outside the years 1 to 9999", ErrorKind.INVALID_ARGUMENTS
        ) from None


def parse_duration(text: str) -> tuple[int, int, timedelta]:
    """Return (months, days, elapsed time) of an ISO 8601 duration like 'P1Y2M3DT4H5M6.5S'."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ToolFailure(
            f"duration {text!r} is not ISO 8601: write e.g. 'P3D', 'PT2H30M', 'P1Y2M', 'P2W' or "
            "'-PT15M' (letters after T are hours, minutes, seconds; before T, years to days)",
            ErrorKind.INVALID_ARGUMENTS,
        )
    parts = {
        k: float(v.replace(",", ".")) for k, v in match.groupdict().items() if v and k != "sign"
    }
    sign = -1 if match["sign"] == "-" else 1
    months = int(parts.get("years", 0) * 12 + parts.get("months", 0))
    days = int(parts.get("weeks", 0) * 7 + parts.get("days", 0))
    elapsed = timedelta(
        hours=parts.get("hours", 0),
        minutes=parts.get("minutes", 0),
        seconds=parts.get("seconds", 0),
    )
    return sign * months, sign * days, sign * elapsed


def describe(moment: datetime) -> dict[str, Any]:
    """Return a date-time as ISO text plus the parts a reader asks about."""
    zone = moment.tzinfo
    offset = moment.utcoffset()
    return {
        "datetime": moment.isoformat(),
        "date": moment.date().isoformat(),
        "time": moment.time().isoformat(),
        "weekday": calendar.day_name[moment.weekday()],
        "timezone": getattr(zone, "key", None) or (moment.tzname() if zone else None),
        "abbreviation": moment.tzname() if isinstance(zone, ZoneInfo) else None,
        "utc_offset": _format_offset(offset) if offset is not None else None,
        "timestamp": moment.timestamp() if zone else None,
    }


def _now(zone: tzinfo) -> datetime:
    # Whole seconds: a model reads and repeats this; microseconds are noise to it.
    return datetime.now(zone).replace(microsecond=0)


def _aware(moment: datetime, zone: ZoneInfo | None, text: str) -> datetime:
    """Return the moment with a zone: its own offset, else `zone`; neither is an error."""
    if moment.tzinfo is None and zone is None:
        raise ToolFailure(
            f"datetime {text!r} has no UTC offset: give `timezone` (the zone it is in) or write "
            "the offset, e.g. '2024-03-10T14:30:00+01:00' or '...Z' for UTC",
            ErrorKind.INVALID_ARGUMENTS,
        )
    return _in_zone(moment, zone)


def _in_zone(moment: datetime, zone: ZoneInfo | None) -> datetime:
    if zone is None:
        return moment
    if moment.tzinfo is None:
        return moment.replace(tzinfo=zone).astimezone(UTC).astimezone(zone)
    return moment.astimezone(zone)


def _add_months(moment: datetime, months: int) -> datetime:
    """Return the moment `months` later; a day past the new month's end becomes its last day."""
    if not months:
        return moment
    year, month = divmod(moment.year * 12 + moment.month - 1 + months, 12)
    if not 1 <= year <= 9999:
        raise OverflowError(year)
    day = min(moment.day, calendar.monthrange(year, month + 1)[1])
    return moment.replace(year=year, month=month + 1, day=day)


def _format_offset(offset: timedelta) -> str:
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


SPEC = ToolSpec(
    name="datetime",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    function=run_datetime,
    returns=RETURNS,
    deterministic=False,  # `now`, and `add` without a datetime, read the clock.
    timeout_s=5.0,
    capabilities=("DateTime",),
)
