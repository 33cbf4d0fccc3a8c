"""The sandbox chat in a real Chromium: the planner path, the scripted-LLM path, hostile text."""

from __future__ import annotations

import importlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from planner_app.models import Agent, Workflow
from tests.ares_site.browser import assert_stayed_local
from tests.planner_app import conftest as planner_fixtures
from tests.planner_app.fake_llm import FakeLlm, call, calls, held, say
from traces_app.models import Invocation, Trace

pytestmark = pytest.mark.browser

# The planner's fixtures, reused here without moving them.
default_rules = planner_fixtures.default_rules
fake_llm = planner_fixtures.fake_llm
fresh_ruleset_cache = planner_fixtures.fresh_ruleset_cache
demo_server = planner_fixtures.demo_server

HOSTILE = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned=2'>"
# The newest turn of the conversation, and its parts.
TURN = "li.turn:last-child"
ANSWER = f"{TURN} section.answer:not([hidden])"
ANSWER_TEXT, FACTS, TRACE_LINK = (
    f"{TURN} .{part}" for part in ("answer-text", "answer-facts", "trace-link")
)


def llm_sandbox(
    page: Any, live_server: Any, settings: Any, fake_llm: FakeLlm, agent: Agent | None = None
) -> None:
    """Open the sandbox on the LLM path of the agent (math-tutor), at the fake model."""
    settings.ARES_LLM_BASE_URL = fake_llm.base_url
    settings.ARES_LLM_MODEL = "fake-model"
    agent = (
        agent
        or Agent.objects.get_or_create(name="math-tutor", defaults={"tools": ["calculator"]})[0]
    )
    page.goto(f"{live_server.url}/sandbox/")
    page.select_option("#id_agent", agent.name)
    page.select_option("#id_mode", "llm")


def test_the_planner_path_runs_without_an_llm(
    staff_page: Any,
    live_server: Any,
    settings: Any,
    default_rules: None,
    screenshot: Callable[[Any, str], Path],
) -> None:
    settings.ARES_LLM_BASE_URL = ""
    page = staff_page
    page.goto(f"{live_server.url}/")
    page.click("nav >> text=Sandbox")
    assert "No LLM endpoint is configured" in page.locator("#no-llm").inner_text()
    assert page.locator("#id_mode option[value=llm]").is_disabled()
    assert page.locator("#id_mode").input_value() == "planner"
    page.fill("#id_message", "what is 2+3*4")
    page.click("#send-button")
    page.wait_for_selector(ANSWER, timeout=30_000)
    call = page.locator("li.tool-call")
    assert call.count() == 1
    assert call.locator(".badge").first.inner_text() == "2 planner"
    assert call.locator(".badge").first.get_attribute("data-path") == "2"
    assert "calculator" in call.inner_text() and "ok" in call.inner_text()
    assert '"expression": "2+3*4"' in call.inner_text()
    assert '"result": 14' in page.locator(ANSWER_TEXT).inner_text()
    link = page.locator(TRACE_LINK)
    trace_id = link.get_attribute("href").strip("/").split("/")[-1]
    assert Invocation.objects.filter(trace_id=trace_id, chosen_by="planner").exists()
    screenshot(page, "sandbox-planner")
    link.click()
    page.wait_for_url(f"{live_server.url}/traces/{trace_id}/")
    assert "calculator" in page.content()
    assert_stayed_local(page, live_server)


def test_the_scripted_llm_path_shows_turns_calls_and_hostile_text_as_text(
    staff_page: Any,
    live_server: Any,
    settings: Any,
    fake_llm: FakeLlm,
    screenshot: Callable[[Any, str], Path],
) -> None:
    settings.ARES_LLM_STREAM = True
    tutor = Agent.objects.create(name="math-tutor", tools=["calculator", "string_utils"])
    fake_llm.script(
        calls(("calculator", {"expression": "6*7"}, "call_a"),
              ("string_utils", {"operation": "lower", "text": HOSTILE}, "call_b")),
        say(f"6*7 = 42. The text was {HOSTILE}"),
    )  # fmt: skip
    page = staff_page
    llm_sandbox(page, live_server, settings, fake_llm, tutor)
    page.fill("#id_message", "what is 6*7, and lower-case this text")
    page.click("#send-button")
    page.wait_for_selector(ANSWER, timeout=30_000)

    turns = page.locator("li.step-model_turn")
    assert turns.count() == 2
    assert "calculator" in turns.first.inner_text()
    tool_calls = page.locator("li.tool-call")
    assert tool_calls.count() == 2
    assert [b.inner_text() for b in tool_calls.locator(".badge").all()] == ["1 LLM", "1 LLM"]
    assert "calculator returned" in tool_calls.nth(0).inner_text()
    hostile = tool_calls.nth(1).inner_text()
    assert "<script>window.__pwned = 1</script>" in hostile  # shown as text, not run
    answer = page.locator(ANSWER_TEXT).inner_text()
    assert answer.startswith("6*7 = 42.") and "<script>" in answer
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#transcript script, #transcript img").count() == 0
    assert page.locator(FACTS).inner_text().startswith("Answered · ")
    assert len(fake_llm.requests) == 2 and fake_llm.requests[0]["stream"] is True
    screenshot(page, "sandbox-llm")
    assert_stayed_local(page, live_server)


