"""The agent loop (Path 1), driven through the real openai client by a scripted LLM server."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from planner_app.agents.llm.messages import Message
from planner_app.agents.loop import LoopResult
from planner_app.agents.loop_events import LoopEvent
from planner_app.agents.site_agents import run_agent
from planner_app.models import Agent
from tests.planner_app.conftest import in_site_registry
from tests.planner_app.fake_llm import FakeLlm, call, calls, fail, say
from tools_app.models import McpServer
from tools_app.specs import ErrorKind, SideEffect, ToolFailure, ToolSpec
from traces_app.models import FailureSpiral, Invocation, Trace

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("llm_settings")]

OBJECT = {"type": "object", "properties": {"key": {"type": "string"}}}


@pytest.fixture
def notes() -> list[str]:
    return []


@pytest.fixture
def test_tools(notes: list[str]) -> Iterator[None]:
    """Tools made for these tests, in the site's registry for as long as a test runs."""
    barrier = threading.Barrier(2, timeout=10)

    def lookup(key: str) -> None:
        raise ToolFailure("the lookup backend is down", ErrorKind.TOOL_ERROR)

    def append_note(key: str) -> dict[str, int]:
        notes.append(key)
        return {"notes": len(notes)}

    def meet(key: str) -> dict[str, str]:
        barrier.wait()  # returns only when two calls run at the same time
        return {"met": key}

    specs = [
        ToolSpec("lookup", "Look a key up.", OBJECT, lookup),
        ToolSpec("append_note", "Append a note.", OBJECT, append_note,
                 side_effect=SideEffect.WRITE, idempotent=False),
        ToolSpec("meet", "Wait for a partner call.", OBJECT, meet),
        ToolSpec("long_text", "Return a long text.", OBJECT, lambda key: "lorem ipsum " * 2000),
        ToolSpec("search_stub", "Search.", OBJECT, lambda key: {"results": [
            {"title": f"result {n}", "snippet": "x" * 300} for n in range(10)]}),
    ]  # fmt: skip
    yield from in_site_registry(specs)


def make_agent(**fields: Any) -> Agent:
    fields = {"name": "tutor", "tools": ["calculator", "hash_tool"], **fields}
    return Agent.objects.create(**fields)


def chat(
    agent: Agent, text: str, events: list[LoopEvent] | None = None, **options: Any
) -> LoopResult:
    collect = events.append if events is not None else None
    return run_agent(agent, [Message("user", text)], on_event=collect, **options)


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def of_type(events: list[LoopEvent], kind: str) -> list[dict[str, Any]]:
    return [event.as_dict() for event in events if event.type == kind]


def spans(result: LoopResult, **filters: Any) -> list[Invocation]:
    return list(
        Invocation.objects.filter(trace_id=result.trace_id, **filters).order_by("started_at")
    )


# Answers, calls, order ------------------------------------------------------------------


def test_it_returns_a_final_answer_and_records_the_llm_call(fake_llm: FakeLlm) -> None:
    fake_llm.script(say("Hello!", usage={"prompt_tokens": 300, "completion_tokens": 5}))
    result = chat(make_agent(system_prompt="Be kind."), "hi")
    assert (result.content, result.finish_reason, result.iterations) == ("Hello!", "stop", 1)
    sent = fake_llm.requests[0]
    assert sent["messages"] == [{"role": "system", "content": "Be kind."},
                                {"role": "user", "content": "hi"}]  # fmt: skip
    assert [t["function"]["name"] for t in sent["tools"]] == ["calculator", "hash_tool"]
    [llm] = spans(result, kind="llm")
    assert (llm.input_tokens, llm.output_tokens, llm.model, llm.agent) == (
        300,
        5,
        "fake-model",
        "tutor",
    )
    assert llm.arguments["schema_tokens"] > 100 and llm.arguments["tool_output_tokens"] == 0
    [agent_span] = spans(result, kind="agent")
    assert agent_span.result["finish_reason"] == "stop"
    assert agent_span.result["schema_tokens"] == llm.arguments["schema_tokens"]
    trace = Trace.objects.get(trace_id=result.trace_id)
    assert (trace.input_tokens, trace.output_tokens, trace.llm_calls) == (300, 5, 1)
    assert trace.request_text == "hi"


