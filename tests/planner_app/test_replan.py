"""Plan-execute-replan on the real engine and built-in tools, with a scripted model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from planner_app.agents.replan import (
    ReplanSettings,
    plan_execute_replan,
    plan_from_reply,
    replan_reasons,
)
from planner_app.workflows.executor import RunStatus
from planner_app.workflows.graph import WorkflowError
from tools_app.builtins import calculator, string_utils
from tools_app.engine import ToolEngine
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolCall


@pytest.fixture
def engine() -> Iterator[ToolEngine]:
    engine = ToolEngine(ToolRegistry([calculator.SPEC, string_utils.SPEC]))
    yield engine
    engine.close()


def plan(*steps: dict[str, Any]) -> str:
    return "Here is my plan:\n```json\n" + json.dumps({"steps": list(steps)}) + "\n```"


def calc(step_id: str, expression: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": "calculator", "arguments": {"expression": expression},
            "reason": f"compute {expression}", **extra}  # fmt: skip


class ScriptedModel:
    """Answers each draft with the next scripted reply and keeps the feedback it was given."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.notes: list[str] = []

    def __call__(self, request: str, notes: str) -> str:
        self.notes.append(notes)
        return self.replies.pop(0)


def run(model: ScriptedModel, engine: ToolEngine, **settings: Any) -> Any:
    def run_step(step, arguments):  # noqa: ANN001, ANN202 - the workflow's RunStep
        return engine.execute_async(ToolCall(step.tool, arguments, step.id))

    return asyncio.run(
        plan_execute_replan("work it out", model, run_step, engine.registry,
                            ReplanSettings(**settings))
    )  # fmt: skip


def test_it_runs_a_good_first_plan_with_references(engine: ToolEngine) -> None:
    model = ScriptedModel(plan(calc("a", "6*7"), calc("b", "{$a.result} + 1", depends_on=["a"])))

    outcome = run(model, engine)

    assert outcome.succeeded and len(outcome.attempts) == 1
    assert outcome.final_run.status is RunStatus.SUCCESS
    assert outcome.final_run.step("b").result.data["result"] == 43
    assert model.notes == [""]


def test_it_replans_after_a_failed_step_with_the_results_so_far(engine: ToolEngine) -> None:
    model = ScriptedModel(
        plan(calc("a", "2+2"), calc("b", "1/0")),
        plan(calc("a", "2+2"), calc("b", "{$a.result} / 2", depends_on=["a"])),
    )

    outcome = run(model, engine)

    assert outcome.succeeded and len(outcome.attempts) == 2
    first = outcome.attempts[0]
    assert any("step b (calculator) failed" in reason for reason in first.replan_reasons)
    assert '- a calculator [success]: {"result": 4' in model.notes[1]
    assert "It needs a new plan because" in model.notes[1]
    assert outcome.final_run.step("b").result.data["result"] == 2


def test_it_sends_plan_problems_back_and_runs_nothing_of_a_bad_plan(engine: ToolEngine) -> None:
    model = ScriptedModel(
        "I think we should just guess.",
        plan({"id": "a", "tool": "teleport", "arguments": {}}),
        plan(calc("a", "1+1")),
    )

    outcome = run(model, engine)

    assert outcome.succeeded and len(outcome.attempts) == 3
    assert "not JSON" in model.notes[1]
    assert "teleport" in model.notes[2]
    assert outcome.attempts[0].run is None and outcome.attempts[1].run is None


def test_it_stops_after_the_replan_bound(engine: ToolEngine) -> None:
    model = ScriptedModel(*[plan(calc("a", "1/0"))] * 3)

    outcome = run(model, engine, max_replans=1)

    assert not outcome.succeeded and len(outcome.attempts) == 2
    assert model.replies == [plan(calc("a", "1/0"))]


def test_it_asks_for_a_new_plan_on_empty_or_unsure_results(engine: ToolEngine) -> None:
    async def unsure(step, arguments):  # noqa: ANN001, ANN202 - the workflow's RunStep
        result = await engine.execute_async(ToolCall(step.tool, arguments, step.id))
        data = {"result": result.data["result"], "confidence": 0.2} if step.id == "a" else {}
        return type(result)(**{**result.__dict__, "data": data})

    from planner_app.workflows.executor import run_workflow

    workflow = plan_from_reply(plan(calc("a", "1+1"), calc("b", "2+2")), "p", 10)
    finished = asyncio.run(run_workflow(workflow, unsure, registry=engine.registry))

    reasons = replan_reasons(finished, low_confidence=0.5)

    assert reasons == [
        "step a (calculator) reported low confidence 0.2",
        "step b (calculator) returned nothing",
    ]


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ('{"plan": []}', 'expected an object with a "steps" array'),
        ('{"steps": ["calc"]}', "steps[0]: expected an object"),
        ('{"steps": [{"id": "a", "tool": "calculator", "why": "x"}]}', "unknown fields ['why']"),
        ('{"steps": [{"id": "a", "tool": "calculator", "depends_on": ["z"]}]}', "z"),
        ("```json\n{not json}\n```", "not JSON"),
    ],
)
def test_it_names_what_is_wrong_with_a_plan(reply: str, problem: str, engine: ToolEngine) -> None:
    from planner_app.workflows.graph import validate_workflow

    try:
        problems = [str(p) for p in validate_workflow(plan_from_reply(reply, "p", 10))]
    except WorkflowError as exc:
        problems = [str(p) for p in exc.problems]
    assert any(problem in text for text in problems), problems
