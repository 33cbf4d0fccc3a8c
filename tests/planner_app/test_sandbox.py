"""The sandbox chat page: staff only, every path streamed as events, clear errors, no 500."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from planner_app.evidence import evidence_from
from planner_app.models import Agent, SandboxStop, Workflow, WorkflowRun
from planner_app.services import recent_evidence
from tests.planner_app.conftest import Gate
from tests.planner_app.fake_llm import FakeLlm, call, fail, held, say
from tools_app.models import McpServer
from traces_app.models import Invocation, SpanRollup, ToolRollup, Trace
from traces_app.rollups.range_totals import tool_totals
from traces_app.rollups.ranges import parse_range
from traces_app.rollups.recount import recount_all_marked_rollups

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("llm_settings")]

URL, RUN, STOP = "/sandbox/", "/sandbox/run", "/sandbox/stop"
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
    """Return the events of a server-sent event stream after `accepted`, in order.

    `accepted` comes first in every stream and names the task's trace, which every event
    that names a trace names too."""
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
    accepted, *events = events
    assert accepted["type"] == "accepted" and accepted["session_id"].startswith("sandbox-")
    assert accepted["trace_url"] == f"/traces/{accepted['trace_id']}/"
    assert {e["trace_id"] for e in events if "trace_id" in e} <= {accepted["trace_id"]}
    return events


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == kind]


# Who may use it -----------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "url"), [("get", URL), ("post", RUN), ("post", STOP)])
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


@pytest.mark.usefixtures("demo_server")
def test_planner_only_chooses_among_the_agents_tools_and_shows_the_mcp_text_as_text(
    staff: Client,
) -> None:
    Agent.objects.create(name="mcp-only", tools=["mcp.demo.add", "mcp.demo.sha256"])
    message = {"agent": "mcp-only", "mode": "planner", "message": "what is 1250 plus 370"}
    events = events_of(staff.post(RUN, message))
    [notice] = of_type(events, "notice")
    assert notice["message"] == "calculator passed over for Summation: the caller may not use it"
    [finished] = of_type(events, "tool_finished")
    assert (finished["tool"], finished["success"], finished["ran_on"]) == (
        "mcp.demo.add", True, "mcp:demo",
    )  # fmt: skip
    final = events[-1]
    assert (final["finish_reason"], final["finished"]) == ("stop", "Answered")
    # The tool's text content, as text: its own lines and quotes, nothing escaped.
    assert final["content"].startswith("mcp.demo.add:\n{\n")
    assert '"sum": 1620' in final["content"] and "\\" not in final["content"]


@pytest.mark.usefixtures("demo_server")
def test_planner_only_refuses_when_none_of_the_agents_tools_serves_the_request(
    staff: Client,
) -> None:
    Agent.objects.create(name="hash-only", tools=["mcp.demo.sha256"])
    message = {"agent": "hash-only", "mode": "planner", "message": "what is 1250 plus 370"}
    events = events_of(staff.post(RUN, message))
    refused = of_type(events, "notice")[-1]["message"]
    assert "no tool the caller may use offers Summation" in refused
    assert "it may use: mcp.demo.sha256" in refused
    assert not of_type(events, "tool_started")
    assert (events[-1]["finish_reason"], events[-1]["finished"]) == ("error", "Ended with an error")


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


# A conversation -----------------------------------------------------------------------------

EARLIER = [
    {"role": "user", "content": "My name is Ada and I owe 120 euros."},
    {"role": "assistant", "content": "Noted, Ada: 120 euros."},
]


def test_the_earlier_turns_reach_the_model_before_the_new_message(
    staff: Client, tutor: Agent, fake_llm: FakeLlm
) -> None:
    fake_llm.script(say("You are Ada, and you owe 120 euros."))
    data = {"agent": "math-tutor", "mode": "llm", "message": "Who am I and what do I owe?",
            "history": json.dumps(EARLIER), "session": "sandbox-chat-7"}  # fmt: skip
    events = events_of(staff.post(RUN, data))
    sent = [(m["role"], m["content"]) for m in fake_llm.requests[0]["messages"]]
    assert sent[-3:] == [
        ("user", "My name is Ada and I owe 120 euros."),
        ("assistant", "Noted, Ada: 120 euros."),
        ("user", "Who am I and what do I owe?"),
    ]
    assert events[0]["session_id"] == "sandbox-chat-7"
    trace = Trace.objects.get(trace_id=events[-1]["trace_id"])
    assert trace.session_id == "sandbox-chat-7"
    # The request a trace is filed under is the new message, not the first of the chat.
    assert trace.request_text == "Who am I and what do I owe?"


def test_plan_execute_replan_drafts_with_the_earlier_turns(
    staff: Client, tutor: Agent, fake_llm: FakeLlm
) -> None:
    plan = json.dumps({"steps": [{"id": "s1", "tool": "calculator",
                                  "arguments": {"expression": "120*2"}}]})  # fmt: skip
    fake_llm.script(say(plan), say("You owe 240 euros now."))
    data = {"agent": "math-tutor", "mode": "replan", "message": "Double what I owe.",
            "history": json.dumps(EARLIER)}  # fmt: skip
    events = events_of(staff.post(RUN, data))
    assert events[-1]["content"] == "You owe 240 euros now."
    drafting = [m["content"] for m in fake_llm.requests[0]["messages"]]
    assert drafting[-3:] == [EARLIER[0]["content"], EARLIER[1]["content"], "Double what I owe."]
    answering = " ".join(m["content"] for m in fake_llm.requests[1]["messages"])
    assert "120 euros" in answering and "240" in answering


def test_the_planner_says_it_reads_only_the_newest_message(
    staff: Client, default_rules: None
) -> None:
    data = {"mode": "planner", "message": "what is 2+3*4", "history": json.dumps(EARLIER)}
    events = events_of(staff.post(RUN, data))
    assert "from this message alone" in of_type(events, "notice")[0]["message"]
    assert '"result": 14' in events[-1]["content"]


def test_a_session_id_is_made_for_a_new_conversation_and_kept_after(
    staff: Client, default_rules: None
) -> None:
    first = events_of(staff.post(RUN, {"mode": "planner", "message": "what is 2+2"}))
    session = first[0]["session_id"]
    assert session.startswith("sandbox-") and len(session) == len("sandbox-") + 16
    data = {"mode": "planner", "message": "what is 3+3", "session": session}
    second = events_of(staff.post(RUN, data))
    assert second[0]["session_id"] == session
    traces = {first[-1]["trace_id"], second[-1]["trace_id"]}
    assert len(traces) == 2  # one trace per message, one session for the conversation
    sessions = Trace.objects.filter(trace_id__in=traces).values_list("session_id", flat=True)
    assert list(sessions) == [session, session]


@pytest.mark.parametrize(
    ("history", "error"),
    [
        ("{not json", "The history is not valid JSON: "),
        ('{"role": "user"}', "The history must be a list of messages."),
        (json.dumps([EARLIER[0]] * 41),
         "The history has 41 messages; the limit is 40: start a new conversation."),
        (json.dumps([EARLIER[0], {"role": "system", "content": "obey"}]),
         "History message 2: the role must be user or assistant, not 'system'."),
        (json.dumps([{"role": "tool", "content": "x"}]),
         "History message 1: the role must be user or assistant, not 'tool'."),
        (json.dumps([{"role": "user", "content": 7}]),
         "History message 1 must be an object with a text content."),
        (json.dumps(["hello"]), "History message 1 must be an object with a text content."),
        (json.dumps([{"role": "user", "content": "x" * 60_000}] * 2),
         "The history is 120,000 characters long; the limit is 100,000: start a new "
         "conversation."),
    ],
)  # fmt: skip
def test_a_bad_history_is_refused_clearly(
    staff: Client, tutor: Agent, fake_llm: FakeLlm, history: str, error: str
) -> None:
    data = {"agent": "math-tutor", "mode": "llm", "message": "hi", "history": history}
    response = staff.post(RUN, data)
    assert response.status_code == 400
    assert response.json()["error"].startswith(error)
    assert not fake_llm.requests and not Invocation.objects.exists()


@pytest.mark.parametrize("session", ["has space", "semi;colon", "x" * 201, "ümlaut"])
def test_a_bad_session_id_is_refused_clearly(staff: Client, session: str) -> None:
    response = staff.post(RUN, {"mode": "planner", "message": "2+2", "session": session})
    assert response.status_code == 400
    assert response.json()["error"] in (
        "The session id may hold only letters, digits and _ . : -",
        "The session id is over 200 characters.",
    )
    assert not Invocation.objects.exists()


# Stopping a task ----------------------------------------------------------------------------


def frames(response: Any) -> Iterator[dict[str, Any]]:
    """Yield a stream's events one by one, as the page reads them (comments skipped)."""
    for chunk in response.streaming_content:
        data = [line[5:].strip() for line in chunk.decode().split("\n") if line.startswith("data:")]
        if data:
            yield json.loads("\n".join(data))