@pytest.mark.parametrize("stream", [False, True])
def test_it_runs_a_tool_call_and_sends_the_result_back(
    fake_llm: FakeLlm, settings: Any, stream: bool
) -> None:
    settings.ARES_LLM_STREAM = stream
    fake_llm.script(call("calculator", {"expression": "6*7"}, "call_a"), say("It is 42."))
    events: list[LoopEvent] = []
    result = chat(make_agent(), "what is 6*7?", events)
    assert result.content == "It is 42."
    [answer] = tool_messages(fake_llm.requests[1])
    assert answer["tool_call_id"] == "call_a" and '"result": 42' in answer["content"]
    assert [e.type for e in events] == [
        "started", "model_turn", "tool_started", "tool_finished", "model_turn", "final",
    ]  # fmt: skip
    finished = of_type(events, "tool_finished")[0]
    assert (finished["tool"], finished["path"], finished["success"]) == ("calculator", 1, True)
    [tool_span] = spans(result, kind="tool")
    [agent_span] = spans(result, kind="agent")
    assert (tool_span.chosen_by, tool_span.parent_span_id) == ("llm", agent_span.span_id)
    assert result.tokens["tool_output_tokens"] > 0


def test_it_runs_one_turns_calls_together_and_answers_in_call_order(
    fake_llm: FakeLlm, test_tools: None
) -> None:
    fake_llm.script(
        calls(("meet", {"key": "left"}, "c1"), ("calculator", {"expression": "2*3"}, "c2"),
              ("meet", {"key": "right"}, "c3")),
        say("done"),
    )  # fmt: skip
    result = chat(make_agent(tools=["meet", "calculator"]), "meet twice")
    answers = tool_messages(fake_llm.requests[1])
    assert [a["tool_call_id"] for a in answers] == ["c1", "c2", "c3"]
    assert '"met": "left"' in answers[0]["content"] and '"result": 6' in answers[1]["content"]
    assert '"met": "right"' in answers[2]["content"]
    assert [r["call_id"] for r in result.tool_calls] == ["c1", "c2", "c3"]


# What goes wrong ------------------------------------------------------------------------


def test_an_unknown_tool_goes_to_the_planner(fake_llm: FakeLlm, default_rules: None) -> None:
    fake_llm.script(call("math_solver", {"q": "2^10"}), say("1024"))
    events: list[LoopEvent] = []
    result = chat(make_agent(), "2的10次方", events)
    [answer] = tool_messages(fake_llm.requests[1])
    assert "no tool named 'math_solver'" in answer["content"]
    assert "the planner took the user's request" in answer["content"]
    assert '"result": 1024' in answer["content"]
    assert of_type(events, "fallback")[0]["reason"] == "unknown_tool"
    assert [e["path"] for e in of_type(events, "tool_finished")] == [1, 2]
    assert [(s.tool_name, s.chosen_by, s.error_kind, s.ran_on, s.tool_call_id)
            for s in spans(result, kind="tool")] == [
        ("math_solver", "llm", "not_found", "none", "call_1"),
        ("calculator", "planner", "", "builtin", "call_1"),
    ]  # fmt: skip


def test_no_tool_call_where_one_was_needed_goes_to_the_planner(
    fake_llm: FakeLlm, default_rules: None
) -> None:
    fake_llm.script(say(""), say("10! is 3628800."))
    events: list[LoopEvent] = []
    result = chat(make_agent(), "10 factorial", events)
    assert result.content == "10! is 3628800."
    note = fake_llm.requests[1]["messages"][-1]
    assert note["role"] == "user" and "3628800" in note["content"]
    assert of_type(events, "fallback")[0]["reason"] == "no_tool_call"


def test_required_tool_choice_plans_when_the_model_only_talks(
    fake_llm: FakeLlm, default_rules: None
) -> None:
    fake_llm.script(say("I think it is about 3 million."))
    result = chat(make_agent(), "10 factorial", tool_choice="required")
    assert [r["tool_choice"] for r in fake_llm.requests] == ["required"]
    assert [s.chosen_by for s in spans(result, kind="tool")] == ["planner"]
    assert result.finish_reason == "planner_answer" and "3628800" in result.content


