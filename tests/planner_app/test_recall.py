"""The built-in recall tool: in the agent loop with the scripted model, and its answers alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from planner_app.agents.llm.messages import Message
from planner_app.agents.recall import (
    EarlierResult,
    RecallScope,
    result_parts,
    run_recall,
)
from planner_app.agents.site_agents import run_agent
from planner_app.models import Agent
from tests.planner_app.conftest import in_site_registry
from tests.planner_app.fake_llm import FakeLlm, call, calls, say
from tools_app.formatting import estimate_tokens
from tools_app.specs import ToolCall, ToolSpec
from traces_app.models import Invocation

OBJECT = {"type": "object", "properties": {"key": {"type": "string"}}}
PLACES = [
    *("Lisbon tram", "Madrid museum", "Sevilla tiles", "Granada palace", "Bilbao steel"),
    *("Valencia rice", "Toledo sword", "Porto wine cellar", "Braga shrine", "Faro beach"),
]
RESULTS = {"results": [{"title": place, "snippet": f"{place} " + "x" * 300} for place in PLACES]}
SCOPE = RecallScope("tutor", "s-1", "t1")


@pytest.fixture
def search_tool() -> Iterator[None]:
    yield from in_site_registry([ToolSpec("search_stub", "Search.", OBJECT, lambda key: RESULTS)])


def tutor(tools: list[str], name: str = "tutor", budget: int = 1000) -> Agent:
    return Agent.objects.create(name=name, tools=tools, token_budget=budget)  # 30 % for tools


def tool_message(fake_llm: FakeLlm, request: int, call_id: str) -> str:
    """Return the tool message for call_id in the model's request number `request`."""
    messages = fake_llm.requests[request]["messages"]
    return next(m["content"] for m in messages if m.get("tool_call_id") == call_id)


def search_turn(fake_llm: FakeLlm, agent: Agent, session: str, call_id: str = "s1") -> str:
    """Run a turn that searches once (its output cut by the budget); return the tool message."""
    fake_llm.script(call("search_stub", {"key": "spain"}, call_id), say("found some"))
    run_agent(agent, [Message("user", "search spain")], session_id=session)
    return tool_message(fake_llm, len(fake_llm.requests) - 1, call_id)


def recall_turn(fake_llm: FakeLlm, agent: Agent, session: str, arguments: Any) -> str:
    """Run a turn whose model recalls with these arguments; return what it was told."""
    fake_llm.script(call("recall", arguments, "r1"), say("done"))
    run_agent(agent, [Message("user", "what else?")], session_id=session)
    return tool_message(fake_llm, len(fake_llm.requests) - 1, "r1")


# In the agent loop, across the turns of one session ------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "search_tool")
def test_a_cut_output_says_it_can_be_recalled_by_its_call_id(fake_llm: FakeLlm) -> None:
    told = search_turn(fake_llm, tutor(["search_stub", "recall"]), "s-1")
    assert "[reduced to the top 3 of 10 results" in told
    assert 'call recall with call_id "s1"' in told
    offered = [tool["function"]["name"] for tool in fake_llm.requests[0]["tools"]]
    assert offered == ["search_stub", "recall"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "search_tool")
def test_the_next_turn_recalls_the_rest_by_call_id(fake_llm: FakeLlm) -> None:
    agent = tutor(["search_stub", "recall"])
    first = search_turn(fake_llm, agent, "s-1")
    assert "Toledo" not in first
    told = recall_turn(fake_llm, agent, "s-1", {"call_id": "s1", "offset": 3})
    assert told.startswith('recall: search_stub call s1 ({"key":"spain"}) returned')
    assert "[4/10]" in told and "Granada palace" in told and "Lisbon tram" not in told
    assert estimate_tokens(told) <= 300 and "truncated" not in told  # sized to the budget
    [span] = Invocation.objects.filter(tool_name="recall")
    assert (span.kind, span.status, span.tool_call_id, span.agent) == ("tool", "ok", "r1", "tutor")
    assert span.trace.session_id == "s-1" and span.result["call_id"] == "s1"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "search_tool")
def test_the_next_turn_recalls_by_a_query(fake_llm: FakeLlm) -> None:
    agent = tutor(["search_stub", "recall"])
    assert "Porto" not in search_turn(fake_llm, agent, "s-1")
    told = recall_turn(fake_llm, agent, "s-1", {"query": "porto wine"})
    best = told.splitlines()[1]
    assert best.startswith('- search_stub call s1 ({"key":"spain"}), part 8/10: ')
    assert "Porto wine cellar" in best
    again = recall_turn(fake_llm, agent, "s-1", {"call_id": "r1"})  # recall's own: never
    assert again.startswith("recall failed (not_found): no earlier tool call with id 'r1'")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "search_tool")
