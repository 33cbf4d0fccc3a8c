"""Evidence blames the right party: a caller's faults count against it, not the tool."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from planner_app.evidence import evidence_from
from planner_app.models import Agent
from planner_app.services import recent_evidence
from tests.conftest import make_span
from tests.planner_app.fake_llm import FakeLlm, call, say
from tools_app.engine import CallContext
from tools_app.site_engine import get_engine
from tools_app.specs import ToolCall
from traces_app.models import Invocation, SpanRollup, caller_fault_q
from traces_app.rollups.range_totals import activity, tool_totals
from traces_app.rollups.ranges import TimeRange
from traces_app.rollups.recount import recount_all_marked_rollups

pytestmark = pytest.mark.django_db(transaction=True)

BAD = {"expression": 123}  # a number where the contract wants a string


@pytest.fixture(autouse=True)
def fresh_evidence(settings: Any) -> None:
    """Read the planner's recent evidence afresh: no cache kept from another test."""
    settings.ARES_PLANNER_EVIDENCE_TTL_S = 0


def today() -> TimeRange:
    now = timezone.now()
    return TimeRange(now - timedelta(hours=2), now + timedelta(hours=1), "today")


def good_calculator_calls(count: int, agent: str) -> None:
    """Run `count` correct calculator calls through the site's engine."""
    for index in range(count):
        call_ = ToolCall("calculator", {"expression": f"{index}+1"}, f"good_{index}")
        assert get_engine().execute(call_, CallContext(agent=agent)).success


def test_a_models_invalid_arguments_leave_the_tools_evidence_unchanged(
    make_key: Callable[..., str], settings: Any, fake_llm: FakeLlm, admin_client: Client
) -> None:
    settings.ARES_LLM_BASE_URL, settings.ARES_LLM_MODEL = fake_llm.base_url, "fake-model"
    Agent.objects.create(name="math-tutor", tools=["calculator"])
    good_calculator_calls(4, agent="homework-bot")
    before = recent_evidence("calculator", 20)
    fake_llm.script(*[call("calculator", BAD, f"call_{i}") for i in range(12)], say("No idea."))

    headers = {"Authorization": f"Bearer {make_key('chat')}"}
    body = {"agent": "math-tutor", "messages": [{"role": "user", "content": "what is 6*7?"}]}
    response = Client().post("/api/v1/chat", body, "application/json", headers=headers)

    assert response.status_code == 200, response.content
    refused = Invocation.objects.filter(agent="math-tutor", error_kind="invalid_arguments")
    assert refused.count() >= 3  # the model's spiral reached the engine, which refused it
    # Every call the tool ran succeeded (the planner may have run it too, with its own
    # arguments): its record is still perfect, the refusals are not in it.
    ran = Invocation.objects.filter(tool_name="calculator", status="ok").count()
    after = recent_evidence("calculator", 20)
    assert (before.samples, before.success_rate) == (4, 1.0)
    assert (after.samples, after.success_rate) == (ran, 1.0)
    recount_all_marked_rollups()
    [totals] = tool_totals(today(), ["calculator"])
    assert (totals.calls, totals.caller_faults, totals.success_rate) == (
        ran + refused.count(), refused.count(), 1.0,
    )  # fmt: skip
    assert (evidence_from(totals).samples, evidence_from(totals).success_rate) == (ran, 1.0)
    faults = Invocation.objects.filter(caller_fault_q(), agent="math-tutor").count()
    assert faults >= refused.count()  # the refusals, and calls the breaker cancelled if any
    assert activity(today()).by_agent["math-tutor"].caller_faults == faults
    assert activity(today()).by_agent["homework-bot"].caller_faults == 0


def test_the_pages_show_the_numbers_the_scorer_uses(
    api: httpx.Client, admin_client: Client, default_rules: None
) -> None:
    started = (datetime.now(UTC) - timedelta(minutes=20)).isoformat()
    spans = [
        *(make_span(agent="outside-bot", started_at=started) for _ in range(2)),
        make_span(agent="outside-bot", status="error", error_kind="timeout", started_at=started),
        *(
            make_span(agent="outside-bot", arguments=BAD, status="error",
                      error_kind="invalid_arguments", result=None, started_at=started)
            for _ in range(3)
        ),
    ]  # fmt: skip
    assert api.post("/invocations", json={"invocations": spans}).status_code == 200

    tool_page = admin_client.get("/tools/calculator/?range=24h").content.decode()
    assert re.search(r'id="success-rate">66\.7%<', tool_page)  # 2 of 3: the timeout counts
    assert "3 caller faults left out" in tool_page
    tools_row = _row(admin_client.get("/tools/?range=24h").content.decode(), "calculator")
    assert "66.7%" in tools_row and "(3 caller faults left out)" in tools_row
    evidence_row = _row(
        admin_client.get("/evidence/Arithmetic/?range=24h").content.decode(), "calculator"
    )
    assert re.search(r'<td class="num">3</td>\s*<td class="num caller-faults">3</td>', evidence_row)
    assert '<td class="num">66.7%</td>' in evidence_row
    overview_row = _row(admin_client.get("/?range=24h").content.decode(), "outside-bot", "agent")
    assert '<td class="num caller-faults">3</td>' in overview_row


def test_a_tools_own_failures_still_count_against_it(api: httpx.Client) -> None:
    started = (datetime.now(UTC) - timedelta(minutes=20)).isoformat()
    spans = [
        make_span(tool_name="lookup", started_at=started),
        make_span(tool_name="lookup", status="error", error_kind="tool_error", started_at=started),
        make_span(tool_name="lookup", status="error", error_kind="not_found", started_at=started),
    ]
    api.post("/invocations", json={"invocations": spans})
    recount_all_marked_rollups()

    [totals] = tool_totals(today(), ["lookup"])

    assert (totals.caller_faults, totals.judged_calls, totals.success_rate) == (0, 3, 1 / 3)
    assert recent_evidence("lookup", 20).success_rate == pytest.approx(1 / 3)


def test_check_rollups_compares_the_caller_faults(api: httpx.Client) -> None:
    started = (datetime.now(UTC) - timedelta(minutes=20)).isoformat()
    bad = make_span(status="error", error_kind="invalid_arguments", started_at=started)
    api.post("/invocations", json={"invocations": [bad]})
    recount_all_marked_rollups()
    assert SpanRollup.objects.get(kind="tool").caller_faults == 1
    SpanRollup.objects.update(caller_faults=0)

    out = _check_rollups()

    assert "caller_faults 0 -> 1" in out
    assert SpanRollup.objects.get(kind="tool").caller_faults == 1


def _check_rollups() -> str:
    from io import StringIO

    out = StringIO()
    since = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    call_command("check_rollups", "--since", since, stdout=out)
    return out.getvalue()


def _row(page: str, name: str, attribute: str = "tool") -> str:
    """Return the table row of a page marked data-<attribute>="<name>"."""
    match = re.search(rf'<tr data-{attribute}="{re.escape(name)}">(.*?)</tr>', page, re.S)
    assert match, f"no row for {name}"
    return match.group(1)