def test_invalid_json_arguments_go_back_as_invalid_arguments(fake_llm: FakeLlm) -> None:
    fake_llm.script(
        call("calculator", '{"expression": "6*7"'),  # the closing brace is missing
        call("calculator", {"expression": "6*7"}),
        say("42"),
    )
    result = chat(make_agent(), "6*7")
    [broken] = tool_messages(fake_llm.requests[1])
    assert broken["content"].startswith("calculator failed (invalid_arguments)")
    assert "arguments are not valid JSON" in broken["content"]
    assert '"result": 42' in tool_messages(fake_llm.requests[2])[1]["content"]
    assert result.content == "42"
    assert [s.error_kind for s in spans(result, kind="tool")] == ["invalid_arguments", ""]


def test_field_problems_go_back_to_the_model(fake_llm: FakeLlm) -> None:
    fake_llm.script(call("calculator", {"expr": "1"}), say("sorry"))
    chat(make_agent(), "1")
    [answer] = tool_messages(fake_llm.requests[1])
    assert "calculator failed (invalid_arguments)" in answer["content"]
    assert "- expression: required but missing" in answer["content"]


def test_a_tool_the_agent_may_not_call_is_refused(fake_llm: FakeLlm) -> None:
    fake_llm.script(call("hash_tool", {"operation": "sha256", "text": "x"}), say("ok"))
    result = chat(make_agent(tools=["calculator"]), "hash x")
    assert [t["function"]["name"] for t in fake_llm.requests[0]["tools"]] == ["calculator"]
    [answer] = tool_messages(fake_llm.requests[1])
    assert "hash_tool failed (permission_denied): tutor is not allowed" in answer["content"]
    [span] = spans(result, kind="tool")
    assert (span.tool_name, span.error_kind) == ("hash_tool", "permission_denied")


def test_an_agent_without_tools_gets_none_and_its_calls_are_not_run(fake_llm: FakeLlm) -> None:
    fake_llm.script(call("calculator", {"expression": "1+1"}, content="2"))
    result = chat(make_agent(tools=[]), "1+1")
    assert "tools" not in fake_llm.requests[0]
    assert (result.content, spans(result, kind="tool")) == ("2", [])


def test_the_spiral_breaker_stops_a_repeated_failure_and_plans(
    fake_llm: FakeLlm, test_tools: None, default_rules: None
) -> None:
    fake_llm.script(*[call("lookup", {"key": "n"}) for _ in range(3)], say("10! = 3628800"))
    events: list[LoopEvent] = []
    result = chat(make_agent(tools=["lookup", "calculator"]), "10 factorial", events)
    third = tool_messages(fake_llm.requests[3])[-1]["content"]
    assert third.startswith("lookup failed (tool_error): the lookup backend is down")
    assert "stopped by the spiral breaker: 3 calls of lookup failed alike" in third
    assert "3628800" in third
    assert "tools" not in fake_llm.requests[3] and len(fake_llm.requests) == 4
    assert fake_llm.requests[3]["messages"][-1]["content"].startswith("No more tool calls")
    assert (result.content, result.finish_reason) == ("10! = 3628800", "spiral_breaker")
    [spiral] = of_type(events, "spiral")
    assert (spiral["tool"], spiral["attempts"], spiral["resolution"]) == (
        "lookup", 3, "planner_fallback",
    )  # fmt: skip
    assert [s.tool_name for s in spans(result, kind="tool")] == [
        "lookup", "lookup", "lookup", "calculator",
    ]  # the fourth lookup was never sent  # fmt: skip
    record = FailureSpiral.objects.get(trace_id=result.trace_id)
    assert (record.tool_name, record.kind, record.attempts, record.resolution) == (
        "lookup", "failing", 3, "planner_fallback",
    )  # fmt: skip


def test_the_spiral_breaker_stops_identical_calls_that_succeed(
    fake_llm: FakeLlm, default_rules: None
) -> None:
    same = {"operation": "sha256", "text": "hello"}
    fake_llm.script(*[call("hash_tool", same) for _ in range(3)], say("done"))
    events: list[LoopEvent] = []
    result = chat(make_agent(), "10 factorial", events)
    assert of_type(events, "spiral")[0]["kind"] == "loop"
    assert FailureSpiral.objects.get(trace_id=result.trace_id).resolution == "planner_fallback"


