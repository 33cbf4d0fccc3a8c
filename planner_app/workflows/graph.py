"""Workflows: named DAGs of tool steps whose arguments may use earlier steps' outputs.

No Django here: the site stores workflows and runs in the database and adapts this core.
This module defines, reads and checks a workflow; executor.py runs one.

References. A string in a step's arguments may hold `{$step_id}` (the step's whole output,
its ToolResult.data) or `{$step_id.path}`, where the path walks object fields with `.name`
and list items with `[0]` (`[-1]` counts from the end): `{$s2.data.items[0].name}`. A string
that is exactly one reference becomes the referenced value, with its type; a reference inside
longer text is interpolated as text (strings as they are, anything else as JSON), so the
result is always a string. References are found in values at any depth, never in keys. A
reference makes the step depend on the referenced step, declared or not.

Type checks. When an argument holds a reference, the type the producer's `returns` schema
gives at the path must be one the consumer's `parameters` schema accepts for that argument.
A check is made only when both types are known, and it fails only when no produced type
fits (string_utils' `result` may be a string, an integer or a list). An integer fits a
number, and a number fits an integer: tools such as the calculator declare `number` for
whole results too, the engine turns a whole float into an int, and a fractional one is
refused at run time with a message naming the argument. The primary tool's schemas are
used; a fallback tool is expected to take and return the same shapes.
"""

from __future__ import annotations

import copy
import heapq
import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tools_app.registry import ToolRegistry, UnknownToolError
from tools_app.specs import ToolSpec

STEP_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]+\Z")
_REFERENCE = re.compile(
    r"\{\$(?P<step>[A-Za-z0-9_-]+)(?P<path>(?:\.[A-Za-z0-9_-]+|\[-?[0-9]+\])*)\}"
)
_SEGMENT = re.compile(r"\.?(?P<key>[A-Za-z0-9_-]+)|\[(?P<index>-?[0-9]+)\]")


# Data -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkflowStep:
    """One tool call of a workflow; `fallback_tools` are tried in order if the tool fails."""

    id: str
    tool: str
    arguments: dict[str, Any]
    depends_on: tuple[str, ...] = ()
    fallback_tools: tuple[str, ...] = ()
    # What the step is for, in words: the planner's input when the tool is missing or fails.
    request: str = ""


@dataclass(frozen=True)
class Workflow:
    name: str
    steps: tuple[WorkflowStep, ...]
    max_steps: int = 20
    max_parallel: int = 4


class ProblemKind(StrEnum):
    INVALID_JSON = "invalid_json"
    EMPTY_PLAN = "empty_plan"
    TOO_MANY_STEPS = "too_many_steps"
    INVALID_LIMIT = "invalid_limit"
    EMPTY_ID = "empty_id"
    INVALID_ID = "invalid_id"
    DUPLICATE_ID = "duplicate_id"
    MISSING_DEPENDENCY = "missing_dependency"
    UNKNOWN_REFERENCE = "unknown_reference"
    CYCLE = "cycle"
    UNKNOWN_TOOL = "unknown_tool"
    UNKNOWN_OUTPUT_FIELD = "unknown_output_field"
    TYPE_MISMATCH = "type_mismatch"


@dataclass(frozen=True)
class WorkflowProblem:
    """One thing wrong with a workflow; `steps` names the step ids involved."""

    kind: ProblemKind
    message: str
    steps: tuple[str, ...] = ()
    path: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class WorkflowError(ValueError):
    """A workflow that cannot be used, with every problem found."""

    def __init__(self, problems: list[WorkflowProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(problem) for problem in problems))


class UnresolvedReferenceError(LookupError):
    """A reference whose step has no output, or whose path is not in that output."""

    def __init__(self, reference: str, step_id: str, path: str, message: str) -> None:
        self.reference, self.step_id, self.path = reference, step_id, path
        super().__init__(f"{reference}: {message}")


# JSON -------------------------------------------------------------------------------------

_WORKFLOW_FIELDS: dict[str, type] = {
    "name": str,
    "steps": list,
    "max_steps": int,
    "max_parallel": int,
}
_STEP_FIELDS: dict[str, type] = {
    "id": str,
    "tool": str,
    "arguments": dict,
    "depends_on": list,
    "fallback_tools": list,
    "request": str,
}
_JSON_NAMES = {str: "a string", int: "an integer", list: "an array", dict: "an object"}


