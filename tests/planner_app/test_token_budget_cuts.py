"""What the token budget says it cut, and the tool span that records it (loop + scripted LLM)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from planner_app.agents.llm.messages import Message
from planner_app.agents.site_agents import run_agent
from planner_app.agents.token_budget import TokenBudget
from planner_app.models import Agent
from tests.planner_app.conftest import in_site_registry
from tests.planner_app.fake_llm import FakeLlm, call, calls, say
from tools_app.formatting import estimate_tokens
from tools_app.specs import ToolResult, ToolSpec
from traces_app.models import Invocation

OBJECT = {"type": "object", "properties": {"key": {"type": "string"}}}
LONG = "lorem ipsum " * 2000
RESULTS = {"results": [{"title": f"result {n}", "snippet": "x" * 300} for n in range(10)]}


def result(text: str, data: Any = None) -> ToolResult:
    return ToolResult("c1", "t", True, data=data, text=text)


def test_an_output_that_fits_is_not_cut() -> None:
    fitted = TokenBudget(1000).fit(result("short"))
    assert (fitted.text, fitted.cut, fitted.reduction, fitted.tokens_dropped) == (
        "short", False, "", 0,
    )  # fmt: skip


def test_a_long_text_is_truncated_and_says_what_it_dropped() -> None:
    fitted = TokenBudget(1000).fit(result(LONG))  # 300 tokens for tool output
    assert fitted.reduction == "truncated" and fitted.cut
    assert fitted.tokens_dropped == estimate_tokens(LONG) - estimate_tokens(fitted.text)
    assert 5000 < fitted.tokens_dropped < estimate_tokens(LONG)


def test_a_long_list_is_compressed_to_its_top_items() -> None:
    import json

    fitted = TokenBudget(1000).fit(result(json.dumps(RESULTS), RESULTS))
    assert fitted.reduction == "compressed"
    assert "[reduced to the top 3 of 10 results" in fitted.text
    assert fitted.tokens_dropped > 0


def test_an_output_past_the_spent_budget_is_omitted_whole() -> None:
    budget = TokenBudget(1000)
    budget.fit(result(LONG))
    fitted = budget.fit(result("x" * 400))
    assert (fitted.reduction, fitted.tokens_dropped) == ("omitted", 100)
    assert fitted.text.startswith("[t output left out")


def test_it_still_unpacks_as_text_and_cut() -> None:
    text, cut = TokenBudget(1000).fit(result(LONG))
    assert cut is True and text.endswith("characters]")


# The loop records the cut on the tool's span ------------------------------------------


@pytest.fixture
def long_tools() -> Iterator[None]:
    specs = [
        ToolSpec("long_text", "Return a long text.", OBJECT, lambda key: LONG),
        ToolSpec("search_stub", "Search.", OBJECT, lambda key: RESULTS),
        ToolSpec("short_text", "Return a short text.", OBJECT, lambda key: "fine"),
    ]
    yield from in_site_registry(specs)


def tool_cuts(fake_llm: FakeLlm, *tool_calls: tuple[str, str]) -> dict[str, tuple[str, int, int]]:
    """Run one task making these (tool, call id) calls; return each span's cut by call id.

    A cut is (reduction, tokens dropped, the span's result tokens); the budget gives tool
    output 300 tokens in all.
    """
    fake_llm.script(calls(*[(tool, {"key": id_}, id_) for tool, id_ in tool_calls]), say("ok"))
    tools = sorted({tool for tool, _ in tool_calls})
    agent = Agent.objects.create(name="tutor", tools=tools, token_budget=1000)
    done = run_agent(agent, [Message("user", "look")])
    rows = Invocation.objects.filter(trace_id=done.trace_id, kind="tool")
    return {
        row.tool_call_id: (row.result_reduction, row.result_tokens_dropped, row.result_tokens)
        for row in rows
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "long_tools")
@pytest.mark.parametrize(("tool", "reduction"), [("search_stub", "compressed"),
                                                 ("long_text", "truncated")])  # fmt: skip
def test_the_loop_records_how_a_tool_output_was_cut(
    fake_llm: FakeLlm, tool: str, reduction: str
) -> None:
    cuts = tool_cuts(fake_llm, ("short_text", "a"), (tool, "b"))
    assert cuts["a"][:2] == ("", 0)
    how, dropped, tokens = cuts["b"]
    assert how == reduction
    assert tokens - 300 < dropped < tokens - 150  # under 300 sent, most of that used


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "long_tools")
def test_the_loop_records_an_output_left_out_whole(fake_llm: FakeLlm) -> None:
    cuts = tool_cuts(fake_llm, ("long_text", "a"), ("long_text", "b"))
    assert cuts["a"][0] == "truncated"
    how, dropped, tokens = cuts["b"]
    assert (how, dropped) == ("omitted", tokens) and tokens > 700


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "long_tools")
def test_a_single_call_within_budget_records_no_cut(fake_llm: FakeLlm) -> None:
    fake_llm.script(call("short_text", {"key": "a"}, "a"), say("ok"))
    agent = Agent.objects.create(name="tutor", tools=["short_text"])
    done = run_agent(agent, [Message("user", "look")])
    [row] = Invocation.objects.filter(trace_id=done.trace_id, kind="tool")
    assert (row.result_reduction, row.result_tokens_dropped) == ("", 0)
