"""Tool contracts: what a spec refuses, when it may retry, how LLMs see it, the shared shapes."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tools_app.specs import (
    LLM_NAME_PATTERN,
    ErrorKind,
    Problem,
    SideEffect,
    ToolCall,
    ToolError,
    ToolResult,
    ToolSpec,
    llm_safe_name,
)

PARAMETERS = {
    "type": "object",
    "properties": {"expression": {"type": "string"}},
    "required": ["expression"],
}


def calculate(expression: str) -> dict[str, Any]:
    return {"expression": expression}


def make_spec(**overrides: Any) -> ToolSpec:
    fields: dict[str, Any] = {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": PARAMETERS,
        "function": calculate,
    }
    return ToolSpec(**(fields | overrides))


@pytest.mark.parametrize(
    "parameters",
    [
        pytest.param({}, id="empty"),
        pytest.param({"type": "array", "items": {"type": "string"}}, id="array"),
        pytest.param({"type": "string"}, id="string"),
        pytest.param({"properties": {"a": {"type": "string"}}}, id="no type"),
        pytest.param({"type": ["object", "null"]}, id="object or null"),
        pytest.param({"type": "dict"}, id="BFCL dict"),
        pytest.param([{"type": "object"}], id="a list"),
        pytest.param("object", id="a string"),
        pytest.param(None, id="none"),
    ],
)
def test_it_rejects_parameters_that_are_not_an_object_schema(parameters: Any) -> None:
    with pytest.raises(ValueError, match="parameters must be a JSON Schema of type 'object'"):
        make_spec(parameters=parameters)


@pytest.mark.parametrize(
    "name", [pytest.param("", id="empty"), pytest.param("x" * 201, id="201 characters")]
)
def test_it_rejects_an_empty_or_overlong_name(name: str) -> None:
    with pytest.raises(ValueError, match="tool name must be 1 to 200 characters"):
        make_spec(name=name)


@pytest.mark.parametrize(
    "timeout_s",
    [
        pytest.param(0, id="zero"),
        pytest.param(-1.5, id="negative"),
        pytest.param(math.nan, id="nan"),
    ],
)
def test_it_rejects_a_non_positive_timeout(timeout_s: float) -> None:
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        make_spec(timeout_s=timeout_s)


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"max_retries": -1}, id="negative retries"),
        pytest.param({"max_concurrency": 0}, id="zero concurrency"),
    ],
)
def test_it_rejects_impossible_limits(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="max_retries must be >= 0, max_concurrency >= 1"):
        make_spec(**overrides)


def test_it_accepts_a_valid_spec_with_its_documented_defaults() -> None:
    spec = make_spec(timeout_s=0.5, max_retries=0, max_concurrency=1)
    assert spec.timeout_s == 0.5
    assert (spec.side_effect, spec.idempotent, spec.enabled) == (SideEffect.READ_ONLY, True, True)


@pytest.mark.parametrize(
    ("side_effect", "idempotent", "retryable"),
    [
        pytest.param(SideEffect.READ_ONLY, True, True, id="read-only idempotent"),
        pytest.param(SideEffect.READ_ONLY, False, True, id="read-only not idempotent"),
        pytest.param(SideEffect.WRITE, True, True, id="idempotent write"),
        pytest.param(SideEffect.WRITE, False, False, id="non-idempotent write"),
        pytest.param(SideEffect.DESTRUCTIVE, True, True, id="idempotent destructive"),
        pytest.param(SideEffect.DESTRUCTIVE, False, False, id="non-idempotent destructive"),
    ],
)
def test_it_retries_only_idempotent_or_read_only_tools(
    side_effect: SideEffect, idempotent: bool, retryable: bool
) -> None:
    assert make_spec(side_effect=side_effect, idempotent=idempotent).retryable is retryable


def test_it_gives_the_openai_function_definition() -> None:
    assert make_spec(name="mcp.time.get_current_time").openai_definition() == {
        "type": "function",
        "function": {
            "name": "mcp__time__get_current_time",
            "description": "Evaluate an arithmetic expression.",
            "parameters": PARAMETERS,
        },
    }


def test_it_gives_the_anthropic_tool_definition() -> None:
    assert make_spec(name="mcp.time.get_current_time").anthropic_definition() == {
        "name": "mcp__time__get_current_time",
        "description": "Evaluate an arithmetic expression.",
        "input_schema": PARAMETERS,
    }


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        pytest.param("calculator", "calculator", id="already safe"),
        pytest.param("hash-tool_2", "hash-tool_2", id="dash and digit"),
        pytest.param("mcp.time.get_current_time", "mcp__time__get_current_time", id="mcp"),
        pytest.param("get current time", "get_current_time", id="spaces"),
        pytest.param("héllo", "h_llo", id="accent"),
        pytest.param("x" * 200, "x" * 64, id="200 characters"),
        pytest.param("tool\n", "tool_", id="newline"),
        pytest.param("", "_", id="empty"),
    ],
)
def test_it_makes_a_name_safe_for_llms(name: str, safe: str) -> None:
    assert llm_safe_name(name) == safe
    assert LLM_NAME_PATTERN.match(safe)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("a.b", id="dot"),
        pytest.param("a b", id="space"),
        pytest.param("x" * 65, id="65 characters"),
        pytest.param("tool\n", id="trailing newline"),
        pytest.param("café", id="accent"),
    ],
)
def test_the_llm_name_pattern_rejects_unsafe_names(name: str) -> None:
    assert LLM_NAME_PATTERN.match(name) is None


def test_a_problem_reads_as_path_then_message() -> None:
    assert str(Problem("items[0].count", "required but missing")) == (
        "items[0].count: required but missing"
    )
    assert str(Problem("", "arguments must be a JSON object, got array")) == (
        "arguments must be a JSON object, got array"
    )


def test_an_error_and_a_result_serialise_to_plain_data() -> None:
    error = ToolError(
        ErrorKind.INVALID_ARGUMENTS,
        "invalid arguments",
        (Problem("expression", "expected string, got number 123"),),
    )
    result = ToolResult("call_1", "calculator", False, error=error, text="calculator failed")
    assert result.as_dict() == {
        "call_id": "call_1",
        "tool": "calculator",
        "success": False,
        "data": None,
        "error": {
            "kind": "invalid_arguments",
            "message": "invalid arguments",
            "problems": ["expression: expected string, got number 123"],
        },
        "text": "calculator failed",
        "metadata": {},
    }


def test_an_error_without_problems_has_no_problems_key() -> None:
    assert ToolError(ErrorKind.TIMEOUT, "timed out").as_dict() == {
        "kind": "timeout",
        "message": "timed out",
    }


def test_a_call_defaults_to_no_arguments_and_no_id() -> None:
    call = ToolCall("calculator")
    assert (call.arguments, call.id) == (None, "")
