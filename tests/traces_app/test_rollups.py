"""Tool rollups: the pure histogram, refreshes from raw spans, retention, marks ingest leaves."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import models

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import Invocation, RollupMark, SpanRollup, ToolRollup
from traces_app.rollups.histogram import (
    BIN_COUNT,
    LATENCY_EDGES_MS,
    bin_bounds,
    bucket_of,
    histogram_of,
    merge,
    merge_counts,
    percentile_cont,
    percentile_from_histogram,
)
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.rollups.retention import purge_past_retention
from traces_app.schemas import InvocationIn
from traces_app.tasks import purge_past_retention_task, recount_rollups_task

NOW = datetime.now(UTC)
THIS_HOUR = NOW.replace(minute=0, second=0, microsecond=0)
EARLIER_HOUR = THIS_HOUR - timedelta(hours=3)


@pytest.mark.parametrize(
    ("latency", "expected"),
    [(0.0, 0), (0.99, 0), (1.0, 1), (1.2, 1), (1.259, 2), (999_999.0, 60), (1e6, 61), (1e9, 61)],
)
def test_bucket_of_places_latencies_between_edges(latency: float, expected: int) -> None:
    assert bucket_of(latency) == expected


@pytest.mark.parametrize("fraction", [0.5, 0.95])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentile_from_histogram_is_within_one_bin_of_exact(fraction: float, seed: int) -> None:
    rng = random.Random(seed)
    latencies = sorted(rng.lognormvariate(4, 1.2) for _ in range(5000))
    exact = percentile_cont(latencies, fraction)
    low, high = bin_bounds(bucket_of(exact))
    estimate = percentile_from_histogram(histogram_of(latencies), fraction)
    assert abs(estimate - exact) <= high - low


def test_percentile_from_histogram_of_nothing_is_zero() -> None:
    assert percentile_from_histogram([0] * BIN_COUNT, 0.5) == 0.0


def test_merge_sums_histograms_and_tallies() -> None:
    merged = merge(histogram_of([5, 50]), histogram_of([5]))
    assert merged[bucket_of(5)] == 2 and merged[bucket_of(50)] == 1 and sum(merged) == 3
    assert merge_counts({"timeout": 1}, {"timeout": 2, "not_found": 1}) == {
        "timeout": 3,
        "not_found": 1,
    }
    assert len(LATENCY_EDGES_MS) + 1 == BIN_COUNT


def _record(*spans: dict[str, Any]) -> None:
    """Store spans, then recount the rollups they marked, as the beat does."""
    _store(*spans)
    recount_all_marked_rollups()


def _store(*spans: dict[str, Any]) -> None:
    """Store spans and leave their rollup marks, as ingest does."""
    record_invocations([InvocationIn.model_validate(span) for span in spans])


def _span(hour: datetime, minute: int, **overrides: Any) -> dict[str, Any]:
    return make_span(started_at=(hour + timedelta(minutes=minute)).isoformat(), **overrides)


def _mixed_spans() -> list[dict[str, Any]]:
    return [
        _span(THIS_HOUR, 1, latency_ms=12.0, input_tokens=10, cost_usd=0.5),
        _span(THIS_HOUR, 2, latency_ms=300.0, status="error", error_kind="timeout"),
        _span(THIS_HOUR, 3, status="error", error_kind="timeout", output_tokens=7),
        _span(THIS_HOUR, 4, tool_name="web_search", status="error", error_kind="not_found"),
        _span(EARLIER_HOUR, 5, latency_ms=40.0, result_tokens=9, cost_usd=0.25),
        _span(THIS_HOUR, 6, kind="llm", tool_name="", model="gpt", input_tokens=500),
    ]


def _rollup_rows() -> list[dict[str, Any]]:
    return list(ToolRollup.objects.values().order_by("tool_name", "bucket_start"))


@pytest.mark.django_db(transaction=True)
def test_refresh_matches_raw_aggregates() -> None:
    _record(*_mixed_spans())
    ToolRollup.objects.all().delete()
    buckets = {("calculator", THIS_HOUR), ("web_search", THIS_HOUR), ("calculator", EARLIER_HOUR)}
    assert ToolRollup.objects.refresh_buckets(buckets) == 3
    for rollup in ToolRollup.objects.all():
        raw = (
            Invocation.objects.tools()
            .for_tool(rollup.tool_name)
            .filter(
                started_at__gte=rollup.bucket_start,
                started_at__lt=rollup.bucket_start + timedelta(hours=1),
            )
        )
        totals = raw.aggregate(
            calls=models.Count("pk"),
            failures=models.Count("pk", filter=models.Q(status="error")),
            input_tokens=models.Sum("input_tokens"),
            output_tokens=models.Sum("output_tokens"),
            result_tokens=models.Sum("result_tokens"),
            cost_usd=models.Sum("cost_usd"),
            latency_sum_ms=models.Sum("latency_ms"),
        )
        kinds: dict[str, int] = {}
        for kind in raw.failed().values_list("error_kind", flat=True):
            kinds[kind] = kinds.get(kind, 0) + 1
        assert rollup.calls == totals["calls"]
        assert rollup.failures == totals["failures"]
        assert rollup.successes == totals["calls"] - totals["failures"]
        assert rollup.failures_by_kind == kinds
        assert rollup.input_tokens == totals["input_tokens"]
        assert rollup.output_tokens == totals["output_tokens"]
        assert rollup.result_tokens == totals["result_tokens"]
        assert rollup.cost_usd == pytest.approx(totals["cost_usd"])
        assert rollup.latency_sum_ms == pytest.approx(totals["latency_sum_ms"])
        latencies = list(raw.values_list("latency_ms", flat=True))
        assert rollup.latency_histogram == histogram_of(latencies)
    calculator_now = ToolRollup.objects.get(tool_name="calculator", bucket_start=THIS_HOUR)
    assert calculator_now.failures_by_kind == {"timeout": 2}


@pytest.mark.django_db(transaction=True)
def test_refresh_twice_gives_the_same_rows() -> None:
    _record(*_mixed_spans())
    buckets = {("calculator", THIS_HOUR), ("web_search", THIS_HOUR), ("calculator", EARLIER_HOUR)}
    ToolRollup.objects.refresh_buckets(buckets)
    first = _rollup_rows()
    ToolRollup.objects.refresh_buckets(buckets)
    second = _rollup_rows()
    assert len(first) == 3
    for row in first + second:
        row.pop("updated_at")
    assert first == second


@pytest.mark.django_db(transaction=True)
def test_new_spans_in_an_old_bucket_update_that_bucket_only() -> None:
    _record(*_mixed_spans())
    before = {(row["tool_name"], row["bucket_start"]): row for row in _rollup_rows()}
    _record(_span(EARLIER_HOUR, 30, status="error", error_kind="tool_error"))
    after = {(row["tool_name"], row["bucket_start"]): row for row in _rollup_rows()}
    earlier = after[("calculator", EARLIER_HOUR)]
    assert (earlier["calls"], earlier["failures"]) == (2, 1)
    assert earlier["failures_by_kind"] == {"tool_error": 1}
    for key in [("calculator", THIS_HOUR), ("web_search", THIS_HOUR)]:
        assert after[key] == before[key]  # updated_at included: not even rewritten


@pytest.mark.django_db(transaction=True)
def test_purge_deletes_only_old_raw_spans_and_keeps_rollups(settings: Any) -> None:
    old_hour = THIS_HOUR - timedelta(days=40)
    settings.ARES_RETENTION_DAYS = 60
    _record(_span(old_hour, 1), _span(old_hour, 2), _span(THIS_HOUR, 1))
    assert ToolRollup.objects.get(bucket_start=old_hour).calls == 2
    settings.ARES_RETENTION_DAYS = 30
    assert purge_past_retention_task.delay().get() == (2, 2, 0)  # spans, their traces, scores
    assert list(Invocation.objects.values_list("started_at", flat=True)) == [
        THIS_HOUR + timedelta(minutes=1)
    ]
    assert ToolRollup.objects.get(bucket_start=old_hour).calls == 2
    # A recount of the old bucket (marked again) leaves the purged bucket's rollup alone.
    RollupMark.objects.create(bucket_start=old_hour, tool_name="calculator")
    recount_rollups_task.delay().get()
    assert ToolRollup.objects.get(bucket_start=old_hour).calls == 2
    assert not RollupMark.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_purge_deletes_in_batches(settings: Any) -> None:
    old = THIS_HOUR - timedelta(days=31)
    settings.ARES_RETENTION_DAYS = 60  # stored while it was within the retention
    _record(*(_span(old, minute) for minute in range(5)))
    settings.ARES_RETENTION_DAYS = 30
    assert purge_past_retention(batch_size=2).spans == 5
    assert not Invocation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_periodic_task_recounts_every_marked_bucket() -> None:
    _store(*_mixed_spans())
    assert not ToolRollup.objects.exists()
    assert RollupMark.objects.count() == 4  # calculator and web_search now, calculator earlier, llm
    assert recount_rollups_task.delay().get() == 4
    assert ToolRollup.objects.count() == 3
    assert ToolRollup.objects.filter(tool_name="web_search").get().failures == 1
    assert not RollupMark.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_spans_from_the_api_are_counted_by_the_next_recount_not_by_ingest(api, span) -> None:
    started = THIS_HOUR + timedelta(minutes=2)
    response = api.post(
        "/invocations",
        json={
            "invocations": [
                span(started_at=started.isoformat(), latency_ms=25.0),
                span(started_at=started.isoformat(), status="error", error_kind="timeout"),
            ]
        },
    )
    assert response.status_code < 300, response.text
    assert not ToolRollup.objects.exists()
    recount_rollups_task.delay().get()
    rollup = ToolRollup.objects.get(tool_name="calculator", bucket_start=THIS_HOUR)
    assert (rollup.calls, rollup.successes, rollup.failures) == (2, 1, 1)
    assert rollup.failures_by_kind == {"timeout": 1}
    assert rollup.latency_histogram[bucket_of(25.0)] >= 1


@pytest.mark.django_db(transaction=True)
def test_span_rollups_count_every_kind_by_chooser_and_place() -> None:
    _record(
        *_mixed_spans(),
        _span(THIS_HOUR, 7, chosen_by="planner", ran_on="mcp:time", input_tokens=3),
    )
    SpanRollup.objects.all().delete()
    SpanRollup.objects.refresh_hours({THIS_HOUR, EARLIER_HOUR})
    rows = SpanRollup.objects.filter(bucket_start=THIS_HOUR)
    assert sum(row.calls for row in rows) == 6
    llm = rows.get(kind="llm")
    assert (llm.calls, llm.input_tokens, llm.failures) == (1, 500, 0)
    planner = rows.get(chosen_by="planner")
    assert (planner.ran_on, planner.calls, planner.input_tokens) == ("mcp:time", 1, 3)
    tools = rows.filter(kind="tool")
    assert sum(row.failures for row in tools) == 3
    assert SpanRollup.objects.get(bucket_start=EARLIER_HOUR).cost_usd == 0.25


@pytest.mark.django_db(transaction=True)
def test_span_rollup_refresh_is_idempotent_and_follows_new_spans() -> None:
    _record(*_mixed_spans())
    hours = {THIS_HOUR, EARLIER_HOUR}
    SpanRollup.objects.refresh_hours(hours)
    before = list(SpanRollup.objects.values("calls", "failures", "input_tokens"))
    SpanRollup.objects.refresh_hours(hours)
    assert list(SpanRollup.objects.values("calls", "failures", "input_tokens")) == before
    _record(_span(THIS_HOUR, 9, kind="llm", tool_name="", model="gpt", input_tokens=5))
    recount_all_marked_rollups()
    assert SpanRollup.objects.get(bucket_start=THIS_HOUR, kind="llm").input_tokens == 505
