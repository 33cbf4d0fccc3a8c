"""The site's outcome history: spans and scores as recorded become the router's outcomes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client

from planner_app.discovery.outcomes import Outcome
from planner_app.discovery.site_history import (
    SiteHistory,
    refresh_site_history,
    refresh_site_history_in_background,
    reset_site_history,
    round_offers,
    site_history,
)
from planner_app.models import ScoreRule
from tests.ares_site.test_settings import run_check
from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import ApiKey, ScoreDefinition, Trace
from traces_app.rollups.retention import purge_past_retention
from traces_app.schemas import InvocationFromDict

pytestmark = pytest.mark.django_db

REQUEST = "what is 17 percent of 230"
NOW = datetime.now(UTC)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def site(clock: Clock, settings: Any) -> SiteHistory:
    settings.ARES_ROUTER_HISTORY = "on"
    settings.ARES_ROUTER_HISTORY_REFRESH_S = 15
    settings.ARES_ROUTER_HISTORY_RELOAD_S = 600
    return SiteHistory(clock)


def record(**fields: Any) -> dict[str, Any]:
    """Store one span through the recording path; return it."""
    span = make_span(**{"request_text": REQUEST, **fields})
    assert record_invocations([InvocationFromDict.model_validate(span)]) == [True]
    return span


def at(seconds: float) -> str:
    return (NOW - timedelta(minutes=10) + timedelta(seconds=seconds)).isoformat()


def kept(site: SiteHistory) -> list[tuple[str, str, float]]:
    return sorted((o.tool, o.request, o.failed) for o in site.history.outcomes())


@pytest.mark.parametrize(
    ("fields", "failed"),
    [
        ({"status": "ok"}, 0.0),
        ({"status": "error", "error_kind": "tool_error"}, 1.0),
        ({"status": "error", "error_kind": "timeout"}, 1.0),
        ({"status": "error", "error_kind": "not_found"}, 1.0),  # the tool ran and answered
        ({"status": "error", "error_kind": "invalid_arguments"}, None),
        ({"status": "error", "error_kind": "permission_denied"}, None),
        ({"status": "error", "error_kind": "disabled"}, None),
        ({"status": "error", "error_kind": "cancelled"}, None),  # the spiral breaker's too
        ({"status": "stopped"}, None),
        ({"kind": "llm", "model": "m", "tool_name": ""}, None),
        ({"kind": "agent", "tool_name": ""}, None),
        ({"kind": "other", "tool_name": "calculator"}, None),
    ],
)
def test_it_classifies_spans_as_the_outcome_rules_say(
    site: SiteHistory, fields: dict, failed: float | None
) -> None:
    record(**fields)
    site.refresh(force=True)
    assert kept(site) == ([] if failed is None else [("calculator", REQUEST, failed)])


def test_an_outcome_holds_the_request_the_tool_when_and_where(site: SiteHistory) -> None:
    span = record(started_at=at(0), request_text="  what is\n17 percent  of 230 ")
    site.refresh(force=True)
    [outcome] = site.history.outcomes()
    started = datetime.fromisoformat(span["started_at"]).timestamp()
    source = f"{span['trace_id']}/{span['span_id']}"
    assert outcome == Outcome(REQUEST, "calculator", 0.0, pytest.approx(started), source)


def test_the_refresh_is_time_gated_and_reads_only_what_is_new(
    site: SiteHistory, clock: Clock
) -> None:
    record()
    assert site.refresh() is True
    record(tool_name="datetime")

    clock.now += 14
    assert site.refresh() is False
    assert [tool for tool, _, _ in kept(site)] == ["calculator"]

    clock.now += 1
    assert site.refresh() is True
    assert [tool for tool, _, _ in kept(site)] == ["calculator", "datetime"]
    clock.now += 15
    assert site.refresh() is False  # nothing new: the overlap read again changes nothing
    assert site.loads == 1


def test_a_burst_of_new_spans_is_read_at_most_the_bound_at_a_time(
    site: SiteHistory, clock: Clock, settings: Any
) -> None:
    settings.ARES_ROUTER_HISTORY_MAX_OUTCOMES = 2
    site.refresh(force=True)
    for n in range(3):
        record(request_text=f"request {n}")
    clock.now += 15
    site.refresh()
    assert len(site.history) == 2
    clock.now += 15
    site.refresh()
    assert len(site.history) == 3
    assert site.loads == 1


@pytest.mark.django_db(transaction=True)  # two writers, each with its own transaction
def test_a_span_committed_late_under_a_lower_key_is_read(site: SiteHistory, clock: Clock) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has one writer at a time: keys commit in order")
    stored, commit = threading.Event(), threading.Event()

    def slow_writer() -> None:
        try:
            with transaction.atomic():
                record(tool_name="datetime", request_text="committed late")
                stored.set()
                assert commit.wait(10)
        finally:
            connection.close()

    writer = threading.Thread(target=slow_writer)
    writer.start()
    assert stored.wait(10)
    record(request_text="committed first")  # a higher key, committed before the lower one
    site.refresh(force=True)
    assert [request for _, request, _ in kept(site)] == ["committed first"]
    commit.set()
    writer.join(10)

    clock.now += 15
    assert site.refresh() is True
    assert [request for _, request, _ in kept(site)] == ["committed first", "committed late"]
    assert site.loads == 1


def test_a_span_waits_for_its_traces_request_text(site: SiteHistory, clock: Clock) -> None:
    span = record(request_text="")
    site.refresh(force=True)
    assert kept(site) == []

    record(trace_id=span["trace_id"], kind="agent", tool_name="", request_text="late request")
    clock.now += 15
    assert site.refresh() is True
    assert kept(site) == [("calculator", "late request", 0.0)]


def test_a_discovery_task_learns_the_tool_request_that_offered_the_tool(
    site: SiteHistory,
) -> None:
    trace_id = record(tool_name="calculator", started_at=at(0))["trace_id"]  # before any round
    requests = [
        {"server": "weather", "tool": "forecast for a city"},
        {"server": "", "tool": "convert a price to euros"},
    ]
    routing = [
        {"tools": [{"server": "mcp:weather", "tool": "get_forecast"}, {"tool": "calculator"}]},
        {"tools": [{"server": "builtin:math", "tool": "currency_convert"}]},
    ]
    record(
        trace_id=trace_id, kind="other", tool_name="tool_discovery", started_at=at(1),
        arguments={"requests": requests}, result={"routing": routing, "loaded": [], "offered": []},
    )  # fmt: skip
    for tool in ("get_forecast", "currency_convert", "calculator", "string_utils"):
        record(trace_id=trace_id, tool_name=tool, started_at=at(2))
    site.refresh(force=True)
    assert kept(site) == [
        ("calculator", "weather forecast for a city", 0.0),  # offered, then called
        ("calculator", REQUEST, 0.0),  # called before the round offered it
        ("currency_convert", "convert a price to euros", 0.0),
        ("get_forecast", "weather forecast for a city", 0.0),
        ("string_utils", REQUEST, 0.0),  # never offered: the task's request
    ]


@pytest.mark.parametrize(
    ("arguments", "result"),
    [
        (None, None),
        ({"requests": "forecast"}, {"routing": []}),
        ({"requests": [{"tool": "forecast"}]}, {"routing": ["get_forecast"]}),
        ({"requests": [{"tool": ""}]}, {"routing": [{"tools": [{"tool": "get_forecast"}]}]}),
        ({"requests": [{"tool": "forecast"}]}, {"routing": [{"tools": [{"tool": 7}]}]}),
        ({"requests": [{"tool": "forecast"}]}, {"routing": [{"tools": {"tool": "x"}}]}),
    ],
)
def test_a_discovery_span_of_another_shape_offers_nothing(arguments: Any, result: Any) -> None:
    assert round_offers(arguments, result) == {}


def test_the_first_request_that_offered_a_tool_is_its_request() -> None:
    requests = [{"server": "web", "tool": "fetch a page"}, {"tool": "download a file"}]
    routing = [{"tools": [{"tool": "http_request"}]}, {"tools": [{"tool": "http_request"}]}]
    offers = round_offers({"requests": requests}, {"routing": routing})
    assert offers == {"http_request": "web fetch a page"}


def send_score(span: dict[str, Any], value: bool) -> None:
    key = ApiKey.objects.issue("evaluator", ["score"])[1]
    item = {"trace_id": span["trace_id"], "span_id": span["span_id"], "name": "result_correct",
            "value": value, "source": "evaluator"}  # fmt: skip
    response = Client().post(
        "/api/v1/scores",
        {"scores": [item]},
        content_type="application/json",
        headers={"authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200 and response.json()["accepted"] == 1, response.content


@pytest.fixture
def result_correct() -> None:
    ScoreDefinition.objects.get_or_create(name="result_correct", defaults={"data_type": "boolean"})


@pytest.mark.django_db(transaction=True)  # a score rule is a rule set version on commit
def test_a_score_counted_failed_fails_the_call_at_the_next_refresh(
    site: SiteHistory, clock: Clock, result_correct: None
) -> None:
    ScoreRule.objects.create(score_name="result_correct", operator="=", threshold="false")
    wrong, right = record(), record(tool_name="datetime")
    site.refresh(force=True)
    send_scores = [(wrong, False), (right, True)]
    for span, value in send_scores:
        send_score(span, value)

    assert site.refresh() is False  # within the refresh interval
    assert kept(site) == [("calculator", REQUEST, 0.0), ("datetime", REQUEST, 0.0)]
    clock.now += 15
    assert site.refresh() is True
    assert kept(site) == [("calculator", REQUEST, 1.0), ("datetime", REQUEST, 0.0)]
    assert (site.loads, len(site.history)) == (1, 2)  # read anew, replacing itself


@pytest.mark.django_db(transaction=True)
def test_a_new_score_rule_reloads_the_outcomes(
    site: SiteHistory, clock: Clock, result_correct: None
) -> None:
    span = record()
    send_score(span, False)
    site.refresh(force=True)
    assert kept(site) == [("calculator", REQUEST, 0.0)]  # no rule counts the score yet

    ScoreRule.objects.create(score_name="result_correct", operator="=", threshold="false")
    clock.now += 15
    assert site.refresh() is True
    assert kept(site) == [("calculator", REQUEST, 1.0)]
    assert site.loads == 2


def test_a_purge_past_retention_removes_outcomes_at_the_next_refresh(
    site: SiteHistory, clock: Clock, settings: Any
) -> None:
    record(started_at=(NOW - timedelta(days=3)).isoformat(), request_text="old request")
    record(request_text="new request")
    site.refresh(force=True)
    assert len(site.history) == 2

    settings.ARES_RETENTION_DAYS = 2
    assert purge_past_retention().spans == 1
    clock.now += 15
    assert site.refresh() is True
    assert kept(site) == [("calculator", "new request", 0.0)]


def test_a_deleted_trace_drops_out_at_the_next_full_reload(site: SiteHistory, clock: Clock) -> None:
    gone = record(request_text="deleted request")
    record(request_text="kept request")
    site.refresh(force=True)
    Trace.objects.filter(pk=gone["trace_id"]).delete()

    clock.now += 15
    site.refresh()
    assert len(site.history) == 2  # between reloads, deletions are not looked for
    clock.now += 600
    assert site.refresh() is True
    assert kept(site) == [("calculator", "kept request", 0.0)]


def test_each_tool_keeps_at_most_its_bound_the_newest(site: SiteHistory, settings: Any) -> None:
    settings.ARES_ROUTER_HISTORY_PER_TOOL = 3
    for n in range(5):
        record(started_at=at(n), request_text=f"request {n}")
    record(tool_name="datetime", request_text="what day is it")
    site.refresh(force=True)
    assert site.history.counts() == {"calculator": 3, "datetime": 1}
    assert {o.request for o in site.history.outcomes()} >= {"request 2", "request 3", "request 4"}


def test_a_full_load_reads_at_most_the_newest_spans(site: SiteHistory, settings: Any) -> None:
    settings.ARES_ROUTER_HISTORY_MAX_OUTCOMES = 2
    for n in range(4):
        record(started_at=at(n), request_text=f"request {n}")
    site.refresh(force=True)
    assert kept(site) == [("calculator", "request 2", 0.0), ("calculator", "request 3", 0.0)]


def test_a_database_error_keeps_the_history_as_it_was(
    site: SiteHistory, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    record(request_text="first request")
    site.refresh(force=True)
    record(request_text="second request")
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE traces_app_score RENAME TO traces_app_score_away")

    clock.now += 15
    with caplog.at_level(logging.WARNING, logger="planner_app.discovery.site_history"):
        assert site.refresh() is False
    assert kept(site) == [("calculator", "first request", 0.0)]
    assert "kept as it was" in caplog.text

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE traces_app_score_away RENAME TO traces_app_score")
    clock.now += 15
    assert site.refresh() is True
    assert len(site.history) == 2


class HeldClock(Clock):
    """A clock whose first reading waits until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.reading, self.go = threading.Event(), threading.Event()

    def __call__(self) -> float:
        if not self.reading.is_set():
            self.reading.set()
            assert self.go.wait(10)
        return self.now