def workflow_from_json(data: Any) -> Workflow:
    """Return the workflow a JSON document (text or parsed) describes, or raise WorkflowError."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError as exc:
            problem = WorkflowProblem(ProblemKind.INVALID_JSON, f"not JSON: {exc}")
            raise WorkflowError([problem]) from exc
    problems = _shape_problems(data, "", _WORKFLOW_FIELDS, ("name", "steps"))
    steps = data.get("steps") if isinstance(data, dict) else None
    for index, step in enumerate(steps if isinstance(steps, list) else []):
        problems += _step_json_problems(step, f"steps[{index}]")
    for limit in ("max_steps", "max_parallel"):
        value = data.get(limit) if isinstance(data, dict) else None
        if _is_json(value, int) and value < 1:
            problems.append(_json_problem(limit, f"must be at least 1, got {value}"))
    if problems:
        raise WorkflowError(problems)
    return Workflow(
        name=data["name"],
        steps=tuple(_step_from_json(step) for step in data["steps"]),
        max_steps=data.get("max_steps", 20),
        max_parallel=data.get("max_parallel", 4),
    )


def workflow_to_json(workflow: Workflow) -> dict[str, Any]:
    """Return the workflow as the JSON document workflow_from_json reads."""
    return {
        "name": workflow.name,
        "max_steps": workflow.max_steps,
        "max_parallel": workflow.max_parallel,
        "steps": [
            {
                "id": step.id,
                "tool": step.tool,
                "arguments": step.arguments,
                "depends_on": list(step.depends_on),
                "fallback_tools": list(step.fallback_tools),
                **({"request": step.request} if step.request else {}),
            }
            for step in workflow.steps
        ],
    }


def _step_from_json(data: dict[str, Any]) -> WorkflowStep:
    return WorkflowStep(
        id=data["id"],
        tool=data["tool"],
        arguments=data.get("arguments", {}),
        depends_on=tuple(data.get("depends_on", ())),
        fallback_tools=tuple(data.get("fallback_tools", ())),
        request=data.get("request", ""),
    )


def _step_json_problems(step: Any, path: str) -> list[WorkflowProblem]:
    problems = _shape_problems(step, path, _STEP_FIELDS, ("id", "tool"))
    for name in ("depends_on", "fallback_tools"):
        items = step.get(name) if isinstance(step, dict) else None
        for index, item in enumerate(items if isinstance(items, list) else []):
            if not isinstance(item, str):
                where = f"{path}.{name}[{index}]"
                problems.append(_json_problem(where, f"expected a string, got {_json_type(item)}"))
    return problems


def _shape_problems(
    data: Any, path: str, fields: dict[str, type], required: tuple[str, ...]
) -> list[WorkflowProblem]:
    """Return the missing, unknown and mistyped fields of one JSON object."""
    if not isinstance(data, dict):
        return [_json_problem(path, f"expected an object, got {_json_type(data)}")]
    problems = [
        _json_problem(path, f"missing field {name!r}") for name in required if name not in data
    ]
    prefix = f"{path}." if path else ""
    for name, value in data.items():
        if name not in fields:
            allowed = ", ".join(fields)
            problems.append(_json_problem(f"{prefix}{name}", f"unknown field (allowed: {allowed})"))
        elif not _is_json(value, fields[name]):
            expected = _JSON_NAMES[fields[name]]
            message = f"expected {expected}, got {_json_type(value)}"
            problems.append(_json_problem(f"{prefix}{name}", message))
    return problems


def _json_problem(path: str, message: str) -> WorkflowProblem:
    return WorkflowProblem(ProblemKind.INVALID_JSON, message, path=path)


def _is_json(value: Any, expected: type) -> bool:
    # bool is an int in Python, never in JSON.
    return isinstance(value, expected) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return _JSON_NAMES.get(type(value), type(value).__name__)


# References -------------------------------------------------------------------------------


def references(arguments: Any) -> set[tuple[str, str]]:
    """Return the (step id, path) of every reference in the arguments; path '' is the whole."""
    return set(_references_in_order(arguments))


def step_dependencies(step: WorkflowStep) -> tuple[str, ...]:
    """Return the steps this one waits for: declared ones, then those its arguments use."""
    found = dict.fromkeys(step.depends_on)
    found.update(dict.fromkeys(step_id for step_id, _ in _references_in_order(step.arguments)))
    return tuple(found)


def resolve(arguments: Any, outputs: Mapping[str, Any]) -> Any:
    """Return the arguments with every reference replaced by the output it names."""
    if isinstance(arguments, dict):
        return {key: resolve(value, outputs) for key, value in arguments.items()}
    if isinstance(arguments, list):
        return [resolve(item, outputs) for item in arguments]
    if isinstance(arguments, str):
        whole = _REFERENCE.fullmatch(arguments)
        if whole is not None:
            return _lookup(whole, outputs)
        return _REFERENCE.sub(lambda match: _as_text(_lookup(match, outputs)), arguments)
    return arguments


def _references_in_order(arguments: Any) -> Iterator[tuple[str, str]]:
    if isinstance(arguments, dict):
        for value in arguments.values():
            yield from _references_in_order(value)
    elif isinstance(arguments, list):
        for item in arguments:
            yield from _references_in_order(item)
    elif isinstance(arguments, str):
        for match in _REFERENCE.finditer(arguments):
            yield match["step"], _path_of(match)


def _path_of(match: re.Match[str]) -> str:
    return match["path"].removeprefix(".")


def _segments(path: str) -> Iterator[str | int]:
    """Yield a path's object keys (str) and list indices (int) in order."""
    for match in _SEGMENT.finditer(path):
        yield match["key"] if match["key"] is not None else int(match["index"])


