"""GET /api/v1/traces answers, byte for byte, what validating it through TracePage gave.

The listing builds its answer as plain data and renders it without ninja's validation
(issue 28: that validation was most of the request's time with include=spans). These
tests render the same page the way it was rendered before, from the model instances
validated through the schema, and compare the bytes; and they compare the endpoint's
OpenAPI description with the one recorded before the change (tests/data).
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from ares_site.api import api as site_api
from traces_app.api import TracePage
from traces_app.models import Invocation, Trace

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
OPENAPI_RECORD = Path(__file__).resolve().parents[1] / "data" / "trace_list_openapi.json"
OPENAI_KEY = "sk-" + "a1B2c3D4e5" * 5
BIG = 40 * 1024  # over ARES_PAYLOAD_MAX_BYTES (16 KiB): stored truncated


def at(seconds: float, offset_hours: float = 0, microsecond: int = 0) -> str:
    """Return T0 + seconds in ISO 8601, written in a zone `offset_hours` from UTC."""
    moment = (T0 + timedelta(seconds=seconds)).replace(microsecond=microsecond)
    return moment.astimezone(timezone(timedelta(hours=offset_hours))).isoformat()


@pytest.fixture
def traces(report, span):
    """Store traces holding every kind of field; return their ids by name."""
    ids = {name: secrets.token_hex(16) for name in ("full", "empty", "long", "old")}
    floats = [1e-7, 1e300, -0.0, 0.1 + 0.2, 12.0, -3.5, 2**53 + 1, 0]
    sent = [
        span(
            trace_id=ids["full"], tool_name="web_search", chosen_by="llm", ran_on="mcp:demo.srv",
            tool_type="function", tool_description="Searches the web — quickly, «safely»",
            agent="research-bot", session_id="s-1", request_text="Trouve un café à 東京 🚀",
            arguments={"query": "café 東京 🚀 \u202eevil", "api_key": OPENAI_KEY,
                       "nested": {"password": "hunter2", "values": floats, "none": None,
                                  "flags": [True, False], "empty": {}, "list": []}},
            result={"text": f"Authorization: Bearer {OPENAI_KEY}", "score": 0.875},
            started_at=at(0, 5.5, 123456), latency_ms=0.1, input_tokens=12, output_tokens=3,
            result_tokens=7, cost_usd=1e-9, attempt=2,
            coercions=['n: string "12" -> integer 12', "ünïcode: kept"],
        ),
        span(
            trace_id=ids["full"], kind="llm", tool_name="", chosen_by=None, ran_on=None,
            model="gpt-4o-mini", agent="research-bot", arguments=None,
            result="x" * BIG, result_reduction="truncated", result_tokens_dropped=120,
            started_at=at(1, -8, 1), latency_ms=1234.5678, cost_usd=0.0123,
        ),
        span(
            trace_id=ids["full"], kind="agent", tool_name="planner", chosen_by="planner",
            ran_on="none", parent_span_id=secrets.token_hex(8), status="stopped",
            arguments={"blob": ["y" * 100] * (BIG // 100)}, result=None,
            started_at=at(2), latency_ms=5,
        ),
        span(
            trace_id=ids["full"], kind="other", tool_name="fetch", chosen_by="workflow",
            status="error", error_kind="timeout",
            error_message=f'gave up after 30 s; token={OPENAI_KEY} \\ "quoted" \x07 ☃',
            arguments="not json {", result=[1, "two", 3.0],
            started_at=at(3, 14), latency_ms=30000,
        ),
        span(
            trace_id=ids["empty"], tool_name="noop", tool_call_id="", chosen_by="external",
            ran_on="remote", agent="", arguments={}, result=[], coercions=[],
            started_at=at(10), latency_ms=0, result_tokens=0,
        ),
        *[
            span(trace_id=ids["long"], tool_name=f"step_{n}", agent="looper",
                 started_at=at(20 + n // 3), latency_ms=n + 0.5)
            for n in range(7)
        ],  # several share a start: ordered by arrival
        span(trace_id=ids["old"], tool_name="calc", agent="archivist",
             started_at=at(-2 * 24 * 3600, 2, 999999), latency_ms=2.25),
    ]  # fmt: skip
    assert report(*sent).json()["accepted"] == len(sent)
    Trace.objects.note_dialect([ids["long"]], "genai")
    return ids


def as_validated_before(answer: dict[str, Any], spans_limit: int | None) -> bytes:
    """Return the page as ninja rendered it before issue 28: the view's model instances
    validated through TracePage (exclude_unset), each trace's spans read as a trace's own."""
    traces = [Trace.objects.get(pk=item["trace_id"]) for item in answer["items"]]
    if spans_limit is not None:
        for trace in traces:
            spans = list(Invocation.objects.of_trace(trace).order_by("started_at", "pk"))
            trace.spans, trace.spans_truncated = spans[:spans_limit], len(spans) > spans_limit
    window = {
        name: datetime.fromisoformat(value) if name in ("since", "until") and value else value
        for name, value in answer["window"].items()
    }
    page = {"next_cursor": answer["next_cursor"], "window": window, "items": traces}
    dumped = TracePage.model_validate(page).model_dump(exclude_unset=True)
    return site_api.renderer.render(None, dumped, response_status=200).encode()


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"include": "spans"}, id="with spans"),
        pytest.param({"include": "spans", "spans_limit": 2}, id="spans cut"),
        pytest.param({"include": "spans", "spans_limit": 7}, id="spans just fit"),
        pytest.param({}, id="no spans"),
        pytest.param({"limit": 500}, id="no spans, largest page"),
        pytest.param({"include": "spans", "sort": "-cost"}, id="by cost"),
        pytest.param({"include": "spans", "sort": "-duration"}, id="by duration"),
        pytest.param({"include": "spans", "sort": "started"}, id="oldest first"),
        pytest.param({"include": "spans", "since": at(-3 * 24 * 3600), "until": at(5)},
                     id="given window"),
        pytest.param({"include": "spans", "agent": "looper"}, id="filtered"),
        pytest.param({"include": "spans", "agent": "nobody"}, id="nothing found"),
    ],
)  # fmt: skip
def test_it_answers_as_validating_through_the_schema_did(api, traces, params):
    response = api.get("/traces", params=params)

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    limit = (params.get("spans_limit") or 1000) if params.get("include") else None
    assert response.content == as_validated_before(response.json(), limit)


def test_it_answers_every_page_as_validating_through_the_schema_did(api, traces):
    params: dict[str, Any] = {"include": "spans", "limit": 1, "spans_limit": 3}
    pages = 0
    while True:
        response = api.get("/traces", params=params)
        answer = response.json()
        assert response.content == as_validated_before(answer, 3)
        pages += 1
        if answer["next_cursor"] is None:
            break
        params["cursor"] = answer["next_cursor"]

    assert pages == 4  # one trace a page, the old one too (within the default 7 days)


def test_the_fixture_holds_every_kind_of_field(api, traces):
    items = api.get("/traces", params={"include": "spans", "since": at(-3 * 24 * 3600)}).json()
    spans = [span for item in items["items"] for span in item["spans"]]

    full = next(item for item in items["items"] if item["trace_id"] == traces["full"])
    search = full["spans"][0]
    assert search["arguments"]["api_key"] == "[REDACTED]"
    assert search["arguments"]["query"] == "café 東京 🚀 \u202eevil"
    assert search["started_at"].endswith("Z") and ".123456" in search["started_at"]
    assert full["spans"][1]["result"].endswith("bytes]")  # text cut, with its marker
    assert full["spans"][2]["arguments"]["__truncated__"] is True
    assert '\\ "quoted" \x07 ☃' in full["spans"][3]["error_message"]
    assert "[REDACTED]" in full["spans"][3]["error_message"]
    assert {span["kind"] for span in spans} == {"tool", "llm", "agent", "other"}
    assert {span["status"] for span in spans} == {"ok", "error", "stopped"}
    assert any(span["arguments"] is None for span in spans)
    assert any(span["parent_span_id"] == "" for span in spans)
    assert any(item["dialect"] == "genai" for item in items["items"])
    assert len(items["items"]) == 4


def test_it_keeps_the_openapi_description_of_the_listing(api):
    schema = api.get("/openapi.json").json()

    assert listing_description(schema) == json.loads(OPENAPI_RECORD.read_text())


def listing_description(schema: dict[str, Any]) -> dict[str, Any]:
    """Return GET /api/v1/traces's operation and every component schema it refers to."""
    operation = schema["paths"]["/api/v1/traces"]["get"]
    components: dict[str, Any] = {}
    todo: list[Any] = [operation]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
        elif isinstance(node, dict):
            ref = node.get("$ref")
            name = ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None
            if name and name not in components:
                components[name] = schema["components"]["schemas"][name]
                todo.append(components[name])
            todo.extend(node.values())
    return {"operation": operation, "components": dict(sorted(components.items()))}
