"""POST /api/v1/scores and GET /api/v1/scores over real HTTP: definitions check every value."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from traces_app.models import Score, ScoreDefinition
from traces_app.scores.judgements import settle_pending_scores

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def definitions(db: None) -> None:
    """The shipped boolean scores, and a numeric and a categorical one."""
    for name in ("feedback", "result_correct"):
        ScoreDefinition.objects.get_or_create(name=name, defaults={"data_type": "boolean"})
    ScoreDefinition.objects.create(
        name="helpfulness", data_type="numeric", min_value=0, max_value=1
    )
    ScoreDefinition.objects.create(
        name="verdict", data_type="categorical", categories=["right", "partly", "wrong"]
    )


@pytest.fixture
def scores_api(live_server: Any, make_key: Callable[..., str]) -> httpx.Client:
    headers = {"Authorization": f"Bearer {make_key('score', 'read', name='judge-bot')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=30) as client:
        yield client


@pytest.fixture
def stored_span(api: httpx.Client, span: Callable[..., dict]) -> dict[str, Any]:
    sent = span()
    assert api.post("/invocations", json={"invocations": [sent]}).status_code == 200
    return sent


def score(trace_id: str, span_id: str = "", **fields: Any) -> dict[str, Any]:
    return {"name": "result_correct", "value": False, "trace_id": trace_id, "span_id": span_id,
            **fields}  # fmt: skip


def test_it_stores_a_score_of_a_stored_span_and_reads_it_back(definitions, scores_api, stored_span):
    sent = score(stored_span["trace_id"], stored_span["span_id"], source="human",
                 comment="the sum was wrong")  # fmt: skip

    response = scores_api.post("/scores", json={"scores": [sent]})

    assert response.status_code == 200, response.text
    [item] = response.json()["items"]
    assert (item["status"], item["pending"], item["errors"]) == ("accepted", False, [])
    [shown] = scores_api.get("/scores", params={"trace_id": stored_span["trace_id"]}).json()
    assert shown["id"] == item["id"]
    assert (shown["name"], shown["value"], shown["data_type"]) == (
        "result_correct", False, "boolean",
    )  # fmt: skip
    assert (shown["source"], shown["comment"], shown["span_id"]) == (
        "human", "the sum was wrong", stored_span["span_id"],
    )  # fmt: skip
    assert shown["reported_by"].startswith("key judge-bot")


def test_it_rejects_each_value_that_does_not_fit_its_definition_and_keeps_the_rest(
    definitions, scores_api, stored_span
):
    ids = (stored_span["trace_id"], stored_span["span_id"])
    batch = [
        score(*ids, name="helpfulness", value=0.25),
        score(*ids, name="helpfulness", value=1.5),
        score(*ids, name="helpfulness", value="high"),
        score(*ids, name="verdict", value="partly"),
        score(*ids, name="verdict", value="maybe"),
        score(*ids, name="result_correct", value="yes"),
        score(*ids, name="no_such_score", value=1),
        score(*ids, source="robot"),
        "not an object",
    ]

    response = scores_api.post("/scores", json={"scores": batch})

    assert response.status_code == 200
    body = response.json()
    assert (body["accepted"], body["rejected"]) == (2, 7)
    reasons = {item["index"]: item["errors"] for item in body["items"] if item["errors"]}
    assert reasons[1] == [{"field": "value", "reason": "helpfulness must be at most 1 (got 1.5)"}]
    assert "is numeric: send a number" in reasons[2][0]["reason"]
    assert "takes one of right, partly, wrong" in reasons[4][0]["reason"]
    assert "is boolean: send true or false" in reasons[5][0]["reason"]
    assert reasons[6][0]["field"] == "name"
    assert "no score definition named 'no_such_score'" in reasons[6][0]["reason"]
    assert reasons[7][0]["field"] == "source"
    assert reasons[8][0]["field"] == "(item)"
    stored = Score.objects.order_by("name")
    assert [(s.name, s.value, s.label) for s in stored] == [
        ("helpfulness", 0.25, ""), ("verdict", None, "partly"),
    ]  # fmt: skip


def test_it_stores_a_client_id_once(definitions, scores_api, stored_span):
    sent = score(stored_span["trace_id"], stored_span["span_id"], client_id="eval-run-7/42")

    first = scores_api.post("/scores", json={"scores": [sent, sent]}).json()
    again = scores_api.post("/scores", json={"scores": [sent]}).json()

    assert [item["status"] for item in first["items"]] == ["accepted", "duplicate"]
    assert again["items"][0]["status"] == "duplicate"
    assert again["items"][0]["id"] == first["items"][0]["id"]
    assert Score.objects.count() == 1


def test_a_score_that_comes_before_its_span_waits_and_joins_it(definitions, scores_api, api, span):
    later = span()
    response = scores_api.post("/scores", json={"scores": [
        score(later["trace_id"], later["span_id"]), score(later["trace_id"], name="feedback"),
    ]}).json()  # fmt: skip
    assert [item["pending"] for item in response["items"]] == [True, True]

    api.post("/invocations", json={"invocations": [later]})
    joined, dropped = settle_pending_scores()

    assert (joined, dropped) == (2, 0)
    shown = scores_api.get("/scores", params={"trace_id": later["trace_id"]}).json()
    assert [s["pending"] for s in shown] == [False, False]


def test_it_keeps_at_most_the_pending_limit_and_drops_them_after_the_expiry(
    definitions, scores_api, settings
):
    settings.ARES_SCORE_PENDING_MAX = 2
    batch = [score(secrets.token_hex(16), secrets.token_hex(8)) for _ in range(3)]

    body = scores_api.post("/scores", json={"scores": batch}).json()

    assert [item["status"] for item in body["items"]] == ["accepted", "accepted", "rejected"]
    assert (
        "2 scores already wait for spans not stored yet" in body["items"][2]["errors"][0]["reason"]
    )
    Score.objects.filter(pk=body["items"][0]["id"]).update(
        created_at=timezone.now() - timedelta(hours=settings.ARES_SCORE_PENDING_TTL_H, minutes=1)
    )
    assert settle_pending_scores() == (0, 1)
    assert Score.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ([], 422, 'body must be an object {"scores": [...]}'),
        ({"scores": []}, 422, "scores is empty"),
        ({"scores": {}}, 422, "scores must be a list"),
        ({"scores": [{}], "extra": 1}, 422, "unknown top-level field(s): extra"),
    ],
)
def test_it_names_what_is_wrong_with_the_envelope(definitions, scores_api, body, status, says):
    response = scores_api.post("/scores", json=body)

    assert response.status_code == status
    assert says in response.json()["detail"]


def test_it_answers_422_when_every_score_is_rejected(definitions, scores_api):
    response = scores_api.post("/scores", json={"scores": [{"name": "feedback"}]})

    assert response.status_code == 422
    fields = {error["field"] for error in response.json()["items"][0]["errors"]}
    assert fields == {"value", "trace_id"}


def test_it_answers_413_above_the_batch_limit(definitions, scores_api, settings):
    items = [score(secrets.token_hex(16))] * 1001

    response = scores_api.post("/scores", json={"scores": items})

    assert response.status_code == 413


def test_a_key_without_the_score_scope_is_refused(definitions, live_server, make_key):
    headers = {"Authorization": f"Bearer {make_key('report', 'read')}"}
    response = httpx.post(
        f"{live_server.url}/api/v1/scores", headers=headers,
        json={"scores": [score(secrets.token_hex(16))]},
    )  # fmt: skip

    assert response.status_code == 403


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"name": "Bad Name", "data_type": "boolean"}, "name"),
        ({"name": "x", "data_type": "numeric", "min_value": 2, "max_value": 1}, "max_value"),
        ({"name": "x", "data_type": "boolean", "min_value": 0}, "min_value"),
        ({"name": "x", "data_type": "categorical", "categories": []}, "categories"),
        ({"name": "x", "data_type": "categorical", "categories": ["a", "a"]}, "categories"),
        ({"name": "x", "data_type": "numeric", "categories": ["a"]}, "categories"),
    ],
)
def test_a_definition_says_what_is_wrong_with_it(fields, problem):
    assert problem in ScoreDefinition(**fields).problems()


def test_a_client_id_stored_meanwhile_by_another_request_is_a_duplicate(definitions, monkeypatch):
    from traces_app.scores import judgements as scores_module

    trace_id = secrets.token_hex(16)
    Score.objects.create(name="feedback", data_type="boolean", value=1.0, label="true",
                         source="human", trace_id=trace_id, client_id="taken",
                         reported_by="another request")  # fmt: skip
    monkeypatch.setattr(scores_module, "_mark_duplicates", lambda items: None)  # the race
    items = [
        scores_module.ScoreItem(0, {"name": "feedback", "raw_value": True, "source": "human",
                                    "comment": "", "trace_id": trace_id, "span_id": "",
                                    "client_id": client_id})
        for client_id in ("taken", "free")
    ]  # fmt: skip
    scores_module.check_values(items)

    scores_module.store_scores(items, "key judge-bot")

    assert [item.status for item in items] == ["duplicate", "accepted"]
    assert Score.objects.filter(client_id="free", reported_by="key judge-bot").exists()


def test_traces_are_filtered_by_a_score_on_them_or_on_a_span(
    definitions, scores_api, api, span, admin_client
):
    spans = [span() for _ in range(3)]
    api.post("/invocations", json={"invocations": spans})
    scored_span, scored_trace, unscored = (s["trace_id"] for s in spans)
    scores_api.post("/scores", json={"scores": [
        score(scored_span, spans[0]["span_id"], value=False),
        score(scored_trace, value=True),
        score(scored_trace, name="helpfulness", value=0.25),
    ]})  # fmt: skip

    def found(**params: str) -> set[str]:
        response = api.get("/traces", params=params)
        assert response.status_code == 200, response.text
        return {trace["trace_id"] for trace in response.json()["items"]}

    assert found(score="result_correct:false") == {scored_span}
    assert found(score="result_correct") == {scored_span, scored_trace}
    assert found(score="helpfulness:0.25") == {scored_trace}
    assert unscored not in found(score="result_correct")
    assert api.get("/traces", params={"score": "Bad Name"}).status_code == 422
    page = admin_client.get("/traces/", {"score": "result_correct:false", "range": "24h"})
    assert scored_span in page.content.decode() and scored_trace not in page.content.decode()
    refused = admin_client.get("/traces/", {"score": "no good", "range": "24h"}).content.decode()
    assert "Give a score&#x27;s name, or name:value" in refused


def test_a_score_sent_before_its_span_is_exported_over_otlp_joins_it(
    definitions, scores_api, sdk_export
):
    exported: dict[str, str] = {}

    def make_spans(tracer: Any) -> None:
        span = tracer.start_span(
            "execute_tool lookup",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
        )
        context = span.get_span_context()
        exported.update(trace_id=f"{context.trace_id:032x}", span_id=f"{context.span_id:016x}")
        # The agent scores the call before its exporter has sent the span.
        body = scores_api.post("/scores", json={"scores": [
            score(exported["trace_id"], exported["span_id"], source="agent")
        ]}).json()  # fmt: skip
        assert body["items"][0]["pending"] is True
        span.end()

    sdk_export(make_spans)  # the OpenTelemetry SDK's batch processor and OTLP exporter

    assert settle_pending_scores() == (1, 0)
    [shown] = scores_api.get("/scores", params={"span_id": exported["span_id"]}).json()
    assert (shown["trace_id"], shown["pending"], shown["value"]) == (
        exported["trace_id"], False, False,
    )  # fmt: skip