def _lookup(match: re.Match[str], outputs: Mapping[str, Any]) -> Any:
    step_id, path = match["step"], _path_of(match)
    if step_id not in outputs:
        have = ", ".join(outputs) or "none"
        message = f"step {step_id} has no output (steps with output: {have})"
        raise UnresolvedReferenceError(match[0], step_id, path, message)
    value, walked = outputs[step_id], ""
    for segment in _segments(path):
        found, value = _child(value, segment)
        if not found:
            where = f"at {walked}" if walked else "at the top"
            wanted = f"index {segment}" if isinstance(segment, int) else f"field {segment!r}"
            message = f"step {step_id}'s output {where} is {_describe(value)}, with no {wanted}"
            raise UnresolvedReferenceError(match[0], step_id, path, message)
        walked = f"{walked}[{segment}]" if isinstance(segment, int) else _join(walked, segment)
    # A copy: a tool that changes its arguments must not change an earlier step's result.
    return copy.deepcopy(value)


def _child(value: Any, segment: str | int) -> tuple[bool, Any]:
    """Return (True, the child) or (False, the value itself, for the error message)."""
    if isinstance(segment, str) and isinstance(value, dict) and segment in value:
        return True, value[segment]
    if isinstance(segment, int) and isinstance(value, list) and -len(value) <= segment < len(value):
        return True, value[segment]
    return False, value


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        keys = ", ".join(map(str, list(value)[:10])) + (", ..." if len(value) > 10 else "")
        return f"an object with keys {keys}" if value else "an empty object"
    if isinstance(value, list):
        return f"a list of {len(value)} items (use [0] to [{len(value) - 1}])"
    shown = json.dumps(value, ensure_ascii=False, default=str)
    return f"{_json_type(value)} ({shown[:60]})"


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _reference_text(step_id: str, path: str) -> str:
    separator = "." if path and not path.startswith("[") else ""
    return f"{{${step_id}{separator}{path}}}"


# Validation -------------------------------------------------------------------------------


def validate_workflow(
    workflow: Workflow, registry: ToolRegistry | None = None
) -> list[WorkflowProblem]:
    """Return every problem of the workflow; tools and types are checked when given a registry."""
    problems = [*_limit_problems(workflow), *_id_problems(workflow)]
    problems += _dependency_problems(workflow)
    problems += _cycle_problems(workflow)
    if registry is not None:
        problems += _tool_problems(workflow, registry)
        problems += _type_problems(workflow, registry)
    return problems


def _limit_problems(workflow: Workflow) -> Iterator[WorkflowProblem]:
    if not workflow.steps:
        yield WorkflowProblem(ProblemKind.EMPTY_PLAN, f"workflow {workflow.name!r} has no steps")
    for limit in ("max_steps", "max_parallel"):
        if getattr(workflow, limit) < 1:
            message = f"{limit} must be at least 1, got {getattr(workflow, limit)}"
            yield WorkflowProblem(ProblemKind.INVALID_LIMIT, message)
    if len(workflow.steps) > workflow.max_steps >= 1:
        count, limit = len(workflow.steps), workflow.max_steps
        message = f"workflow has {count} steps, more than its max_steps ({limit})"
        yield WorkflowProblem(ProblemKind.TOO_MANY_STEPS, message)


