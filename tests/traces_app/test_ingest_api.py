"""POST /api/v1/invocations: storing batches, per-item outcomes, idempotency, gzip, defaults."""

from __future__ import annotations

import gzip
import json
import secrets
import zlib
from datetime import UTC, datetime, timedelta

import pytest

from traces_app.models import Invocation, Trace

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def at(seconds: float) -> str:
    """Return the ISO time `seconds` after T0."""
    return (T0 + timedelta(seconds=seconds)).isoformat()


def trace_totals(trace_id: str) -> dict:
    fields = [
        "span_count", "tool_calls", "llm_calls", "failed_calls", "input_tokens",
        "output_tokens", "cost_usd", "tool_latency_ms", "started_at", "ended_at", "status",
        "agent", "session_id", "request_text",
    ]  # fmt: skip
    return Trace.objects.filter(trace_id=trace_id).values(*fields).get()


def test_it_stores_every_field_of_a_span(report, span):
    sent = span(
        parent_span_id="00f067aa0ba902b7",
        tool_name="web_search",
        tool_call_id="call_42",
        chosen_by="planner",
        ran_on="mcp:search-server",
        agent="researcher",
        model="gpt-4o",
        arguments={"query": "django ninja"},
        result={"hits": ["a", "b"]},
        status="error",
        error_kind="timeout",
        error_message="timed out after 30 s",
        started_at=at(0),
        latency_ms=1234.5,
        input_tokens=11,
        output_tokens=22,
        result_tokens=33,
        cost_usd=0.0125,
        attempt=2,
    )

    response = report(sent)

    assert response.status_code == 200
    row = Invocation.objects.get(trace_id=sent["trace_id"], span_id=sent["span_id"])
    stored = {name: getattr(row, name) for name in sent}
    assert stored == {**sent, "started_at": T0}


def test_it_reports_each_accepted_item(report, span):
    first, second = span(), span()

    response = report(first, second)

    assert response.json() == {
        "accepted": 2,
        "duplicates": 0,
        "rejected": 0,
        "items": [
            {
                "index": index,
                "status": "accepted",
                "trace_id": item["trace_id"],
                "span_id": item["span_id"],
                "errors": [],
            }
            for index, item in enumerate([first, second])
        ],
    }


def test_it_sums_a_traces_spans_into_its_totals(report, span):
    trace_id = secrets.token_hex(16)
    common = {"trace_id": trace_id, "agent": "planner-bot", "session_id": "sess-7"}
    llm = span(
        **common,
        kind="llm",
        tool_name="",
        model="gpt-4o",
        request_text="What is 6 times 7?",
        started_at=at(0),
        latency_ms=800,
        input_tokens=100,
        output_tokens=50,
        cost_usd=0.01,
    )
    tool_ok = span(**common, started_at=at(1), latency_ms=10, cost_usd=0.001)
    tool_failed = span(
        **common, started_at=at(2), latency_ms=20, status="error", error_kind="tool_error"
    )

    assert report(llm, tool_ok, tool_failed).status_code == 200

    assert trace_totals(trace_id) == {
        "span_count": 3,
        "tool_calls": 2,
        "llm_calls": 1,
        "failed_calls": 1,
        "input_tokens": 100,
        "output_tokens": 50,
        "cost_usd": pytest.approx(0.011),
        "tool_latency_ms": 30.0,
        "started_at": T0,
        "ended_at": T0 + timedelta(seconds=2, milliseconds=20),
        "status": "error",
        "agent": "planner-bot",
        "session_id": "sess-7",
        "request_text": "What is 6 times 7?",
    }


def test_it_adds_a_later_batch_to_the_trace_totals(report, span):
    trace_id = secrets.token_hex(16)
    report(span(trace_id=trace_id, started_at=at(10), latency_ms=5, input_tokens=3))

    report(
        span(trace_id=trace_id, started_at=at(5), latency_ms=1, input_tokens=4),
        span(trace_id=trace_id, started_at=at(20), latency_ms=7, status="error"),
    )

    totals = trace_totals(trace_id)
    assert (totals["span_count"], totals["input_tokens"], totals["failed_calls"]) == (3, 7, 1)
    assert totals["started_at"] == T0 + timedelta(seconds=5)
    assert totals["ended_at"] == T0 + timedelta(seconds=20, milliseconds=7)
    assert totals["status"] == "error"