def test_a_stubborn_model_spiral_ends_with_the_planners_answer(
    staff_page: Any,
    live_server: Any,
    settings: Any,
    fake_llm: FakeLlm,
    default_rules: None,
    screenshot: Callable[[Any, str], Path],
) -> None:
    stubborn = Agent.objects.create(name="stubborn", tools=["calculator"])
    fake_llm.always(call("calculator", {"expression": 123}))  # the same bad call, forever
    page = staff_page
    llm_sandbox(page, live_server, settings, fake_llm, stubborn)
    page.fill("#id_message", "what is 6*7?")
    page.click("#send-button")
    page.wait_for_selector(ANSWER, timeout=30_000)
    transcript = page.locator("#transcript").inner_text()
    assert page.locator("li.step-model_turn").count() == 4  # 3 turns, 1 last call without tools
    assert "resolution planner_fallback" in transcript
    planned = page.locator("li.tool-call", has_text="2 planner")
    assert planned.count() == 1 and '"expression": "6*7"' in planned.inner_text()
    assert "not run: refused by the loop" in transcript  # the 4th turn's call, refused
    assert '"result": 42' in page.locator(ANSWER_TEXT).inner_text()
    assert "Answered after a failure spiral was broken" in page.locator(FACTS).inner_text()
    assert len(fake_llm.requests) == 4 and "tools" not in fake_llm.requests[3]
    screenshot(page, "sandbox-spiral")
    assert_stayed_local(page, live_server)


def test_active_discovery_with_a_direct_call_shows_the_planners_answer(
    staff_page: Any,
    live_server: Any,
    settings: Any,
    fake_llm: FakeLlm,
    default_rules: None,
) -> None:
    finder = Agent.objects.create(name="finder", tools=["calculator"], discovery="active")
    fake_llm.always(call("calculator", {"expression": "6*7"}))  # never asks for tools
    page = staff_page
    llm_sandbox(page, live_server, settings, fake_llm, finder)
    page.fill("#id_message", "what is 6*7?")
    page.click("#send-button")
    page.wait_for_selector(ANSWER, timeout=30_000)
    assert '"result": 42' in page.locator(ANSWER_TEXT).inner_text()  # not an empty answer
    assert "Answered by the planner" in page.locator(FACTS).inner_text()
    assert page.locator("li.tool-call", has_text="2 planner").count() == 1
    assert_stayed_local(page, live_server)


def test_the_workflow_path_runs_a_saved_workflow_without_asking_for_a_message(
    staff_page: Any, live_server: Any, settings: Any, default_rules: None
) -> None:
    settings.ARES_LLM_BASE_URL = ""
    examples = importlib.import_module("planner_app.migrations.0006_example_workflows")
    for name, (description, definition) in examples.WORKFLOWS.items():  # flushed by a test before
        Workflow.objects.get_or_create(
            name=name, defaults={"description": description, "definition": definition}
        )
    page = staff_page
    page.goto(f"{live_server.url}/sandbox/")
    notice = page.locator("#no-llm")
    assert "No LLM endpoint is configured" in notice.inner_text()
    assert notice.evaluate("node => node.classList.contains('error')") is False  # a calm note
    assert page.locator("#message-field").is_visible()
    page.select_option("#id_mode", "workflow")
    assert not page.locator("#message-field").is_visible()
    assert page.locator("#id_workflow").input_value() == "invoice-check"  # the first, chosen
    page.select_option("#id_workflow", "nightly-report")
    page.click("#send-button")
    page.wait_for_selector(ANSWER, timeout=30_000)
    calls = page.locator("li.tool-call")
    assert calls.count() == 4
    assert {b.inner_text() for b in calls.locator(".badge").all()} == {"3 workflow"}
    assert "NIGHTLY REPORT: 3662 CALLS" in page.locator("#transcript").inner_text()
    assert page.locator("#form-error").is_hidden()
    assert_stayed_local(page, live_server)


# A conversation, and stopping a task ---------------------------------------------------------


