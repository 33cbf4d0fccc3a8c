"""Rollups correct by construction: durable marks, recounts by pages and tasks, repairs."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import httpx
import pytest
from django.core.management import call_command

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import Invocation, RollupMark, SpanRollup, ToolRollup
from traces_app.rollups.recount import recount_all_marked_rollups, recount_marked_rollups
from traces_app.schemas import InvocationIn

NOW = datetime.now(UTC)
THIS_HOUR = NOW.replace(minute=0, second=0, microsecond=0)
EARLIER_HOUR = THIS_HOUR - timedelta(hours=2)


def _record(*spans: dict[str, Any]) -> None:
    record_invocations([InvocationIn.model_validate(span) for span in spans])


def _span(hour: datetime, minute: int, **overrides: Any) -> dict[str, Any]:
    return make_span(started_at=(hour + timedelta(minutes=minute)).isoformat(), **overrides)


def _raw_tool_calls(tool: str) -> int:
    return Invocation.objects.tools().filter(tool_name=tool).count()


def _rolled_up_calls(tool: str) -> int:
    return sum(ToolRollup.objects.filter(tool_name=tool).values_list("calls", flat=True))


@pytest.mark.django_db(transaction=True)
def test_it_marks_the_buckets_of_new_spans_with_the_spans() -> None:
    _record(
        _span(THIS_HOUR, 1),
        _span(THIS_HOUR, 2),
        _span(EARLIER_HOUR, 3, tool_name="web_search"),
        _span(THIS_HOUR, 4, kind="llm", tool_name="", model="gpt"),
    )
    marks = set(RollupMark.objects.values_list("bucket_start", "tool_name"))
    assert marks == {(THIS_HOUR, "calculator"), (EARLIER_HOUR, "web_search"), (THIS_HOUR, "")}
    assert not ToolRollup.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_span_adds_no_mark() -> None:
    span = _span(THIS_HOUR, 1)
    _record(span)
    RollupMark.objects.all().delete()
    _record(span)
    assert not RollupMark.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_recount_consumes_the_marks_and_matches_the_raw_spans() -> None:
    _record(*(_span(THIS_HOUR, minute) for minute in range(5)), _span(EARLIER_HOUR, 1))
    done = recount_marked_rollups()
    assert (done.marks, done.tool_buckets, done.hours, done.pending) == (2, 2, 2, 0)
    assert _rolled_up_calls("calculator") == _raw_tool_calls("calculator") == 6
    assert sum(SpanRollup.objects.values_list("calls", flat=True)) == 6
    assert not RollupMark.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_bounded_recount_leaves_the_rest_pending() -> None:
    for hours_ago in range(4):
        _record(_span(THIS_HOUR - timedelta(hours=hours_ago), 1))
    done = recount_marked_rollups(limit=3)
    assert (done.marks, done.pending) == (3, 1)
    assert _rolled_up_calls("calculator") == 3
    assert recount_all_marked_rollups() == 1
    assert _rolled_up_calls("calculator") == 4


@pytest.mark.django_db(transaction=True)
def test_a_range_recount_leaves_other_hours_marked() -> None:
    _record(_span(THIS_HOUR, 1), _span(EARLIER_HOUR, 1))
    recount_marked_rollups(THIS_HOUR, THIS_HOUR + timedelta(hours=1))
    assert set(RollupMark.objects.values_list("bucket_start", flat=True)) == {EARLIER_HOUR}
    assert list(ToolRollup.objects.values_list("bucket_start", flat=True)) == [THIS_HOUR]


@pytest.mark.django_db(transaction=True)
def test_recounting_an_hour_drops_groups_its_spans_left() -> None:
    _record(_span(THIS_HOUR, 1, agent="my-service"), _span(THIS_HOUR, 2, agent="my-service"))
    recount_all_marked_rollups()
    # What OTLP attribution does when the agent span arrives later: new agent, marked hour.
    Invocation.objects.update(agent="math-tutor")
    RollupMark.objects.create(bucket_start=THIS_HOUR, tool_name="")
    recount_all_marked_rollups()
    assert list(SpanRollup.objects.values_list("agent", "calls")) == [("math-tutor", 2)]


@pytest.fixture
def staff(session_client: Callable[..., httpx.Client]) -> httpx.Client:
    return session_client(is_staff=True)


PAGES = ["/", "/tools/", "/tools/calculator/", "/traces/"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", PAGES)
def test_a_page_load_counts_spans_a_dead_process_left_marked(
    page: str, api: httpx.Client, staff: httpx.Client
) -> None:
    spans = [make_span(tool_name="calculator") for _ in range(7)]
    assert api.post("/invocations", json={"invocations": spans}).json()["accepted"] == 7
    assert _rolled_up_calls("calculator") == 0  # nothing recounted after the batch
    response = staff.get(page)
    assert response.status_code == 200
    assert _rolled_up_calls("calculator") == 7 == _raw_tool_calls("calculator")
    assert not RollupMark.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_tools_page_shows_a_burst_on_the_next_load(
    api: httpx.Client, staff: httpx.Client
) -> None:
    for _ in range(3):
        batch = [make_span(tool_name="burst_tool") for _ in range(400)]
        assert api.post("/invocations", json={"invocations": batch}).json()["accepted"] == 400
    page = staff.get("/tools/").text
    row = page[page.index("burst_tool") :][:2000]
    assert "1,200" in row or ">1200<" in row


@pytest.mark.django_db(transaction=True)
def test_with_a_broker_a_page_leaves_young_marks_to_the_beat(
    api: httpx.Client, staff: httpx.Client, settings: Any
) -> None:
    settings.ARES_ROLLUP_PAGE_GRACE_S = 3600  # what a broker's 2 x beat interval stands for
    api.post("/invocations", json={"invocations": [make_span()]})
    assert staff.get("/tools/").status_code == 200
    assert RollupMark.objects.exists() and _rolled_up_calls("calculator") == 0


@pytest.mark.django_db(transaction=True)
def test_a_page_says_when_marks_are_left_over(
    api: httpx.Client, staff: httpx.Client, settings: Any
) -> None:
    settings.ARES_ROLLUP_PAGE_RECOUNT_MAX = 1
    for hours_ago in range(3):
        started = (NOW - timedelta(hours=hours_ago)).isoformat()
        api.post("/invocations", json={"invocations": [make_span(started_at=started)]})
    page = staff.get("/tools/?range=24h").text
    assert "2 more batches of recent calls are still being counted" in page
    assert RollupMark.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_check_rollups_reports_and_repairs_drift() -> None:
    _record(*(_span(THIS_HOUR, minute) for minute in range(4)), _span(EARLIER_HOUR, 5))
    recount_all_marked_rollups()
    ToolRollup.objects.filter(bucket_start=THIS_HOUR).update(calls=1, successes=1)
    SpanRollup.objects.filter(bucket_start=EARLIER_HOUR).delete()
    ToolRollup.objects.create(tool_name="ghost", bucket_start=EARLIER_HOUR, calls=3, successes=3)

    dry = _check_rollups("--dry-run")
    assert "tool calculator @" in dry and "calls 1 -> 4" in dry
    assert "would repair" in dry and ToolRollup.objects.get(tool_name="ghost").calls == 3

    out = _check_rollups()
    assert "3 differed, repaired." in out
    assert "tool ghost @" in out and "spans tool" in out
    assert _rolled_up_calls("calculator") == 5
    assert _rolled_up_calls("ghost") == 0
    assert sum(SpanRollup.objects.values_list("calls", flat=True)) == 5
    assert "nothing to repair" in _check_rollups()


def _check_rollups(*args: str) -> str:
    out = StringIO()
    since = (EARLIER_HOUR - timedelta(hours=1)).isoformat()
    call_command("check_rollups", "--since", since, *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_check_rollups_refuses_a_bad_range() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="not an ISO 8601"):
        call_command("check_rollups", "--since", "yesterday")
    with pytest.raises(CommandError, match="before --until"):
        call_command("check_rollups", "--since", "2026-01-02", "--until", "2026-01-01")


@pytest.mark.redis
def test_a_real_worker_recounts_the_marks(redis_worker: tuple[str, str]) -> None:
    from ares_site.celery import app as celery_app
    from traces_app.tasks import recount_rollups_task

    broker, queue = redis_worker
    _record(*(_span(THIS_HOUR, minute) for minute in range(3)))
    with celery_app.connection_for_write(broker) as broker_connection:
        recount_rollups_task.apply_async(queue=queue, connection=broker_connection)
    deadline = time.monotonic() + 60
    while RollupMark.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not RollupMark.objects.exists()
    assert _rolled_up_calls("calculator") == 3