def test_the_planner_does_not_rerun_the_tool_that_spiralled(
    fake_llm: FakeLlm, default_rules: None
) -> None:
    same = {"operation": "sha256", "text": "hello"}
    fake_llm.script(*[call("hash_tool", same) for _ in range(3)], say("done"))
    events: list[LoopEvent] = []
    result = chat(make_agent(), "sha256 of hello", events)  # the plan offers only hash_tool
    assert of_type(events, "spiral")[0]["resolution"] == "ongoing"
    assert (
        "the plan offers nothing but hash_tool"
        in tool_messages(fake_llm.requests[3])[-1]["content"]
    )
    assert len(spans(result, kind="tool")) == 3


def test_a_tool_with_side_effects_is_not_run_twice(
    fake_llm: FakeLlm, test_tools: None, notes: list[str]
) -> None:
    fake_llm.script(
        call("append_note", {"key": "buy milk"}),
        calls(("append_note", {"key": "buy milk"}, "again"), ("append_note", {"key": "eggs"}, "x")),
        say("noted"),
    )  # fmt: skip
    events: list[LoopEvent] = []
    chat(make_agent(tools=["append_note"]), "note: buy milk", events)
    assert notes == ["buy milk", "eggs"]
    again = tool_messages(fake_llm.requests[2])[1]
    assert again["tool_call_id"] == "again"
    assert "not run again: append_note changes things and already ran" in again["content"]
    assert [e["ran"] for e in of_type(events, "tool_finished")] == [True, False, True]


def test_it_asks_for_a_final_answer_without_tools_at_the_limit(fake_llm: FakeLlm) -> None:
    fake_llm.script(
        call("calculator", {"expression": "1+1"}),
        call("calculator", {"expression": "2+2"}),
        say("1+1=2 and 2+2=4."),
    )
    result = chat(make_agent(max_iterations=2), "add things")
    assert (result.finish_reason, result.iterations, result.content) == (
        "max_iterations", 3, "1+1=2 and 2+2=4.",
    )  # fmt: skip
    last = fake_llm.requests[2]
    assert "tools" not in last
    assert last["messages"][-1]["content"].startswith("No more tool calls for this task")


@pytest.mark.parametrize(
    ("tool", "marker"),
    [
        ("search_stub", "[reduced to the top 3 of 10 results for the token budget]"),
        ("long_text", "… [truncated: showing"),
    ],
)
def test_the_token_budget_cuts_long_output_with_a_marker(
    fake_llm: FakeLlm, test_tools: None, tool: str, marker: str
) -> None:
    fake_llm.script(call(tool, {"key": "q"}), say("ok"))
    result = chat(make_agent(tools=[tool], token_budget=1000), "look")  # 300 for tool output
    [answer] = tool_messages(fake_llm.requests[1])
    assert marker in answer["content"]
    assert len(answer["content"]) <= 300 * 4
    assert 0 < result.tokens["tool_output_tokens"] <= 300


def test_search_results_keep_their_top_items(fake_llm: FakeLlm, test_tools: None) -> None:
    fake_llm.script(call("search_stub", {"key": "q"}), say("ok"))
    chat(make_agent(tools=["search_stub"], token_budget=1000), "look")
    [answer] = tool_messages(fake_llm.requests[1])
    assert "result 2" in answer["content"] and "result 3" not in answer["content"]


def test_output_past_the_budget_is_left_out_and_said_so(
    fake_llm: FakeLlm, test_tools: None
) -> None:
    fake_llm.script(calls(("long_text", {"key": "a"}, "a"), ("long_text", {"key": "b"}, "b")),
                    say("ok"))  # fmt: skip
    chat(make_agent(tools=["long_text"], token_budget=1000), "look")
    first, second = tool_messages(fake_llm.requests[1])
    assert "[truncated: showing" in first["content"]
    assert second["content"].startswith("[long_text output left out: this task's tool-output")


def test_an_mcp_tool_runs_on_its_server(fake_llm: FakeLlm, settings: Any) -> None:
    settings.ARES_TOOL_SETTINGS_CHECK_S = 0
    McpServer.objects.create(
        name="time",
        command=sys.executable,
        args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
    )
    fake_llm.script(
        call("mcp__time__get_current_time", {"timezone": "Asia/Tokyo"}), say("It is late.")
    )
    events: list[LoopEvent] = []
    chat(make_agent(tools=["mcp.time.get_current_time"]), "time in Tokyo?", events)
    assert fake_llm.requests[0]["tools"][0]["function"]["name"] == "mcp__time__get_current_time"
    [answer] = tool_messages(fake_llm.requests[1])
    assert answer["content"].startswith(
        'mcp.time.get_current_time returned: {"timezone": "Asia/Tokyo"'
    )
    assert [e["path"] for e in of_type(events, "tool_started")] == [4]


