"""The sandbox chat page: staff only, every path streamed as events, clear errors, no 500."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import pytest
from django.test import Client

from planner_app.models import Agent, Workflow, WorkflowRun
from tests.planner_app.fake_llm import FakeLlm, call, fail, say
from tools_app.models import McpServer
from traces_app.models import Invocation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("llm_settings")]

URL, RUN = "/sandbox/", "/sandbox/run"
CHAIN = {
    "steps": [
        {"id": "total", "tool": "calculator", "arguments": {"expression": "100*(100+1)/2"}},
        {"id": "shout", "tool": "string_utils",
         "arguments": {"operation": "upper", "text": "total is {$total.result}"}},
    ]
}  # fmt: skip


@pytest.fixture
def staff(django_user_model: Any) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("ops", password="x", is_staff=True))
    return client


@pytest.fixture
def tutor() -> Agent:
    return Agent.objects.create(name="math-tutor", tools=["calculator", "string_utils"])


def events_of(response: Any) -> list[dict[str, Any]]:
    """Return the events of a server-sent event stream, in order."""
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream"
    body = b"".join(response.streaming_content).decode()
    events = []
    for frame in body.split("\n\n"):
        data = [line[5:].strip() for line in frame.split("\n") if line.startswith("data:")]
        if data:
            event = json.loads("\n".join(data))
            assert f"event: {event['type']}" in frame
            events.append(event)
    return events


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == kind]


# Who may use it -----------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "url"), [("get", URL), ("post", RUN)])
def test_it_sends_anyone_not_staff_to_log_in(django_user_model: Any, method: str, url: str) -> None:
    plain = Client()
    plain.force_login(django_user_model.objects.create_user("user", password="x"))
    for client in (Client(), plain):
        response = getattr(client, method)(url, {"mode": "planner", "message": "2+2"})
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert not Invocation.objects.exists()


def test_it_refuses_a_start_without_the_csrf_token(django_user_model: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_user("ops", password="x", is_staff=True))
    response = client.post(RUN, {"mode": "planner", "message": "what is 2+2"})
    assert response.status_code == 403
    assert not Invocation.objects.exists()


def test_the_page_offers_agents_paths_and_workflows(staff: Client, tutor: Agent) -> None:
    Workflow.objects.create(name="chain", definition=CHAIN)
    page = staff.get(URL).content.decode()
    assert '<option value="math-tutor" data-llm="yes"' in page
    assert '<option value="chain" title=""' in page
    for label in ("LLM agent", "Plan-execute-replan", "Planner only", "Run a workflow"):
        assert label in page
    assert 'href="/sandbox/">Sandbox</a>' in page
    assert 'name="csrfmiddlewaretoken"' in page
    assert "No LLM endpoint" not in page


# No LLM endpoint ----------------------------------------------------------------------------


def test_without_an_endpoint_the_page_says_how_to_set_one(
    staff: Client, settings: Any, tutor: Agent
) -> None:
    settings.ARES_LLM_BASE_URL = ""
    Agent.objects.create(name="own-endpoint", base_url="http://127.0.0.1:9/v1", model="m")
    page = staff.get(URL).content.decode()
    assert "No LLM endpoint is configured" in page and "set ARES_LLM_BASE_URL" in page
    assert '<option value="llm" data-needs-llm="yes" disabled>' in page
    assert '<option value="math-tutor" data-llm="no"' in page
    assert '<option value="own-endpoint" data-llm="yes"' in page
    assert '<option value="planner" selected>' in page


@pytest.mark.parametrize("mode", ["llm", "replan"])
def test_without_an_endpoint_the_llm_modes_are_refused_clearly(
    staff: Client, settings: Any, mode: str
) -> None:
    settings.ARES_LLM_MODEL = ""
    response = staff.post(RUN, {"mode": mode, "message": "what is 2+2"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert "needs an LLM endpoint" in error and "ARES_LLM_MODEL" in error


def test_without_an_endpoint_the_planner_still_works(
    staff: Client, settings: Any, default_rules: None
) -> None:
    settings.ARES_LLM_BASE_URL = ""
    events = events_of(staff.post(RUN, {"mode": "planner", "message": "what is 2+3*4"}))
    assert '"result": 14' in of_type(events, "final")[0]["content"]


# The paths ----------------------------------------------------------------------------------


def test_planner_only_runs_the_plan_with_badge_2(staff: Client, default_rules: None) -> None:
    events = events_of(staff.post(RUN, {"mode": "planner", "message": "what is 2+3*4"}))
    assert types(events) == ["started", "plan", "tool_started", "tool_finished", "final"]
    assert events[0]["model"] == "" and events[0]["agent"] == "sandbox"
    assert "calculator" in events[0]["tools"]  # no agent: any tool
    assert events[1]["steps"][0]["tool"] == "calculator"
    started, finished = events[2], events[3]
    assert (started["tool"], started["path"], started["arguments"]) == (
        "calculator", 2, {"expression": "2+3*4"},
    )  # fmt: skip
    assert finished["success"] and "14" in finished["text"] and finished["ran_on"] == "builtin"
    final = events[-1]
    assert final["finish_reason"] == "stop"
    assert final["trace_url"] == f"/traces/{final['trace_id']}/"
    [span] = Invocation.objects.filter(trace_id=final["trace_id"])
    assert (span.tool_name, span.chosen_by, span.agent) == ("calculator", "planner", "sandbox")


def test_the_llm_agent_streams_turns_and_calls_with_badge_1(
    staff: Client, tutor: Agent, fake_llm: FakeLlm
) -> None:
    fake_llm.script(
        call("calculator", {"expression": "6*7"}, "call_a",
             usage={"prompt_tokens": 200, "completion_tokens": 10}),
        say("It is 42.", usage={"prompt_tokens": 260, "completion_tokens": 6}),
    )  # fmt: skip
    events = events_of(
        staff.post(RUN, {"agent": "math-tutor", "mode": "llm", "message": "what is 6*7?"})
    )
    assert types(events) == [
        "started", "model_turn", "tool_started", "tool_finished", "model_turn", "final",
    ]  # fmt: skip
    assert events[1]["input_tokens"] == 200 and events[1]["tool_calls"][0]["name"] == "calculator"
    assert (events[2]["path"], events[2]["arguments"]) == (1, {"expression": "6*7"})
    assert events[3]["success"] and events[3]["latency_ms"] >= 0 and events[3]["tokens"] > 0
    final = events[-1]
    assert (final["content"], final["input_tokens"], final["output_tokens"]) == (
        "It is 42.",
        460,
        16,
    )
    assert Invocation.objects.filter(trace_id=final["trace_id"], kind="llm").count() == 2


def test_without_an_agent_the_llm_may_call_any_tool(staff: Client, fake_llm: FakeLlm) -> None:
    fake_llm.script(say("Hi."))
    events = events_of(staff.post(RUN, {"mode": "llm", "message": "hi"}))
    assert events[0]["agent"] == "sandbox" and "hash_tool" in events[0]["tools"]
    assert "hash_tool" in {t["function"]["name"] for t in fake_llm.requests[0]["tools"]}


def test_an_agent_in_active_mode_discovers_its_tools(staff: Client, fake_llm: FakeLlm) -> None:
    Agent.objects.create(name="finder", tools=["calculator", "hash_tool"], discovery="active")
    fake_llm.script(
        say("<tool_request>\nserver: math\ntool: evaluate an arithmetic expression\n"
            "</tool_request>"),
        call("calculator", {"expression": "2**10"}),
        say("1024"),
    )  # fmt: skip
    events = events_of(staff.post(RUN, {"agent": "finder", "mode": "llm", "message": "2**10?"}))
    assert events[0]["tools"] == []
    [found] = of_type(events, "tools_discovered")
    assert "calculator" in found["loaded"]
    assert of_type(events, "tool_finished")[0]["path"] == 1
    assert events[-1]["content"] == "1024"


def test_plan_execute_replan_streams_plans_and_workflow_steps(
    staff: Client, tutor: Agent, fake_llm: FakeLlm
) -> None:
    bad = {"steps": [{"id": "a", "tool": "calculator", "arguments": {"expression": "1/0"}}]}
    good = {"steps": [{"id": "a", "tool": "calculator", "arguments": {"expression": "8/2"}}]}
    fake_llm.script(say(json.dumps(bad)), say(json.dumps(good)), say("8/2 is 4."))
    events = events_of(
        staff.post(RUN, {"agent": "math-tutor", "mode": "replan", "message": "8/2, carefully"})
    )
    assert types(events) == [
        "started", "model_turn", "plan", "tool_started", "tool_finished",
        "replan", "model_turn", "plan", "tool_started", "tool_finished", "model_turn", "final",
    ]  # fmt: skip
    assert [e["path"] for e in of_type(events, "tool_finished")] == [3, 3]
    assert [e["success"] for e in of_type(events, "tool_finished")] == [False, True]
    assert events[-1]["content"] == "8/2 is 4." and events[-1]["finish_reason"] == "stop"


def test_an_mcp_tool_in_a_plan_has_badge_4(staff: Client, fake_llm: FakeLlm, settings: Any) -> None:
    settings.ARES_TOOL_SETTINGS_CHECK_S = 0
    McpServer.objects.create(
        name="time", command=sys.executable,
        args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
    )  # fmt: skip
    Agent.objects.create(name="clock", tools=["mcp.time.get_current_time"])
    step = {"id": "now", "tool": "mcp.time.get_current_time", "arguments": {"timezone": "UTC"}}
    fake_llm.script(say(json.dumps({"steps": [step]})), say("It is now."))
    events = events_of(staff.post(RUN, {"agent": "clock", "mode": "replan", "message": "time?"}))
    [started] = of_type(events, "tool_started")
    [finished] = of_type(events, "tool_finished")
    assert (started["path"], started["ran_on"]) == (4, "mcp:time")
    assert finished["success"] and '"timezone": "UTC"' in finished["text"]
    assert "- mcp.time.get_current_time:" in fake_llm.requests[0]["messages"][0]["content"]


def test_a_saved_workflow_runs_step_by_step_with_badge_3(staff: Client) -> None:
    Workflow.objects.create(name="chain", definition=CHAIN)
    events = events_of(staff.post(RUN, {"mode": "workflow", "workflow": "chain"}))
    assert types(events) == [
        "started", "tool_started", "tool_finished", "tool_started", "tool_finished", "final",
    ]  # fmt: skip
    assert [e["tool"] for e in of_type(events, "tool_started")] == ["calculator", "string_utils"]
    assert {e["path"] for e in of_type(events, "tool_started")} == {3}
    assert of_type(events, "tool_started")[1]["arguments"]["text"] == "total is 5050"
    final = events[-1]
    assert final["finish_reason"] == "stop" and "TOTAL IS 5050" in final["content"]
    run = WorkflowRun.objects.get(trace_id=final["trace_id"])
    assert run.status == "success"


# Bad input and failures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"mode": "planner", "message": ""}, "Type a message."),
        ({"mode": "planner", "message": "   "}, "Type a message."),
        ({"mode": "planner", "message": "x" * 4001},
         "The message is 4001 characters long; the limit is 4000."),
        ({"mode": "planner", "message": "hi", "agent": "nobody"},
         "There is no agent named nobody."),
        ({"mode": "teleport", "message": "hi"}, "There is no path teleport."),
        ({"message": "hi"}, "Choose a path."),
        ({"mode": "workflow"}, "Choose the workflow to run."),
        ({"mode": "workflow", "workflow": "ghost"}, "There is no workflow named ghost."),
    ],
)  # fmt: skip
def test_it_refuses_bad_input_clearly(staff: Client, data: dict[str, str], error: str) -> None:
    response = staff.post(RUN, data)
    assert response.status_code == 400
    assert response.json()["error"] == error
    assert not Invocation.objects.exists()


def test_a_failure_inside_the_task_is_an_error_event(staff: Client) -> None:
    Workflow.objects.create(name="broken", definition={"steps": "not a list"})
    events = events_of(staff.post(RUN, {"mode": "workflow", "workflow": "broken"}))
    [error] = events
    assert error["type"] == "error" and "WorkflowError" in error["message"]
    assert error["trace_url"].startswith("/traces/")


def test_a_failing_llm_endpoint_ends_with_the_reason(
    staff: Client, tutor: Agent, fake_llm: FakeLlm
) -> None:
    fake_llm.script(fail(500, "model crashed"), fail(500, "model crashed"))
    events = events_of(
        staff.post(RUN, {"agent": "math-tutor", "mode": "llm", "message": "what is 6*7?"})
    )
    assert "model crashed" in of_type(events, "notice")[0]["message"]
    assert events[-1]["type"] == "final" and events[-1]["finish_reason"] == "error"


def test_a_task_that_runs_too_long_ends_the_stream_with_its_trace(
    staff: Client, tutor: Agent, fake_llm: FakeLlm, settings: Any
) -> None:
    settings.ARES_SANDBOX_TIMEOUT_S = 0.5

    def slow(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(1.5)
        return say("late")

    fake_llm.script(slow)
    events = events_of(
        staff.post(RUN, {"agent": "math-tutor", "mode": "llm", "message": "take your time"})
    )
    assert types(events) == ["started", "error"]
    assert "no answer within 0.5 s" in events[-1]["message"]
    assert events[-1]["trace_url"] == f"/traces/{events[0]['trace_id']}/"
    worker = next(
        t for t in threading.enumerate() if t.name == f"sandbox-{events[0]['trace_id'][:8]}"
    )
    worker.join(timeout=30)  # let it finish before the database is flushed
    assert Invocation.objects.filter(trace_id=events[0]["trace_id"], kind="agent").exists()
