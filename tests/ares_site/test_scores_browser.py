"""Scoring a span and a whole trace from the trace page, in a real Chromium."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.ares_site.browser import assert_stayed_local
from tests.conftest import make_span
from tests.planner_app import conftest as planner_fixtures
from traces_app.ingest.recording import record_invocations
from traces_app.models import Score, ScoreDefinition
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.browser

# The planner's fixtures, reused here without moving them.
default_rules = planner_fixtures.default_rules
fresh_ruleset_cache = planner_fixtures.fresh_ruleset_cache


@pytest.fixture
def scored_trace(transactional_db: None) -> dict[str, str]:
    ScoreDefinition.objects.get_or_create(name="feedback", defaults={"data_type": "boolean"})
    ScoreDefinition.objects.get_or_create(
        name="helpfulness", defaults={"data_type": "numeric", "min_value": 0, "max_value": 1}
    )
    trace_id = secrets.token_hex(16)
    span = make_span(trace_id=trace_id, tool_name="web_search", arguments={"query": "mcp"})
    record_invocations([InvocationIn.model_validate(span)])
    return {"trace_id": trace_id, "span_id": span["span_id"]}


def test_an_operator_scores_a_span_and_the_trace(staff_page: Any, live_server: Any, scored_trace):
    page, ids = staff_page, scored_trace
    page.goto(f"{live_server.url}/traces/{ids['trace_id']}/#span-{ids['span_id']}")
    panel = page.locator(f"#scores-{ids['span_id']}")
    panel.get_by_label("Comment on this span").fill("the wrong page <b>again</b>")
    panel.get_by_role("button", name=f"Thumbs down for span {ids['span_id']}").click()
    page.wait_for_load_state()

    assert "Scored span" in page.locator("#scores").inner_text()
    shown = page.locator(f"#scores-{ids['span_id']} ul.scores").inner_text()
    assert "feedback = false" in shown and "the wrong page <b>again</b>" in shown
    trace_panel = page.locator("#scores")
    trace_panel.get_by_role("button", name="Thumbs up for the trace").click()
    page.wait_for_load_state()

    scores = Score.objects.order_by("pk")
    assert [(s.span_id, s.label, s.source, s.reported_by) for s in scores] == [
        (ids["span_id"], "false", "human", "user operator"),
        ("", "true", "human", "user operator"),
    ]
    assert "feedback = true" in page.locator("#scores ul.scores").inner_text()
    assert_stayed_local(page, live_server)


def test_a_value_outside_the_definition_is_named_on_the_page(
    staff_page: Any, live_server: Any, scored_trace
):
    page, ids = staff_page, scored_trace
    page.goto(f"{live_server.url}/traces/{ids['trace_id']}/")
    panel = page.locator("#scores")
    panel.locator("summary", has_text="Another score").click()
    panel.locator("select[name=name]").select_option("helpfulness")
    panel.get_by_label("Value").fill("7")
    panel.get_by_role("button", name="Add the score").click()
    page.wait_for_load_state()

    assert "helpfulness must be at most 1 (got 7)" in page.locator("#scores").inner_text()
    assert not Score.objects.exists()


def test_an_operator_scores_each_answer_of_a_sandbox_conversation(
    staff_page: Any, live_server: Any, settings: Any, default_rules: None
):
    ScoreDefinition.objects.get_or_create(name="feedback", defaults={"data_type": "boolean"})
    settings.ARES_LLM_BASE_URL = ""
    page = staff_page
    page.goto(f"{live_server.url}/sandbox/")
    traces = []
    for number, message in enumerate(["what is 2+3*4", "what is 10/4"], start=1):
        page.fill("#id_message", message)
        page.click("#send-button")
        turn = page.locator(f"li.turn:nth-child({number})")
        turn.locator("section.answer:not([hidden])").wait_for(timeout=30_000)
        page.wait_for_selector("#send-button:enabled")
        traces.append(turn.locator(".trace-link").get_attribute("href").strip("/").split("/")[-1])

    first, second = page.locator("li.turn").all()
    first.locator(".score-comment").fill("right, and fast")
    first.get_by_role("button", name="Thumbs up for this answer").click()
    second.get_by_role("button", name="Thumbs down for this answer").click()
    for turn in (first, second):
        turn.locator(".score-status", has_text="Scored").wait_for()
    assert "thumbs down" in second.locator(".score-status").inner_text()

    scores = {score.trace_id: score for score in Score.objects.all()}
    assert set(scores) == set(traces) and len(set(traces)) == 2
    up, down = scores[traces[0]], scores[traces[1]]
    assert (up.span_id, up.label, up.comment) == ("", "true", "right, and fast")
    assert (down.label, down.comment, up.reported_by) == ("false", "", "user operator")
    assert_stayed_local(page, live_server)