# Active discovery -----------------------------------------------------------------------

REQUEST_CALCULATOR = """I need a tool.
<tool_request>
server: math
tool: evaluate an arithmetic expression
</tool_request>"""


def test_an_active_agent_asks_for_its_tools(fake_llm: FakeLlm) -> None:
    fake_llm.script(say(REQUEST_CALCULATOR), call("calculator", {"expression": "6*7"}), say("42"))
    events: list[LoopEvent] = []
    agent = make_agent(discovery="active", tools=["calculator", "hash_tool", "string_utils"])
    result = chat(agent, "what is 6*7?", events)
    first, second = fake_llm.requests[:2]
    assert "tools" not in first and "<tool_request>" in first["messages"][0]["content"]
    # The router always answers with its top k: the best first, the others for the model.
    offered = [t["function"]["name"] for t in second["tools"]]
    assert offered[0] == "calculator" and set(offered) <= {
        "calculator",
        "hash_tool",
        "string_utils",
    }
    loaded = f"Tools discovered and loaded ({len(offered)} new)"
    assert second["messages"][-1]["content"].startswith(loaded)
    [found] = of_type(events, "tools_discovered")
    assert found["loaded"] == offered
    assert result.content == "42"
    assert result.tokens["tool_requests"] == 1
    assert 0 < result.tokens["schema_tokens"] < result.tokens["passive_schema_tokens"]
    [agent_span] = spans(result, kind="agent")
    assert agent_span.result["passive_schema_tokens"] == result.tokens["passive_schema_tokens"]


def test_an_active_agent_finds_only_tools_it_may_call(fake_llm: FakeLlm) -> None:
    fake_llm.script(say(REQUEST_CALCULATOR), say("I have no calculator."))
    chat(make_agent(discovery="active", tools=["hash_tool"]), "6*7?")
    offered = [t["function"]["name"] for t in fake_llm.requests[1].get("tools", [])]
    assert "calculator" not in offered and set(offered) <= {"hash_tool"}


def test_discovery_shows_and_records_how_each_request_was_routed(fake_llm: FakeLlm) -> None:
    fake_llm.script(say(REQUEST_CALCULATOR), say("I will answer myself: 42."))
    events: list[LoopEvent] = []
    result = chat(make_agent(discovery="active", tools=["calculator"]), "6*7?", events)
    [found] = of_type(events, "tools_discovered")
    [routing] = found["routing"]
    assert routing["mode"] == "flat"  # the site's default search (ARES_ROUTER_SEARCH)
    best = routing["tools"][0]
    assert (best["tool"], best["server"]) == ("calculator", "builtin:math")
    assert best["score"] > 0 and best["tool_score"] > 0
    [span] = spans(result, kind="other", tool_name="tool_discovery")
    assert span.arguments["requests"] == [
        {"server": "math", "tool": "evaluate an arithmetic expression"}
    ]
    assert span.result["routing"] == found["routing"]
    assert span.result["loaded"] == ["calculator"]


def test_a_tool_found_again_is_not_loaded_twice(fake_llm: FakeLlm) -> None:
    fake_llm.script(say(REQUEST_CALCULATOR), say(REQUEST_CALCULATOR), say("42"))
    events: list[LoopEvent] = []
    result = chat(make_agent(discovery="active", tools=["calculator"]), "6*7?", events)
    first, second = of_type(events, "tools_discovered")
    assert (first["loaded"], second["loaded"]) == (["calculator"], [])
    note = fake_llm.requests[2]["messages"][-1]["content"]
    assert note.startswith("Tools discovered and loaded (0 new). Already loaded: calculator.")
    assert [t["function"]["name"] for t in fake_llm.requests[2]["tools"]] == ["calculator"]
    assert (result.tokens["tool_requests"], result.tokens["tools_loaded"]) == (2, 1)


def test_a_request_without_a_server_is_sent_back_to_be_rewritten(fake_llm: FakeLlm) -> None:
    fake_llm.script(say("<tool_request>tool: add numbers</tool_request>"), say("42"))
    result = chat(make_agent(discovery="active"), "6*7?")
    note = fake_llm.requests[1]["messages"][-1]["content"]
    assert note.startswith("Your tool request could not be read") and "'server:'" in note
    assert result.tokens["tool_requests"] == 0