def _id_problems(workflow: Workflow) -> Iterator[WorkflowProblem]:
    for index, step in enumerate(workflow.steps):
        if not step.id:
            message = f"steps[{index}] (tool {step.tool}) has an empty id"
            yield WorkflowProblem(ProblemKind.EMPTY_ID, message, path=f"steps[{index}]")
        elif not STEP_ID_PATTERN.match(step.id):
            message = f"step id {step.id!r} may hold only letters, digits, '_' and '-'"
            yield WorkflowProblem(ProblemKind.INVALID_ID, message, (step.id,), f"steps[{index}]")
    counts = Counter(step.id for step in workflow.steps if step.id)
    for step_id, count in counts.items():
        if count > 1:
            where = [f"steps[{i}]" for i, step in enumerate(workflow.steps) if step.id == step_id]
            message = f"step id {step_id} is used by {count} steps: {', '.join(where)}"
            yield WorkflowProblem(ProblemKind.DUPLICATE_ID, message, (step_id,))


def _dependency_problems(workflow: Workflow) -> Iterator[WorkflowProblem]:
    known = {step.id for step in workflow.steps}
    for step in workflow.steps:
        for needed in dict.fromkeys(step.depends_on):
            if needed not in known:
                message = f"step {step.id} depends on {needed}, which is not in the workflow"
                yield WorkflowProblem(ProblemKind.MISSING_DEPENDENCY, message, (step.id, needed))
        for step_id, path in dict.fromkeys(_references_in_order(step.arguments)):
            if step_id not in known and step_id not in step.depends_on:
                reference = _reference_text(step_id, path)
                message = f"step {step.id} refers to {reference}, but there is no step {step_id}"
                yield WorkflowProblem(ProblemKind.UNKNOWN_REFERENCE, message, (step.id, step_id))


def _cycle_problems(workflow: Workflow) -> Iterator[WorkflowProblem]:
    graph: dict[str, tuple[str, ...]] = {}
    for step in workflow.steps:
        graph.setdefault(step.id, step_dependencies(step))
    for cycle in _find_cycles(graph):
        chain = " -> ".join([*cycle, cycle[0]])
        message = f"steps depend on each other in a cycle: {chain} (each depends on the next)"
        yield WorkflowProblem(ProblemKind.CYCLE, message, tuple(cycle))


def _find_cycles(graph: dict[str, tuple[str, ...]]) -> list[list[str]]:
    """Return one cycle per back edge of a depth-first search, each as ids in order.

    Iterative, so a long imported chain cannot exhaust Python's stack.
    """
    state: dict[str, str] = {}  # "open" while on the current path, then "done"
    cycles: list[list[str]] = []
    for root in graph:
        if root in state:
            continue
        path, stack = [root], [iter(graph[root])]
        state[root] = "open"
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = "done"
                stack.pop()
            elif state.get(child) == "open":
                cycles.append(path[path.index(child) :])
            elif child not in state and child in graph:
                state[child] = "open"
                path.append(child)
                stack.append(iter(graph[child]))
    return cycles


def _tool_problems(workflow: Workflow, registry: ToolRegistry) -> Iterator[WorkflowProblem]:
    for step in workflow.steps:
        roles = [("tool", step.tool)] + [("fallback tool", tool) for tool in step.fallback_tools]
        for role, tool in roles:
            try:
                registry.get(tool)
            except UnknownToolError as exc:
                message = f"step {step.id}'s {role} {tool!r} is unknown: {exc}"
                yield WorkflowProblem(ProblemKind.UNKNOWN_TOOL, message, (step.id,))


def _type_problems(workflow: Workflow, registry: ToolRegistry) -> Iterator[WorkflowProblem]:
    producers: dict[str, WorkflowStep] = {}
    for step in workflow.steps:
        producers.setdefault(step.id, step)
    for step in workflow.steps:
        consumer = _spec_or_none(registry, step.tool)
        if consumer is None:
            continue
        for where, text, expected in _reference_slots(step.arguments, consumer.parameters, ""):
            problem = _slot_problem(step, where, text, expected, producers, registry)
            if problem is not None:
                yield problem


