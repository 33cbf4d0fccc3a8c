"""Dashboard reads: tool and span totals over a range come from the rollups, per bucket too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import ToolRollup
from traces_app.rollups.range_totals import (
    activity,
    rate_change,
    relative_change,
    tool_changes,
    tool_series,
    tool_totals,
)
from traces_app.rollups.ranges import parse_range
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.schemas import InvocationIn

NOW = datetime.now(UTC)
HOUR_AGO = NOW - timedelta(hours=1)


def _record(*spans: dict[str, Any]) -> None:
    """Store spans, then recount the rollups they marked, as the beat does."""
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    recount_all_marked_rollups()


@pytest.mark.django_db(transaction=True)
def test_it_sums_tool_rollups_over_a_range_and_per_bucket() -> None:
    _record(
        make_span(started_at=NOW.isoformat(), latency_ms=10.0, cost_usd=0.25),
        make_span(started_at=HOUR_AGO.isoformat(), status="error", error_kind="timeout"),
        make_span(started_at=HOUR_AGO.isoformat(), tool_name="web_search", result_tokens=40),
        make_span(started_at=(NOW - timedelta(days=3)).isoformat()),  # outside 24h
    )
    time_range, _ = parse_range({"range": "24h"}, NOW + timedelta(seconds=1))
    totals = {total.tool_name: total for total in tool_totals(time_range)}
    assert set(totals) == {"calculator", "web_search"}
    calculator = totals["calculator"]
    assert (calculator.calls, calculator.failures, calculator.cost_usd) == (2, 1, 0.25)
    assert calculator.failures_by_kind == {"timeout": 1} and calculator.success_rate == 0.5
    assert totals["web_search"].result_tokens == 40
    series = tool_series(time_range, ["calculator"])
    assert list(series) == ["calculator"]
    assert sorted(point.calls for point in series["calculator"].values()) == [1, 1]
    assert ToolRollup.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_it_sums_every_span_kind_for_the_overview() -> None:
    _record(
        make_span(started_at=NOW.isoformat(), chosen_by="planner", ran_on="builtin"),
        make_span(started_at=NOW.isoformat(), chosen_by="llm", ran_on="mcp:time", agent="bot"),
        make_span(
            started_at=NOW.isoformat(), kind="llm", tool_name="", model="m", input_tokens=700,
            output_tokens=30, cost_usd=0.5, agent="bot",
        ),
    )  # fmt: skip
    time_range, _ = parse_range({"range": "6h"}, NOW + timedelta(seconds=1))
    summary = activity(time_range)
    assert (summary.totals.calls, summary.totals.tool_calls, summary.totals.llm_calls) == (3, 2, 1)
    assert summary.totals.tokens >= 730 and summary.totals.cost_usd >= 0.5
    assert summary.tool_calls_by_chosen_by == {"planner": 1, "llm": 1}
    assert summary.tool_calls_by_ran_on == {"builtin": 1, "mcp:time": 1}
    assert summary.calls_by_agent["bot"] == 2
    assert sum(bucket.calls for bucket in summary.by_bucket.values()) == 3


@pytest.mark.django_db(transaction=True)
def test_it_compares_each_tool_with_the_previous_period() -> None:
    yesterday = NOW - timedelta(hours=30)
    _record(
        *[make_span(started_at=HOUR_AGO.isoformat()) for _ in range(3)],
        make_span(started_at=yesterday.isoformat()),
        make_span(started_at=yesterday.isoformat(), status="error", error_kind="timeout"),
        make_span(started_at=HOUR_AGO.isoformat(), tool_name="web_search"),
    )
    time_range, _ = parse_range({"range": "24h"}, NOW + timedelta(seconds=1))

    changes = tool_changes(time_range, tool_totals(time_range))

    calculator = changes["calculator"]
    assert (calculator.calls.text, calculator.previous.calls) == ("+50.0%", 2)
    assert (calculator.success_rate.text, calculator.success_rate.tone) == ("+50.0 pts", "better")
    assert changes["web_search"].calls.text == "new"
    assert changes["web_search"].success_rate.text == "no previous calls"


@pytest.mark.parametrize(
    ("now", "before", "worse_when_up", "text", "tone"),
    [
        pytest.param(150, 100, True, "+50.0%", "worse", id="up, worse"),
        pytest.param(50, 100, True, "-50.0%", "better", id="down, better"),
        pytest.param(50, 100, None, "-50.0%", "", id="neither"),
        pytest.param(7, 7, True, "no change", "", id="same"),
        pytest.param(3, 0, None, "new", "", id="from nothing"),
    ],
)
def test_a_relative_change_says_how_much_and_which_way(now, before, worse_when_up, text, tone):
    change = relative_change(now, before, worse_when_up)

    assert (change.text, change.tone) == (text, tone)
    assert change.arrow == {"+": "▲", "-": "▼"}.get(text[:1], "")


def test_a_rate_change_is_in_points() -> None:
    assert rate_change(0.25, 0.05).text == "+20.0 pts"
    assert rate_change(0.25, 0.05).tone == "worse"
    assert rate_change(None, 0.5).text == "no calls now"


def _activity_row_by_row(time_range: Any) -> dict[str, Any]:
    """The overview's sums as the rollup rows add up one by one (what the SQL sums replace)."""
    from collections import defaultdict

    from traces_app.models import SpanRollup
    from traces_app.rollups.range_totals import SpanTotals

    totals, by_bucket, agents = SpanTotals(), defaultdict(SpanTotals), defaultdict(SpanTotals)
    chosen_by: dict[str, int] = defaultdict(int)
    ran_on: dict[str, int] = defaultdict(int)
    first = time_range.since.replace(minute=0, second=0, microsecond=0)
    for rollup in SpanRollup.objects.filter(
        bucket_start__gte=first, bucket_start__lt=time_range.until
    ):
        totals.add(rollup)
        by_bucket[time_range.bucket_of(rollup.bucket_start)].add(rollup)
        agents[rollup.agent or "(none)"].add(rollup)
        if rollup.kind == "tool":
            chosen_by[rollup.chosen_by or "unknown"] += rollup.calls
            ran_on[rollup.ran_on or "unknown"] += rollup.calls
    return {
        "totals": totals, "by_bucket": dict(by_bucket), "by_agent": dict(agents),
        "chosen_by": dict(chosen_by), "ran_on": dict(ran_on),
    }  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("preset", ["24h", "7d", "30d"])  # hour buckets, then day buckets