def test_it_counts_the_tasks_metrics_afresh_for_each_task(fake_llm: FakeLlm) -> None:
    agent = make_agent(discovery="active", tools=["calculator"])
    fake_llm.script(say(REQUEST_CALCULATOR), call("calculator", {"expression": "6*7"}), say("42"))
    result = chat(agent, "what is 6*7?")
    metrics = {key: result.tokens[key] for key in
               ("tool_requests", "tools_loaded", "llm_calls", "tool_calls")}  # fmt: skip
    assert metrics == {"tool_requests": 1, "tools_loaded": 1, "llm_calls": 3, "tool_calls": 1}
    assert result.tokens["tokens_used"] == (
        result.tokens["model_input_tokens"] + result.tokens["model_output_tokens"]
    )
    [agent_span] = spans(result, kind="agent")
    assert agent_span.result["llm_calls"] == 3 and agent_span.result["tool_calls"] == 1
    fake_llm.script(say("Nothing to look up: hello."))
    again = chat(agent, "say hello")
    assert {key: again.tokens[key] for key in metrics} == {
        "tool_requests": 0, "tools_loaded": 0, "llm_calls": 1, "tool_calls": 0
    }  # fmt: skip


def test_when_discovery_runs_out_it_asks_for_a_final_answer(fake_llm: FakeLlm) -> None:
    five = "\n".join([REQUEST_CALCULATOR] * 5)
    fake_llm.script(say(five), say(REQUEST_CALCULATOR), say("Best I can say: 42."))
    result = chat(make_agent(discovery="active"), "6*7?")
    assert (result.finish_reason, result.content) == ("discovery_exhausted", "Best I can say: 42.")
    assert "tools" not in fake_llm.requests[2]


# Models and endpoints -------------------------------------------------------------------


def test_a_model_without_tool_support_answers_in_text(fake_llm: FakeLlm) -> None:
    fake_llm.script(fail(400, "registry.ollama.ai/library/gemma:2b does not support tools"),
                    say("6*7 is 42."))  # fmt: skip
    events: list[LoopEvent] = []
    result = chat(make_agent(), "6*7", events)
    assert (result.content, result.finish_reason) == ("6*7 is 42.", "stop")
    assert "tools" in fake_llm.requests[0] and "tools" not in fake_llm.requests[1]
    assert "takes no tools" in of_type(events, "notice")[0]["message"]
    assert [s.error_kind for s in spans(result, kind="llm")] == ["tools_not_supported", ""]


def test_an_agent_marked_without_tool_calling_sends_none(fake_llm: FakeLlm) -> None:
    fake_llm.script(say("42"))
    chat(make_agent(tool_calling=False), "6*7")
    assert "tools" not in fake_llm.requests[0]


def test_a_failing_endpoint_ends_the_task_with_an_error(fake_llm: FakeLlm) -> None:
    fake_llm.script(fail(401, "invalid api key"))
    result = chat(make_agent(), "hi")
    assert result.finish_reason == "error"
    assert "answered 401: invalid api key" in result.error
    [agent_span] = spans(result, kind="agent")
    assert (agent_span.status, agent_span.error_kind) == ("error", "llm_error")


def test_an_agents_own_endpoint_and_key_reference_are_used(
    fake_llm: FakeLlm, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.ARES_LLM_BASE_URL = "http://127.0.0.1:9/v1"  # the agent's own wins
    monkeypatch.setenv("TUTOR_KEY", "k-123")
    fake_llm.script(say("hi"))
    agent = make_agent(base_url=fake_llm.base_url, model="own-model", api_key="${TUTOR_KEY}")
    assert chat(agent, "hi").content == "hi"
    assert fake_llm.requests[0]["model"] == "own-model"


def test_events_are_json_ready(fake_llm: FakeLlm) -> None:
    import json

    fake_llm.script(call("calculator", {"expression": "1"}), say("1"))
    events: list[LoopEvent] = []
    chat(make_agent(), "1", events)
    decoded = json.loads(json.dumps([event.as_dict() for event in events]))
    assert decoded[-1] == {**decoded[-1], "type": "final", "content": "1", "finish_reason": "stop"}
