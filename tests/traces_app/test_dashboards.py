"""Dashboard reads: tool and span totals over a range come from the rollups, per bucket too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import make_span
from traces_app.dashboards import activity, tool_series, tool_totals
from traces_app.models import ToolRollup
from traces_app.ranges import parse_range
from traces_app.schemas import InvocationIn
from traces_app.services import record_invocations

NOW = datetime.now(UTC)
HOUR_AGO = NOW - timedelta(hours=1)


@pytest.fixture(autouse=True)
def refresh_after_every_batch(settings: Any) -> None:
    settings.ARES_ROLLUP_REFRESH_INTERVAL_S = 0


def _record(*spans: dict[str, Any]) -> None:
    record_invocations([InvocationIn.model_validate(span) for span in spans])


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