def test_the_overview_sums_in_the_database_agree_with_the_rows_added_one_by_one(
    preset: str,
) -> None:
    spans = []
    for index in range(60):
        spans.append(
            make_span(
                started_at=(NOW - timedelta(hours=index * 7, minutes=index)).isoformat(),
                kind="llm" if index % 5 == 0 else "tool",
                tool_name="" if index % 5 == 0 else ("calculator", "web_search")[index % 2],
                model="m" if index % 5 == 0 else "",
                status=("ok", "error", "stopped")[index % 3],
                error_kind="timeout" if index % 3 == 1 else "",
                chosen_by=("planner", "llm", None)[index % 3],
                ran_on=("builtin", "mcp:time", None)[index % 3],
                agent=("bot", "", "helper")[index % 3],
                input_tokens=index * 10,
                output_tokens=index,
                result_tokens=index * 2,
                cost_usd=index / 7,
            )  # fmt: skip
        )
    _record(*spans)
    time_range, _ = parse_range({"range": preset}, NOW + timedelta(seconds=1))
    summary, expected = activity(time_range), _activity_row_by_row(time_range)
    assert summary.totals.calls > 0 and len(expected["by_bucket"]) > 1
    assert summary.totals.cost_usd == pytest.approx(expected["totals"].cost_usd)
    expected["totals"].cost_usd = summary.totals.cost_usd
    assert summary.totals == expected["totals"]
    for name in ("by_bucket", "by_agent"):
        found = getattr(summary, name)
        assert found.keys() == expected[name].keys()
        for key, totals in found.items():
            assert totals.cost_usd == pytest.approx(expected[name][key].cost_usd)
            expected[name][key].cost_usd = totals.cost_usd
            assert totals == expected[name][key], (name, key)
    assert summary.tool_calls_by_chosen_by == expected["chosen_by"]
    assert summary.tool_calls_by_ran_on == expected["ran_on"]
