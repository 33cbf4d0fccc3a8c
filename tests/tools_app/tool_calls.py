"""Run a built-in tool as the engine does, and hold its result to the declared `returns`."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from tools_app.specs import ToolSpec
from tools_app.validation import validate_arguments


def call(spec: ToolSpec, **arguments: Any) -> Any:
    """Validate the arguments against the spec, run its function, check the result's shape."""
    valid = validate_arguments(spec.parameters, arguments)
    result = spec.function(**valid.arguments)
    Draft202012Validator(spec.returns).validate(result)
    return result