def test_two_recalls_in_one_turn_share_the_budget_left(fake_llm: FakeLlm) -> None:
    agent = tutor(["search_stub", "recall"])
    search_turn(fake_llm, agent, "s-1")
    fake_llm.script(calls(("recall", {"call_id": "s1", "offset": 3}, "r1"),
                          ("recall", {"query": "faro beach"}, "r2")), say("ok"))  # fmt: skip
    run_agent(agent, [Message("user", "more?")], session_id="s-1")
    first, second = (tool_message(fake_llm, 3, id_) for id_ in ("r1", "r2"))
    assert "[4/10] " in first and "Faro beach" in second
    for told in (first, second):
        assert estimate_tokens(told) <= 150 and "truncated" not in told and "left out" not in told


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "search_tool")
def test_recall_is_refused_when_the_agent_may_not_call_it(fake_llm: FakeLlm) -> None:
    agent = tutor(["search_stub"])
    first = search_turn(fake_llm, agent, "s-1")
    assert "call recall" not in first  # no hint of a tool it does not have
    assert [t["function"]["name"] for t in fake_llm.requests[0]["tools"]] == ["search_stub"]
    told = recall_turn(fake_llm, agent, "s-1", {"call_id": "s1"})
    assert told == "recall failed (permission_denied): tutor is not allowed to call 'recall'"
    [span] = Invocation.objects.filter(tool_name="recall")
    assert (span.status, span.error_kind) == ("error", "permission_denied")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "search_tool")
@pytest.mark.parametrize(("agent_name", "session"), [("tutor", "s-2"), ("rival", "s-1")])
def test_an_id_of_another_session_or_agent_is_not_recalled(
    fake_llm: FakeLlm, agent_name: str, session: str
) -> None:
    search_turn(fake_llm, tutor(["search_stub", "recall"]), "s-1")
    other = tutor(["search_stub", "recall"], name=agent_name) if agent_name != "tutor" else None
    told = recall_turn(fake_llm, other or Agent.objects.get(name="tutor"), session,
                       {"call_id": "s1"})  # fmt: skip
    assert told.startswith(f"recall failed (not_found): no earlier tool call with id 's1' in "
                           f"session {session!r} of agent {agent_name!r}")  # fmt: skip
    assert "Lisbon" not in told
    by_query = recall_turn(fake_llm, other or Agent.objects.get(name="tutor"), session,
                           {"query": "lisbon tram"})  # fmt: skip
    assert "Lisbon" not in by_query and "has no earlier tool results yet" in by_query


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "search_tool")
def test_an_unknown_id_tells_the_model_what_to_do_and_it_can(fake_llm: FakeLlm) -> None:
    agent = tutor(["search_stub", "recall"])
    search_turn(fake_llm, agent, "s-1")
    fake_llm.script(call("recall", {"call_id": "nope"}, "r1"),
                    call("recall", {"query": "faro beach"}, "r2"), say("Faro"))  # fmt: skip
    done = run_agent(agent, [Message("user", "the beach?")], session_id="s-1")
    wrong = tool_message(fake_llm, len(fake_llm.requests) - 1, "r1")
    assert "no earlier tool call with id 'nope'" in wrong and "with a query instead" in wrong
    assert "Faro beach" in tool_message(fake_llm, len(fake_llm.requests) - 1, "r2")
    assert done.content == "Faro"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("llm_settings", "search_tool")
def test_without_a_session_it_recalls_within_the_task_only(fake_llm: FakeLlm) -> None:
    agent = tutor(["search_stub", "recall"], budget=5000)  # room for three outputs
    search_turn(fake_llm, agent, "")  # another task, no session: not this one's
    fake_llm.script(call("search_stub", {"key": "spain"}, "s2"),
                    call("recall", {"call_id": "s1"}, "r1"),
                    call("recall", {"call_id": "s2", "offset": 9}, "r2"), say("ok"))  # fmt: skip
    run_agent(agent, [Message("user", "look")])
    last = len(fake_llm.requests) - 1
    assert "in this task of agent 'tutor'" in tool_message(fake_llm, last, "r1")
    assert "[10/10]" in tool_message(fake_llm, last, "r2")


@pytest.mark.django_db
def test_an_agent_may_list_recall_in_its_tools() -> None:
    Agent(name="a", tools=["calculator", "recall"]).full_clean()
    with pytest.raises(ValidationError, match="no tool named 'recal'"):
        Agent(name="b", tools=["recal"]).full_clean()


# Its answers, from a store in memory ----------------------------------------------------


