"""The issue's worked example, shared by the API and the browser tests: a site whose sum
rules lack a word records traffic in which an LLM serves those requests with the calculator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from planner_app import ruleset_versions
from planner_app.models import Agent, IntentRule
from tests.planner_app.fake_llm import FakeLlm, call, say

# Requests the site's sum rules do not plan (no rule has "tally" or "累计"), with the
# expression the LLM sends to the calculator for each, and what it adds up to.
TALLY = {
    "tally 3 and 4": "3+4",
    "tally 10 and 20": "10+20",
    "tally 7 and 8": "7+8",
}
LEIJI = {
    "累计 3 和 4": "3+4",
    "累计 5 和 6": "5+6",
    "累计 10 和 20": "10+20",
}
# Requests the rules do plan (other capabilities and sum itself): the change must not move them.
PLANNED = ["what is 12*34", "sum 3 and 4", "sha256 of hello"]


def record_llm_traffic(
    live_server: Any, make_key: Callable[..., str], fake_llm: FakeLlm, requests: dict[str, str]
) -> list[str]:
    """Ask a real agent each request over POST /api/v1/chat; the fake LLM calls the calculator.

    Returns the trace ids.
    """
    Agent.objects.get_or_create(name="math-tutor", defaults={"tools": ["calculator"]})
    return [
        record_agent_traffic(live_server, make_key, fake_llm, "math-tutor", "calculator",
                             {"expression": expression}, [request])[0]
        for request, expression in requests.items()
    ]  # fmt: skip


def record_agent_traffic(
    live_server: Any,
    make_key: Callable[..., str],
    fake_llm: FakeLlm,
    agent: str,
    tool: str,
    arguments: dict[str, Any],
    requests: list[str],
) -> list[str]:
    """Ask `agent` each request over POST /api/v1/chat; the fake LLM has it call `tool`."""
    headers = {"Authorization": f"Bearer {make_key('chat')}"}
    traces = []
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=60) as api:
        for request in requests:
            fake_llm.script(call(tool, arguments), say("done"))
            message = {"role": "user", "content": request}
            answer = api.post("/chat", json={"agent": agent, "messages": [message]})
            assert answer.status_code == 200, answer.text
            served = answer.json()["tool_calls"][0]
            assert served["tool"] == tool and served["success"], served
            traces.append(answer.json()["trace_id"])
    return traces


def record_planned_traffic(live_server: Any, make_key: Callable[..., str]) -> None:
    """Run requests the rules plan through POST /api/v1/execute (the planner's own calls)."""
    headers = {"Authorization": f"Bearer {make_key('execute')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=60) as api:
        for request in PLANNED:
            answer = api.post("/execute", json={"request": request})
            assert answer.status_code == 200, answer.text


def site_lacks_the_words() -> None:
    """Make sure neither word is in the rules (the shipped ones have neither; say so)."""
    for rule in IntentRule.objects.filter(name__in=["sum-en", "sum-zh"]):
        assert "tally" not in rule.keywords and "累计" not in rule.keywords, rule.keywords
    assert ruleset_versions.latest_number() >= 1
