"""The planner end to end on the shipped rules and the site's tools, and the Bridge over HTTP."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from planner_app import bridge, services
from planner_app.models import Capability, CapabilityMapping
from tools_app.builtins.calculator import evaluate
from tools_app.engine import CallContext
from traces_app.ingest.recording import new_span_id, new_trace_id, record_invocations
from traces_app.models import Invocation
from traces_app.schemas import InvocationIn


@pytest.fixture(autouse=True)
def fresh_evidence(settings: Any) -> None:
    settings.ARES_PLANNER_EVIDENCE_TTL_S = 0
    services._evidence.clear()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("request_text", "tool", "value"),
    [
        ("sum from 1 to 1,000,000", "calculator", 500000500000),
        ("2的10次方", "calculator", 1024),
        ("gcd of 12 and 18", "calculator", 6),
        ("10 factorial", "calculator", 3628800),
        ("从1加到100", "calculator", 5050),
        ("mean of 1,2,3,4,5", "calculator", 3),
    ],
)
def test_it_plans_a_calculation_from_english_and_chinese(
    default_rules: None, request_text: str, tool: str, value: float
) -> None:
    plan = services.plan_request(request_text)
    assert not plan.needs_llm, plan.reason
    [step] = plan.steps
    assert step.tool == tool
    assert evaluate(step.arguments["expression"]) == value


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("request_text", "tool", "arguments"),
    [
        ("sha256 of hello", "hash_tool", {"operation": "sha256", "text": "hello"}),
        ("uppercase hello world", "string_utils", {"operation": "upper", "text": "hello world"}),
    ],
)
def test_it_plans_hashing_and_string_work(
    default_rules: None, request_text: str, tool: str, arguments: dict
) -> None:
    [step] = services.plan_request(request_text).steps
    assert (step.tool, step.arguments) == (tool, arguments)


@pytest.mark.django_db
def test_it_explains_its_plan(default_rules: None) -> None:
    plan = services.plan_request("what is the sum from 1 to 100?").as_dict()
    explanation = plan["explanation"]
    assert {"rule": "sum-en", "matched": ["sum"], "capabilities": ["Summation"]} in (
        explanation["rules_matched"]
    )
    [candidate] = explanation["candidates"]["Summation"]
    assert candidate["tool"] == "calculator"
    assert set(candidate) >= {"base", "evidence", "penalty", "final", "success_rate", "samples"}
    assert explanation["arguments"]["step_1"]["tool"] == "calculator"
    assert plan["ruleset_version"] >= 1 and plan["reason"] == "step_1: calculator for Summation"


@pytest.mark.django_db
@pytest.mark.parametrize("request_text", ["write me a poem about the sea", "天气怎么样"])
def test_it_says_when_it_needs_the_llm(default_rules: None, request_text: str) -> None:
    plan = services.plan_request(request_text)
    assert plan.needs_llm and plan.steps == []
    assert plan.reason.endswith("needs the LLM")


def _record_calls(tool: str, *, ok: int, failed: int, latency_ms: float = 5.0) -> None:
    spans = [
        InvocationIn.model_validate({
            "trace_id": new_trace_id(), "span_id": new_span_id(), "tool_name": tool,
            "status": "ok" if index < ok else "error", "latency_ms": latency_ms,
            "error_kind": "" if index < ok else "timeout", "started_at": datetime.now(UTC),
        })
        for index in range(ok + failed)
    ]  # fmt: skip
    record_invocations(spans)


@pytest.mark.django_db
def test_recorded_evidence_changes_the_scores(default_rules: None) -> None:
    _record_calls("calculator", ok=5, failed=15, latency_ms=300)
    [candidate] = services.plan_request("10 factorial").explanation["candidates"]["DiscreteMath"]
    assert (candidate["samples"], candidate["success_rate"]) == (20, 0.25)
    assert candidate["evidence"] == pytest.approx(0.25 * 20 - 3 - 0.75 * 10)


@pytest.mark.django_db(transaction=True)  # a rule change is a version once it commits
def test_a_mapping_brings_in_a_tool_and_evidence_ranks_it(default_rules: None) -> None:
    CapabilityMapping.objects.create(
        capability=Capability.objects.get(name="Hashing"), tool="string_utils", weight=0
    )
    plan = services.plan_request("sha256 of hello")
    ranked = [c["tool"] for c in plan.explanation["candidates"]["Hashing"]]
    assert ranked[0] == "hash_tool" and "string_utils" in ranked
    assert plan.steps[0].tool == "hash_tool"


@pytest.mark.django_db(transaction=True)
def test_the_bridge_runs_a_known_tool_directly(default_rules: None) -> None:
    outcome = bridge.execute("calculator", '{"expression": "6*7"}', "what is 6*7")
    assert (outcome.path, outcome.success, outcome.results[0].data["result"]) == (
        "direct", True, 42,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_bridge_plans_when_the_model_names_a_missing_tool(default_rules: None) -> None:
    context = CallContext(chosen_by="llm")
    outcome = bridge.execute("math_solver", {"q": "2^10"}, "2的10次方", context)
    assert outcome.path == "planner" and outcome.success
    assert outcome.results[-1].data["result"] == 1024
    assert "no tool named 'math_solver'" in outcome.warnings[0]
    spans = Invocation.objects.filter(trace_id=context.trace_id).order_by("started_at")
    assert [(s.tool_name, s.chosen_by, s.error_kind) for s in spans] == [
        ("math_solver", "llm", "not_found"), ("calculator", "planner", ""),
    ]  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_bridge_falls_back_to_the_planner_when_a_tool_fails(default_rules: None) -> None:
    outcome = bridge.execute("hash_tool", {"operation": "base64_decode", "text": "%%%"},
                             "gcd of 12 and 18")  # fmt: skip
    assert outcome.path == "fallback"
    assert [r.tool for r in outcome.results] == ["hash_tool", "calculator"]
    assert outcome.results[-1].data["result"] == 6


@pytest.mark.django_db(transaction=True)
def test_the_bridge_needs_a_tool_or_a_request(default_rules: None) -> None:
    outcome = bridge.execute(None, None, "  ")
    assert outcome.path == "error" and not outcome.success
    assert "name a tool or give the user's request" in outcome.results[0].error.message


def test_plan_and_execute_over_http(live_server: Any, make_key: Any, default_rules: None) -> None:
    headers = {"Authorization": f"Bearer {make_key('plan', 'execute')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers) as client:
        plan = client.post("/plan", json={"request": "10 factorial"}).json()
        assert plan["steps"][0]["tool"] == "calculator"
        ran = client.post("/execute", json={"request": "3的平方"}).json()
        assert (ran["path"], ran["results"][0]["data"]["result"]) == ("planner", 9)
        assert client.post("/plan", json={"request": ""}).status_code == 422


def test_planning_needs_the_plan_scope(live_server: Any, make_key: Any) -> None:
    headers = {"Authorization": f"Bearer {make_key('read')}"}
    response = httpx.post(f"{live_server.url}/api/v1/plan", json={"request": "1+1"},
                          headers=headers)  # fmt: skip
    assert response.status_code == 403


@pytest.mark.parametrize("fallback", [0, 0.0, 1, "yes", "false", None])
def test_execute_takes_only_json_true_or_false_for_fallback(
    live_server: Any, make_key: Any, fallback: Any
) -> None:
    headers = {"Authorization": f"Bearer {make_key('execute')}"}
    body = {"request": "1+1", "fallback": fallback}
    response = httpx.post(f"{live_server.url}/api/v1/execute", json=body, headers=headers)

    assert response.status_code == 422
    assert "fallback" in response.text