def test_it_keeps_the_first_known_agent_session_and_request(report, span):
    trace_id = secrets.token_hex(16)
    report(span(trace_id=trace_id, agent="", session_id="", request_text=""))
    report(span(trace_id=trace_id, agent="first", session_id="s1", request_text="first ask"))

    report(span(trace_id=trace_id, agent="second", session_id="s2", request_text="other ask"))

    totals = trace_totals(trace_id)
    assert (totals["agent"], totals["session_id"], totals["request_text"]) == (
        "first",
        "s1",
        "first ask",
    )


@pytest.mark.parametrize("together", [True, False], ids=["one batch", "a batch each"])
def test_it_keeps_the_request_of_the_earliest_span_whatever_arrives_first(report, span, together):
    trace_id = secrets.token_hex(16)
    asks = [
        span(trace_id=trace_id, kind="llm", tool_name="", request_text=f"ask {n}", started_at=at(n))
        for n in (3, 1, 2)
    ]

    if together:
        report(*asks)
    else:
        for ask in asks:
            report(ask)

    assert trace_totals(trace_id)["request_text"] == "ask 1"


def test_it_names_a_trace_after_its_root_spans_agent(report, span):
    trace_id = secrets.token_hex(16)
    # Span ids sort the sub-agent's call first in the batch; the root still names the trace.
    sub_agent_call = span(trace_id=trace_id, span_id="0" * 15 + "1", parent_span_id="f" * 16,
                          agent="researcher")  # fmt: skip
    root = span(trace_id=trace_id, span_id="f" * 16, agent="planner-bot", kind="agent",
                tool_name="")  # fmt: skip

    report(sub_agent_call, root)

    assert trace_totals(trace_id)["agent"] == "planner-bot"


def test_it_stores_the_valid_items_of_a_mixed_batch(report, span):
    good = [span(), span()]
    bad = [span(latency_ms=-1), span(started_at="yesterday")]

    response = report(good[0], bad[0], good[1], bad[1])

    assert response.status_code == 200
    assert [item["status"] for item in response.json()["items"]] == [
        "accepted",
        "rejected",
        "accepted",
        "rejected",
    ]
    stored = set(Invocation.objects.values_list("trace_id", "span_id"))
    assert stored == {(s["trace_id"], s["span_id"]) for s in good}
    assert set(Trace.objects.values_list("trace_id", flat=True)) == {s["trace_id"] for s in good}


def test_it_names_the_field_and_reason_of_a_rejected_item(report, span):
    bad = span(latency_ms=-1)

    item = report(span(), bad).json()["items"][1]

    assert item["index"] == 1
    assert (item["trace_id"], item["span_id"]) == (bad["trace_id"], bad["span_id"])
    assert item["errors"] == [
        {"field": "latency_ms", "reason": "Input should be greater than or equal to 0 (got -1)"}
    ]


def test_it_answers_422_when_every_item_is_rejected(report, span):
    response = report(span(status="maybe"), span(attempt=0))

    assert response.status_code == 422
    assert response.json()["accepted"] == 0
    assert response.json()["rejected"] == 2
    assert not Invocation.objects.exists()
    assert not Trace.objects.exists()


def test_it_reports_a_reposted_batch_as_duplicates(report, span):
    batch = [span(), span(), span()]
    report(*batch)

    response = report(*batch)

    assert response.status_code == 200
    body = response.json()
    assert (body["accepted"], body["duplicates"]) == (0, 3)
    assert {item["status"] for item in body["items"]} == {"duplicate"}
    assert Invocation.objects.count() == 3


def test_it_does_not_count_a_reposted_span_twice_in_its_trace(report, span):
    trace_id = secrets.token_hex(16)
    batch = [span(trace_id=trace_id, input_tokens=5), span(trace_id=trace_id, input_tokens=7)]
    report(*batch)
    before = trace_totals(trace_id)

    report(*batch)

    after = trace_totals(trace_id)
    assert after == before
    assert (after["span_count"], after["input_tokens"]) == (2, 12)


def test_it_keeps_the_first_copy_of_a_span_repeated_in_one_batch(report, span):
    first = span(result={"copy": 1}, input_tokens=1)
    again = {**first, "result": {"copy": 2}, "input_tokens": 100}

    response = report(first, again, span())

    assert [item["status"] for item in response.json()["items"]] == [
        "accepted",
        "duplicate",
        "accepted",
    ]
    assert Invocation.objects.get(span_id=first["span_id"]).result == {"copy": 1}
    assert trace_totals(first["trace_id"])["input_tokens"] == 1


