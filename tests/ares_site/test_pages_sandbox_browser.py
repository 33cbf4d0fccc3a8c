"""The sandbox chat in a real Chromium: the planner path, the scripted-LLM path, hostile text."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from planner_app.models import Agent, Workflow
from tests.ares_site.browser import assert_stayed_local
from tests.planner_app import conftest as planner_fixtures
from tests.planner_app.fake_llm import FakeLlm, call, calls, say
from traces_app.models import Invocation

pytestmark = pytest.mark.browser

# The planner's fixtures, reused here without moving them.
default_rules = planner_fixtures.default_rules
fake_llm = planner_fixtures.fake_llm
fresh_ruleset_cache = planner_fixtures.fresh_ruleset_cache

HOSTILE = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned=2'>"
ANSWER = "#answer-box:not([hidden])"


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
    assert '"result": 14' in page.locator("#answer").inner_text()
    link = page.locator("#trace-link")
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
    settings.ARES_LLM_BASE_URL = fake_llm.base_url
    settings.ARES_LLM_MODEL = "fake-model"
    settings.ARES_LLM_STREAM = True
    Agent.objects.create(name="math-tutor", tools=["calculator", "string_utils"])
    fake_llm.script(
        calls(("calculator", {"expression": "6*7"}, "call_a"),
              ("string_utils", {"operation": "lower", "text": HOSTILE}, "call_b")),
        say(f"6*7 = 42. The text was {HOSTILE}"),
    )  # fmt: skip
    page = staff_page
    page.goto(f"{live_server.url}/sandbox/")
    page.select_option("#id_agent", "math-tutor")
    page.select_option("#id_mode", "llm")
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
    answer = page.locator("#answer").inner_text()
    assert answer.startswith("6*7 = 42.") and "<script>" in answer
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#transcript script, #answer-box script, #transcript img").count() == 0
    assert "finished: stop" in page.locator("#answer-facts").inner_text()
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
    settings.ARES_LLM_BASE_URL = fake_llm.base_url
    settings.ARES_LLM_MODEL = "fake-model"
    Agent.objects.create(name="stubborn", tools=["calculator"])
    fake_llm.always(call("calculator", {"expression": 123}))  # the same bad call, forever
    page = staff_page
    page.goto(f"{live_server.url}/sandbox/")
    page.select_option("#id_agent", "stubborn")
    page.select_option("#id_mode", "llm")
    page.fill("#id_message", "what is 6*7?")
    page.click("#send-button")
    page.wait_for_selector(ANSWER, timeout=30_000)
    transcript = page.locator("#transcript").inner_text()
    assert page.locator("li.step-model_turn").count() == 4  # 3 turns, 1 last call without tools
    assert "resolution planner_fallback" in transcript
    planned = page.locator("li.tool-call", has_text="2 planner")
    assert planned.count() == 1 and '"expression": "6*7"' in planned.inner_text()
    assert "not run: refused by the loop" in transcript  # the 4th turn's call, refused
    assert '"result": 42' in page.locator("#answer").inner_text()
    assert "finished: spiral_breaker" in page.locator("#answer-facts").inner_text()
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
    settings.ARES_LLM_BASE_URL = fake_llm.base_url
    settings.ARES_LLM_MODEL = "fake-model"
    Agent.objects.create(name="finder", tools=["calculator"], discovery="active")
    fake_llm.always(call("calculator", {"expression": "6*7"}))  # never asks for tools
    page = staff_page
    page.goto(f"{live_server.url}/sandbox/")
    page.select_option("#id_agent", "finder")
    page.select_option("#id_mode", "llm")
    page.fill("#id_message", "what is 6*7?")
    page.click("#send-button")
    page.wait_for_selector(ANSWER, timeout=30_000)
    assert '"result": 42' in page.locator("#answer").inner_text()  # not an empty answer
    assert "finished: planner_answer" in page.locator("#answer-facts").inner_text()
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
