"""GET /api/v1/chains over real HTTP: pairs, chains, waste and often-failing tools, bad input."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from traces_app import tool_chains as chains

NOW = datetime.now(UTC).replace(microsecond=0)


def trace(*steps: tuple[str, str] | tuple[str, str, dict[str, Any]], minutes_ago: float = 10):
    """Return the spans of one trace calling the steps (tool, status[, fields]) in order."""
    trace_id, start = secrets.token_hex(16), NOW - timedelta(minutes=minutes_ago)
    spans = []
    for index, (tool, status, *more) in enumerate(steps):
        fields = more[0] if more else {}
        spans.append({
            "trace_id": trace_id, "span_id": secrets.token_hex(8), "kind": "tool",
            "tool_name": tool, "status": status, "latency_ms": 5.0,
            "started_at": (start + timedelta(seconds=index)).isoformat(),
            **({"error_kind": "tool_error"} if status == "error" else {}), **fields,
        })  # fmt: skip
    return spans


@pytest.fixture
def sent(report: Callable[..., httpx.Response]) -> dict[str, list[dict[str, Any]]]:
    """Send a small site's traces through POST /api/v1/invocations; return them by name."""
    traces = {
        # search -> fetch -> summarize, three times; fetch failed once and was retried.
        "a": trace(("search", "ok"), ("fetch", "error"), ("fetch", "ok"), ("summarize", "ok")),
        "b": trace(("search", "ok"), ("fetch", "ok"), ("summarize", "ok"), minutes_ago=20),
        "c": trace(("search", "ok"), ("fetch", "error"), ("summarize", "ok"), minutes_ago=30),
        # A flaky tool: 12 calls, 9 failures; and an output the budget cut.
        "d": trace(*[("flaky", "error")] * 9, *[("flaky", "ok")] * 3, minutes_ago=40),
        "e": trace(
            (
                "search",
                "ok",
                {
                    "result_tokens": 4000,
                    "result_reduction": "truncated",
                    "result_tokens_dropped": 3700,
                },
            ),
            ("search", "ok", {"result_tokens": 100}),
            minutes_ago=50,
        ),  # fmt: skip
        "old": trace(("search", "ok"), ("fetch", "ok"), minutes_ago=60 * 24 * 8),
    }
    spans = [span for spans in traces.values() for span in spans]
    response = report(*spans)
    assert response.json()["accepted"] == len(spans), response.text
    return traces


def trace_id(traces: dict[str, list[dict[str, Any]]], name: str) -> str:
    return traces[name][0]["trace_id"]


def test_it_lists_the_chains_with_counts_and_failure_rates(api: httpx.Client, sent: Any) -> None:
    body = api.get("/chains").json()
    found = {tuple(chain["tools"]): chain for chain in body["chains"]}
    three = found[("search", "fetch", "summarize")]
    assert (three["count"], three["traces"], three["failed"]) == (3, 3, 1)
    assert three["failure_rate"] == pytest.approx(1 / 3)
    assert three["trace_ids"] == [trace_id(sent, name) for name in "abc"]  # newest first
    assert (found[("search", "fetch")]["count"], found[("search", "fetch")]["failed"]) == (3, 1)
    # Retries in a row are one step: no chain "fetch then fetch"; the 8-day-old trace is out.
    assert ("fetch", "fetch") not in found and ("flaky",) not in found
    assert body["sample"]["traces_read"] == 5 and body["sample"]["complete"] is True


def test_it_lists_tools_called_together(api: httpx.Client, sent: Any) -> None:
    pairs = {tuple(pair["tools"]): pair for pair in api.get("/chains").json()["pairs"]}
    assert pairs[("fetch", "search")]["traces"] == 3
    assert pairs[("fetch", "search")]["failed_traces"] == 1  # a's fetch ended ok on retry
    assert set(pairs) == {("fetch", "search"), ("fetch", "summarize"), ("search", "summarize")}


def test_it_ranks_the_tools_called_often_that_succeed_rarely(api: httpx.Client, sent: Any) -> None:
    body = api.get("/chains").json()
    assert [row["tool_name"] for row in body["often_failing"]] == ["flaky"]
    [flaky] = body["often_failing"]
    assert (flaky["calls"], flaky["failures"], flaky["trace_ids"]) == (12, 9, [trace_id(sent, "d")])
    assert "most failures" in body["often_failing_ranking"]
    assert api.get("/chains", params={"min_calls": 13}).json()["often_failing"] == []


def test_it_says_per_tool_what_the_token_budget_cut(api: httpx.Client, sent: Any) -> None:
    waste = {row["tool_name"]: row for row in api.get("/chains").json()["waste"]}
    search = waste["search"]
    assert (search["calls"], search["cut_calls"], search["truncated"]) == (5, 1, 1)
    assert search["tokens_dropped"] == 3700 and search["cut_share"] == pytest.approx(0.2)
    assert search["p95_result_tokens"] > search["p50_result_tokens"]
    assert list(waste)[0] == "search"  # the most tokens dropped first
    assert waste["fetch"]["tokens_dropped"] == 0


def test_a_tool_filter_keeps_the_rows_that_hold_it(api: httpx.Client, sent: Any) -> None:
    body = api.get("/chains", params={"tool": "summarize", "min_count": 1}).json()
    assert body["chains"] and all("summarize" in chain["tools"] for chain in body["chains"])
    assert [row["tool_name"] for row in body["waste"]] == ["summarize"]


def test_the_window_and_min_count_bound_what_is_listed(api: httpx.Client, sent: Any) -> None:
    since = (NOW - timedelta(days=9)).isoformat()
    wide = api.get("/chains", params={"since": since, "min_count": 4}).json()
    assert [chain["tools"] for chain in wide["chains"]] == [["search", "fetch"]]
    assert wide["sample"]["traces_read"] == 6


def test_it_reads_only_the_newest_traces_when_the_window_holds_more(
    api: httpx.Client, sent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chains, "MAX_TRACES", 2)
    sample = api.get("/chains").json()["sample"]
    # The live server runs in this process: the patched cap applies to it.
    assert (sample["traces_read"], sample["complete"]) == (2, False)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"min_count": 0}, "min_count"),
        ({"limit": 501}, "limit"),
        ({"tool": "a\nb"}, "tool"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_parameters_get_a_422_naming_them(
    api: httpx.Client, problem: Any, params: dict[str, Any], field: str
) -> None:
    response = api.get("/chains", params=params)
    assert response.status_code == 422
    assert field in problem(response)


def test_since_after_until_is_refused(api: httpx.Client) -> None:
    params = {"since": NOW.isoformat(), "until": (NOW - timedelta(hours=1)).isoformat()}
    response = api.get("/chains", params=params)
    assert response.status_code == 422 and "since must be before until" in response.text


def test_it_needs_a_read_key(anonymous_api: httpx.Client) -> None:
    assert anonymous_api.get("/chains").status_code == 401


def test_it_stops_reading_traces_at_the_span_cap(
    api: httpx.Client, sent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chains, "MAX_SPANS", 5)  # a (4 tool spans) fits, b (3 more) would not
    sample = api.get("/chains").json()["sample"]
    assert (sample["traces_read"], sample["spans_read"], sample["complete"]) == (1, 4, False)