def _reference_slots(value: Any, schema: Any, path: str) -> Iterator[tuple[str, str, Any]]:
    """Yield (argument path, text, expected schema) for every string holding a reference."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _reference_slots(item, _property_schema(schema, key), _join(path, key))
    elif isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        for index, item in enumerate(value):
            yield from _reference_slots(item, items, f"{path}[{index}]")
    elif isinstance(value, str) and _REFERENCE.search(value):
        yield path, value, schema


def _slot_problem(
    step: WorkflowStep,
    where: str,
    text: str,
    expected_schema: Any,
    producers: dict[str, WorkflowStep],
    registry: ToolRegistry,
) -> WorkflowProblem | None:
    """Return the problem of one argument holding references, if its types cannot fit."""
    expected = _schema_types(expected_schema)
    whole = _REFERENCE.fullmatch(text)
    if whole is None:
        if expected is None or "string" in expected:
            return None
        ids = tuple(dict.fromkeys(step_id for step_id, _ in _references_in_order(text)))
        message = (
            f"step {step.id} argument {where!r} expects {_types_text(expected)}, but "
            f"{text!r} interpolates {', '.join(ids)}'s output into a string"
        )
        return WorkflowProblem(ProblemKind.TYPE_MISMATCH, message, (*ids, step.id))
    producer = producers.get(whole["step"])
    spec = _spec_or_none(registry, producer.tool) if producer is not None else None
    if spec is None:
        return None  # an unknown step or tool is reported on its own
    produced, missing = _returns_at(spec.returns, _path_of(whole))
    if missing:
        message = f"step {step.id} argument {where!r} refers to {text}, but {spec.name} {missing}"
        return WorkflowProblem(ProblemKind.UNKNOWN_OUTPUT_FIELD, message, (producer.id, step.id))
    if expected is None or produced is None or _fits(produced, expected):
        return None
    message = (
        f"step {step.id} argument {where!r} expects {_types_text(expected)}, but {text} is "
        f"{_types_text(produced)} (step {producer.id}'s tool {spec.name} returns that there)"
    )
    return WorkflowProblem(ProblemKind.TYPE_MISMATCH, message, (producer.id, step.id))


def _returns_at(schema: Any, path: str) -> tuple[set[str] | None, str]:
    """Return the types a returns schema gives at a path (None: unknown) or why it has none."""
    walked = ""
    for segment in _segments(path):
        if not isinstance(schema, dict):
            return None, ""
        types = _schema_types(schema)
        where = f"at {walked}" if walked else "at the top"
        if isinstance(segment, int):
            if types is not None and "array" not in types:
                return None, f"returns {_types_text(types)} {where}, which has no items"
            schema = schema.get("items")
            walked += f"[{segment}]"
            continue
        if types is not None and "object" not in types:
            return None, f"returns {_types_text(types)} {where}, which has no field {segment!r}"
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        if segment not in properties and extra is False and properties:
            fields = ", ".join(properties)
            return None, f"returns no field {segment!r} {where} (fields there: {fields})"
        schema = properties.get(segment, extra)
        walked = _join(walked, segment)
    return _schema_types(schema), ""


def _schema_types(schema: Any) -> set[str] | None:
    """Return the JSON types a schema allows, or None when it does not say."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list) and kind and all(isinstance(item, str) for item in kind):
        return set(kind)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        types = [_schema_types(branch) for branch in branches]
        if all(branch is not None for branch in types):
            return set().union(*types)
    return None


def _fits(produced: set[str], expected: set[str]) -> bool:
    """Return whether some produced type is one the consumer accepts (see the module doc)."""
    numeric = {"integer", "number"}
    return bool(produced & expected) or bool(produced & numeric and expected & numeric)


def _property_schema(schema: Any, key: str) -> Any:
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    if isinstance(properties, dict) and key in properties:
        return properties[key]
    return schema.get("additionalProperties")


def _spec_or_none(registry: ToolRegistry, name: str) -> ToolSpec | None:
    try:
        return registry.get(name)
    except UnknownToolError:
        return None


def _types_text(types: set[str]) -> str:
    return " or ".join(sorted(types))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def execution_order(workflow: Workflow) -> list[WorkflowStep]:
    """Return the steps in dependency order, ties broken by declaration order.

    Raises WorkflowError on a workflow that validate_workflow would not pass.
    """
    problems = validate_workflow(workflow)
    if problems:
        raise WorkflowError(problems)
    position = {step.id: index for index, step in enumerate(workflow.steps)}
    waiting_on = {step.id: set(step_dependencies(step)) for step in workflow.steps}
    ready = [position[step_id] for step_id, needs in waiting_on.items() if not needs]
    heapq.heapify(ready)
    order: list[WorkflowStep] = []
    while ready:
        step = workflow.steps[heapq.heappop(ready)]
        order.append(step)
        for other, needs in waiting_on.items():
            if step.id in needs:
                needs.discard(step.id)
                if not needs:
                    heapq.heappush(ready, position[other])
    return order