def thinking_model(fake_llm: FakeLlm) -> threading.Event:
    """Script a model that thinks until the returned event is set (or 30 s pass)."""
    release = threading.Event()
    fake_llm.script(held(release, say("too late")))
    return release


def wait_until_thinking(fake_llm: FakeLlm) -> None:
    """Wait until the model holds the task's request: only then is the task thinking."""
    deadline = time.monotonic() + 30
    while not fake_llm.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake_llm.requests, "the task never asked the model"


def test_stop_ends_a_task_whose_model_is_thinking_as_cancelled(
    staff: Client, tutor: Agent, fake_llm: FakeLlm
) -> None:
    release = thinking_model(fake_llm)
    stream = frames(staff.post(RUN, {"agent": "math-tutor", "mode": "llm", "message": "6*7?"}))
    accepted = next(stream)
    trace_id = accepted["trace_id"]
    assert next(stream)["type"] == "started"
    wait_until_thinking(fake_llm)
    response = staff.post(STOP, {"trace_id": trace_id})
    assert response.status_code == 202 and response.json() == {
        "trace_id": trace_id, "stop": "requested"
    }  # fmt: skip
    rest = list(stream)
    release.set()
    assert [event["type"] for event in rest] == ["stopping", "final"]
    final = rest[-1]
    assert final["finish_reason"] == "cancelled" and final["trace_id"] == trace_id
    assert len(fake_llm.requests) == 1  # no last call for an answer once stopped
    agent = Invocation.objects.get(trace_id=trace_id, kind="agent")
    assert (agent.status, agent.error_kind) == ("stopped", "cancelled")
    assert agent.result["finish_reason"] == "cancelled"
    assert Invocation.objects.get(trace_id=trace_id, kind="llm").error_kind == "cancelled"
    assert not SandboxStop.objects.exists()  # the stream's end cleared its stop


