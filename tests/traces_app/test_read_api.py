"""Reading back: traces and invocations with filters and cursors, one trace, tool statistics."""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime, timedelta

import pytest

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


@pytest.fixture
def spans(report, span):
    """Store five spans in four traces; return their names mapped to (trace_id, span_id)."""
    traces = {name: secrets.token_hex(16) for name in ("T1", "T2", "T3", "T4")}
    sent = {
        "a": span(trace_id=traces["T1"], agent="alpha", tool_name="search", chosen_by="llm",
                  request_text="Summarise the QUARTERLY report", started_at=at(0)),
        "b": span(trace_id=traces["T1"], agent="alpha", tool_name="calc", chosen_by="planner",
                  status="error", error_kind="timeout", started_at=at(10)),
        "c": span(trace_id=traces["T2"], agent="beta", tool_name="search", chosen_by="workflow",
                  request_text="find cheap flights", started_at=at(20)),
        "d": span(trace_id=traces["T3"], agent="beta", kind="llm", tool_name="", chosen_by=None,
                  ran_on=None, model="gpt-4o", started_at=at(30)),
        "e": span(trace_id=traces["T4"], agent="gamma", tool_name="calc", chosen_by="external",
                  started_at=at(-3 * 24 * 3600)),
    }  # fmt: skip
    assert report(*sent.values()).json()["accepted"] == 5
    ids = {name: (item["trace_id"], item["span_id"]) for name, item in sent.items()}
    return {**ids, **traces}


def walk(api, path, **params):
    """Return every item of a listing, following next_cursor page by page."""
    items, cursor = [], None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = api.get(path, params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        items += body["items"]
        cursor = body["next_cursor"]
        if cursor is None:
            return items


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({}, "abcde", id="no filter"),
        pytest.param({"agent": "alpha"}, "ab", id="agent"),
        pytest.param({"tool": "search"}, "ac", id="tool"),
        pytest.param({"status": "error"}, "b", id="status"),
        pytest.param({"chosen_by": "planner"}, "b", id="chosen_by"),
        pytest.param({"kind": "llm"}, "d", id="kind"),
        pytest.param({"error_kind": "timeout"}, "b", id="error_kind"),
        pytest.param({"since": at(5)}, "bcd", id="since"),
        pytest.param({"until": at(15)}, "abe", id="until"),
        pytest.param({"since": at(5), "until": at(15)}, "b", id="since and until"),
        pytest.param({"agent": "beta", "tool": "search"}, "c", id="agent and tool"),
        pytest.param({"agent": "nobody"}, "", id="no match"),
    ],
)
def test_it_filters_invocations(api, spans, params, expected):
    items = api.get("/invocations", params=params).json()["items"]

    assert {(i["trace_id"], i["span_id"]) for i in items} == {spans[name] for name in expected}


def test_it_filters_invocations_by_trace(api, spans):
    items = api.get("/invocations", params={"trace_id": spans["T1"]}).json()["items"]

    assert {item["span_id"] for item in items} == {spans["a"][1], spans["b"][1]}


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({}, ["T1", "T2", "T3", "T4"], id="no filter"),
        pytest.param({"agent": "beta"}, ["T2", "T3"], id="agent"),
        pytest.param({"tool": "calc"}, ["T1", "T4"], id="tool"),
        pytest.param({"status": "error"}, ["T1"], id="status"),
        pytest.param({"chosen_by": "workflow"}, ["T2"], id="chosen_by"),
        pytest.param({"since": at(-1)}, ["T1", "T2", "T3"], id="since"),
        pytest.param({"until": at(0)}, ["T4"], id="until"),
        pytest.param({"q": "flights"}, ["T2"], id="request text"),
        pytest.param({"q": "quarterly"}, ["T1"], id="request text, any case"),
        pytest.param({"tool": "search", "agent": "alpha"}, ["T1"], id="tool and agent"),
    ],
)
def test_it_filters_traces(api, spans, params, expected):
    items = api.get("/traces", params=params).json()["items"]

    assert {item["trace_id"] for item in items} == {spans[name] for name in expected}


def test_it_lists_newest_first(api, spans):
    items = api.get("/invocations").json()["items"]

    assert [(i["trace_id"], i["span_id"]) for i in items] == [spans[n] for n in "dcbae"]


