"""Reads for agents and exporters: traces with their spans in one request, cheap counts."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

import pytest

from traces_app import api as traces_api
from traces_app.models import Trace

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


@pytest.fixture
def traces(report, span):
    """Store three traces of 3, 1 and 5 spans, sent out of time order; return their ids."""
    ids = {name: secrets.token_hex(16) for name in ("A", "B", "C")}
    sent = [
        span(trace_id=ids["A"], tool_name="search", agent="alpha", started_at=at(20)),
        span(trace_id=ids["A"], tool_name="calc", agent="alpha", started_at=at(0)),
        span(trace_id=ids["A"], kind="llm", tool_name="", chosen_by=None, ran_on=None,
             model="gpt-4o", agent="alpha", started_at=at(10)),
        span(trace_id=ids["B"], tool_name="search", agent="beta", status="error",
             error_kind="timeout", request_text="find cheap flights", started_at=at(30)),
        *[span(trace_id=ids["C"], tool_name="calc", agent="gamma", started_at=at(40 + n % 3))
          for n in range(5)],  # three share a start: ordered by arrival
    ]  # fmt: skip
    assert report(*sent).json()["accepted"] == len(sent)
    return ids


def test_it_lists_traces_with_their_spans_as_one_trace_shows_them(api, traces):
    listed = api.get("/traces", params={"include": "spans"}).json()["items"]

    assert [item["trace_id"] for item in listed] == [traces["C"], traces["B"], traces["A"]]
    for item in listed:
        one = api.get(f"/traces/{item['trace_id']}").json()
        assert item["spans"] == one["spans"]  # same shape, same time order
        assert item["spans_truncated"] is False
        assert {**item, "spans": None} == {**one, "spans": None, "spans_truncated": False}


def test_it_orders_each_traces_spans_by_time(api, traces):
    [item] = api.get("/traces", params={"include": "spans", "agent": "alpha"}).json()["items"]

    starts = [span["started_at"] for span in item["spans"]]
    assert starts == sorted(starts) and len(starts) == 3


def test_it_leaves_spans_out_unless_asked(api, traces):
    item = api.get("/traces").json()["items"][0]

    assert "spans" not in item and "spans_truncated" not in item
    assert item["span_count"] == 5


@pytest.mark.parametrize(
    ("spans_limit", "expected"),
    [
        pytest.param(1, {"A": (1, True), "B": (1, False), "C": (1, True)}, id="1"),
        pytest.param(3, {"A": (3, False), "B": (1, False), "C": (3, True)}, id="3"),
        pytest.param(5, {"A": (3, False), "B": (1, False), "C": (5, False)}, id="5"),
        pytest.param(1000, {"A": (3, False), "B": (1, False), "C": (5, False)}, id="1000"),
    ],
)
def test_it_caps_the_spans_of_each_trace_and_says_so(api, traces, spans_limit, expected):
    params = {"include": "spans", "spans_limit": spans_limit}
    listed = api.get("/traces", params=params).json()["items"]
    full = {item["trace_id"]: api.get(f"/traces/{item['trace_id']}").json() for item in listed}

    by_name = {
        name: next(i for i in listed if i["trace_id"] == tid) for name, tid in traces.items()
    }
    got = {name: (len(i["spans"]), i["spans_truncated"]) for name, i in by_name.items()}
    assert got == expected
    for item in listed:  # the earliest spans, in order, and the true total beside them
        assert item["spans"] == full[item["trace_id"]]["spans"][:spans_limit]
        assert item["span_count"] == len(full[item["trace_id"]]["spans"])


def test_it_pages_traces_with_their_spans(api, traces):
    params = {"include": "spans", "limit": 2}
    first = api.get("/traces", params=params).json()
    second = api.get("/traces", params={**params, "cursor": first["next_cursor"]}).json()

    items = first["items"] + second["items"]
    assert [item["trace_id"] for item in items] == [traces["C"], traces["B"], traces["A"]]
    assert [len(item["spans"]) for item in items] == [5, 1, 3]
    assert second["next_cursor"] is None


def test_it_applies_the_filters_with_spans(api, traces):
    params = {"include": "spans", "tool": "search", "status": "error"}
    [item] = api.get("/traces", params=params).json()["items"]

    assert item["trace_id"] == traces["B"]
    assert [span["error_kind"] for span in item["spans"]] == ["timeout"]


def test_it_reads_the_spans_of_a_page_in_one_query(traces, django_assert_num_queries):
    page = list(Trace.objects.order_by("-started_at"))

    with django_assert_num_queries(1):
        traces_api.attach_spans(page, per_trace=2)

    assert [len(trace.spans) for trace in page] == [2, 1, 2]
    assert [trace.spans_truncated for trace in page] == [True, False, True]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        pytest.param({"include": "spans", "limit": 51}, "limit", id="too many traces"),
        pytest.param({"include": "spans", "spans_limit": 0}, "spans_limit", id="no spans"),
        pytest.param({"include": "spans", "spans_limit": 1001}, "spans_limit", id="too many"),
        pytest.param({"include": "events"}, "include", id="unknown include"),
    ],
)
def test_it_refuses_unbounded_or_unknown_includes(api, problem, params, field):
    response = api.get("/traces", params=params)

    assert response.status_code == 422
    assert field in problem(response)


# (listing, filters)
FILTERS = [
    ("/traces", {}), ("/traces", {"agent": "alpha"}), ("/traces", {"tool": "search"}),
    ("/traces", {"tool": "calc"}), ("/traces", {"status": "error"}),
    ("/traces", {"q": "CHEAP"}), ("/traces", {"since": at(25)}),
    ("/traces", {"until": at(25), "chosen_by": "llm"}), ("/traces", {"agent": "nobody"}),
    ("/invocations", {}), ("/invocations", {"tool": "calc"}), ("/invocations", {"kind": "llm"}),
    ("/invocations", {"agent": "gamma", "since": at(41)}),
    ("/invocations", {"error_kind": "timeout"}), ("/invocations", {"status": "ok"}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "params"), FILTERS)
def test_it_counts_what_a_filter_matches(api, traces, path, params):
    listed = api.get(path, params={**params, "limit": 500}).json()["items"]

    response = api.get(f"{path}/count", params=params)

    assert response.status_code == 200
    assert response.json() | {"window": None} == {
        "count": len(listed),
        "exact": True,
        "window": None,
    }


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        pytest.param(8, {"count": 8, "exact": False}, id="more than the limit"),
        pytest.param(9, {"count": 9, "exact": True}, id="exactly the limit"),
        pytest.param(10, {"count": 9, "exact": True}, id="under the limit"),
    ],
)
def test_it_stops_counting_at_the_limit(api, traces, monkeypatch, limit, expected):
    monkeypatch.setattr(traces_api, "COUNT_LIMIT", limit)  # the live server runs in-process

    assert api.get("/invocations/count").json() | {"window": None} == {**expected, "window": None}


def test_it_documents_the_new_reads(api):
    schema = api.get("/openapi.json").json()

    for path in ("/api/v1/traces/count", "/api/v1/invocations/count"):
        operation = schema["paths"][path]["get"]
        assert "10,000" in operation["description"]
        assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/WindowCountOut"
        }
        assert {"401", "422", "503"} <= set(operation["responses"])
    names = {param["name"] for param in schema["paths"]["/api/v1/traces"]["get"]["parameters"]}
    assert {"include", "spans_limit"} <= names