def test_closing_the_stream_stops_its_task(staff: Client, tutor: Agent, fake_llm: FakeLlm) -> None:
    release = thinking_model(fake_llm)
    response = staff.post(RUN, {"agent": "math-tutor", "mode": "llm", "message": "6*7?"})
    stream = frames(response)
    trace_id = next(stream)["trace_id"]
    assert next(stream)["type"] == "started"
    wait_until_thinking(fake_llm)
    stream.close()
    response.close()  # what the server does when the page goes away mid-stream
    worker = next(t for t in threading.enumerate() if t.name == f"sandbox-{trace_id[:8]}")
    worker.join(timeout=30)
    release.set()
    assert not worker.is_alive()
    agent = Invocation.objects.get(trace_id=trace_id, kind="agent")
    assert agent.result["finish_reason"] == "cancelled" and agent.error_kind == "cancelled"
    assert len(fake_llm.requests) == 1


def test_a_stubborn_model_calling_tools_forever_is_stopped_between_calls(
    staff: Client, tutor: Agent, fake_llm: FakeLlm, gate: Gate
) -> None:
    def stubborn(n: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def reply(body: dict[str, Any]) -> dict[str, Any]:
            if n >= 2:
                gate.hold()  # from the third call on, the model thinks until Stop is seen
            # Never the same call twice, so no spiral ends it first: only the stop can.
            return call("calculator", {"expression": f"{n}+1"})

        return reply

    fake_llm.script(*(stubborn(n) for n in range(40)))
    stream = frames(staff.post(RUN, {"agent": "math-tutor", "mode": "llm", "message": "go"}))
    trace_id = next(stream)["trace_id"]
    finished = 0
    while finished < 2:
        finished += next(stream)["type"] == "tool_finished"
    assert gate.entered.wait(5)  # the third model call is thinking
    staff.post(STOP, {"trace_id": trace_id})
    rest = list(stream)
    assert types(rest) == ["stopping", "final"] and rest[-1]["finish_reason"] == "cancelled"
    assert "calculator" in rest[-1]["content"]  # the results it had, as the answer
    assert Invocation.objects.filter(trace_id=trace_id, tool_name="calculator").count() == 2
    agent = Invocation.objects.get(trace_id=trace_id, kind="agent")
    assert agent.result["finish_reason"] == "cancelled"
    assert agent.result["iterations"] == 3 and len(fake_llm.requests) == 3


def test_stop_abandons_a_workflow_step_and_starts_no_more(
    staff: Client, gate: Gate, site_tools: None
) -> None:
    steps = [{"id": "wait", "tool": "slow", "arguments": {}},
             {"id": "after", "tool": "calculator", "arguments": {"expression": "1+1"},
              "depends_on": ["wait"]}]  # fmt: skip
    Workflow.objects.create(name="slow-chain", definition={"steps": steps})
    stream = frames(staff.post(RUN, {"mode": "workflow", "workflow": "slow-chain"}))
    trace_id = next(stream)["trace_id"]
    seen = [next(stream)["type"], next(stream)["type"]]
    assert seen == ["started", "tool_started"] and gate.entered.wait(5)
    staff.post(STOP, {"trace_id": trace_id})
    events = list(stream)
    assert not gate.finished.is_set()  # the step was abandoned, not waited for
    assert types(events)[0] == "stopping" and events[-1]["finish_reason"] == "cancelled"
    [finished] = of_type(events, "tool_finished")
    assert finished["tool"] == "slow" and finished["error_kind"] == "cancelled"
    assert WorkflowRun.objects.get(trace_id=trace_id).status == WorkflowRun.Status.CANCELLED
    assert not Invocation.objects.filter(trace_id=trace_id, tool_name="calculator").exists()


def stop_during_the_slow_call(staff: Client, fake_llm: FakeLlm, gate: Gate) -> str:
    """Run an agent whose model calls the slow tool, press Stop while it runs; the trace id."""
    Agent.objects.create(name="waiter", tools=["slow"])
    fake_llm.script(call("slow", {"key": "a"}))
    fake_llm.always(say("never asked"))
    stream = frames(staff.post(RUN, {"agent": "waiter", "mode": "llm", "message": "wait"}))
    trace_id = next(stream)["trace_id"]
    seen = []
    while not seen or seen[-1]["type"] != "tool_started":  # the stream runs the task as read
        seen.append(next(stream, {"type": "(ended)"}))
        assert seen[-1]["type"] != "(ended)", seen
    assert gate.entered.wait(5)
    staff.post(STOP, {"trace_id": trace_id})
    rest = list(stream)
    assert (rest[-1]["finish_reason"], rest[-1]["finished"]) == ("cancelled", "Stopped by you")
    recount_all_marked_rollups()
    return trace_id


def test_a_stopped_task_is_recorded_as_stopped_never_as_failed(
    staff: Client, fake_llm: FakeLlm, gate: Gate, site_tools: None, make_key: Callable[..., str]
) -> None:
    trace_id = stop_during_the_slow_call(staff, fake_llm, gate)
    spans = {s.kind: s for s in Invocation.objects.filter(trace_id=trace_id)}
    assert {kind: span.status for kind, span in spans.items()} == {
        "llm": "ok", "tool": "stopped", "agent": "stopped",
    }  # fmt: skip
    trace = Trace.objects.get(pk=trace_id)
    assert (trace.status, trace.failed_calls, trace.stopped_calls) == ("stopped", 0, 2)
    trace.recompute_totals()  # the recount from the raw spans agrees
    assert (trace.status, trace.failed_calls, trace.stopped_calls) == ("stopped", 0, 2)
    # The rollups count the stops apart: no failure, no success.
    hours = SpanRollup.objects.filter(bucket_start__gte=timezone.now() - timedelta(hours=2))
    assert (sum(r.failures for r in hours), sum(r.stopped for r in hours)) == (0, 2)
    [slow] = ToolRollup.objects.filter(tool_name="slow")
    assert (slow.calls, slow.successes, slow.failures, slow.stopped) == (1, 0, 0, 1)
    # The evidence: a stopped call judges no tool.
    time_range, _ = parse_range({"range": "1h"}, timezone.now())
    [totals] = tool_totals(time_range, ["slow"])
    assert (totals.judged_calls, totals.success_rate, evidence_from(totals)) == (0, None, None)
    assert recent_evidence("slow", 20) is None
    # The REST read API says what happened.
    read = Client(headers={"Authorization": f"Bearer {make_key('read')}"})
    body = read.get(f"/api/v1/traces/{trace_id}").json()
    assert (body["status"], body["failed_calls"], body["stopped_calls"]) == ("stopped", 0, 2)
    assert sorted(span["status"] for span in body["spans"]) == ["ok", "stopped", "stopped"]
    assert read.get("/api/v1/traces", {"status": "error"}).json()["items"] == []


def test_the_pages_say_a_stopped_task_stopped_and_count_no_failure(
    staff: Client, fake_llm: FakeLlm, gate: Gate, site_tools: None
) -> None:
    trace_id = stop_during_the_slow_call(staff, fake_llm, gate)
    page = staff.get(f"/traces/{trace_id}/").content.decode()
    assert '<span class="badge stopped" id="trace-status">Stopped</span>' in page
    assert ", 2 stopped</dd>" in page
    assert "Has failures" not in page and "failed" not in page
    listing = staff.get("/traces/", {"range": "1h"}).content.decode()
    assert '<strong id="total-failed">0</strong> with failures' in listing
    assert '<strong id="total-stopped">1</strong> stopped' in listing
    row = '<span class="badge stopped">Stopped</span> <span class="empty">2 stopped</span>'
    assert row in listing
    overview = staff.get("/", {"range": "1h"}).content.decode()
    assert '<span id="failures">0</span> failed' in overview


@pytest.mark.parametrize("trace_id", ["", "abc", "g" * 32, "a" * 33, "a" * 32 + "\n"])
def test_a_stop_without_a_trace_id_is_refused_clearly(staff: Client, trace_id: str) -> None:
    response = staff.post(STOP, {"trace_id": trace_id})
    assert response.status_code == 400
    assert response.json() == {"error": "trace_id must be the 32 hex digits of the task's trace."}
    assert not SandboxStop.objects.exists()


def test_a_stop_needs_the_csrf_token(django_user_model: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_user("ops", password="x", is_staff=True))
    assert client.post(STOP, {"trace_id": "a" * 32}).status_code == 403
    assert not SandboxStop.objects.exists()


def test_a_stop_that_came_too_late_is_cleared_a_day_later(staff: Client) -> None:
    assert staff.post(STOP, {"trace_id": "a" * 32}).status_code == 202
    assert staff.post(STOP, {"trace_id": "a" * 32}).status_code == 202  # twice: one row
    [stop] = SandboxStop.objects.all()
    assert stop.requested_by == "ops"
    SandboxStop.objects.update(requested_at=timezone.now() - timedelta(days=1, seconds=1))
    staff.post(STOP, {"trace_id": "b" * 32})
    assert list(SandboxStop.objects.values_list("trace_id", flat=True)) == ["b" * 32]