def test_it_walks_every_span_exactly_once_when_many_share_a_start(api, report, span):
    trace_ids = [secrets.token_hex(16) for _ in range(3)]
    same_time = [span(trace_id=trace_ids[n % 3], started_at=at(0)) for n in range(23)]
    others = [span(started_at=at(seconds)) for seconds in (-5, 5, 10)]
    report(*same_time, *others)

    items = walk(api, "/invocations", limit=5)

    sent = {(s["trace_id"], s["span_id"]) for s in same_time + others}
    assert len(items) == 26
    assert {(i["trace_id"], i["span_id"]) for i in items} == sent
    starts = [datetime.fromisoformat(item["started_at"]) for item in items]
    assert starts == sorted(starts, reverse=True)


def test_it_walks_every_trace_exactly_once_when_many_share_a_start(api, report, span):
    sent = [span(started_at=at(0)) for _ in range(12)] + [span(started_at=at(1))]
    report(*sent)

    items = walk(api, "/traces", limit=5)

    assert sorted(item["trace_id"] for item in items) == sorted(s["trace_id"] for s in sent)


def test_it_gives_no_cursor_on_the_last_page(api, report, span):
    report(span(), span())

    body = api.get("/invocations", params={"limit": 2}).json()

    assert (len(body["items"]), body["next_cursor"]) == (2, None)


def cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize("path", ["/invocations", "/traces"])
@pytest.mark.parametrize(
    "bad_cursor",
    [
        pytest.param("not a cursor!", id="not base64"),
        pytest.param("abc", id="bad padding"),
        pytest.param(cursor("no separator"), id="no separator"),
        pytest.param(cursor("yesterday|12"), id="not a time"),
        pytest.param(base64.urlsafe_b64encode(b"\xff\xfe|1").decode(), id="not UTF-8"),
    ],
)
def test_it_refuses_a_cursor_it_did_not_make(api, path, bad_cursor):
    response = api.get(path, params={"cursor": bad_cursor})

    assert response.status_code == 422
    assert response.json() == {"detail": "cursor is not one this API returned"}


def test_it_refuses_a_cursor_with_a_bad_position(api):
    response = api.get("/invocations", params={"cursor": cursor(f"{at(0)}|twelve")})

    assert response.status_code == 422
    assert response.json() == {"detail": "cursor is not one this API returned"}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        pytest.param({"limit": 0}, "limit", id="limit 0"),
        pytest.param({"limit": 501}, "limit", id="limit 501"),
        pytest.param({"limit": "ten"}, "limit", id="limit a word"),
        pytest.param({"since": "last week"}, "since", id="since not a time"),
    ],
)
def test_it_refuses_bad_listing_parameters(api, params, field):
    response = api.get("/invocations", params=params)

    assert response.status_code == 422
    assert [error["field"] for error in response.json()["errors"]] == [field]


def test_it_shows_one_trace_with_its_spans_in_order(api, report, span):
    trace_id = secrets.token_hex(16)
    late, early, middle = (
        span(trace_id=trace_id, started_at=at(seconds), latency_ms=10) for seconds in (20, 0, 10)
    )
    report(late, early, middle)

    response = api.get(f"/traces/{trace_id}")

    assert response.status_code == 200
    trace = response.json()
    assert [s["span_id"] for s in trace["spans"]] == [
        early["span_id"],
        middle["span_id"],
        late["span_id"],
    ]
    assert (trace["trace_id"], trace["span_count"], trace["duration_ms"]) == (trace_id, 3, 20010)


def test_it_shows_a_span_with_every_field(api, report, span):
    sent = span(
        parent_span_id="00f067aa0ba902b7",
        model="gpt-4o",
        attempt=2,
        started_at=at(0),
        coercions=['expression: number 12 -> string "12"'],
        tool_type="function",
        tool_description="Evaluate an arithmetic expression.",
        result_reduction="truncated",
        result_tokens_dropped=2,
    )
    report(sent)

    shown = api.get(f"/traces/{sent['trace_id']}").json()["spans"][0]

    assert shown == {
        **sent,
        "started_at": shown["started_at"],
        "error_kind": "",
        "error_message": "",
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": 0.0,
    }
    assert datetime.fromisoformat(shown["started_at"]) == T0