@pytest.mark.django_db(transaction=True)  # the other thread reads what this one stored
def test_a_refresh_while_another_runs_returns_at_once(settings: Any) -> None:
    settings.ARES_ROUTER_HISTORY = "on"
    clock = HeldClock()
    site = SiteHistory(clock)
    record()
    changed: list[bool] = []

    def refresh() -> None:
        try:
            changed.append(site.refresh(force=True))
        finally:
            connection.close()

    first = threading.Thread(target=refresh)
    first.start()
    assert clock.reading.wait(10)
    assert site.refresh(force=True) is False  # the first holds the refresh
    clock.go.set()
    first.join(10)
    assert changed == [True]
    assert (site.loads, len(site.history)) == (1, 1)


@pytest.fixture
def fresh_site_history() -> Iterator[None]:
    reset_site_history()
    yield
    reset_site_history()


def test_the_site_history_loads_on_first_use(fresh_site_history: None, settings: Any) -> None:
    settings.ARES_ROUTER_HISTORY = "on"
    record()
    assert [o.tool for o in site_history().outcomes()] == ["calculator"]
    assert refresh_site_history() is False  # just loaded: time-gated


def test_the_site_history_off_reads_nothing(fresh_site_history: None, settings: Any) -> None:
    settings.ARES_ROUTER_HISTORY = "off"
    record()
    assert refresh_site_history(force=True) is False
    assert len(site_history()) == 0


