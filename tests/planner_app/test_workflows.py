"""Workflows on the real engine with real built-in tools: references, validation, execution."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from planner_app.workflows.executor import RunStatus, StepStatus, WorkflowRun, run_workflow
from planner_app.workflows.graph import (
    ProblemKind,
    UnresolvedReferenceError,
    Workflow,
    WorkflowError,
    WorkflowStep,
    execution_order,
    references,
    resolve,
    step_dependencies,
    validate_workflow,
    workflow_from_json,
    workflow_to_json,
)
from tools_app.builtins import calculator, hash_tool, string_utils
from tools_app.engine import ToolEngine
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolCall, ToolFailure, ToolResult, ToolSpec

RunStep = Callable[[WorkflowStep, dict[str, Any]], Awaitable[ToolResult]]


def out_of_order(expression: str) -> dict[str, Any]:
    raise ToolFailure(f"the broken calculator cannot do {expression}")


# A calculator that always fails, with the calculator's contract, to exercise fallbacks.
BROKEN = ToolSpec(
    name="broken_calculator",
    description="Always fails.",
    parameters=calculator.PARAMETERS,
    returns=calculator.RETURNS,
    function=out_of_order,
)


@pytest.fixture
def engine() -> Iterator[ToolEngine]:
    registry = ToolRegistry([calculator.SPEC, string_utils.SPEC, hash_tool.SPEC, BROKEN])
    engine = ToolEngine(registry)
    yield engine
    engine.close()


def through(engine: ToolEngine) -> RunStep:
    """Return the run_step the site would pass, minus the planner: straight to the engine."""
    return lambda step, arguments: engine.execute_async(ToolCall(step.tool, arguments, step.id))


def run(workflow: Workflow, engine: ToolEngine, **options: Any) -> WorkflowRun:
    options.setdefault("run_step", through(engine))
    return asyncio.run(run_workflow(workflow, registry=engine.registry, **options))


def step(step_id: str, tool: str, **arguments: Any) -> WorkflowStep:
    return WorkflowStep(step_id, tool, arguments)


def calc(step_id: str, expression: str, **options: Any) -> WorkflowStep:
    return WorkflowStep(step_id, "calculator", {"expression": expression}, **options)


def flow(*steps: WorkflowStep, **limits: Any) -> Workflow:
    return Workflow("test", steps, **limits)


def statuses(result: WorkflowRun) -> dict[str, str]:
    return {record.step_id: str(record.status) for record in result.steps}


# Chains with references ------------------------------------------------------------------


def test_it_interpolates_a_calculator_result_into_text(engine: ToolEngine) -> None:
    workflow = flow(
        calc("total", "6*7"),
        step("shout", "string_utils", operation="upper", text="total: {$total.result}"),
    )
    result = run(workflow, engine)
    assert result.status == RunStatus.SUCCESS
    assert result.step("shout").arguments == {"operation": "upper", "text": "total: 42"}
    assert result.step("shout").result.data["result"] == "TOTAL: 42"


def test_it_feeds_a_result_into_another_expression(engine: ToolEngine) -> None:
    workflow = flow(calc("s1", "2+3"), calc("s2", "{$s1.result} * 10"))
    result = run(workflow, engine)
    assert result.step("s2").arguments == {"expression": "5 * 10"}
    assert result.step("s2").result.data["result"] == 50


def test_it_keeps_the_type_of_an_argument_that_is_one_reference(engine: ToolEngine) -> None:
    workflow = flow(
        step("words", "string_utils", operation="split", text="a b c"),
        step("joined", "string_utils", operation="join", items="{$words.result}", separator="-"),
    )
    result = run(workflow, engine)
    assert result.step("joined").arguments["items"] == ["a", "b", "c"]
    assert result.step("joined").result.data["result"] == "a-b-c"


def test_it_passes_a_whole_output_and_nested_references(engine: ToolEngine) -> None:
    workflow = flow(
        step("words", "string_utils", operation="split", text="red green blue"),
        step("last", "string_utils", operation="upper", text="{$words.result[-1]}"),
        step("digest", "hash_tool", operation="sha256", text="words: {$words}"),
    )
    result = run(workflow, engine)
    assert result.step("last").result.data["result"] == "BLUE"
    # A whole output inside text is its JSON.
    assert result.step("digest").arguments["text"] == (
        'words: {"operation": "split", "result": ["red", "green", "blue"]}'
    )


OUTPUTS = {
    "s1": {"result": 5, "expression": "2+3"},
    "s2": {"data": {"items": [{"name": "ada", "tags": ["x", "y"]}, {"name": "bob"}]}},
    "s3": ["first", "second"],
}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"n": "{$s1.result}"}, {"n": 5}),
        ({"name": "{$s2.data.items[0].name}"}, {"name": "ada"}),
        ({"tag": "{$s2.data.items[0].tags[1]}"}, {"tag": "y"}),
        ({"last": "{$s2.data.items[-1].name}"}, {"last": "bob"}),
        ({"whole": "{$s1}"}, {"whole": OUTPUTS["s1"]}),
        ({"item": "{$s3[1]}"}, {"item": "second"}),
        ({"list": ["{$s1.result}", "{$s3[0]}", 7]}, {"list": [5, "first", 7]}),
        ({"deep": {"a": {"b": "{$s2.data.items[1]}"}}}, {"deep": {"a": {"b": {"name": "bob"}}}}),
        ({"text": "{$s1.expression} = {$s1.result}"}, {"text": "2+3 = 5"}),
        ({"text": "tags: {$s2.data.items[0].tags}"}, {"text": 'tags: ["x", "y"]'}),
        ({"text": "no references", "flag": True, "n": None}, None),
    ],
)
def test_resolve_replaces_references(arguments: dict[str, Any], expected: Any) -> None:
    assert resolve(arguments, OUTPUTS) == (arguments if expected is None else expected)


@pytest.mark.parametrize(
    ("argument", "named"),
    [
        ("{$s9.result}", ["{$s9.result}", "step s9 has no output", "s1, s2, s3"]),
        ("{$s1.total}", ["{$s1.total}", "field 'total'", "keys result, expression"]),
        ("{$s2.data.items[5].name}", ["at data.items", "a list of 2 items", "index 5"]),
        ("{$s1.result.digits}", ["at result", "a number (5)", "field 'digits'"]),
        ("total: {$s3[2]}", ["{$s3[2]}", "a list of 2 items", "index 2"]),
    ],
)
def test_resolve_says_what_is_missing_and_what_is_there(argument: str, named: list[str]) -> None:
    with pytest.raises(UnresolvedReferenceError) as caught:
        resolve({"x": argument}, OUTPUTS)
    for words in named:
        assert words in str(caught.value)


def test_references_lists_every_reference_with_its_path() -> None:
    arguments = {
        "a": "{$s1.result}",
        "b": ["x {$s2.data.items[0].name} y", {"c": "{$s3}"}],
        "d": 4,
    }
    assert references(arguments) == {("s1", "result"), ("s2", "data.items[0].name"), ("s3", "")}


def test_a_reference_makes_an_implicit_dependency() -> None:
    consumer = WorkflowStep("c", "calculator", {"expression": "{$b.result}+{$a.result}"}, ("a",))
    assert step_dependencies(consumer) == ("a", "b")


def test_it_fails_a_step_whose_reference_is_not_in_the_actual_output(engine: ToolEngine) -> None:
    workflow = flow(
        step("words", "string_utils", operation="split", text="only two"),
        step("third", "string_utils", operation="upper", text="{$words.result[2]}"),
    )
    result = run(workflow, engine)
    third = result.step("third")
    assert third.status == StepStatus.FAILED
    assert third.result is None
    assert "{$words.result[2]}" in third.error and "a list of 2 items" in third.error
    assert result.tool_calls == 1


# Validation -------------------------------------------------------------------------------

PROBLEM_CASES = [
    pytest.param(flow(), ProblemKind.EMPTY_PLAN, [], id="empty plan"),
    pytest.param(
        flow(calc("s1", "1"), calc("s2", "2"), calc("s3", "3"), max_steps=2),
        ProblemKind.TOO_MANY_STEPS,
        ["3 steps", "max_steps (2)"],
        id="more steps than max_steps",
    ),
    pytest.param(
        flow(calc("s1", "1"), max_parallel=0), ProblemKind.INVALID_LIMIT, ["max_parallel"]
    ),
    pytest.param(flow(calc("s1", "1"), calc("", "2")), ProblemKind.EMPTY_ID, ["steps[1]"]),
    pytest.param(flow(calc("s.1", "1")), ProblemKind.INVALID_ID, ["s.1"]),
    pytest.param(
        flow(calc("s1", "1"), calc("s2", "2"), calc("s1", "3")),
        ProblemKind.DUPLICATE_ID,
        ["s1", "steps[0], steps[2]"],
        id="duplicate id",
    ),
    pytest.param(
        flow(calc("s1", "1"), calc("s2", "2", depends_on=("s9",))),
        ProblemKind.MISSING_DEPENDENCY,
        ["s2", "s9"],
        id="missing dependency",
    ),
    pytest.param(
        flow(calc("s1", "1"), calc("s2", "{$s9.result} + 1")),
        ProblemKind.UNKNOWN_REFERENCE,
        ["s2", "{$s9.result}"],
        id="reference to a step not in the workflow",
    ),
    pytest.param(
        flow(
            calc("s1", "{$s2.result} + 1"),
            calc("s2", "2", depends_on=("s3",)),
            calc("s3", "{$s1.result} + 1"),
            calc("s4", "4"),
        ),
        ProblemKind.CYCLE,
        ["s1 -> s2 -> s3 -> s1"],
        id="cycle",
    ),
    pytest.param(
        flow(calc("s1", "{$s1.result} + 1")), ProblemKind.CYCLE, ["s1 -> s1"], id="self reference"
    ),
    pytest.param(
        flow(calc("s1", "1"), step("s2", "teleport", to="mars")),
        ProblemKind.UNKNOWN_TOOL,
        ["s2", "'teleport'", "available: broken_calculator, calculator"],
        id="unknown tool",
    ),
    pytest.param(
        flow(calc("s1", "1", fallback_tools=("abacus",))),
        ProblemKind.UNKNOWN_TOOL,
        ["s1", "fallback tool 'abacus'"],
        id="unknown fallback tool",
    ),
    pytest.param(
        flow(calc("s1", "1"), calc("s2", "{$s1.value}")),
        ProblemKind.UNKNOWN_OUTPUT_FIELD,
        ["s2", "{$s1.value}", "fields there: result, expression"],
        id="field the producer never returns",
    ),
    pytest.param(
        flow(
            calc("s1", "1"),
            step("s2", "string_utils", operation="substring", text="abc", start="{$s1.expression}"),
        ),
        ProblemKind.TYPE_MISMATCH,
        ["s2", "'start'", "expects integer", "{$s1.expression} is string", "s1's tool calculator"],
        id="string into integer",
    ),
    pytest.param(
        flow(
            calc("s1", "1"),
            step("s2", "string_utils", operation="substring", text="abc", end="-{$s1.result}"),
        ),
        ProblemKind.TYPE_MISMATCH,
        ["s2", "'end'", "expects integer", "interpolates s1's output into a string"],
        id="interpolation into integer",
    ),
    pytest.param(
        flow(calc("s1", "1"), step("s2", "string_utils", operation="join", items="{$s1}")),
        ProblemKind.TYPE_MISMATCH,
        ["s2", "'items'", "expects array", "{$s1} is object"],
        id="whole object into array",
    ),
    pytest.param(
        flow(
            step("s1", "hash_tool", operation="sha256", text="x"),
            step("s2", "string_utils", operation="join", items=["{$s1.byte_length}"]),
        ),
        ProblemKind.TYPE_MISMATCH,
        ["s2", "'items[0]'", "expects string", "is integer"],
        id="integer into a list of strings",
    ),
]


@pytest.mark.parametrize(("workflow", "kind", "named"), PROBLEM_CASES)
def test_validation_names_the_problem_and_its_steps(
    engine: ToolEngine, workflow: Workflow, kind: ProblemKind, named: list[str]
) -> None:
    problems = validate_workflow(workflow, engine.registry)
    assert [problem.kind for problem in problems] == [kind]
    for words in named:
        assert words in str(problems[0])
    for step_id in problems[0].steps:
        assert step_id in str(problems[0])


@pytest.mark.parametrize(
    "workflow",
    [
        pytest.param(
            flow(
                calc("s1", "2"),
                step("s2", "string_utils", operation="substring", text="abc", start="{$s1.result}"),
            ),
            id="number into integer (documented)",
        ),
        pytest.param(
            flow(
                step("s1", "hash_tool", operation="md5", text="x"),
                calc("s2", "2", depends_on=("s1",)),
                step("s3", "string_utils", operation="substring", text="{$s1.result}", end=3),
            ),
            id="string into string, declared dependency",
        ),
        pytest.param(
            flow(
                step("s1", "string_utils", operation="length", text="abc"),
                step("s2", "string_utils", operation="upper", text="{$s1.result}"),
                step("s3", "string_utils", operation="upper", text="{$s1.result[0]}"),
            ),
            id="one of several produced types fits",
        ),
        pytest.param(
            flow(calc("s1", "2"), step("s2", "string_utils", operation="upper", text="{$s1}!")),
            id="interpolation into string",
        ),
    ],
)
def test_validation_accepts_compatible_types(engine: ToolEngine, workflow: Workflow) -> None:
    assert validate_workflow(workflow, engine.registry) == []


def test_validation_reports_every_problem_at_once(engine: ToolEngine) -> None:
    workflow = flow(calc("s1", "1", depends_on=("nope",)), step("s1", "teleport"))
    kinds = {problem.kind for problem in validate_workflow(workflow, engine.registry)}
    assert kinds == {
        ProblemKind.MISSING_DEPENDENCY,
        ProblemKind.DUPLICATE_ID,
        ProblemKind.UNKNOWN_TOOL,
    }


def test_it_runs_nothing_when_the_workflow_has_problems(engine: ToolEngine) -> None:
    calls: list[str] = []

    async def counting(step: WorkflowStep, arguments: dict[str, Any]) -> ToolResult:
        calls.append(step.id)
        return await through(engine)(step, arguments)

    workflow = flow(calc("s1", "1"), step("s2", "teleport"))
    result = run(workflow, engine, run_step=counting)
    assert result.status == RunStatus.FAILED
    assert [problem.kind for problem in result.problems] == [ProblemKind.UNKNOWN_TOOL]
    assert calls == [] and result.tool_calls == 0
    assert set(statuses(result).values()) == {"skipped"}


# JSON -------------------------------------------------------------------------------------


def test_it_reads_a_workflow_from_json_and_writes_it_back() -> None:
    document = {
        "name": "report",
        "max_steps": 5,
        "max_parallel": 2,
        "steps": [
            {"id": "s1", "tool": "calculator", "arguments": {"expression": "1+1"}},
            {
                "id": "s2",
                "tool": "broken_calculator",
                "arguments": {"expression": "{$s1.result}*2"},
                "depends_on": ["s1"],
                "fallback_tools": ["calculator"],
            },
        ],
    }
    workflow = workflow_from_json(json.dumps(document))
    assert workflow.steps[1] == WorkflowStep(
        "s2", "broken_calculator", {"expression": "{$s1.result}*2"}, ("s1",), ("calculator",)
    )
    assert (workflow.max_steps, workflow.max_parallel) == (5, 2)
    assert workflow_from_json(workflow_to_json(workflow)) == workflow


def test_it_defaults_optional_json_fields() -> None:
    workflow = workflow_from_json({"name": "n", "steps": [{"id": "s1", "tool": "calculator"}]})
    assert workflow == Workflow("n", (WorkflowStep("s1", "calculator", {}),), 20, 4)


def test_it_lists_every_json_problem_with_its_path() -> None:
    document = {
        "steps": [
            {"id": 1, "tool": "calculator", "arguments": [], "colour": "red"},
            "s2",
            {"tool": "calculator", "depends_on": ["s1", 2]},
        ],
        "max_steps": 0,
        "max_parallel": True,
    }
    with pytest.raises(WorkflowError) as caught:
        workflow_from_json(document)
    found = {(problem.path, problem.message) for problem in caught.value.problems}
    assert found == {
        ("", "missing field 'name'"),
        ("max_parallel", "expected an integer, got a boolean"),
        ("steps[0].id", "expected a string, got a number"),
        ("steps[0].arguments", "expected an object, got an array"),
        (
            "steps[0].colour",
            "unknown field (allowed: id, tool, arguments, depends_on, fallback_tools, request)",
        ),
        ("steps[1]", "expected an object, got a string"),
        ("steps[2]", "missing field 'id'"),
        ("steps[2].depends_on[1]", "expected a string, got a number"),
        ("max_steps", "must be at least 1, got 0"),
    }


def test_it_refuses_text_that_is_not_json() -> None:
    with pytest.raises(WorkflowError, match="not JSON"):
        workflow_from_json('{"name": ')


# Execution --------------------------------------------------------------------------------


def test_it_runs_independent_steps_at_the_same_time(engine: ToolEngine) -> None:
    # Each call waits for the other at a barrier: run one after the other, both would fail.
    barrier = threading.Barrier(2, timeout=10)

    def meet(name: str) -> dict[str, Any]:
        barrier.wait()
        return {"met": name}

    parameters = {"type": "object", "properties": {"name": {"type": "string"}}}
    engine.registry.register(ToolSpec("meet", "Wait for a partner.", parameters, meet))
    workflow = flow(step("left", "meet", name="l"), step("right", "meet", name="r"))
    result = run(workflow, engine)
    assert statuses(result) == {"left": "success", "right": "success"}
    assert result.step("right").result.data == {"met": "r"}


def test_it_runs_no_more_steps_at_once_than_max_parallel(engine: ToolEngine) -> None:
    in_flight, peak = 0, 0
    two_inside = asyncio.Event()

    async def gated(step: WorkflowStep, arguments: dict[str, Any]) -> ToolResult:
        # The first two calls wait for each other; a third at once would raise the peak.
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == 2:
            two_inside.set()
        try:
            await asyncio.wait_for(two_inside.wait(), 10)
            return await through(engine)(step, arguments)
        finally:
            in_flight -= 1

    workflow = flow(calc("a", "1"), calc("b", "2"), calc("c", "3"), calc("d", "4"), max_parallel=2)
    result = run(workflow, engine, run_step=gated)
    assert set(statuses(result).values()) == {"success"}
    assert peak == 2


def test_it_reports_steps_in_dependency_order_then_declaration_order(
    engine: ToolEngine,
) -> None:
    workflow = flow(
        calc("c", "{$b.result} + 1"),
        calc("a", "1"),
        calc("b", "{$a.result} + 1"),
        calc("d", "4"),
    )
    expected = ["a", "b", "c", "d"]
    assert [step.id for step in execution_order(workflow)] == expected
    for parallel in (1, 4):
        result = run(Workflow("order", workflow.steps, max_parallel=parallel), engine)
        assert [record.step_id for record in result.steps] == expected
        assert result.step("c").result.data["result"] == 3


def test_it_serves_a_failed_step_with_its_fallback_tools_in_order(engine: ToolEngine) -> None:
    workflow = flow(
        calc("s1", "6*7", fallback_tools=("hash_tool", "calculator", "string_utils")),
        calc("s2", "{$s1.result} + 1"),
    )
    result = run(workflow, engine)
    first = result.step("s1")
    assert first.status == StepStatus.SUCCESS
    assert first.tools_tried == ["calculator"]
    assert first.fallback_used is None

    workflow = flow(
        WorkflowStep(
            "s1", "broken_calculator", {"expression": "6*7"}, (), ("hash_tool", "calculator")
        ),
        calc("s2", "{$s1.result} + 1"),
    )
    result = run(workflow, engine)
    first = result.step("s1")
    assert first.status == StepStatus.SUCCESS
    assert first.tools_tried == ["broken_calculator", "hash_tool", "calculator"]
    assert first.fallback_used == "calculator"
    assert first.result.tool == "calculator"
    assert result.step("s2").result.data["result"] == 43
    assert result.tool_calls == 4


def test_it_fails_a_step_when_every_fallback_fails(engine: ToolEngine) -> None:
    workflow = flow(calc("s1", "1/0", fallback_tools=("broken_calculator",)))
    result = run(workflow, engine)
    first = result.step("s1")
    assert first.status == StepStatus.FAILED
    assert first.fallback_used is None
    assert "division by zero" in first.error
    assert "the broken calculator cannot do 1/0" in first.error


def test_it_skips_the_dependents_of_a_failed_step_and_keeps_the_others(
    engine: ToolEngine,
) -> None:
    workflow = flow(
        calc("s1", "2"),
        calc("s2", "{$s1.result} / 0"),
        calc("s3", "{$s2.result} + 1"),
        calc("s4", "{$s3.result} + 1"),
        calc("s5", "{$s1.result} + 5"),
    )
    result = run(workflow, engine)
    assert result.status == RunStatus.PARTIAL_FAILURE
    assert statuses(result) == {
        "s1": "success",
        "s2": "failed",
        "s3": "skipped",
        "s4": "skipped",
        "s5": "success",
    }
    error = result.step("s2").error
    assert "division by zero" in error
    assert result.step("s3").error == f"depends on s2, which failed: {error}"
    assert result.step("s4").error == f"depends on s2 (through s3), which failed: {error}"
    assert result.step("s5").result.data["result"] == 7
    assert result.step("s3").result is None and result.step("s3").started_at is None


@pytest.mark.parametrize(
    ("expressions", "status"),
    [
        (["1", "2"], RunStatus.SUCCESS),
        (["1", "1/0"], RunStatus.PARTIAL_FAILURE),
        (["1/0", "sqrt(-1) + nope"], RunStatus.FAILED),
    ],
)
def test_the_run_status_follows_the_steps(
    engine: ToolEngine, expressions: list[str], status: RunStatus
) -> None:
    workflow = flow(*(calc(f"s{i}", text) for i, text in enumerate(expressions)))
    assert run(workflow, engine).status == status


@pytest.mark.parametrize(
    ("max_steps", "served", "tool_calls"),
    [(2, False, 2), (3, True, 3)],
)
def test_fallbacks_stay_within_max_steps(
    engine: ToolEngine, max_steps: int, served: bool, tool_calls: int
) -> None:
    workflow = flow(
        WorkflowStep("s1", "broken_calculator", {"expression": "1+1"}, (), ("calculator",)),
        calc("s2", "2+2"),
        max_steps=max_steps,
    )
    result = run(workflow, engine)
    assert result.tool_calls == tool_calls
    assert result.max_steps_reached is not served
    assert result.step("s2").status == StepStatus.SUCCESS
    first = result.step("s1")
    assert (first.fallback_used == "calculator") is served
    if not served:
        assert first.status == StepStatus.FAILED
        assert "fallback tools not tried (calculator)" in first.error
        assert f"max_steps ({max_steps})" in first.error


def test_it_keeps_a_tool_call_for_every_step_still_to_run(engine: ToolEngine) -> None:
    workflow = flow(
        WorkflowStep("s1", "broken_calculator", {"expression": "1"}, (), ("calculator",)),
        calc("s2", "{$s1.result} + 1", depends_on=("s1",)),
        max_steps=2,
    )
    result = run(workflow, engine)
    # s1's fallback would have taken s2's call: s1 fails and s2 is skipped, within budget.
    assert statuses(result) == {"s1": "failed", "s2": "skipped"}
    assert result.tool_calls == 1


def test_it_reports_progress_after_each_step(engine: ToolEngine) -> None:
    seen: list[tuple[str, dict[str, str]]] = []
    workflow = flow(calc("s1", "1"), calc("s2", "{$s1.result} + 1"), calc("s3", "{$s2.result}/0"))
    result = run(workflow, engine, on_progress=lambda r: seen.append((r.status, statuses(r))))
    done = [sum(status in ("success", "failed") for status in s.values()) for _, s in seen]
    assert done == [1, 2, 3, 3]
    assert [status for status, _ in seen] == ["running"] * 3 + ["partial_failure"]
    assert seen[-1][1] == statuses(result)


def test_it_awaits_an_async_progress_callback(engine: ToolEngine) -> None:
    saved: list[str] = []

    async def save(run: WorkflowRun) -> None:
        await asyncio.sleep(0)
        saved.append(json.dumps(run.as_dict()))

    run(flow(calc("s1", "1"), calc("s2", "2")), engine, on_progress=save)
    assert len(saved) == 3
    final = json.loads(saved[-1])
    assert final["status"] == "success"
    assert [s["result"]["data"]["result"] for s in final["steps"]] == [1, 2]


def test_it_sets_start_and_end_times_of_every_step_that_ran(engine: ToolEngine) -> None:
    workflow = flow(calc("s1", "1"), calc("s2", "{$s1.result} + 1"), calc("s3", "1/0"))
    result = run(workflow, engine)
    for record in result.steps:
        assert record.started_at is not None and record.ended_at is not None
        assert record.started_at.tzinfo is not None
        assert record.started_at <= record.ended_at
    # The dependent starts only once its dependency has ended.
    assert result.step("s2").started_at >= result.step("s1").ended_at
    assert result.started_at <= result.steps[0].started_at
    assert result.ended_at >= max(record.ended_at for record in result.steps)


def test_it_records_a_run_step_that_raises_as_that_steps_failure(engine: ToolEngine) -> None:
    async def flaky(step: WorkflowStep, arguments: dict[str, Any]) -> ToolResult:
        if step.id == "s1":
            raise ConnectionError("bridge is down")
        return await through(engine)(step, arguments)

    result = run(flow(calc("s1", "1"), calc("s2", "2")), engine, run_step=flaky)
    assert statuses(result) == {"s1": "failed", "s2": "success"}
    assert "run_step raised ConnectionError: bridge is down" in result.step("s1").error
