"""A trace's request text is its first user message by start time, whatever order its spans arrive.

A traceloop workflow runs three agent turns, one LLM span each, whose prompts hold only
that turn's question; each span goes in an OTLP request of its own (the SDK's
SimpleSpanProcessor exports a span when it ends), in every order.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.traces_app.test_otlp_exporters import SUCCESS, at, ids
from traces_app.models import Trace

QUESTIONS = ["What is 12*7?", "And divided by 4?", "Now add 100."]


def llm_turn(tracer: Any, workflow: Any, turn: int) -> Any:
    """Start the LLM span of a turn (OpenLLMetry: GenAI attributes beside traceloop's)."""
    return tracer.start_span(
        "openai.chat",
        context=trace.set_span_in_context(workflow),
        start_time=at(1000 * turn + 10),
        attributes={
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "You are a calculator.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": QUESTIONS[turn],
            "gen_ai.usage.prompt_tokens": 20,
            "gen_ai.usage.completion_tokens": 5,
        },
    )


@pytest.mark.parametrize(
    "order", list(itertools.permutations(range(3))), ids=lambda order: "-".join(map(str, order))
)
def test_it_keeps_the_first_question_whatever_order_the_turns_arrive_in(sdk_export, order):
    made: dict[str, Any] = {}

    def workflow_run(tracer: Any) -> None:
        workflow = tracer.start_span(
            "calculator.workflow",
            start_time=at(0),
            attributes={"traceloop.span.kind": "workflow", "traceloop.entity.name": "calculator"},
        )
        turns = [llm_turn(tracer, workflow, turn) for turn in range(3)]
        for turn in order:  # each end exports that span in a request of its own
            turns[turn].end(end_time=at(1000 * turn + 900))
        workflow.end(end_time=at(3000))
        made["trace_id"] = ids(workflow)[0]

    results = sdk_export(workflow_run, processor=SimpleSpanProcessor)

    assert results == SUCCESS * 4
    stored = Trace.objects.get(trace_id=made["trace_id"])
    assert stored.request_text == "What is 12*7?"
    assert stored.llm_calls == 3