def send(page: Any, message: str) -> Any:
    """Send a message and return its turn once the answer is in and Send is back."""
    turn = page.locator("li.turn").nth(page.locator("li.turn").count())  # this one, for good
    page.fill("#id_message", message)
    page.click("#send-button")
    turn.locator("section.answer:not([hidden])").wait_for(timeout=30_000)
    page.wait_for_selector("#send-button:enabled")
    return turn


def trace_of(turn: Any) -> Trace:
    return Trace.objects.get(
        trace_id=turn.locator(".trace-link").get_attribute("href").split("/")[2]
    )


def test_a_conversation_sends_its_earlier_turns_and_a_new_one_starts_clean(
    staff_page: Any,
    live_server: Any,
    settings: Any,
    fake_llm: FakeLlm,
    screenshot: Callable[[Any, str], Path],
) -> None:
    fake_llm.script(
        say("Noted: you owe 120 euros."),
        call("calculator", {"expression": "120*2"}),
        say("Doubled, that is 240 euros."),
        say("I don't know what you owe."),
    )
    page = staff_page
    llm_sandbox(page, live_server, settings, fake_llm)
    first = send(page, "I owe 120 euros.")
    assert first.locator(".turn-message").inner_text() == "I owe 120 euros."
    assert page.locator("#id_message").input_value() == ""  # sent, so the box is empty again

    second = send(page, "Double it.")
    assert page.locator("li.turn").count() == 2
    assert "240 euros" in second.locator(".answer-text").inner_text()
    assert (
        "1 earlier turn sent with this message" in page.locator("#conversation-state").inner_text()
    )
    sent = [(m["role"], m["content"]) for m in fake_llm.requests[1]["messages"]]
    assert sent[-3:] == [
        ("user", "I owe 120 euros."),
        ("assistant", "Noted: you owe 120 euros."),
        ("user", "Double it."),
    ]
    # One trace per message, one session for the conversation.
    one, two = trace_of(first), trace_of(second)
    assert one.trace_id != two.trace_id and one.session_id == two.session_id != ""
    assert (one.request_text, two.request_text) == ("I owe 120 euros.", "Double it.")
    screenshot(page, "sandbox-conversation")

    page.click("#new-conversation")
    assert page.locator("li.turn").count() == 0
    third = send(page, "What do I owe?")
    assert [m["role"] for m in fake_llm.requests[3]["messages"]] == ["user"]
    assert trace_of(third).session_id not in ("", one.session_id)
    assert_stayed_local(page, live_server)


def thinking(fake_llm: FakeLlm) -> threading.Event:
    """Script a model that thinks until the returned event is set (at most 30 s)."""
    release = threading.Event()
    fake_llm.script(held(release, say("too late")), say("Here again, and answering."))
    return release


def agent_span(trace: Trace) -> Invocation:
    return Invocation.objects.get(trace_id=trace.trace_id, kind="agent")


def test_stop_ends_a_task_the_trace_says_so_and_the_chat_goes_on(
    staff_page: Any,
    live_server: Any,
    settings: Any,
    fake_llm: FakeLlm,
    screenshot: Callable[[Any, str], Path],
) -> None:
    release = thinking(fake_llm)
    page = staff_page
    llm_sandbox(page, live_server, settings, fake_llm)
    assert page.locator("#stop-button").is_hidden()
    page.fill("#id_message", "Think about 6*7 for a long time.")
    page.click("#send-button")
    page.click("#stop-button:enabled")
    page.wait_for_selector(ANSWER, timeout=30_000)
    release.set()
    turn = page.locator(TURN)
    facts = turn.locator(".answer-facts")
    assert facts.inner_text() == "Stopped by you" and "failed" not in turn.inner_text()
    assert facts.get_attribute("data-finish-reason") == "cancelled"
    assert "Stopped before the model answered." in turn.locator(".answer-text").inner_text()
    assert turn.locator("li.step-notice", has_text="Stopping").count() == 1
    assert "stopped" in turn.get_attribute("class")
    page.wait_for_selector("#send-button:enabled")
    assert page.locator("#stop-button").is_hidden()
    screenshot(page, "sandbox-stopped")

    # The records agree with the page: the task and its model call stopped, none failed.
    trace = trace_of(turn)
    span = agent_span(trace)
    assert (span.status, span.error_kind, span.result["finish_reason"]) == (
        "stopped", "cancelled", "cancelled"
    )  # fmt: skip
    llm = Invocation.objects.get(trace_id=trace.trace_id, kind="llm")
    assert (llm.status, llm.error_kind) == ("stopped", "cancelled")
    assert (trace.status, trace.failed_calls, trace.stopped_calls) == ("stopped", 0, 2)

    # The conversation goes on, the stopped turn in it.
    send(page, "Answer now, then.")
    assert [m["content"] for m in fake_llm.requests[1]["messages"]][-3:] == [
        "Think about 6*7 for a long time.",
        "Stopped before the model answered.",
        "Answer now, then.",
    ]
    page.locator(TRACE_LINK).click()
    assert "Answer now, then." in page.content()
    page.goto(f"{live_server.url}/traces/{trace.trace_id}/")  # the stopped turn's trace
    main = page.locator("main").inner_text()
    assert "stopped by its caller" in main and "2 stopped" in main
    assert page.locator("#trace-status").inner_text() == "Stopped"
    assert "failed" not in main.lower() and "Has failures" not in main
    assert_stayed_local(page, live_server)


