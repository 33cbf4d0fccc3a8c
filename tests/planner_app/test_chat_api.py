"""POST /api/v1/chat: an agent's answer, its trace and tokens, for a key with the chat scope."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from planner_app.models import Agent
from tests.planner_app.fake_llm import FakeLlm, call, fail, say
from traces_app.models import Trace

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/chat"


@pytest.fixture(autouse=True)
def llm_settings(settings: Any, fake_llm: FakeLlm) -> None:
    settings.ARES_LLM_BASE_URL = fake_llm.base_url
    settings.ARES_LLM_MODEL = "fake-model"


@pytest.fixture
def tutor() -> Agent:
    return Agent.objects.create(name="math-tutor", tools=["calculator"])


@pytest.fixture
def post(make_key: Callable[..., str]) -> Callable[..., Any]:
    """Return a function that posts a JSON body to /api/v1/chat with a key of given scopes."""

    def send(body: dict[str, Any], *scopes: str) -> Any:
        headers = {"Authorization": f"Bearer {make_key(*(scopes or ('chat',)))}"}
        return Client().post(URL, body, content_type="application/json", headers=headers)

    return send


def ask(text: str, agent: str = "math-tutor", **extra: Any) -> dict[str, Any]:
    return {"agent": agent, "messages": [{"role": "user", "content": text}], **extra}


def test_it_answers_with_the_trace_and_tokens(
    post: Callable[..., Any], tutor: Agent, fake_llm: FakeLlm
) -> None:
    fake_llm.script(
        call("calculator", {"expression": "6*7"},
             usage={"prompt_tokens": 200, "completion_tokens": 10}),
        say("6*7 = 42", usage={"prompt_tokens": 260, "completion_tokens": 6}),
    )  # fmt: skip
    response = post(ask("what is 6*7?"))
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["content"], body["finish_reason"], body["model"]) == (
        "6*7 = 42",
        "stop",
        "fake-model",
    )
    assert body["tokens_used"]["input_tokens"] == 460
    assert body["tokens_used"]["total_tokens"] == 476
    assert body["tokens_used"]["schema_tokens"] > 0
    assert body["tool_calls"][0]["tool"] == "calculator" and body["tool_calls"][0]["success"]
    trace = Trace.objects.get(trace_id=body["trace_id"])
    assert (trace.agent, trace.input_tokens, trace.tool_calls) == ("math-tutor", 460, 1)


def test_it_keeps_the_callers_trace_and_history(
    post: Callable[..., Any], tutor: Agent, fake_llm: FakeLlm
) -> None:
    fake_llm.script(say("Still 42."))
    history = [
        {"role": "user", "content": "6*7?"},
        {"role": "assistant", "content": "42"},
        {"role": "user", "content": "sure?"},
    ]
    trace_id = "ab" * 16
    body = post({"agent": "math-tutor", "messages": history, "trace_id": trace_id}).json()
    assert body["trace_id"] == trace_id
    assert fake_llm.requests[0]["messages"] == history


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        (ask("hi", agent="nobody"), 404, "no agent named 'nobody'; known: math-tutor"),
        ({"agent": "math-tutor", "messages": []}, 422, "messages"),
        (ask("hi") | {"messages": [{"role": "user", "content": "hi"},
                                   {"role": "assistant", "content": "hello"}]},
         422, "the last message must be the user's"),
        (ask("hi") | {"messages": [{"role": "tool", "content": "x"}]}, 422, "messages.0.role"),
        (ask("hi") | {"messages": [{"role": "user"}]}, 422, "messages.0.content"),
        (ask("hi", tool_choice="always"), 422, "tool_choice"),
        (ask("hi", trace_id="xyz"), 422, "trace_id"),
        # PostgreSQL refuses a NUL in a query: the name is checked first (a fuzzer's find).
        (ask("hi", agent="math\x00tutor"), 422, "agent"),
        (ask("hi", agent="math\ntutor"), 422, "agent"),
    ],
)  # fmt: skip
def test_it_refuses_bad_requests_clearly(
    post: Callable[..., Any], tutor: Agent, body: dict[str, Any], status: int, detail: str
) -> None:
    response = post(body)
    assert response.status_code == status, response.content
    assert detail in response.json()["detail"]


def test_it_says_how_to_configure_a_missing_llm(
    post: Callable[..., Any], tutor: Agent, settings: Any
) -> None:
    settings.ARES_LLM_BASE_URL = ""
    response = post(ask("hi"))
    assert response.status_code == 503
    assert "set ARES_LLM_BASE_URL" in response.json()["detail"]


def test_a_failing_endpoint_is_a_bad_gateway_with_the_trace(
    post: Callable[..., Any], tutor: Agent, fake_llm: FakeLlm
) -> None:
    fake_llm.script(fail(500, "model crashed"), fail(500, "model crashed"))  # the SDK retries once
    response = post(ask("hi"))
    assert response.status_code == 502
    body = response.json()
    assert "model crashed" in body["detail"]
    assert Trace.objects.filter(trace_id=body["trace_id"]).exists()


@pytest.mark.parametrize(("scopes", "status"), [(("read", "execute"), 403), (("chat",), 200)])
def test_it_needs_the_chat_scope(
    post: Callable[..., Any], tutor: Agent, fake_llm: FakeLlm, scopes: tuple, status: int
) -> None:
    fake_llm.script(say("hi"))
    assert post(ask("hi"), *scopes).status_code == status


def test_it_needs_a_key(tutor: Agent) -> None:
    response = Client().post(URL, ask("hi"), content_type="application/json")
    assert response.status_code == 401