def test_it_treats_upper_case_ids_as_the_same_span(report, span):
    sent = span()
    report(sent)

    shouting = {**sent, "trace_id": sent["trace_id"].upper(), "span_id": sent["span_id"].upper()}
    response = report(shouting)

    assert response.json()["items"][0]["status"] == "duplicate"
    assert Invocation.objects.count() == 1


def test_it_reads_a_gzip_body(api, span):
    sent = span()
    body = gzip.compress(json.dumps({"invocations": [sent]}).encode())

    response = api.post(
        "/invocations",
        content=body,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )

    assert response.status_code == 200, response.text
    assert Invocation.objects.filter(span_id=sent["span_id"]).exists()


def test_it_reads_a_deflate_body(api, span):
    sent = span()
    body = zlib.compress(json.dumps({"invocations": [sent]}).encode())

    response = api.post(
        "/invocations",
        content=body,
        headers={"Content-Type": "application/json", "Content-Encoding": "deflate"},
    )

    assert response.status_code == 200, response.text
    assert Invocation.objects.filter(span_id=sent["span_id"]).exists()


def test_it_reads_a_gzip_body_made_of_several_members(api, span):
    sent = [span(), span()]
    text = json.dumps({"invocations": sent}).encode()
    body = gzip.compress(text[:40]) + gzip.compress(text[40:])

    response = api.post(
        "/invocations",
        content=body,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )

    assert response.status_code == 200, response.text
    assert Invocation.objects.count() == 2


def test_it_defaults_tool_spans_to_chosen_by_an_outside_agent_running_remotely(report, span):
    sent = span()
    del sent["chosen_by"], sent["ran_on"]

    report(sent)

    row = Invocation.objects.get()
    assert (row.chosen_by, row.ran_on) == ("external", "remote")


def test_it_leaves_chosen_by_and_ran_on_blank_for_llm_spans(report, span):
    sent = span(kind="llm", tool_name="", model="gpt-4o-mini")
    del sent["chosen_by"], sent["ran_on"]

    report(sent)

    row = Invocation.objects.get()
    assert (row.chosen_by, row.ran_on) == ("", "")


def test_it_fills_in_the_optional_fields(report):
    minimal = {
        "trace_id": secrets.token_hex(16),
        "span_id": secrets.token_hex(8),
        "tool_name": "calculator",
        "status": "ok",
        "started_at": at(0),
        "latency_ms": 1,
    }

    assert report(minimal).status_code == 200

    row = Invocation.objects.values().get()
    assert {key: row[key] for key in ("kind", "parent_span_id", "attempt", "input_tokens")} == {
        "kind": "tool",
        "parent_span_id": "",
        "attempt": 1,
        "input_tokens": 0,
    }
    assert (row["arguments"], row["result"], row["cost_usd"]) == (None, None, 0.0)


def test_it_accepts_a_trace_of_llm_and_agent_spans_without_tools(report, span):
    trace_id = secrets.token_hex(16)
    llm = span(trace_id=trace_id, kind="llm", tool_name="", input_tokens=9)
    step = span(trace_id=trace_id, kind="agent", tool_name="")

    assert report(llm, step).status_code == 200

    totals = trace_totals(trace_id)
    assert (totals["span_count"], totals["tool_calls"], totals["llm_calls"]) == (2, 0, 1)


def test_it_documents_the_batch_body_in_the_openapi_schema(anonymous_api):
    schema = anonymous_api.get("/openapi.json").json()

    body = schema["paths"]["/api/v1/invocations"]["post"]["requestBody"]
    batch = body["content"]["application/json"]["schema"]
    assert batch["properties"]["invocations"]["maxItems"] == 1000
    assert {"trace_id", "span_id", "status"} <= set(
        batch["properties"]["invocations"]["items"]["required"]
    )


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"Content-Type": "application/json; charset=utf-8"}, id="with charset"),
        pytest.param({"Content-Type": "Application/JSON"}, id="any case"),
        pytest.param(
            {"Content-Type": "application/json", "Content-Encoding": "identity"}, id="identity"
        ),
    ],
)
def test_it_accepts_json_however_it_is_labelled(api, span, headers):
    body = json.dumps({"invocations": [span()]})

    response = api.post("/invocations", content=body, headers=headers)

    assert response.status_code == 200, response.text
    assert Invocation.objects.count() == 1