def test_it_finds_a_trace_by_its_upper_case_id(api, report, span):
    sent = span()
    report(sent)

    response = api.get(f"/traces/{sent['trace_id'].upper()}")

    assert response.status_code == 200
    assert response.json()["trace_id"] == sent["trace_id"]


def test_it_answers_404_for_an_unknown_trace(api):
    response = api.get(f"/traces/{secrets.token_hex(16)}")

    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}


@pytest.mark.parametrize("trace_id", ["abc", "z" * 32, "a" * 33])
def test_it_answers_422_for_a_malformed_trace_id(api, trace_id):
    response = api.get(f"/traces/{trace_id}")

    assert response.status_code == 422
    assert response.json() == {"detail": "trace_id must be 32 hex characters"}


@pytest.fixture
def tool_spans(report, span):
    """Store search and calc calls in the last hour, plus spans the stats must leave out."""
    search = [
        span(tool_name="search", latency_ms=ms, started_at=at(n), input_tokens=n, result_tokens=2)
        for n, ms in enumerate([40, 10, 100, 30, 20])
    ]
    search[2].update(status="error", error_kind="timeout")
    calc = [
        span(tool_name="calc", latency_ms=7, cost_usd=0.5, started_at=at(1)),
        span(tool_name="calc", latency_ms=5, cost_usd=0.25, started_at=at(2)),
    ]
    left_out = [
        span(kind="llm", tool_name="", latency_ms=900, input_tokens=1000, started_at=at(3)),
        span(tool_name="search", latency_ms=5000, started_at=at(-2 * 3600)),
        span(tool_name="old_tool", latency_ms=1, started_at=at(-3 * 24 * 3600)),
    ]
    report(*search, *calc, *left_out)


def test_it_computes_per_tool_statistics_over_a_window(api, tool_spans):
    response = api.get("/tools/stats", params={"since": at(-60), "until": at(60)})

    assert response.status_code == 200
    assert response.json()["tools"] == [
        {
            "tool_name": "calc",
            "calls": 2,
            "failures": 0,
            "stopped": 0,
            "success_rate": 1.0,
            "p50_latency_ms": pytest.approx(6.0),
            "p95_latency_ms": pytest.approx(6.9),  # 5 + 0.95 * (7 - 5)
            "input_tokens": 0,
            "output_tokens": 0,
            "result_tokens": 8,
            "cost_usd": pytest.approx(0.75),
        },
        {
            "tool_name": "search",
            "calls": 5,
            "failures": 1,
            "stopped": 0,
            "success_rate": 0.8,
            "p50_latency_ms": pytest.approx(30.0),
            "p95_latency_ms": pytest.approx(88.0),  # 40 + 0.8 * (100 - 40)
            "input_tokens": 0 + 1 + 2 + 3 + 4,
            "output_tokens": 0,
            "result_tokens": 10,
            "cost_usd": 0.0,
        },
    ]


def test_it_reports_the_window_it_used(api):
    body = api.get("/tools/stats", params={"since": at(-60), "until": at(60)}).json()

    assert datetime.fromisoformat(body["since"]) == T0 - timedelta(seconds=60)
    assert datetime.fromisoformat(body["until"]) == T0 + timedelta(seconds=60)


def test_it_takes_the_last_24_hours_by_default(api, tool_spans):
    tools = api.get("/tools/stats").json()["tools"]

    assert {tool["tool_name"]: tool["calls"] for tool in tools} == {"calc": 2, "search": 6}


def test_it_gives_percentiles_of_a_single_call(api, report, span):
    report(span(tool_name="lonely", latency_ms=12.5, started_at=at(0)))

    tool = api.get("/tools/stats").json()["tools"][0]

    assert (tool["p50_latency_ms"], tool["p95_latency_ms"]) == (12.5, 12.5)


def test_it_gives_no_tools_for_an_empty_window(api, tool_spans):
    response = api.get("/tools/stats", params={"since": at(3600), "until": at(7200)})

    assert response.json()["tools"] == []


def test_it_refuses_a_window_that_ends_before_it_starts(api):
    response = api.get("/tools/stats", params={"since": at(60), "until": at(0)})

    assert response.status_code == 422
    assert response.json() == {"detail": "since must be before until"}
