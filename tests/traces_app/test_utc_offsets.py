"""Moments from outside: any UTC offset stored as the same instant in UTC, edges refused cleanly.

PostgreSQL refuses a UTC offset beyond +/-15:59, which ISO 8601 and Python allow, and a
moment near year 1 or 9999 can overflow once moved to UTC. Spans, read filters and page
ranges with such values are normalized to UTC or refused with the field and the reason:
never a 500, never a whole batch lost.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.traces_app.test_otlp_bad_input import (
    JSON,
    as_json,
    export_request,
    is_stored,
    post,
    tool_span,
)
from traces_app.models import Invocation

__all__ = ["post"]  # a fixture, used by name

INSTANT = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)


def offset(hours: int, minutes: int = 0) -> timezone:
    sign = -1 if hours < 0 else 1
    return timezone(sign * timedelta(hours=abs(hours), minutes=minutes))


# Offsets PostgreSQL can't store (beyond +/-15:59) and some it can, for contrast.
OFFSETS = [
    pytest.param(offset(16), id="+16:00"),
    pytest.param(offset(23, 59), id="+23:59"),
    pytest.param(offset(-20), id="-20:00"),
    pytest.param(offset(-23, 59), id="-23:59"),
    pytest.param(offset(15, 59), id="+15:59"),
    pytest.param(offset(5, 30), id="+05:30"),
    pytest.param(UTC, id="Z"),
]


@pytest.mark.parametrize("zone", OFFSETS)
def test_it_stores_a_span_with_any_offset_as_the_same_instant_in_utc(api, report, span, zone):
    sent = span(started_at=INSTANT.astimezone(zone).isoformat())

    response = report(sent, span())

    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == 2
    stored = api.get(f"/traces/{sent['trace_id']}").json()["spans"][0]
    assert datetime.fromisoformat(stored["started_at"]) == INSTANT
    assert datetime.fromisoformat(stored["started_at"]).utcoffset() == timedelta(0)


# (started_at, words its rejection must contain)
BAD_MOMENTS = [
    pytest.param("0001-01-01T00:00:00+01:00", "out of range", id="year 1 east of UTC"),
    pytest.param("9999-12-31T23:59:59-01:00", "out of range", id="year 9999 west of UTC"),
    pytest.param("0001-01-01T00:00:00Z", "before 2000-01-01", id="year 1"),
    pytest.param("9999-12-31T23:59:59Z", "in the future", id="year 9999"),
    pytest.param("9999-12-31T23:59:59+23:59", "in the future", id="year 9999 at +23:59"),
    pytest.param("2026-01-01T00:00:00+24:00", "datetime", id="offset +24:00"),
    pytest.param("10000-01-01T00:00:00Z", "datetime", id="year 10000"),
    pytest.param(10**20, "datetime", id="a huge number"),
    pytest.param(-(10**20), "datetime", id="a huge negative number"),
]


@pytest.mark.parametrize(("started_at", "words"), BAD_MOMENTS)
def test_it_rejects_a_span_at_an_unstorable_moment_and_keeps_the_batch(
    report, span, problem, started_at, words
):
    response = report(span(), span(started_at=started_at), span())

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["accepted"], body["rejected"]) == (2, 1)
    [error] = body["items"][1]["errors"]
    assert error["field"] == "started_at"
    assert words in error["reason"]
    assert Invocation.objects.count() == 2


def test_it_reads_an_otlp_start_time_as_utc(post, settings):
    settings.ARES_RETENTION_DAYS = 10 * 365  # the moment is fixed, so older than the default
    sent = tool_span(start_time_unix_nano=1_767_225_600_123_456_789)  # 2026-01-01 00:00:00.123456Z
    sent.end_time_unix_nano = sent.start_time_unix_nano + 10**6

    response = post(export_request(sent).SerializeToString())

    assert response.status_code == 200
    stored = Invocation.objects.get(span_id=sent.span_id.hex())
    assert stored.started_at == datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)


def test_it_rejects_the_largest_otlp_start_time_and_keeps_the_others(post):
    largest = 2**64 - 1
    good, bad = tool_span(), tool_span(start_time_unix_nano=largest, end_time_unix_nano=largest)

    response = post(export_request(good, bad).SerializeToString())

    assert response.status_code == 200
    outcome = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert outcome.rejected_spans == 1
    assert "started_at" in outcome.error_message and "in the future" in outcome.error_message
    assert is_stored(good) and not is_stored(bad)


@pytest.mark.parametrize(
    "start", ["18446744073709551616", "-1", "99999999999999999999999999", "1e30"]
)
def test_it_refuses_an_otlp_json_start_time_beyond_uint64_without_a_500(post, start):
    document = as_json(export_request(tool_span()))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = start

    response = post(json.dumps(document).encode(), content_type=JSON)

    assert response.status_code == 400
    assert "startTimeUnixNano" in response.text or "start_time_unix_nano" in response.text
    assert Invocation.objects.count() == 0


LISTS = ["/traces", "/invocations"]


@pytest.fixture
def one_span(report, span) -> dict:
    sent = span(started_at=INSTANT.isoformat())
    assert report(sent).json()["accepted"] == 1
    return sent


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize("zone", OFFSETS)
def test_it_filters_by_moments_at_any_offset(api, one_span, path, zone):
    just_before = (INSTANT - timedelta(seconds=1)).astimezone(zone).isoformat()
    at = INSTANT.astimezone(zone).isoformat()

    found = api.get(path, params={"since": just_before, "until": at}).json()["items"]
    found_since = api.get(path, params={"since": at}).json()["items"]

    assert found == []  # until is exclusive: the instant itself is outside
    assert [item["trace_id"] for item in found_since] == [one_span["trace_id"]]


@pytest.mark.parametrize("zone", OFFSETS)
def test_it_computes_tool_statistics_over_a_window_at_any_offset(api, one_span, zone):
    window = {
        "since": (INSTANT - timedelta(minutes=1)).astimezone(zone).isoformat(),
        "until": (INSTANT + timedelta(minutes=1)).astimezone(zone).isoformat(),
    }

    body = api.get("/tools/stats", params=window).json()

    assert [(tool["tool_name"], tool["calls"]) for tool in body["tools"]] == [("calculator", 1)]
    assert datetime.fromisoformat(body["since"]) == INSTANT - timedelta(minutes=1)
    assert datetime.fromisoformat(body["since"]).utcoffset() == timedelta(0)


# Read-filter moments the databases can't hold, or that leave datetime's range.
BAD_FILTER_MOMENTS = [
    pytest.param("0001-01-01T00:00:00+01:00", "out of range", id="year 1 east of UTC"),
    pytest.param("9999-12-31T23:59:59-01:00", "out of range", id="year 9999 west of UTC"),
    pytest.param("0001-01-01T00:00:00Z", "out of range", id="the first day"),
    pytest.param("9999-12-31T00:00:00Z", "out of range", id="the last day"),
    pytest.param("2026-01-01T00:00:00+24:00", "date", id="offset +24:00"),
    pytest.param("yesterday", "date", id="not a date"),
]


@pytest.mark.parametrize("path", [*LISTS, "/tools/stats", "/traces/count", "/invocations/count"])
@pytest.mark.parametrize("name", ["since", "until"])
@pytest.mark.parametrize(("moment", "words"), BAD_FILTER_MOMENTS)
def test_it_refuses_a_filter_moment_it_cannot_use(api, problem, path, name, moment, words):
    response = api.get(path, params={name: moment})

    assert response.status_code == 422, response.text
    assert [error["field"] for error in response.json()["errors"]] == [name]
    assert words in problem(response)


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize(
    ("position", "status"),
    [
        pytest.param("2026-01-01T00:00:00+23:00", 200, id="+23:00 read as UTC"),
        pytest.param("0001-01-01T00:00:00+01:00", 422, id="out of range"),
    ],
)
def test_it_reads_an_edited_cursor_in_utc_or_refuses_it(api, path, position, status):
    cursor = base64.urlsafe_b64encode(f"{position}|1".encode()).decode()

    response = api.get(path, params={"cursor": cursor})

    assert response.status_code == status, response.text
    if status == 422:
        assert "cursor" in response.json()["detail"]


PAGES = ["/", "/traces/", "/spirals/", "/tools/", "/tools/calculator/"]


@pytest.fixture
def staff(session_client) -> httpx.Client:
    return session_client(is_staff=True)


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("zone", [offset(16), offset(-20), offset(23, 59)])
def test_it_shows_a_page_over_a_range_at_any_offset(staff, one_span, page, zone):
    since = (INSTANT - timedelta(hours=1)).astimezone(zone)
    until = (INSTANT + timedelta(hours=1)).astimezone(zone)

    response = staff.get(page, params={"since": since.isoformat(), "until": until.isoformat()})

    assert response.status_code == 200
    since_utc = INSTANT - timedelta(hours=1)
    assert f"{since_utc:%Y-%m-%d %H:%M} to " in response.text  # the range, shown in UTC


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize(
    ("since", "until"),
    [
        pytest.param("0001-01-01T00:00:00+01:00", "0001-01-05T00:00:00Z", id="year 1 east"),
        pytest.param("9999-12-28T00:00:00Z", "9999-12-31T23:59:59-01:00", id="year 9999 west"),
        pytest.param("9999-12-30T12:00:00Z", "9999-12-31T00:00:00Z", id="the last days"),
    ],
)
def test_it_names_an_unusable_range_on_the_page(staff, page, since, until):
    response = staff.get(page, params={"since": since, "until": until})

    assert response.status_code == 200
    assert "out of range" in response.text
    assert "last 24 hours" in response.text  # the default range, shown instead
