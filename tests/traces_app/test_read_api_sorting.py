"""GET /api/v1/traces: name matching (exact, prefix, contains), the wider search, sorting."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

import pytest

from tests.traces_app.test_read_api import walk
from traces_app import api as traces_api

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


@pytest.fixture
def traces(report, span):
    """Store three traces; return their names mapped to their trace ids."""
    ids = {name: secrets.token_hex(16) for name in ("T1", "T2", "T3")}
    sent = [
        span(trace_id=ids["T1"], agent="math-tutor", tool_name="calculator", cost_usd=0.5,
             arguments={"expression": "17% of 2340"}, started_at=at(0), latency_ms=10.0),
        span(trace_id=ids["T2"], agent="research-bot", tool_name="web_search", cost_usd=2.0,
             status="error", error_kind="timeout", error_message="upstream timed out",
             started_at=at(10), latency_ms=900.0),
        span(trace_id=ids["T3"], agent="math-tutor-2", tool_name="calc_pro", cost_usd=1.0,
             request_text="Add the invoices", started_at=at(20), latency_ms=50.0),
    ]  # fmt: skip
    assert report(*sent).json()["accepted"] == 3
    return ids


def names(ids: dict[str, str], items: list[dict]) -> list[str]:
    by_id = {trace_id: name for name, trace_id in ids.items()}
    return [by_id[item["trace_id"]] for item in items]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({"agent": "math"}, set(), id="agent: exact by default"),
        pytest.param({"agent": "math", "match": "prefix"}, {"T1", "T3"}, id="agent prefix"),
        pytest.param({"agent": "TUTOR", "match": "contains"}, {"T1", "T3"}, id="agent contains"),
        pytest.param({"tool": "calc"}, set(), id="tool: exact by default"),
        pytest.param({"tool": "calc", "match": "prefix"}, {"T1", "T3"}, id="tool prefix"),
        pytest.param({"tool": "search", "match": "contains"}, {"T2"}, id="tool contains"),
        pytest.param({"q": "upstream"}, {"T2"}, id="search: error message"),
        pytest.param({"q": "2340"}, {"T1"}, id="search: arguments"),
        pytest.param({"q": "CALC_PRO"}, {"T3"}, id="search: tool name"),
        pytest.param({"q": "invoices"}, {"T3"}, id="search: request"),
    ],
)
def test_it_matches_names_and_searches_spans(api, traces, params, expected):
    items = walk(api, "/traces", **params)

    assert set(names(traces, items)) == expected


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        pytest.param("-started", ["T3", "T2", "T1"], id="newest"),
        pytest.param("started", ["T1", "T2", "T3"], id="oldest"),
        pytest.param("-cost", ["T2", "T3", "T1"], id="cost"),
    ],
)
def test_it_sorts_traces_across_pages(api, traces, sort, expected):
    items = walk(api, "/traces", sort=sort, limit=1)

    assert names(traces, items) == expected


def test_it_refuses_an_unknown_sort_and_a_name_matching_too_many_tools(api, traces, monkeypatch):
    assert api.get("/traces", params={"sort": "-mood"}).status_code == 422
    monkeypatch.setattr(traces_api, "MAX_MATCHED_TOOLS", 1)

    response = api.get("/traces", params={"tool": "c", "match": "contains"})

    assert response.status_code == 422
    assert "matches 3 tools" in response.text
