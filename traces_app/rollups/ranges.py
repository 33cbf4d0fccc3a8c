"""The time range a dashboard page shows: `?range=24h`, or `?since=...&until=...` (ISO 8601)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

# The moments a read filter may name, in UTC: a day inside datetime's years 1 to 9999, so
# that a filter end, a default window (until - 24h) or an hour bucket around it never
# overflows. Both databases hold every moment between them.
EARLIEST_FILTER = datetime(1, 1, 2, tzinfo=UTC)
LATEST_FILTER = datetime(9999, 12, 30, tzinfo=UTC)


PRESETS: dict[str, tuple[timedelta, str]] = {
    "1h": (timedelta(hours=1), "last hour"),
    "6h": (timedelta(hours=6), "last 6 hours"),
    "24h": (timedelta(hours=24), "last 24 hours"),
    "7d": (timedelta(days=7), "last 7 days"),
    "30d": (timedelta(days=30), "last 30 days"),
}
DEFAULT_PRESET = "24h"
MAX_SPAN = timedelta(days=400)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


@dataclass(frozen=True)
class TimeRange:
    since: datetime
    until: datetime
    label: str
    preset: str = ""  # "" for a custom since/until range

    @property
    def bucket(self) -> timedelta:
        """Chart bucket size: an hour, or a day for ranges over a week."""
        return DAY if self.until - self.since > timedelta(days=7) else HOUR

    def bucket_starts(self) -> list[datetime]:
        """Return the start of every chart bucket that overlaps the range, oldest first."""
        step = self.bucket
        start = self.since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        if step == DAY:
            start = start.replace(hour=0)
        starts = []
        while start < self.until:
            starts.append(start)
            start += step
        return starts

    def bucket_of(self, moment: datetime) -> datetime:
        """Return the start of the chart bucket holding a moment."""
        moment = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        return moment.replace(hour=0) if self.bucket == DAY else moment

    def previous(self) -> TimeRange:
        """Return the period of the same length that ends where this one starts."""
        span = self.until - self.since
        return TimeRange(self.since - span, self.since, f"the previous {_duration(span)}")

    def query(self) -> str:
        """Return the query string that reopens this range, for links between pages."""
        if self.preset:
            return urlencode({"range": self.preset})
        return urlencode({"since": self.since.isoformat(), "until": self.until.isoformat()})


def _duration(span: timedelta) -> str:
    """Return a period's length in words: "24 hours", "7 days", "90 minutes"."""
    minutes = round(span.total_seconds() / 60)
    if minutes % (24 * 60) == 0:
        days = minutes // (24 * 60)
        return "day" if days == 1 else f"{days} days"
    if minutes % 60 == 0:
        return "hour" if minutes == 60 else f"{minutes // 60} hours"
    return f"{minutes} minutes"


def parse_range(params: Mapping[str, str], now: datetime) -> tuple[TimeRange, str]:
    """Return the requested range and an error to show ('' if none); bad input gets the default.

    A custom range needs both ends (and no preset); a missing zone means UTC; ends are swapped when
    reversed, and longer ranges than MAX_SPAN are refused rather than scanned.
    """
    preset = params.get("range", "")
    # A preset wins over since/until: the range picker sends its prefilled custom fields
    # along with the preset button pressed.
    if not preset and (params.get("since") or params.get("until")):
        try:
            since, until = _moment(params, "since"), _moment(params, "until")
        except ValueError as exc:
            return _preset(DEFAULT_PRESET, now), str(exc)
        since, until = min(since, until), max(since, until)
        if until - since > MAX_SPAN:
            return _preset(DEFAULT_PRESET, now), f"a range can span at most {MAX_SPAN.days} days"
        if since == until:
            return _preset(DEFAULT_PRESET, now), "since and until are the same moment"
        label = f"{since:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC"
        return TimeRange(since, until, label), ""
    if preset and preset not in PRESETS:
        known = ", ".join(PRESETS)
        return _preset(DEFAULT_PRESET, now), f"unknown range {preset!r}; choose one of {known}"
    return _preset(preset or DEFAULT_PRESET, now), ""


def _preset(key: str, now: datetime) -> TimeRange:
    span, label = PRESETS[key]
    return TimeRange(now - span, now, label, key)


def _moment(params: Mapping[str, str], key: str) -> datetime:
    raw = params.get(key, "").strip()
    if not raw:
        raise ValueError(f"{key}: missing; a custom range needs both since and until")
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"{key}: {raw[:40]!r} is not an ISO 8601 date or time") from None
    try:
        return filter_moment(moment)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None


def range_context(params: Mapping[str, str], now: datetime) -> dict[str, object]:
    """Return the template context of `templates/charts/range.html` for a page's query."""
    time_range, error = parse_range(params, now)
    return {
        "time_range": time_range,
        "previous_range": time_range.previous(),
        "range_error": error,
        "range_presets": list(PRESETS),
    }


def aware(moment: datetime) -> datetime:
    """Return the datetime, read as UTC when it came without a time zone."""
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


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