@pytest.mark.django_db(transaction=True)  # the refreshing thread reads what this one stored
def test_a_background_refresh_reads_in_a_thread_of_its_own(
    fresh_site_history: None, settings: Any
) -> None:
    settings.ARES_ROUTER_HISTORY = "on"
    record()
    thread = refresh_site_history_in_background()
    assert thread is not None
    thread.join(30)
    assert [o.tool for o in site_history().outcomes()] == ["calculator"]
    assert refresh_site_history_in_background() is None  # just refreshed: none due


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ARES_ROUTER_HISTORY": "maybe"}, "ARES_ROUTER_HISTORY='maybe' is not one of on, off"),
        ({"ARES_ROUTER_HISTORY_PER_TOOL": "0"}, "ARES_ROUTER_HISTORY_PER_TOOL=0 is below"),
        ({"ARES_ROUTER_HISTORY_HALF_LIFE_DAYS": "0"}, "HALF_LIFE_DAYS must be above 0"),
        ({"ARES_ROUTER_HISTORY_REFRESH_S": "-1"}, "ARES_ROUTER_HISTORY_REFRESH_S='-1' is below"),
    ],
)
def test_the_site_refuses_a_bad_history_setting(env: dict[str, str], message: str) -> None:
    result = run_check(**env)
    assert result.returncode != 0 and message in result.stderr
