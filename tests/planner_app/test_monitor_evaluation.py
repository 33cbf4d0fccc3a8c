"""Monitors evaluated on spans sent through the ingest API: each metric, each transition."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from planner_app.monitors.evaluation import evaluate, evaluate_monitors
from planner_app.monitors.metrics import measure, monitor_problems
from planner_app.monitors.records import Delivery, Monitor, MonitorEvent
from tests.planner_app import notify_records
from tests.planner_app.monitor_spans import NOW, calls, monitor, one_trace, reporter, send

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> Any:
    return reporter()


def kinds(watched: Monitor) -> list[tuple[int, str]]:
    return list(watched.events.order_by("number").values_list("number", "kind"))


def test_it_fires_reminds_and_resolves_once_each(client: Any) -> None:
    send(client, calls(3, status="error") + calls(2))
    watched = monitor(renotify_minutes=30)

    fired = evaluate(watched, NOW)
    assert fired is not None and fired.kind == "fired"
    assert fired.value == pytest.approx(0.6)
    assert evaluate(watched, NOW + timedelta(minutes=1)) is None  # still firing: no reminder yet

    send(client, calls(3, status="error", at=NOW + timedelta(minutes=31)))
    reminder = evaluate(watched, NOW + timedelta(minutes=31))
    assert reminder is not None and reminder.kind == "reminder"

    send(client, calls(20, at=NOW + timedelta(minutes=50)))
    resolved = evaluate(watched, NOW + timedelta(minutes=50))
    assert resolved is not None and resolved.kind == "resolved"
    assert evaluate(watched, NOW + timedelta(minutes=51)) is None
    assert kinds(watched) == [(1, "fired"), (2, "reminder"), (3, "resolved")]
    watched.refresh_from_db()
    assert (watched.state, watched.transitions) == ("resolved", 3)


def test_its_message_says_the_metric_value_threshold_window_and_target(client: Any) -> None:
    send(client, calls(1, status="error") + calls(1))
    event = evaluate(monitor(name="calc errors"), NOW)
    assert event is not None
    assert event.message == (
        "calc errors fired: error rate of tool calculator was 50.0% over the 15 minutes to "
        "2026-12-01 12:00 UTC, above the threshold 20.0% (1 of 2 calls failed)."
    )


def test_its_trace_ids_are_the_failing_traces(client: Any) -> None:
    failing, fine = calls(2, status="error"), calls(3)
    send(client, failing + fine)
    event = evaluate(monitor(), NOW)
    assert event is not None
    assert sorted(event.trace_ids) == sorted(span["trace_id"] for span in failing)


def test_too_few_calls_leave_the_state_as_it_is(client: Any) -> None:
    send(client, calls(2, status="error"))
    watched = monitor(min_calls=5)
    assert evaluate(watched, NOW) is None
    watched.refresh_from_db()
    assert (watched.state, watched.last_value, watched.transitions) == ("ok", None, 0)
    assert watched.last_evaluated_at == NOW


def test_calls_stopping_fire_a_below_monitor(client: Any) -> None:
    send(client, calls(4, at=NOW - timedelta(minutes=20)))
    watched = monitor(metric="calls", comparison="below", threshold=1)
    event = evaluate(watched, NOW)
    assert event is not None and event.kind == "fired" and event.value == 0
    assert "calls of tool calculator was 0" in event.message
    assert measure(watched, NOW - timedelta(minutes=15)).value == 4


def test_it_measures_the_p95_latency(client: Any) -> None:
    spans = [{**span, "latency_ms": float(index + 1)} for index, span in enumerate(calls(100))]
    send(client, spans)
    measured = measure(monitor(metric="p95_latency_ms", threshold=50), NOW)
    assert measured.value == pytest.approx(95.05)
    slowest = max(spans, key=lambda span: span["latency_ms"])
    assert measured.trace_ids[0] == slowest["trace_id"]


def test_it_measures_the_cost_per_hour(client: Any) -> None:
    send(client, calls(3, cost_usd=0.5))
    measured = measure(monitor(metric="cost_per_hour", threshold=1, window_minutes=30), NOW)
    assert measured.value == pytest.approx(3.0)  # $1.50 in half an hour


def test_it_counts_the_spirals_started(client: Any) -> None:
    spiral = one_trace(calls(3, status="error", tool="web_search"))
    send(client, spiral + calls(3, status="error"))  # three separate traces: no spiral
    measured = measure(monitor(metric="spirals_started", scope="site", target="", threshold=0), NOW)
    assert (measured.value, measured.trace_ids) == (1, [spiral[0]["trace_id"]])
    of_calculator = monitor(metric="spirals_started", threshold=0)
    assert measure(of_calculator, NOW).value == 0


def test_it_counts_the_tasks_the_spiral_breaker_ended(client: Any) -> None:
    spiral = one_trace(calls(3, status="error", tool="web_search"))
    result = {"finish_reason": "spiral_breaker", "answer": "sorry"}
    task = {**spiral[0], "span_id": "a1" * 8, "kind": "agent", "tool_name": "", "status": "ok",
            "error_kind": "", "error_message": "", "result": result}  # fmt: skip
    other = {**calls(1)[0], "kind": "agent", "tool_name": "", "result": {"finish_reason": "stop"}}
    send(client, [*spiral, task, other])
    site = monitor(metric="breaker_trips", scope="site", target="", threshold=0)
    assert measure(site, NOW).value == 1
    assert (
        measure(monitor(metric="breaker_trips", target="web_search", threshold=0), NOW).value == 1
    )
    assert measure(monitor(metric="breaker_trips", threshold=0), NOW).value == 0


def test_it_measures_the_share_of_requests_that_needed_the_llm(client: Any) -> None:
    by_llm = calls(3, chosen_by="llm", request_text="add 1 and 1")
    by_planner = calls(1, chosen_by="planner", request_text="add 2 and 2")
    send(client, by_llm + by_planner)
    watched = monitor(metric="needs_llm_rate", scope="site", target="", threshold=0.5)
    measured = measure(watched, NOW)
    assert measured.value == pytest.approx(0.75)
    assert sorted(measured.trace_ids) == sorted(span["trace_id"] for span in by_llm)


def test_an_agent_monitor_reads_only_that_agents_calls(client: Any) -> None:
    send(client, calls(2, status="error", agent="night-bot") + calls(2, agent="day-bot"))
    night = monitor(scope="agent", target="night-bot", threshold=0.5)
    day = monitor(scope="agent", target="day-bot", threshold=0.5)
    assert (measure(night, NOW).value, measure(day, NOW).value) == (1.0, 0.0)


def test_a_score_drop_compares_the_window_with_the_one_before(client: Any) -> None:
    send(client, calls(10, at=NOW - timedelta(minutes=15)))  # all fine before
    send(client, calls(10, status="error"))  # all failing now
    measured = measure(monitor(metric="score_drop", threshold=0.1), NOW)
    assert measured.value is not None and measured.value > 0.1
    assert "in the window before" in measured.detail


def test_a_silenced_monitor_records_without_sending_then_reminds(
    client: Any, settings: Any
) -> None:
    channel = notify_records.webhook("http://127.0.0.1:9/hook")
    send(client, calls(3, status="error"))
    watched = monitor(channels=[channel], silenced_until=NOW + timedelta(minutes=10))

    fired = evaluate(watched, NOW)
    assert fired is not None and fired.silenced
    assert not Delivery.objects.exists()
    assert evaluate(watched, NOW + timedelta(minutes=5)) is None  # still silenced

    send(client, calls(3, status="error", at=NOW + timedelta(minutes=11)))
    reminder = evaluate(watched, NOW + timedelta(minutes=11))
    assert reminder is not None and (reminder.kind, reminder.silenced) == ("reminder", False)
    assert list(Delivery.objects.values_list("event__number", "channel")) == [(2, channel.pk)]


def test_each_event_gets_one_delivery_per_enabled_channel(client: Any) -> None:
    hooks = [notify_records.webhook("http://127.0.0.1:9/a", name="a"),
             notify_records.webhook("http://127.0.0.1:9/b", name="b", enabled=False)]  # fmt: skip
    send(client, calls(3, status="error"))
    event = evaluate(monitor(channels=hooks), NOW)
    assert event is not None
    assert list(event.deliveries.values_list("channel__name", flat=True)) == ["a"]


def test_a_stale_copy_of_a_monitor_records_nothing(client: Any) -> None:
    send(client, calls(3, status="error"))
    watched = monitor()
    stale = Monitor.objects.get(pk=watched.pk)
    assert evaluate(watched, NOW) is not None
    assert evaluate(stale, NOW) is None  # read at transitions 0: the update matches no row
    assert MonitorEvent.objects.filter(monitor=watched).count() == 1


def test_evaluate_monitors_skips_disabled_ones_and_sums_up(client: Any) -> None:
    send(client, calls(3, status="error"))
    monitor(), monitor(enabled=False), monitor(min_calls=50)
    summary = evaluate_monitors(NOW)
    assert (summary.evaluated, summary.fired, summary.not_judged) == (2, 1, 1)
    assert str(summary).startswith("2 monitors evaluated: 1 fired")


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"metric": "error_rate", "scope": "tool", "target": "no_such_tool"}, "target", "no tool"),
        ({"metric": "error_rate", "scope": "capability", "target": "nope"}, "target", "capability"),
        ({"metric": "error_rate", "scope": "site", "target": "x"}, "target", "blank"),
        ({"metric": "error_rate", "scope": "agent", "target": ""}, "target", "name the agent"),
        ({"metric": "error_rate", "scope": "site", "threshold": 1.5}, "threshold", "between 0"),
        ({"metric": "p95_latency_ms", "scope": "site", "threshold": -1}, "threshold", "between"),
        ({"metric": "score_drop", "scope": "site"}, "scope", "tool or a capability"),
    ],
)
def test_it_names_what_cannot_be_measured(fields: dict, field: str, says: str) -> None:
    problems = monitor_problems({"threshold": 0.1, "target": "", **fields})
    assert says in problems[field]


def test_a_tool_only_an_outside_agent_reported_can_be_watched(client: Any) -> None:
    send(client, calls(1, tool="their_lookup"))
    assert monitor_problems({"metric": "calls", "scope": "tool", "target": "their_lookup",
                             "threshold": 1}) == {}  # fmt: skip


def test_a_capability_monitor_reads_the_tools_serving_it(client: Any, default_rules: None) -> None:
    send(client, calls(2, status="error", tool="hash_tool") + calls(2, tool="calculator"))
    hashing = monitor(scope="capability", target="Hashing", threshold=0.5)
    summing = monitor(scope="capability", target="Summation", threshold=0.5)
    assert (measure(hashing, NOW).value, measure(summing, NOW).value) == (1.0, 0.0)
    event = evaluate(hashing, NOW)
    assert event is not None and "capability Hashing" in event.message
    assert (
        measure(
            monitor(metric="score_drop", scope="capability", target="Hashing", threshold=0), NOW
        ).value
        is None
    )  # nothing in the window before