class ListStore:
    """A RecallStore over a list, the newest result first."""

    def __init__(self, *results: EarlierResult, broken: bool = False) -> None:
        self.results, self.broken = list(results), broken

    def with_call_id(self, scope: RecallScope, call_id: str) -> list[EarlierResult]:
        if self.broken:
            raise ConnectionError("database is gone")
        return [r for r in self.results if r.call_id == call_id]

    def searchable(self, scope: RecallScope, limit: int) -> list[EarlierResult]:
        return [r for r in self.results if r.ok][:limit]


def earlier(call_id: str, result: Any, ok: bool = True, tool: str = "search_stub") -> EarlierResult:
    when = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    return EarlierResult(call_id, tool, {"key": "k"}, result, ok, "" if ok else "it broke",
                         "t0", when)  # fmt: skip


LONG_TEXT = "\n".join(f"line {n}: " + "word " * 30 for n in range(60))
STORE = ListStore(earlier("s1", RESULTS), earlier("t1", LONG_TEXT, tool="reader"),
                  earlier("f1", None, ok=False))  # fmt: skip


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "give call_id (an earlier call's id) or query"),
        ({"query": "  "}, "give call_id"),
        ({"call_id": "s1", "offset": -1}, "offset: expected a number >= 0, got number -1"),
        ({"call_id": "s1", "offset": 10}, "offset 10 is past the end: call 's1' has 10 part(s)"),
        ({"call_id": "s1", "extra": 1}, "extra: unknown field; allowed: call_id, offset, query"),
        ("not json", "invalid arguments"),
        ({"call_id": 7}, "call_id: expected string, got number 7"),
    ],
)
def test_bad_arguments_get_an_error_the_model_can_act_on(arguments: Any, expected: str) -> None:
    result = run_recall(STORE, SCOPE, ToolCall("recall", arguments, "r"), 300)
    assert not result.success and result.error.kind == "invalid_arguments"
    assert expected in result.text


def test_a_long_text_comes_back_part_by_part_within_the_allowance() -> None:
    seen, offset = [], 0
    while offset is not None:
        result = run_recall(STORE, SCOPE, ToolCall("recall", {"call_id": "t1", "offset": offset},
                                                   "r"), 200)  # fmt: skip
        assert result.success and estimate_tokens(result.text) <= 200
        seen += [part["part"] for part in result.data["shown"]]
        offset = result.data["next_offset"]
    assert seen == list(range(1, len(result_parts(STORE.results[1])) + 1))
    first = run_recall(STORE, SCOPE, ToolCall("recall", {"call_id": "t1"}, "r"), 400)
    shown = len(first.data["shown"])
    assert shown > 1 and first.data["next_offset"] == shown
    assert f"and offset {shown} for the rest]" in first.text


def test_a_query_within_one_call_ranks_its_parts() -> None:
    result = run_recall(STORE, SCOPE, ToolCall("recall", {"call_id": "s1", "query": "toledo"},
                                               "r"), 300)  # fmt: skip
    assert [part["part"] for part in result.data["shown"]] == [7]
    assert "Toledo sword" in result.text


def test_a_failed_call_is_recalled_with_its_error_but_never_searched() -> None:
    by_id = run_recall(STORE, SCOPE, ToolCall("recall", {"call_id": "f1"}, "r"), 300)
    assert by_id.success and "failed, at" in by_id.text and "it broke" in by_id.text
    by_query = run_recall(STORE, SCOPE, ToolCall("recall", {"query": "broke"}, "r"), 300)
    assert by_query.data["matches"] == []


def test_a_query_matching_nothing_says_so() -> None:
    result = run_recall(STORE, SCOPE, ToolCall("recall", {"query": "zanzibar ?"}, "r"), 300)
    assert result.success and result.data["matches"] == []
    assert "has nothing matching 'zanzibar ?' (2 results searched)" in result.text


def test_a_broken_store_fails_the_call_not_the_task() -> None:
    result = run_recall(
        ListStore(broken=True), SCOPE, ToolCall("recall", {"call_id": "x"}, "r"), 300
    )
    assert (result.success, result.error.kind) == (False, "tool_error")
    assert "ConnectionError: database is gone" in result.text


def test_a_payload_the_store_cut_is_recalled_as_its_preview() -> None:
    stored = {"__truncated__": True, "original_bytes": 90000, "preview": '{"a": "b'}
    assert result_parts(earlier("c", stored)) == [
        '[stored cut: the result had 90000 bytes] {"a": "b'
    ]


def test_json_arguments_as_text_are_read_like_an_object() -> None:
    text = json.dumps({"call_id": "s1", "offset": 9})
    result = run_recall(STORE, SCOPE, ToolCall("recall", text, "r"), 300)
    assert result.success and [part["part"] for part in result.data["shown"]] == [10]