def test_the_planner_runs_an_agents_mcp_tool_and_shows_its_text_as_text(
    staff_page: Any,
    live_server: Any,
    settings: Any,
    default_rules: None,
    demo_server: None,
    screenshot: Callable[[Any, str], Path],
) -> None:
    Agent.objects.create(name="mcp-only", tools=["mcp.demo.add", "mcp.demo.sha256"])
    page = staff_page
    page.goto(f"{live_server.url}/sandbox/")
    page.select_option("#id_agent", "mcp-only")
    page.select_option("#id_mode", "planner")
    send(page, "what is 1250 plus 370")
    turn = page.locator(TURN)
    note = turn.locator("li.step-notice").inner_text()
    assert "calculator passed over for Summation: the caller may not use it" in note
    call = turn.locator("li.tool-call")
    assert "mcp.demo.add" in call.inner_text() and "ok" in call.inner_text()
    answer = turn.locator(".answer-text").inner_text()
    # The tool's own text, its lines and quotes as they are: no escaped JSON string.
    assert answer.startswith("mcp.demo.add:\n{\n") and '"sum": 1620' in answer
    assert "\\" not in answer and '\\"' not in answer
    assert turn.locator(".answer-facts").inner_text() == "Answered"
    assert "finished:" not in turn.inner_text()
    screenshot(page, "sandbox-mcp-answer")


def test_when_the_stop_request_fails_closing_the_stream_stops_the_task(
    staff_page: Any, live_server: Any, settings: Any, fake_llm: FakeLlm
) -> None:
    release = thinking(fake_llm)
    page = staff_page
    llm_sandbox(page, live_server, settings, fake_llm)
    page.route("**/sandbox/stop", lambda route: route.fulfill(status=502, body="bad gateway"))
    page.fill("#id_message", "Think about 6*7 for a long time.")
    page.click("#send-button")
    page.click("#stop-button:enabled")
    turn = page.locator(TURN)
    turn.locator("li.step-notice", has_text="the stream was closed").wait_for(timeout=30_000)
    page.wait_for_selector("#send-button:enabled")
    assert "No answer: this turn is left out" in turn.inner_text()
    trace_id = turn.locator(".trace-link").get_attribute("href").split("/")[2]
    # The server notices the closed stream at its next write and stops the task.
    for _ in range(300):
        span = Invocation.objects.filter(trace_id=trace_id, kind="agent").first()
        if span is not None:
            break
        time.sleep(0.1)
    release.set()
    assert span is not None and span.result["finish_reason"] == "cancelled"
    assert len(fake_llm.requests) == 1
    # The turn without an answer is not sent with the next message.
    send(page, "Answer now, then.")
    assert [m["role"] for m in fake_llm.requests[1]["messages"]] == ["user"]


def test_a_long_conversation_sends_only_the_newest_turns_the_server_takes(
    staff_page: Any, live_server: Any, settings: Any, fake_llm: FakeLlm
) -> None:
    long_answer = "lorem ipsum " * 5_000  # 60,000 characters: two of them pass the 100,000
    fake_llm.script(say("A" + long_answer), say("B" + long_answer), say("Short, at last."))
    page = staff_page
    llm_sandbox(page, live_server, settings, fake_llm)
    send(page, "Tell me everything.")
    send(page, "And again.")
    third = send(page, "Now briefly.")
    assert page.locator("#form-error").is_hidden()  # no 400: the page trimmed what it sent
    assert third.locator(".answer-facts").get_attribute("data-finish-reason") == "stop"
    state = page.locator("#conversation-state").inner_text()
    assert state == "1 earlier turn sent with this message (1 older left out)"
    sent = [(m["role"], m["content"][:12]) for m in fake_llm.requests[2]["messages"]]
    assert sent[-3:] == [("user", "And again."), ("assistant", "Blorem ipsum"),
                         ("user", "Now briefly.")]  # fmt: skip
    assert "Tell me everything." not in json.dumps(fake_llm.requests[2])  # the oldest turn
